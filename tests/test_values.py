"""Values compared: an output with the right key and IDs but other values than its batch
row's is incorrect (``wrong-value``), with both values in the anomaly set; numbers that
differ only by the order a sum was taken in are equal; a run stored before values were
kept is judged as it was."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.core.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC
from pgval.evidence.bundle import Manifest, save_expected, save_topic
from pgval.evidence.recheck import recheck
from pgval.oracle.values import DEFAULT_TOLERANCE, same_value, wrong_values
from tests.test_evidence import topic
from tests.test_job_evidence import T0, W, _inputs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.01, max_value=1e6, allow_nan=False), min_size=1,
                max_size=300), st.randoms())
def test_a_sum_in_another_order_is_the_same_value(terms: list[float], rnd) -> None:  # noqa: ANN001
    """What a stream and a batch may do to a floating-point sum: add in another order."""
    shuffled = list(terms)
    rnd.shuffle(shuffled)
    assert same_value({"total": math.fsum(terms)}, {"total": sum(shuffled)})
    assert same_value({"total": sum(terms)}, {"total": sum(shuffled)})


@pytest.mark.parametrize(("expected", "written", "sink", "same"), [
    ('{"n": 3}', '{"n": 3}', False, True),
    ('{"n": 3}', '{"n": 4}', False, False),                  # a count is exact
    ('{"n": 3}', '{"n": 3.0}', False, True),                 # the same number
    ('{"x": 1.0}', '{"x": 1.000000000001}', False, True),    # within the tolerance
    ('{"x": 1.0}', '{"x": 1.001}', False, False),
    ('{"x": 5.551115123125783e-17}', '{"x": 2.7755575615628914e-17}', False, True),  # cancels
    ('{"s": "a"}', '{"s": "b"}', False, False),
    ('{"s": "007"}', '{"s": "7"}', False, False),            # text is text
    ('{"s": "1000000000"}', '{"s": "1000000001"}', False, False),
    ('{"n": 5}', '{"n": "5"}', False, False),                # not in the stream's own text
    ('{"l": [1, 2]}', '{"l": [1, 2]}', False, True),
    ('{"l": [1, 2]}', '{"l": [2, 1]}', False, True),         # collect_list: no order
    ('{"l": [1, 2]}', '{"l": [1, 1]}', False, False),
    ('{"l": [10.000000000000002, 9.5]}', '{"l": [9.5, 9.999999999999998]}', False, True),
    ('{"a": 1, "b": 2}', '{"a": 1}', False, False),          # a column missing
    ('{"a": 1}', '{"a": 1, "b": null}', False, True),        # to_json leaves nulls out
    ('{"b": true}', '{"b": 1}', False, False),
    ('{"d": 1.000000000000000000001}', '{"d": 1.000000000000000000002}', False, True),
    # What a sink gives back, in its own types.
    ('{"amount": 237.12}', '{"amount": "237.12"}', True, True),  # a decimal as text
    ('{"t": "2026-11-02T09:00:00.000Z"}', '{"t": "2026-11-02 09:00:00+00:00"}', True, True),
    ('{"t": "2026-11-02T09:00:00.000Z"}', '{"t": "2026-11-02 09:00:00"}', True, True),  # UTC
    ('{"t": "2026-11-02T09:00:00.123Z"}', '{"t": "2026-11-02 09:00:00.123456"}', True, True),
    ('{"t": "2026-11-02T09:00:00.000Z"}', '{"t": "2026-11-02 09:00:01+00:00"}', True, False),
    ('{"t": "2024-01-01"}', '{"t": "2024-01-01T00:00:00"}', True, False),  # a date is no time
    ('{"b": true}', '{"b": 1}', True, True),                 # SQLite's boolean
    ('{"n": 1}', '{"n": true}', True, True),
    ('{"x": "NaN"}', '{"x": NaN}', True, True),              # Spark's text, Python's float
    ('{"s": "007"}', '{"s": "7"}', True, False),
])
def test_values_compare_as_values(expected: str, written: str, sink: bool, same: bool) -> None:
    parse = lambda text: json.loads(text, parse_float=Decimal)  # noqa: E731
    assert same_value(parse(expected), parse(written), from_sink=sink) is same


def test_exactly_means_exactly() -> None:
    a, b = Decimal("1.000000000000000000001"), Decimal("1.000000000000000000002")
    assert same_value(a, b) and not same_value(a, b, tolerance=0)


def test_a_sink_is_compared_on_the_jobs_columns() -> None:
    """A sink's own columns (a row id, an update time) are not the job's: not compared."""
    job = frozenset({"a", "b"})
    assert same_value({"a": 1, "b": 2}, {"a": 1, "b": 2, "rowid": 7}, from_sink=True,
                      fields=job)
    assert not same_value({"a": 1, "b": 2}, {"a": 1, "b": 3, "rowid": 7}, from_sink=True,
                          fields=job)
    assert same_value({"a": 1, "b": 2}, {"a": 1, "rowid": 7}, from_sink=True,
                      fields=job)  # b not kept by the sink: nothing to compare it with
    assert not same_value({"a": 1, "b": 2}, {"a": 1, "b": None}, from_sink=True,
                          fields=job)  # b given back as null: it is not 2
    assert same_value({"a": 1}, {"a": 1, "b": None}, from_sink=True, fields=job)


def test_only_differing_texts_are_parsed() -> None:
    expected = pa.array(['{"n":1}', '{"x":1.0}', None, '{"n":2}', '{"n":5}'])
    written = pa.array(['{"n":1}', '{"x":1.0000000000001}', '{"n":9}', None, '{"n":6}'])
    assert wrong_values(expected, written).tolist() == [False, False, False, False, True]
    assert wrong_values(expected, written, tolerance=0).tolist() == [
        False, True, False, False, True]
    assert DEFAULT_TOLERANCE == 1e-9


def build_valued_run(run_dir: Path, rows: dict[str, tuple[list[int], dict]],
                     outputs: list[tuple[str, list[int], dict]], with_values: bool = True
                     ) -> None:
    """A job run's evidence whose batch rows and outputs carry their values, as a run of
    `validate --job` keeps them since values are compared."""
    inputs = _inputs()
    for name, kind in ((GET_TOPIC, "GET"), (POST_TOPIC, "POST")):
        mine = [e for e in inputs if e["type"] == kind]
        save_topic(run_dir, topic([orjson.dumps({k: v for k, v in e.items() if k != "ingress_ts"})
                                   for e in mine], [e["ingress_ts"] for e in mine], name))
    last = max(e["ingress_ts"] for e in inputs)
    values = [orjson.dumps({"_pgval_key": key, **({"_pgval_value": json.dumps(value)}
                                                   if with_values else {}),
                            **value, "ids": ids}) for key, ids, value in outputs]
    save_topic(run_dir, topic(values, [last + 1 + k for k in range(len(values))],
                              OUTPUT_TOPIC, partitions=3))
    table = {"key": list(rows), "ids": [ids for ids, _ in rows.values()]}
    schema = [("key", pa.string()), ("ids", pa.list_(pa.int64()))]
    if with_values:
        table["value"] = [json.dumps(value) for _, value in rows.values()]
        schema.append(("value", pa.string()))
    save_expected(run_dir, pa.table(table, schema=pa.schema(schema)))
    Manifest(topology="job", window_ms=W, phases=[T0, T0 + 400, T0 + 800], t4=T0 + 1200,
             resources=2, job={"ref": "/jobs/count.py:build",
                               "oracle": {"rows": len(rows), "builtin": None}}).write(run_dir)


def _rows() -> dict[str, tuple[list[int], dict]]:
    """Two resources' GET counts and a float total, as a windowed job writes them."""
    even, odd = [i for i in range(12) if i % 2 == 0], [i for i in range(12) if i % 2]
    return {json.dumps({"resource": "r0000"}): (even, {"resource": "r0000", "n": 6,
                                                        "total": 0.1 + 0.2 + 0.3}),
            json.dumps({"resource": "r0001"}): (odd, {"resource": "r0001", "n": 6,
                                                       "total": 1.5})}


