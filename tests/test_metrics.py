"""Latency definitions, reliable throughput and failure cost on hand-computed cases."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.checker.evaluate import Evaluation, evaluate
from pgval.checker.metrics import (
    compute_metrics,
    emission_lags_ms,
    failure_cost_bound,
    outage_at_removal,
    reference_ingress,
)
from pgval.checker.recovery import recovery_bounds
from pgval.checker.render import notes as render_notes
from pgval.checker.validator import validate
from pgval.oracle import expected_outputs
from pgval.records.parse import ResourceTable
from pgval.records.phases import Phases
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


def _stalled(hold: str, removal_scheduled: bool = True, t3: int = 40_000) -> Evaluation:
    """One GET per 100 ms for 60 s, 1 s windows, each out 300 ms after it closes, phases
    0 / 20 s / 40 s / T4 60 s. The windows closing in the failure phase are held: ``t3``
    until just after T3 (the removal ends the stall, as a delay below the time-outs does),
    ``early`` until 8 s after T2 (Spark recovers on its own), ``slow`` 5 s each (a steady,
    slower pipeline). Two shapes hold the windows after T3 too, until the catch-up batch 2 s
    after T3 (in order, as Spark emits them): ``rising`` holds each failure-phase window
    5 s plus a quarter of its time since T2 (falling behind until the removal); ``burst``
    holds those closing 10 s or more before T3 until 0.5 s before T3 — the flagship MST
    delay-gt run's shape: Spark ends its long batch itself just before T3, still behind.
    ``half`` runs at half speed from T2 (a window closing s after T2 is out 2s after T2)
    and catches up 0.5 s after T3."""
    rt = ResourceTable()
    events = to_inputs([ev(i, "a", 100 * i, 100 * i) for i in range(600)], rt)
    exp = expected_outputs(events, "sst", 1000)
    t2 = 20_000
    catch_up = t3 + 2_000

    def out_at(at: int) -> int:
        if at < t2 or (at >= t3 and hold in ("t3", "early", "slow")):
            return at
        if hold == "half":
            return min(t2 + 2 * (at - t2), max(at, t3 + 500))
        if hold == "rising" and at + 5_000 + (at - t2) // 4 < t3:
            return at + 5_000 + (at - t2) // 4
        if hold == "burst" and at < t3 - 10_000:
            return t3 - 500
        return {"t3": t3 + 500 + (at - t2) // 100, "early": max(at, t2 + 8_000),
                "slow": at + 5_000}.get(hold, max(at, catch_up))

    outs = [{**row, "ingress_ts": out_at(int(row["window_end"]) + 300)}
            for row in exp.to_records()]
    return evaluate(events, to_outputs(outs, rt), "sst", 1000,
                    Phases(0, t2, t3, 60_000, removal_scheduled=removal_scheduled))


def test_a_stall_that_ends_only_at_t3_is_a_lower_bound() -> None:
    """The outage lasts until the fault is removed: the failure cost, the slowest outputs
    and the recovery's numbers measure the failure phase's length, so they are flagged."""
    held = _stalled("t3")
    m = held.metrics
    # The slowest output: window [19 s, 20 s), closed by the input at 20 s, out at 40.503 s;
    # control's median latency 0.3 s.
    assert m.failure_cost_s == pytest.approx(20.503 - 0.3)
    assert m.outage_at_t3 is not None and m.outage_at_t3.kind == "silent"
    summary = held.summary()
    assert summary["failure_cost_bound"] == "lower"
    assert "20.0 s after T2" in str(summary["failure_cost_bound_why"])
    assert summary["latency"]["recovery"]["max_bound"] == "lower"  # type: ignore[index]
    assert "max_bound" not in summary["latency"]["control"]  # type: ignore[index]
    rec = held.recovery.as_dict()
    bounds = recovery_bounds(rec, m.outage_at_t3.as_dict())
    # Silent from T2 to the first output after it: window [39 s, 40 s), on time at 40.3 s.
    assert rec["downtime_s"] == pytest.approx(20.3)
    assert {k for k in bounds if not k.endswith("_why")} == {
        "downtime_bound", "recovery_throughput_bound", "recovery_latency_bound"}
    # --json's recovery object carries the same siblings as the stored run's columns give.
    assert {k: v for k, v in summary["recovery"].items()  # type: ignore[union-attr]
            if k.endswith(("_bound", "_bound_why"))} == bounds


def test_a_stall_until_a_restart_the_job_made_is_measured() -> None:
    """Under --restart immediate T3 is when the restarted process was back: an outage until
    then is Spark's own recovery, so the same stall is a measurement, not a bound."""
    own = _stalled("t3", removal_scheduled=False)
    assert own.metrics.failure_cost_s == pytest.approx(20.503 - 0.3)
    assert own.metrics.outage_at_t3 is None
    summary = own.summary()
    assert "failure_cost_bound" not in summary and summary["schedule_bound"] is None
    assert not any(k.endswith("_bound") for k in summary["recovery"])  # type: ignore[union-attr]


