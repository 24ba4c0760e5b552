"""Latency definitions, reliable throughput and failure cost on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from pgval.checker.metrics import compute_metrics, reference_ingress
from pgval.checker.validator import validate
from pgval.oracle import expected_outputs
from pgval.phases import Phases
from pgval.records import ResourceTable
from tests.strategies import to_inputs, to_outputs


def ev(i: int, res: str, ts: int, ing: int, typ: str = "GET") -> dict:
    return {"id": i, "type": typ, "resource": res, "event_ts": ts, "ingress_ts": ing}


def test_reference_ingress_paper_and_karimov() -> None:
    rt = ResourceTable()
    events = to_inputs([ev(1, "a", 1, 10), ev(2, "a", 8, 30), ev(3, "a", 12, 50),
                        ev(4, "a", 11, 60), ev(5, "b", 2, 5)], rt)
    paper, karimov = reference_ingress(events, np.array([0, 0, 1], np.int32),
                                       np.array([10, 20, 10]))
    # Window [0,10) of a: first input with ts >= 10 by ingress is id 3 (50, ts 12) vs id 4
    # (60, ts 11) → min ingress 50. Last input with ts < 10 → max ingress 30.
    assert paper[0] == 50 and karimov[0] == 30
    # Window [10,20) of a: no later input → undefined; Karimov = max ingress of ts < 20 = 60.
    assert np.isnan(paper[1]) and karimov[1] == 60
    # b has no input after its window.
    assert np.isnan(paper[2]) and karimov[2] == 5


def test_metrics_per_phase_and_failure_cost() -> None:
    rt = ResourceTable()
    # One GET per 100 ms on resource a from t=0 to 2.9 s; ingress = event time.
    events = [ev(i, "a", 100 * i, 100 * i) for i in range(30)]
    inputs = to_inputs(events, rt)
    exp = expected_outputs(inputs, "sst", 1000)
    # Windows close 200 ms after the next window's first input, except window 1 (slow: 1.5 s).
    outs = []
    for k, row in enumerate(exp.to_records()):
        delay = 1500 if k == 1 else 200
        outs.append({**row, "ingress_ts": row["window_end"] + delay})
    produced = to_outputs(outs, rt)
    phases = Phases(0, 1500, 2500)
    v = validate(exp, produced, phases)
    m = compute_metrics(inputs, produced, v, 1000, phases)
    assert m.latency["control"].p50 == pytest.approx(0.2)
    assert m.latency["failure"].n == 0 and m.latency["recovery"].max == pytest.approx(1.5)
    assert m.failure_cost_s == pytest.approx(1.3)
    # Reliable throughput: window 0's 10 IDs in control (1.5 s), window 1's 10 in recovery.
    assert m.throughput["control"] == pytest.approx(10 / 1.5)
    # Window 2 is emitted too (its paper latency is undefined: no later input), so all 30 count.
    assert m.reliable_per_s.sum() == 30
    assert m.latency["recovery"].n == 1
    assert m.inputs_per_s.sum() == 30


def test_duplicates_do_not_count_as_throughput() -> None:
    rt = ResourceTable()
    inputs = to_inputs([ev(i, "a", i, i) for i in range(10)], rt)
    exp = expected_outputs(inputs, "sst", 100)
    row = exp.to_records()[0]
    produced = to_outputs([{**row, "ingress_ts": 200}, {**row, "ingress_ts": 300}], rt)
    v = validate(exp, produced)
    m = compute_metrics(inputs, produced, v, 100)
    assert m.reliable_per_s.sum() == 10
    assert v.duplicate == 10


def _run(rows: list[dict], window_ms: int = 1000):
    """A faithful run over ``rows``: every expected output, 300 ms after its window ends."""
    rt = ResourceTable()
    events = to_inputs(rows, rt)
    exp = expected_outputs(events, "sst", window_ms)
    outs = to_outputs([{**r, "ingress_ts": r["window_end"] + 300} for r in exp.to_records()],
                      rt)
    return events, outs, validate(exp, outs)


def test_both_latency_definitions_cover_the_same_outputs() -> None:
    """The last window has no paper latency (no later input): Karimov's must skip it too."""
    rows = [ev(i, "a", 1000 * i + 10, 1000 * i + 10) for i in range(10)]
    events, outs, val = _run(rows)
    m = compute_metrics(events, outs, val, 1000)
    assert m.latency["control"].n == m.latency_karimov["control"].n == len(outs) - 1


def test_series_span_ignores_a_stray_timestamp_and_counts_it() -> None:
    """One input stamped 10 days early once cost 864,022 series rows; now it is outside."""
    t0 = 1_700_000_000_000
    rows = [ev(i, "a", t0 + 100 * i, t0 + 100 * i) for i in range(600)]  # 60 s of inputs
    rows.append(ev(10_000, "a", t0 - 10 * 86_400_000, t0 - 10 * 86_400_000))
    events, outs, val = _run(rows)
    m = compute_metrics(events, outs, val, 1000)
    assert len(m.reliable_per_s) <= 62
    assert m.series_outside == {"inputs": 1, "outputs": 1}
    assert int(m.reliable_per_s.sum()) == val.processed - 1  # all but the stray one
    assert val.processed == 601  # still validated and counted