def test_a_right_run_with_its_values_is_exactly_once(tmp_path: Path) -> None:
    rows = _rows()
    outputs = [(k, ids, {**v, "total": 0.3 + 0.2 + 0.1 if v["n"] == 6 and
                         v["resource"] == "r0000" else v["total"]})
               for k, (ids, v) in rows.items()]  # a sum in another order: equal
    build_valued_run(tmp_path, rows, outputs)
    s = recheck(tmp_path).summary()
    assert (s["guarantee"], s["incorrect"]) == ("exactly-once", 0)
    assert s["values"] == {"compared_outputs": 2, "wrong_outputs": 0, "wrong_value": 0,
                           "tolerance": DEFAULT_TOLERANCE, "columns": "all"}


def test_a_value_the_job_got_wrong_is_incorrect_with_both_values(tmp_path: Path) -> None:
    """The right key and IDs, a count off by 100: not exactly-once, and which values."""
    rows = _rows()
    outputs = [(k, ids, dict(v)) for k, (ids, v) in rows.items()]
    outputs[1][2]["n"] += 100
    build_valued_run(tmp_path, rows, outputs)
    again = recheck(tmp_path)
    s = again.summary()
    assert s["guarantee"] == "none" and s["incorrect"] == 6 and s["unprocessed"] == 6
    assert s["values"]["wrong_outputs"] == 1 and s["values"]["wrong_value"] == 6
    assert s["correctness"] == 0.5
    wrong = [a for a in again.evaluation.anomalies().to_pylist() if a["kind"] == "wrong-value"]
    assert sorted(a["id"] for a in wrong) == [1, 3, 5, 7, 9, 11]
    assert json.loads(wrong[0]["expected_value"])["n"] == 6
    assert json.loads(wrong[0]["written_value"])["n"] == 106
    assert {a["kind"] for a in again.evaluation.anomalies().to_pylist()} == {
        "wrong-value", "unprocessed"}


