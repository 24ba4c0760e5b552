"""The vectorised validator against the loop-by-loop reference of Algorithms 1 and 3."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.checker.validator import (
    ANOMALIES,
    first_occurrences,
    guarantee_of,
    stream_order,
    validate,
)
from pgval.oracle import expected_outputs
from pgval.records.parse import ResourceTable
from pgval.records.phases import CONTROL, FAILURE, PHASES, RECOVERY, Phases
from tests.reference import ref_oracle, ref_validate
from tests.strategies import input_events, produced_outputs, to_inputs, to_outputs
from tests.test_oracle_properties import colliding_events


@st.composite
def scenario(draw: st.DrawFn):
    events = draw(st.one_of(input_events(), colliding_events()))
    topology = draw(st.sampled_from(["sst", "mst"]))
    w = draw(st.sampled_from([7, 10, 50]))
    rows = list(ref_oracle(events, topology, w).values())
    outputs = draw(produced_outputs(rows))
    bounds = sorted(draw(st.lists(st.integers(0, 400), min_size=3, max_size=3)))
    phases = tuple(bounds) if draw(st.booleans()) else None
    return events, outputs, topology, w, phases


@settings(max_examples=300)
@given(scenario())
def test_matches_reference(sc) -> None:
    events, outputs, topology, w, phases = sc
    inputs = to_inputs(events)
    exp = expected_outputs(inputs, topology, w)
    got = validate(exp, to_outputs(outputs, inputs.resources),
                   Phases(*phases) if phases else None)
    ref = ref_validate(events, outputs, topology, w, phases)
    assert (got.expected, got.processed, got.unprocessed, got.duplicate, got.incorrect,
            got.reliable) == (ref.expected, ref.processed, ref.unprocessed, ref.duplicate,
                              ref.incorrect, ref.reliable)
    assert {p: c.as_dict() for p, c in got.phases.items()} == ref.phases
    for kind in ANOMALIES:
        assert got.ids(kind).tolist() == ref.ids[kind], kind


@st.composite
def planted(draw: st.DrawFn):
    """Expected outputs with anomalies planted by hand, so the answer is known without any
    implementation: dropped IDs are unprocessed, re-listed IDs duplicated, IDs placed in
    an output of a key the oracle never produced (and IDs that are no input) incorrect."""
    events = draw(input_events())
    topology = draw(st.sampled_from(["sst", "mst"]))
    w = draw(st.sampled_from([7, 10, 50]))
    rows = list(ref_oracle(events, topology, w).values())
    ids = sorted(i for r in rows for i in r["ids"])
    picked = draw(st.lists(st.sampled_from(["keep", "drop", "dup", "misplace"]),
                           min_size=len(ids), max_size=len(ids)))
    role = dict(zip(ids, picked, strict=True))
    inputs = {e["id"] for e in events}
    foreign = draw(st.lists(st.integers(-(2**41), 2**41).filter(lambda i: i not in inputs),
                            max_size=3, unique=True))
    outputs = []
    for r in rows:  # each expected output once, at 1000 (control), without dropped IDs
        outputs.append({**r, "ids": [i for i in r["ids"] if role[i] != "drop"],
                        "ingress_ts": 1000})
        again = [i for i in r["ids"] if role[i] == "dup"]
        if again:  # the same key again, at 2000 (failure): one duplicate per ID
            outputs.append({**r, "ids": again, "ingress_ts": 2000})
    wrong = [i for i in ids if role[i] == "misplace"] + foreign
    if wrong:  # a key no expected output has, at 3000 (recovery)
        outputs.append({"window_start": -10**6, "resource": "r0", "count": len(wrong),
                        "gets": 0, "posts": 0, "ids": wrong, "ingress_ts": 3000})
    order = draw(st.permutations(range(len(outputs))))
    return events, [outputs[k] for k in order], topology, w, role, foreign


@settings(max_examples=200)
@given(planted())
def test_planted_anomalies_are_found_exactly(case) -> None:
    events, outputs, topology, w, role, foreign = case
    inputs = to_inputs(events)
    v = validate(expected_outputs(inputs, topology, w), to_outputs(outputs, inputs.resources),
                 Phases(0, 1500, 2500))
    of = {kind: sorted(i for i, r in role.items() if r == kind)
          for kind in ("keep", "drop", "dup", "misplace")}
    assert v.expected == len(role)
    assert v.ids("unprocessed").tolist() == of["drop"]
    assert v.ids("duplicate").tolist() == of["dup"]
    assert v.ids("incorrect").tolist() == sorted(of["misplace"] + foreign)
    assert (v.processed, v.duplicate, v.incorrect, v.reliable) == (
        len(role) - len(of["drop"]), len(of["dup"]), len(of["misplace"]) + len(foreign),
        len(of["keep"]))
    # Inputs arrive before 300: every expected ID is control's; the anomalies' own clock
    # is the planted outputs' (duplicates in failure, incorrect ones in recovery).
    assert v.phases["control"].as_dict() == {
        "expected": len(role), "processed": len(role) - len(of["drop"]),
        "unprocessed": len(of["drop"]), "duplicate": 0, "incorrect": 0,
        "reliable": len(of["keep"]), "duplicated_ids": len(of["dup"]),
        "incorrect_ids": len(of["misplace"])}
    assert (v.phases["failure"].duplicate, v.phases["recovery"].incorrect) == (
        len(of["dup"]), len(of["misplace"]) + len(foreign))
    expected_verdict = guarantee_of(len(of["drop"]), len(of["dup"]),
                                    len(of["misplace"]) + len(foreign), 0)
    assert v.guarantee == (expected_verdict if role else "unknown")


@given(input_events(), st.sampled_from(["sst", "mst"]), st.data())
def test_an_input_retried_into_kafka_shows_as_one_duplicate(events: list[dict], topology: str,
                                                            data: st.DataObject) -> None:
    """docs/semantics.md: every input record is one occurrence. A processor that carries
    every record (as pgval's SST and MST do) lists a retried input twice at its own key:
    one duplicate per extra record, never an incorrect or unprocessed one, and
    ``duplicate_inputs`` names the cause."""
    read = [e for e in events if topology == "mst" or e["type"] == "GET"]
    retried = data.draw(st.lists(st.sampled_from(read), unique_by=lambda e: e["id"])
                        if read else st.just([]))
    records = events + [{**e, "ingress_ts": e["ingress_ts"] + 500} for e in retried]
    rows = ref_oracle(events, topology, 10)
    extra = {i: sum(e["id"] == i for e in retried) for r in rows.values() for i in r["ids"]}
    outputs = [{**r, "ids": r["ids"] + [i for i in r["ids"] if extra[i]], "ingress_ts": 900}
               for r in rows.values()]
    inputs = to_inputs(records)
    v = validate(expected_outputs(inputs, topology, 10), to_outputs(outputs, inputs.resources))
    listed = sum(extra.values())  # retried inputs that belong to some expected output
    assert v.duplicate_inputs == len(retried)
    assert (v.duplicate, v.incorrect, v.unprocessed) == (listed, 0, 0)
    assert v.guarantee == ("unknown" if not rows else
                           "at-least-once" if listed else "exactly-once")


@settings(max_examples=200)
@given(scenario())
def test_phase_rows_add_up_on_the_inputs_clock(sc) -> None:
    """Per phase, reliability and the ID-level anomalies are about the same expected IDs."""
    events, outputs, topology, w, phases = sc
    inputs = to_inputs(events)
    exp = expected_outputs(inputs, topology, w)
    ph = Phases(*phases) if phases else Phases.unbounded()
    v = validate(exp, to_outputs(outputs, inputs.resources), ph)
    in_phase = ph.of(exp.id_ingress)
    anomalous = {k: np.isin(exp.id_sorted, v.ids(k)) for k in ANOMALIES}
    for name, code in zip(PHASES, (CONTROL, FAILURE, RECOVERY), strict=True):
        c = v.phases[name]
        mine = in_phase == code
        not_reliable = mine & (anomalous["unprocessed"] | anomalous["duplicate"]
                               | anomalous["incorrect"])
        assert c.reliable + int(not_reliable.sum()) == c.expected
        assert c.duplicated_ids == int((mine & anomalous["duplicate"]).sum())
        assert c.incorrect_ids == int((mine & anomalous["incorrect"]).sum())
        assert c.unprocessed == int((mine & anomalous["unprocessed"]).sum())
        assert c.reliability is None if c.expected == 0 else c.reliability == (
            c.reliable / c.expected)
    assert sum(c.duplicated_ids for c in v.phases.values()) <= v.duplicate
    assert sum(c.duplicated_ids for c in v.phases.values()) <= v.duplicated_ids
    assert sum(c.incorrect_ids for c in v.phases.values()) <= v.incorrect


@given(scenario())
def test_without_phases_control_is_the_whole_run(sc) -> None:
    events, outputs, topology, w, _ = sc
    inputs = to_inputs(events)
    v = validate(expected_outputs(inputs, topology, w), to_outputs(outputs, inputs.resources))
    assert v.phases["control"].as_dict() == {
        "expected": v.expected, "processed": v.processed, "unprocessed": v.unprocessed,
        "duplicate": v.duplicate, "incorrect": v.incorrect, "reliable": v.reliable,
        "duplicated_ids": v.duplicated_ids, "incorrect_ids": v.incorrect_ids}
    assert v.phases["control"].reliability == v.reliability
    assert not any(any(v.phases[p].as_dict().values()) for p in ("failure", "recovery"))


@given(input_events(), st.sampled_from(["sst", "mst"]), st.integers(0, 3))
def test_faithful_processor_is_exactly_once(events: list[dict], topology: str, seed: int
                                            ) -> None:
    rows = ref_oracle(events, topology, 10).values()
    outputs = [{**r, "ingress_ts": 500 + seed} for r in rows]
    inputs = to_inputs(events)
    v = validate(expected_outputs(inputs, topology, 10), to_outputs(outputs, inputs.resources))
    assert v.correctness == 1.0 and v.missing_outputs == 0
    if not rows:  # nothing expected: no evidence either way
        assert v.guarantee == "unknown" and v.reliability is None
    else:
        assert v.guarantee == "exactly-once" and v.reliability == 1.0


def test_nothing_expected_is_unknown_not_exactly_once() -> None:
    rt = ResourceTable()
    posts_only = to_inputs([{"id": 1, "type": "POST", "resource": "r0", "event_ts": 0,
                             "ingress_ts": 0}], rt)
    for inputs, topology in ((to_inputs([], rt), "sst"), (posts_only, "sst"),
                             (posts_only, "mst")):
        v = validate(expected_outputs(inputs, topology, 10), to_outputs([], rt),
                     Phases(0, 10, 20))
        assert v.expected == 0
        assert v.reliability is None and v.guarantee == "unknown"
        assert all(c.reliability is None for c in v.phases.values())
        assert v.ids("unprocessed").tolist() == []


def test_guarantee_ladder() -> None:
    assert guarantee_of(0, 0, 0, 0) == "exactly-once"
    assert guarantee_of(0, 3, 0, 0) == "at-least-once"
    assert guarantee_of(2, 0, 0, 0) == "at-most-once"
    assert guarantee_of(2, 3, 0, 0) == "none"
    assert guarantee_of(0, 0, 1, 0) == "none"
    assert guarantee_of(0, 0, 0, 1) == "none"


@given(st.lists(st.tuples(st.integers(0, 5), st.lists(st.integers(0, 50), max_size=6)),
                max_size=12), st.randoms(use_true_random=False))
def test_stream_order_is_the_occurrences_sorted_by_output_then_place(outputs, rnd) -> None:
    """The gather :func:`stream_order` does stands for a sort of every occurrence by its
    output's (ingress time, position), then its place in the output: empty outputs, equal
    ingress times and positions out of storage order included."""
    positions = list(range(len(outputs)))
    rnd.shuffle(positions)
    records = to_outputs([{"window_start": 0, "resource": "r", "ingress_ts": ts, "ids": ids}
                          for ts, ids in outputs], ResourceTable())
    records.position = np.array(positions, dtype=np.int64)
    occ_output, occ_index = stream_order(records)
    lengths = records.lengths
    owner = np.repeat(np.arange(len(records), dtype=np.int64), lengths)
    place = np.arange(len(records.ids)) - np.repeat(records.offsets[:-1], lengths)
    rank = np.empty(len(records), dtype=np.int64)
    rank[np.lexsort((records.position, records.ingress_ts))] = np.arange(len(records))
    want = np.lexsort((place, rank[owner]))
    assert occ_index.tolist() == want.tolist()
    assert occ_output.tolist() == owner[want].tolist()


@given(st.lists(st.integers(0, 20), max_size=60), st.integers(0, 5))
def test_first_occurrences_are_where_each_slot_is_first_seen(slots, extra) -> None:
    """:func:`first_occurrences` finds what ``np.unique(..., return_index=True)`` finds,
    and says ``len(slots)`` for a slot that never occurs."""
    arr = np.array(slots, dtype=np.int64)
    n_slots = (max(slots) + 1 if slots else 0) + extra
    first = first_occurrences(arr, n_slots)
    values, index = np.unique(arr, return_index=True)
    want = np.full(n_slots, len(arr), dtype=np.int64)
    want[values] = index
    assert first.tolist() == want.tolist()
