"""Expected outputs from a batch result's rows (the oracle for a user's job): for SST's
rows, written out by hand, the same expectation as the SST oracle; rows that fan out
(one input in several rows), judged pair by pair; and the batch results the validator
cannot use, refused with the first offending key or ID."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.checker.validator import validate
from pgval.oracle import expected_outputs
from pgval.oracle.rows import RowsError, expected_from_rows, set_aside_rows
from pgval.records.parse import ResourceTable
from tests.strategies import input_events, to_inputs, to_outputs

W = 20


def _sst_rows(events: list[dict]) -> tuple[list[str], list[list[int]]]:
    """SST by hand: GETs grouped by (window start, resource), the first ingress of an ID
    kept; keys as a job's canonical JSON."""
    first: dict[int, dict] = {}
    for e in sorted(events, key=lambda e: e["ingress_ts"]):
        if e["type"] == "GET":
            first.setdefault(e["id"], e)
    groups: dict[str, list[int]] = {}
    for e in first.values():
        key = json.dumps({"window_start": e["event_ts"] // W * W, "resource": e["resource"]})
        groups.setdefault(key, []).append(e["id"])
    keys = sorted(groups)
    return keys, [groups[k] for k in keys]


def _flat(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return np.array([i for r in rows for i in r], dtype=np.int64), offsets


def _three_rows(ingress_step: int) -> tuple:
    """Six GETs (ingress ``ingress_step`` ms apart) and a job's rows x ← 0, 1; y ← 2, 3;
    z ← 4, 5: (inputs, the key table, the expected outputs)."""
    inputs = to_inputs([{"id": i, "type": "GET", "resource": "a", "event_ts": i,
                         "ingress_ts": ingress_step * i} for i in range(6)])
    ids, offsets = _flat([[0, 1], [2, 3], [4, 5]])
    table = ResourceTable()
    keys = ['{"k":"x"}', '{"k":"y"}', '{"k":"z"}']
    return inputs, table, expected_from_rows(keys, ids, offsets, inputs, table)


@settings(max_examples=150, deadline=None)
@given(events=input_events())
def test_sst_rows_expect_what_the_sst_oracle_expects(events: list[dict]) -> None:
    gets_only = [e for e in events if e["type"] == "GET"]
    inputs = to_inputs(gets_only)
    keys, rows = _sst_rows(gets_only)
    ids, offsets = _flat(rows)
    got = expected_from_rows(keys, ids, offsets, inputs)
    want = expected_outputs(inputs, "sst", W)
    # The same IDs expected, each in the output of the same (window, resource).
    assert got.id_sorted.tolist() == want.id_sorted.tolist()
    assert got.id_ingress.tolist() == want.id_ingress.tolist()
    assert got.id_event_ts.tolist() == want.id_event_ts.tolist()
    names = got.resources.names
    got_key = [json.loads(names[got.resource[r]]) for r in got.id_output]
    want_key = [{"window_start": int(want.window_start[r]),
                 "resource": want.resources.names[want.resource[r]]} for r in want.id_output]
    assert got_key == want_key
    # Rows in key order, IDs ascending within each.
    assert got.resource.tolist() == sorted(got.resource.tolist())
    for k in range(len(got)):
        row = got.ids[got.offsets[k]:got.offsets[k + 1]].tolist()
        assert row == sorted(row)


def test_the_validator_judges_a_job_by_its_rows() -> None:
    """A job's outputs keyed as its rows (the key text is the output's key): one row twice
    duplicates its IDs, an ID in the wrong row is incorrect, a missing row unprocessed."""
    inputs, table, expected = _three_rows(ingress_step=1)
    produced = to_outputs([
        {"window_start": 0, "resource": '{"k":"x"}', "ids": [0, 1], "ingress_ts": 10},
        {"window_start": 0, "resource": '{"k":"x"}', "ids": [0, 1], "ingress_ts": 11},
        {"window_start": 0, "resource": '{"k":"y"}', "ids": [2, 4], "ingress_ts": 12},
    ], table)
    v = validate(expected, produced)
    # Duplicated: IDs 0 and 1. Incorrect: 4 (in y's output). Unprocessed: 3 and 5 never out
    # and 4, never in its own output (z).
    assert (v.duplicate, v.incorrect, v.unprocessed) == (2, 1, 3)
    assert v.guarantee == "none"


@pytest.mark.parametrize(("keys", "rows", "says"), [
    (['{"k":1}', '{"k":1}'], [[1], [2]], 'two rows with the key {"k":1}'),
    (['{"k":1}', '{"k":2}'], [[1, 2, 2], [2]], "lists input ID 2 twice in one row"),
    (['{"k":1}'], [[1, 99]], "lists ID 99, which is no input of the run"),
])
def test_a_batch_result_the_validator_cannot_use_is_refused(
        keys: list[str], rows: list[list[int]], says: str) -> None:
    inputs = to_inputs([{"id": i, "type": "GET", "resource": "a", "event_ts": i,
                         "ingress_ts": i} for i in (1, 2)])
    ids, offsets = _flat(rows)
    with pytest.raises(RowsError) as err:
        expected_from_rows(keys, ids, offsets, inputs)
    assert says in str(err.value)


def test_a_jobs_latency_is_from_the_newest_input_of_its_ids() -> None:
    """A job's outputs need carry no window: its latency is output ingress minus the latest
    ingress among its IDs (Karimov's definition; for a stateless job, input to output)."""
    from pgval.checker.evaluate import evaluate
    from pgval.records.phases import Phases

    inputs, table, expected = _three_rows(ingress_step=100)
    produced = to_outputs([
        {"window_start": 0, "resource": '{"k":"x"}', "ids": [1, 0], "ingress_ts": 150},
        {"window_start": 0, "resource": '{"k":"y"}', "ids": [2, 3], "ingress_ts": 420},
        {"window_start": 0, "resource": '{"k":"z"}', "ids": [4, 5, 77], "ingress_ts": 900},
    ], table)
    ev = evaluate(inputs, produced, "job", 1, Phases(0, 10_000, 20_000), expected=expected)
    # x: newest input 1 (ingress 100) → 50 ms; y: 3 (300) → 120; z: 5 (500; 77 is no
    # input) → 400.
    assert ev.metrics.latency_per_output_ms.tolist() == [50.0, 120.0, 400.0]
    assert ev.metrics.latency["control"].p50 == pytest.approx(0.12)
    assert ev.metrics.latency_karimov["control"].max == pytest.approx(0.4)
    assert (ev.validation.processed, ev.validation.incorrect) == (6, 1)  # 77: foreign


def test_a_jobs_outputs_are_read_by_their_key_text() -> None:
    """Values as the driver writes a job's rows: the key text and ids beside the job's own
    columns (not read); a value without the key, or with ids that are no list of
    integers, is malformed and counted."""
    from pgval.records.parse import job_outputs_from_kafka

    table = ResourceTable()
    table.code('{"k":"y"}')  # coded by the batch oracle first
    values = [b'{"_pgval_key": "{\\"k\\":\\"x\\"}", "n": 2, "ids": [1, 0], "t": "2023"}',
              b'{"_pgval_key": "{\\"k\\":\\"y\\"}", "ids": [2, 3]}',
              b'{"n": 2, "ids": [4]}', b'{"_pgval_key": "{}", "ids": ["a"]}', b"not json"]
    out = job_outputs_from_kafka(values, np.array([30, 10, 20, 40, 50]), np.zeros(5, int),
                                 np.arange(5), table)
    assert [table.names[c] for c in out.resource] == ['{"k":"x"}', '{"k":"y"}']
    assert out.ids.tolist() == [1, 0, 2, 3] and out.ingress_ts.tolist() == [30, 10]
    assert out.position.tolist() == [2, 0]  # stream order: by timestamp
    assert out.malformed == 3 and out.window_start.tolist() == [0, 0]


def _rows_table(rows: list[tuple[str, list[int]]]) -> pa.Table:
    return pa.table({"key": [k for k, _ in rows], "ids": [i for _, i in rows]},
                    schema=pa.schema([("key", pa.string()), ("ids", pa.list_(pa.int64()))]))


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.text(max_size=3),
                               st.lists(st.integers(-12, 12), max_size=5)), max_size=8),
       lo=st.integers(-12, 12), width=st.integers(0, 10))