def test_a_run_kept_without_values_is_judged_as_before(tmp_path: Path) -> None:
    rows = _rows()
    outputs = [(k, ids, dict(v)) for k, (ids, v) in rows.items()]
    outputs[1][2]["n"] += 100  # not seen: neither side kept its values
    build_valued_run(tmp_path, rows, outputs, with_values=False)
    s = recheck(tmp_path).summary()
    assert s["guarantee"] == "exactly-once" and "values" not in s


def test_validate_without_values_is_unchanged() -> None:
    """The validator with no value check classifies exactly as before (wrong_value None)."""
    from pgval.checker.validator import validate
    from pgval.oracle import expected_outputs
    from tests.strategies import to_inputs, to_outputs

    events = to_inputs([{"id": i, "type": "GET", "resource": f"r{i % 2}",
                         "event_ts": T0 + 10 * i, "ingress_ts": T0 + 10 * i + 1}
                        for i in range(20)])
    exp = expected_outputs(events, "sst", W)
    outs = to_outputs([{"window_start": int(w), "resource": exp.resources.names[r],
                        "count": int(g), "ids": exp.ids[exp.offsets[k]:exp.offsets[k + 1]]
                        .tolist(), "ingress_ts": T0 + 5000}
                       for k, (w, r, g) in enumerate(zip(exp.window_start, exp.resource,
                                                         exp.gets, strict=True))],
                      exp.resources)
    plain = validate(exp, outs)
    none_wrong = validate(exp, outs, wrong_value=np.zeros(len(outs), dtype=bool))
    assert plain.guarantee == none_wrong.guarantee == "exactly-once"
    assert plain.wrong_value is None and none_wrong.wrong_value == 0
    all_wrong = validate(exp, outs, wrong_value=np.ones(len(outs), dtype=bool))
    assert all_wrong.processed == 0 and all_wrong.incorrect == 20
    assert all_wrong.wrong_value == 20 and all_wrong.guarantee == "none"