def test_a_stall_that_ends_before_t3_is_measured() -> None:
    """Spark recovers 8 s into a 20 s failure phase: the numbers are Spark's, not flagged."""
    early = _stalled("early")
    assert early.metrics.failure_cost_s == pytest.approx(8.0 - 0.3, abs=0.05)
    assert early.metrics.outage_at_t3 is None
    summary = early.summary()
    assert "failure_cost_bound" not in summary and summary["schedule_bound"] is None
    assert "max_bound" not in summary["latency"]["recovery"]  # type: ignore[index]
    assert recovery_bounds(early.recovery.as_dict(), None) == {}


def test_outputs_falling_behind_until_t3_bound_the_latency_but_not_the_downtime() -> None:
    rising = _stalled("rising")
    outage = rising.metrics.outage_at_t3
    assert outage is not None and outage.kind == "rising"
    # The last window out before T3, [30 s, 31 s), closed at 31 s and was held 5 + 2.825 s
    # (out at 39.125 s): the outputs were 8.1 s behind the newest input they covered. The
    # catch-up 2 s after T3 brings [31 s, 32 s) at latency 10.0 s, above 8.1 s + 1 s.
    assert "still 8.1 s behind their inputs" in outage.why
    assert "control's at most 0.3 s" in outage.why and "came after it" in outage.why
    summary = rising.summary()
    assert summary["failure_cost_bound"] == "lower"
    assert summary["latency"]["failure"]["max_bound"] == "lower"  # type: ignore[index]
    bounds = recovery_bounds({"downtime_s": 1.0, "recovery_latency_s": 21.0},
                             outage.as_dict())
    assert set(bounds) == {"recovery_latency_bound", "recovery_latency_bound_why"}


def test_a_steadily_slower_pipeline_at_t3_bounds_the_failure_cost_too() -> None:
    """5 s late throughout: the outputs were still behind when the fault was removed, so the
    failure phase ended before the pipeline had caught up: the failure cost is flagged as a
    lower bound as well as the recovery (how much slower it would have got is not known)."""
    slow = _stalled("slow")
    outage = slow.metrics.outage_at_t3
    assert outage is not None and outage.kind == "behind"
    assert "still 5.3 s behind" in outage.why and "had caught up" in outage.why
    summary = slow.summary()
    assert summary["failure_cost_bound"] == "lower"
    assert summary["failure_cost_bound_why"] == outage.why
    assert summary["latency"]["failure"]["max_bound"] == "lower"  # type: ignore[index]
    assert summary["schedule_bound"] == outage.as_dict()
    assert "recovery_latency_bound" in recovery_bounds({"recovery_latency_s": 21.0},
                                                       outage.as_dict())


def test_a_stall_spark_ends_just_before_t3_still_behind_is_a_lower_bound() -> None:
    """The flagship run's shape: a burst just before T3 that leaves the outputs still behind
    does not show the stall was over, so the failure cost is a bound too. (The old-rule
    sentence "latency was still 54.4 s when the fault was removed" came from the catch-up
    burst's own old windows; what counts is how far behind the outputs were.)"""
    burst = _stalled("burst")
    m = burst.metrics
    outage = m.outage_at_t3
    assert outage is not None and outage.kind == "behind"
    # The burst at 39.5 s carried windows up to [28 s, 29 s), closed by the input at 29 s:
    # 10.5 s behind at T3. The catch-up after T3 is no slower (its oldest window, 12 s).
    assert "still 10.5 s behind" in outage.why
    assert "Spark ended the stall itself" not in outage.why
    assert m.failure_cost_s == pytest.approx(19.5 - 0.3)
    summary = burst.summary()
    assert summary["failure_cost_bound"] == "lower"
    assert summary["latency"]["failure"]["max_bound"] == "lower"  # type: ignore[index]
    bounds = recovery_bounds(burst.recovery.as_dict(), outage.as_dict())
    assert "downtime_bound" not in bounds  # not silent at T3
    assert "recovery_latency_bound" in bounds