def test_pgvals_own_ids_leave_the_batch_rows_as_they_leave_the_outputs(
        rows: list[tuple[str, list[int]]], lo: int, width: int) -> None:
    """set_aside_rows against the rule written out: drop the IDs in [lo, hi]; drop a row
    only when that left it empty and it was not empty before."""
    hi = lo + width
    want = []
    for key, ids in rows:
        kept = [i for i in ids if not lo <= i <= hi]
        if kept or not ids:
            want.append((key, kept))
    got = set_aside_rows(_rows_table(rows), [lo, hi])
    assert list(zip(got.column("key").to_pylist(), got.column("ids").to_pylist(),
                    strict=True)) == want
    assert set_aside_rows(_rows_table(rows), None).equals(_rows_table(rows))


def test_a_one_to_one_job_without_a_key_is_judged_by_each_rows_one_id() -> None:
    """A filter with no ``build.key``: two outputs share every column (the same resource
    at the same time), so the key text repeats; each row has one ID, and the ID tells the
    outputs apart — a re-written output is a duplicate, a missing one unprocessed, and an
    output that lists two IDs matches no key (incorrect)."""
    from pgval.evidence.bundle import job_streams_from_records
    from pgval.kafka.topic_records import TopicRecords

    def records(values: list[bytes], timestamps: list[int]) -> TopicRecords:
        n = len(values)
        return TopicRecords(keys=[None] * n, values=values, timestamps=timestamps,
                            partitions=[0] * n, offsets=list(range(n)))

    inputs = records([json.dumps({"id": i, "type": "GET", "resource": "r0000",
                                  "event_ts": 5}).encode() for i in range(1, 5)],
                     [10, 11, 12, 13])
    same = '{"resource":"r0000"}'
    rows = _rows_table([(same, [1]), (same, [2]), (same, [3]), (same, [4])])

    def out(ids: list[int]) -> bytes:
        return json.dumps({"_pgval_key": same, "ids": ids}).encode()

    output = records([out([1]), out([2]), out([2]), out([3, 4])], [20, 21, 22, 23])
    streams, expected = job_streams_from_records({"get": inputs}, output, rows, 1, None)
    v = validate(expected, streams.outputs)
    assert (v.processed, v.duplicate, v.unprocessed) == (2, 1, 2)  # 1, 2 | 2 | 3, 4
    assert v.incorrect == 2 and v.guarantee == "none"
    # Rows with distinct keys keep them: nothing re-keyed.
    distinct = _rows_table([('{"r":1}', [1]), ('{"r":2}', [2])])
    _, kept = job_streams_from_records({"get": inputs}, records([], []), distinct, 1, None)
    assert sorted(kept.resources.names) == ['{"r":1}', '{"r":2}']


