"""Property-based tests of the oracle against the semantics and a naive reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.oracle import OracleHorizonError, expected_outputs, stream_expected_outputs
from pgval.records.parse import InputEvents, ResourceTable
from tests.reference import read_by, ref_oracle
from tests.strategies import input_events, to_inputs

windows = st.sampled_from([1, 7, 10, 50])
topologies = st.sampled_from(["sst", "mst"])


def rows_by_key(rows: list[dict]) -> dict[tuple[int, str], dict]:
    return {(r["window_start"], r["resource"]): r for r in rows}


@given(input_events(), topologies, windows)
def test_matches_naive_reference(events: list[dict], topology: str, w: int) -> None:
    got = rows_by_key(expected_outputs(to_inputs(events), topology, w).to_records())
    assert got == ref_oracle(events, topology, w)


@given(input_events(), windows)
def test_sst_every_get_in_exactly_one_output_with_its_key(events: list[dict], w: int) -> None:
    rows = expected_outputs(to_inputs(events), "sst", w).to_records()
    seen = [i for r in rows for i in r["ids"]]
    gets = {e["id"]: e for e in events if e["type"] == "GET"}
    assert sorted(seen) == sorted(gets)
    for r in rows:
        assert r["count"] == len(r["ids"])
        assert r["ids"] == sorted(r["ids"])
        assert r["window_end"] - r["window_start"] == w
        for i in r["ids"]:
            e = gets[i]
            assert r["resource"] == e["resource"]
            assert r["window_start"] <= e["event_ts"] < r["window_end"]


@given(input_events(), windows)
def test_mst_outputs_exist_iff_both_types_present(events: list[dict], w: int) -> None:
    rows = rows_by_key(expected_outputs(to_inputs(events), "mst", w).to_records())
    types: dict[tuple[int, str], set[str]] = {}
    for e in events:
        types.setdefault(((e["event_ts"] // w) * w, e["resource"]), set()).add(e["type"])
    for key, present in types.items():
        assert (key in rows) == (present == {"GET", "POST"})
    for r in rows.values():
        assert r["gets"] + r["posts"] == len(r["ids"]) and r["gets"] > 0 and r["posts"] > 0


@given(input_events(), topologies, windows, st.randoms())
def test_permutation_invariant(events: list[dict], topology: str, w: int, rnd) -> None:
    shuffled = list(events)
    rnd.shuffle(shuffled)
    a = expected_outputs(to_inputs(events), topology, w).to_records()
    b = expected_outputs(to_inputs(shuffled), topology, w).to_records()
    assert rows_by_key(a) == rows_by_key(b)


@given(input_events(), topologies, windows)
def test_ids_never_invented_and_index_consistent(events: list[dict], topology: str, w: int
                                                 ) -> None:
    exp = expected_outputs(to_inputs(events), topology, w)
    ids = {e["id"] for e in events}
    assert set(exp.ids.tolist()) <= ids
    assert np.all(np.diff(exp.id_sorted) > 0)
    assert len(exp.id_sorted) == len(exp.ids)
    for i, row in zip(exp.id_sorted.tolist(), exp.id_output.tolist(), strict=True):
        assert i in exp.ids[exp.offsets[row]:exp.offsets[row + 1]].tolist()


@given(input_events(), topologies)
def test_duplicate_input_records_count_once(events: list[dict], topology: str) -> None:
    doubled = events + [{**e, "ingress_ts": e["ingress_ts"] + 1000} for e in events]
    exp = expected_outputs(to_inputs(doubled), topology, 10)
    # Only duplicates among the inputs the topology reads count (SST: GETs).
    assert exp.duplicate_inputs == len(read_by(events, topology))
    assert rows_by_key(exp.to_records()) == ref_oracle(events, topology, 10)


@st.composite
def colliding_events(draw: st.DrawFn) -> list[dict]:
    """Events where some IDs repeat, across types too (a GET and a POST with one ID)."""
    events = draw(input_events(max_size=40))
    if len(events) >= 2:
        for _ in range(draw(st.integers(0, len(events)))):
            a, b = draw(st.integers(0, len(events) - 1)), draw(st.integers(0, len(events) - 1))
            events[b] = {**events[b], "id": events[a]["id"]}
    return events


@settings(max_examples=300)
@given(colliding_events(), topologies, windows)
def test_duplicates_are_removed_within_the_topologys_inputs(events: list[dict], topology: str,
                                                            w: int) -> None:
    exp = expected_outputs(to_inputs(events), topology, w)
    assert rows_by_key(exp.to_records()) == ref_oracle(events, topology, w)
    read = [e for e in events if topology == "mst" or e["type"] == "GET"]
    assert exp.duplicate_inputs == len(read) - len({e["id"] for e in read})


def test_sst_get_sharing_its_id_with_a_post_is_expected() -> None:
    # The POST arrives first; SST never reads it, so it cannot hide the GET.
    events = [{"id": 7, "type": "POST", "resource": "r0", "event_ts": 1, "ingress_ts": 1},
              {"id": 7, "type": "GET", "resource": "r0", "event_ts": 2, "ingress_ts": 5},
              {"id": 8, "type": "GET", "resource": "r0", "event_ts": 3, "ingress_ts": 6}]
    sst = expected_outputs(to_inputs(events), "sst", 10)
    assert sst.to_records() == [{"window_start": 0, "window_end": 10, "resource": "r0",
                                 "count": 2, "ids": [7, 8]}]
    assert sst.duplicate_inputs == 0
    assert sst.id_ingress.tolist() == [5, 6]  # the GET's own ingress time, not the POST's
    mst = expected_outputs(to_inputs(events), "mst", 10)  # MST reads both: first ingress wins
    assert mst.duplicate_inputs == 1
    assert mst.to_records() == [{"window_start": 0, "window_end": 10, "resource": "r0",
                                 "gets": 1, "posts": 1, "ids": [7, 8]}]


@settings(max_examples=60)
@given(input_events(max_size=80), topologies, windows, st.integers(1, 10))
def test_streaming_equals_batch_when_horizon_covers_disorder(events: list[dict], topology: str,
                                                             w: int, n_chunks: int) -> None:
    # Feed in event-time order with a horizon of 0: no event is ever late.
    events = sorted(events, key=lambda e: e["event_ts"])
    rt = ResourceTable()
    chunks = [to_inputs(events[k::n_chunks], rt) for k in range(n_chunks)]
    ordered = [to_inputs(events[a:a + 7], rt) for a in range(0, len(events), 7)]
    streamed = [r for part in stream_expected_outputs(ordered, topology, w, 0)
                for r in part.to_records()]
    batch = expected_outputs(InputEvents.concat(chunks, rt), topology, w).to_records()
    assert rows_by_key(streamed) == rows_by_key(batch)
    assert len(streamed) == len(batch)


def test_streaming_refuses_events_behind_its_horizon() -> None:
    rt = ResourceTable()
    first = to_inputs([{"id": 1, "type": "GET", "resource": "r0", "event_ts": 1000,
                        "ingress_ts": 0}], rt)
    late = to_inputs([{"id": 2, "type": "GET", "resource": "r0", "event_ts": 5,
                       "ingress_ts": 1}], rt)
    stream = stream_expected_outputs([first, late], "sst", 10, horizon_ms=100)
    try:
        list(stream)
    except OracleHorizonError as exc:
        assert "horizon" in str(exc)
    else:
        raise AssertionError("a late event must not be silently dropped")