def test_half_speed_until_t3_gives_a_bounded_cost_that_grows_with_the_phase() -> None:
    """At half speed from T2 and caught up just after T3, the slowest output comes just
    before T3 and the failure cost is about half the failure phase: 19 s of it give 9.3 s,
    9 s give 4.3 s. Both are flagged, and the sentence says the phase ended before the
    pipeline caught up (it once said "Spark ended the stall itself", unflagged). (Outputs
    every 2 s, the last 0.4 s before T3: not silent against control's 1 s gaps.)"""
    costs = []
    for t3 in (39_000, 29_000):
        half = _stalled("half", t3=t3)
        outage = half.metrics.outage_at_t3
        assert outage is not None and outage.kind == "behind"  # slowest output before T3
        summary = half.summary()
        assert summary["failure_cost_bound"] == "lower", t3
        assert "ended before the pipeline had caught up" in str(summary["failure_cost_bound_why"])
        assert "Spark ended" not in str(summary["failure_cost_bound_why"])
        costs.append(half.metrics.failure_cost_s)
    assert costs == pytest.approx([9.6 - 0.3, 4.6 - 0.3])


def test_a_recovery_censored_at_the_end_of_the_run_bounds_the_failure_cost() -> None:
    """Spark recovers on its own 8 s into the failure phase (no outage at T3), but the run's
    recovery detector was censored (recovered: false): the slowest output may be still to
    come, so the cost is a lower bound and says why. Recovered, it is a measurement."""
    early = _stalled("early")
    assert early.metrics.outage_at_t3 is None and early.recovery.recovered is True
    assert "failure_cost_bound" not in early.summary()
    early.recovery.recovered, early.recovery.censored = False, True
    summary = early.summary()
    assert summary["failure_cost_bound"] == "lower"
    assert "recovered: false" in str(summary["failure_cost_bound_why"])
    assert failure_cost_bound(None, False) == summary["failure_cost_bound_why"]
    assert failure_cost_bound(None, None) is None and failure_cost_bound(None, True) is None
    notes = " ".join(render_notes(early))
    assert "failure cost ≥ " in notes and "recovered: false" in notes


def test_emission_lag_is_cut_by_a_burst_whatever_its_own_latencies() -> None:
    """Outputs at 10.2 s (input at 10 s), then a burst at 50.5 s of windows whose closing
    inputs came at 11 … 50 s: the burst's latencies run 0.5–39.5 s, its lag is 0.5 s."""
    out = np.array([10_200] + [50_500] * 40, np.int64)
    ref = np.array([10_000] + [11_000 + 1000 * k for k in range(40)], np.float64)
    at, lag = emission_lags_ms(out, out - ref)
    assert list(at) == [10_200, 50_500] and list(lag) == [200, 500]
    lat = (out - ref).astype(np.float64)
    lat[-1] = np.nan  # an output without a paper latency covers nothing
    assert list(emission_lags_ms(out, lat)[1]) == [200, 1_500]


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 20_000), st.integers(-5_000, 60_000),
                               st.booleans()), max_size=40),
       breaks=st.lists(st.integers(0, 20_000), max_size=2, unique=True).map(sorted))
def test_emission_lag_is_the_per_second_brute_force(rows: list[tuple[int, int, bool]],
                                                    breaks: list[int]) -> None:
    """For each second with outputs (with a paper latency), split at the breaks: its last
    output's time minus the newest closing input of any output up to then, the slow way."""
    out = np.array([r[0] for r in rows], np.int64)
    lat = np.array([np.nan if r[2] else float(r[1]) for r in rows], np.float64)
    at, lag = emission_lags_ms(out, lat, breaks)
    known = [(t, t - la) for t, la in zip(out.tolist(), lat.tolist(), strict=True)
             if not np.isnan(la)]

    def group(t: int) -> tuple[int, int]:
        return t // 1000, sum(t >= b for b in breaks)

    want = []
    for g in sorted({group(t) for t, _ in known}):
        last = max(t for t, _ in known if group(t) == g)
        newest = max(ref for t, ref in known if t <= last)
        want.append((last, last - newest))
    assert list(zip(at.tolist(), lag.tolist(), strict=True)) == want