def _sliding() -> tuple:
    """Four GETs in three overlapping windows (a sliding window's rows): w1 ← 1, 2;
    w2 ← 2, 3; w3 ← 3, 4. Six (input, row) pairs of four inputs."""
    inputs = to_inputs([{"id": i, "type": "GET", "resource": "a", "event_ts": i,
                         "ingress_ts": i} for i in (1, 2, 3, 4)])
    ids, offsets = _flat([[1, 2], [2, 3], [3, 4]])
    table = ResourceTable()
    keys = ['{"w":1}', '{"w":2}', '{"w":3}']
    return table, expected_from_rows(keys, ids, offsets, inputs, table)


def _out(key: str, ids: list[int], at: int = 10) -> dict:
    return {"window_start": 0, "resource": key, "ids": ids, "ingress_ts": at}


@pytest.mark.parametrize(("outputs", "counts", "guarantee"), [
    # Every pair once.
    ([_out('{"w":1}', [1, 2]), _out('{"w":2}', [2, 3]), _out('{"w":3}', [3, 4])],
     (6, 6, 0, 0, 0), "exactly-once"),
    # Window 2 lost: its two pairs unprocessed, though inputs 2 and 3 are in other windows.
    ([_out('{"w":1}', [1, 2]), _out('{"w":3}', [3, 4])], (6, 4, 2, 0, 0), "at-most-once"),
    # Window 1 written twice: its two pairs duplicated.
    ([_out('{"w":1}', [1, 2]), _out('{"w":1}', [1, 2], 11), _out('{"w":2}', [2, 3]),
      _out('{"w":3}', [3, 4])], (6, 6, 0, 2, 0), "at-least-once"),
    # Input 1 in window 2 (not one of its windows): incorrect; its own pair still done.
    ([_out('{"w":1}', [1, 2]), _out('{"w":2}', [1, 2, 3]), _out('{"w":3}', [3, 4])],
     (6, 6, 0, 0, 1), "none"),
])
def test_a_fan_out_is_judged_pair_by_pair(outputs: list[dict], counts: tuple,
                                          guarantee: str) -> None:
    table, expected = _sliding()
    assert expected.fans_out and len(expected.id_sorted) == 6
    v = validate(expected, to_outputs(outputs, table))
    assert (v.expected, v.processed, v.unprocessed, v.duplicate, v.incorrect) == counts
    assert v.guarantee == guarantee and v.expected_inputs == 4
    if v.unprocessed:
        assert v.ids("unprocessed").tolist() == [2, 3]