def test_the_lag_at_t3_is_the_last_output_before_it_even_mid_second() -> None:
    """Control: one output a second, 0.3 s behind. Failure (T2 = 20 s): falling behind
    (out at 25, 30, 35 s covering inputs of 20, 21, 22 s), then a catch-up output at 40.5 s
    covering the input of 40.4 s, and one more at 40.8 s. T3 = 40.7 s: the lag at T3 is
    the catch-up's 0.1 s, so nothing was on at T3. Grouping by whole seconds dropped the
    second holding T3 and judged the run by 35 s (13 s behind)."""
    out = [k * 1000 + 300 for k in range(1, 20)] + [25_000, 30_000, 35_000, 40_500, 40_800]
    ref = [k * 1000 for k in range(1, 20)] + [20_000, 21_000, 22_000, 40_400, 40_450]
    ts = np.array(out, np.int64)
    lat = (ts - np.array(ref)).astype(np.float64)
    for t3 in (40_700, 41_000):
        assert outage_at_removal(Phases(0, 20_000, t3, 60_000), ts, lat, 300.0) is None
    # Without the catch-up before T3 the same run is behind at T3 (and silent from 35 s).
    early = outage_at_removal(Phases(0, 20_000, 36_000, 60_000), ts, lat, 300.0)
    assert early is not None and early.kind == "behind" and "still 13.0 s behind" in early.why


def _shaped(out_at: Callable[[int], int]) -> Evaluation:
    """One GET per 100 ms for 60 s, 1 s windows; phases 0 / 20 s / 40 s / T4 60 s; each
    window's output at ``out_at(window_end)``."""
    rt = ResourceTable()
    events = to_inputs([ev(i, "a", 100 * i, 100 * i) for i in range(600)], rt)
    exp = expected_outputs(events, "sst", 1000)
    outs = [{**row, "ingress_ts": out_at(int(row["window_end"]))} for row in exp.to_records()]
    return evaluate(events, to_outputs(outs, rt), "sst", 1000, Phases(0, 20_000, 40_000, 60_000))


def test_a_control_phase_much_slower_than_recovery_was_not_yet_steady() -> None:
    """Control at 5 s of latency, later 2 s: 2.5× (more than 1.5×), so control was measured
    before the pipeline was warm, and the run says so. At 2.8 s against 2 s it is steady."""
    cold = _shaped(lambda end: end + (5_000 if end <= 20_000 else 2_000))
    why = cold.metrics.control_unsettled
    assert why is not None and why.startswith("control's latency p50 5.0 s is 2.5× recovery's "
                                              "2.0 s (more than 1.5×)")
    assert cold.summary()["control_unsettled"] == why
    assert f"caveat: {why}" in render_notes(cold)
    warm = _shaped(lambda end: end + (2_800 if end <= 20_000 else 2_000))
    assert warm.metrics.control_unsettled is None and warm.summary()["control_unsettled"] is None


def test_outputs_falling_behind_through_control_say_the_pipeline_does_not_keep_up() -> None:
    """Each window out 0.3 s later than the one before through control, one every 1.3 s (a
    pipeline that takes 1/1.3 = 77 % of the rate): the lag grows 0.23 s a second, 4.6 s over
    control's 20 s, and the run says it does not keep up, with the rate and how to find one
    it can take."""
    behind = _shaped(lambda end: end + 300 + (3 * min(end, 20_000)) // 10)
    why = behind.metrics.falls_behind
    assert why is not None and "does not keep up with the input rate (10 ev/s)" in why
    assert "pgval oir" in why and "--job" in why and "fell 4.6 s further behind" in why
    assert "(0.23 s a second)" in why
    assert behind.summary()["falls_behind"] == why
    assert f"caveat: {why}" in render_notes(behind)


@pytest.mark.parametrize("shape", ["steady", "jitter", "draining"])
def test_a_pipeline_that_keeps_up_or_catches_up_is_not_said_to_fall_behind(shape: str) -> None:
    """Outputs 0.3 s after their window; the same with ±0.9 s of jitter; a backlog drained
    through control (each window out 0.2 s less late than the one before): none falls
    further behind, so none is flagged."""
    rng = np.random.default_rng(3)
    jitter = {end: int(rng.integers(-900, 900)) for end in range(0, 61_000, 1000)}
    late = {"steady": lambda end: end + 300,
            "jitter": lambda end: end + 1_000 + jitter[end],
            "draining": lambda end: end + 300 + max(0, 4_000 - end // 5)}[shape]
    assert _shaped(late).metrics.falls_behind is None