def test_a_stray_occurrence_is_charged_to_a_processed_pair_of_its_input() -> None:
    """Input 2 in window 3 (none of its windows), window 1 lost: the stray occurrence is
    charged to 2's processed pair (2, w2), which is then not reliable, not to the lost
    (2, w1); the input's IDs are listed once however many of its pairs are anomalous."""
    table, expected = _sliding()
    v = validate(expected, to_outputs([_out('{"w":2}', [2, 3]), _out('{"w":3}', [2, 3, 4])],
                                      table))
    assert (v.processed, v.unprocessed, v.incorrect, v.reliable) == (4, 2, 1, 3)
    assert v.incorrect_ids == 1
    slot = int(v.occurrences.incorrect_slot[0])
    assert expected.id_sorted[slot] == 2 and expected.id_output[slot] == 1  # (2, w2)
    assert v.ids("unprocessed").tolist() == [1, 2]  # (1, w1) and (2, w1)
    assert [i for _, i in v.witnesses["unprocessed"]] == [1, 2]  # each input once
    # Nothing written: every input unprocessed, each listed and witnessed once.
    none = validate(expected, to_outputs([], table))
    assert none.unprocessed == 6 and none.ids("unprocessed").tolist() == [1, 2, 3, 4]
    assert [i for _, i in none.witnesses["unprocessed"]] == [1, 2, 3, 4]
    # Every own occurrence's slot is its own pair.
    dup = validate(expected, to_outputs([_out('{"w":2}', [2, 3]), _out('{"w":2}', [2, 3], 11)],
                                        table))
    for slot in dup.occurrences.duplicate_slot.tolist():
        assert expected.id_output[slot] == 1
    assert dup.ids("duplicate").tolist() == [2, 3]


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True),
                     min_size=1, max_size=5),
       picks=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 7), st.booleans()),
                      max_size=25))
def test_fan_out_counts_agree_with_pairs_counted_by_hand(rows: list[list[int]],
                                                         picks: list) -> None:
    """Any rows (an ID in any of them) and any outputs (each a row's key with some IDs):
    the validator's counts are the pairs' counts, each (ID, key) occurrence counted by
    hand: own pair first time processed, again duplicate, any other incorrect."""
    inputs = to_inputs([{"id": i, "type": "GET", "resource": "a", "event_ts": i,
                         "ingress_ts": 0} for i in range(8)])
    keys = [f'{{"k":{k}}}' for k in range(len(rows))]
    ids, offsets = _flat(rows)
    table = ResourceTable()
    expected = expected_from_rows(keys, ids, offsets, inputs, table)
    outputs = {}
    for row, i, _ in picks:
        outputs.setdefault(row % len(rows), set()).add(i)
    produced = [_out(keys[r], sorted(found), at=1 + r) for r, found in outputs.items()]
    # Each picked output once more when its flag says so: a duplicate of the whole output.
    produced += [_out(keys[r % len(rows)], sorted(outputs[r % len(rows)]), at=50)
                 for r, _, again in picks[:3] if again]
    pairs = {(i, k) for k, row in enumerate(rows) for i in row}
    seen: dict[tuple[int, int], int] = {}
    incorrect = 0
    for out in produced:
        k = keys.index(out["resource"])
        for i in out["ids"]:
            if (i, k) in pairs:
                seen[(i, k)] = seen.get((i, k), 0) + 1
            else:
                incorrect += 1
    v = validate(expected, to_outputs(produced, table))
    assert v.expected == len(pairs)
    assert v.processed == len(seen)
    assert v.duplicate == sum(c - 1 for c in seen.values())
    assert v.incorrect == incorrect
    assert v.ids("unprocessed").tolist() == sorted({i for i, k in pairs - set(seen)})
    assert v.processed + v.unprocessed == v.expected
    # A pair is reliable when done once and not charged with a stray of its input.
    assert v.reliable <= sum(1 for c in seen.values() if c == 1)
    assert v.reliable >= sum(1 for c in seen.values() if c == 1) - incorrect
