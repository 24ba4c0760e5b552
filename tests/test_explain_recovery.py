"""Why-unprocessed attribution and recovery metrics on constructed runs."""

from __future__ import annotations

import numpy as np
import pytest

from pgval.checker.evaluate import evaluate
from pgval.checker.explain import batch_ranges, explain_unprocessed
from pgval.checker.recovery import Recovery, recovery_metrics
from pgval.records.parse import ResourceTable
from pgval.records.phases import Phases
from tests.strategies import to_inputs, to_outputs

T0 = 1_700_000_000_000


def iso(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def progress(batch: int, start: int | None, end: int, watermark_ms: int) -> dict:
    return {"event": "progress", "batchId": batch, "eventTime": {"watermark": iso(watermark_ms)},
            "sources": [{"startOffset": None if start is None else {"get": {"0": start}},
                         "endOffset": {"get": {"0": end}}}]}


def at_offsets(events, offsets) -> None:
    """Place the events at these offsets of partition 0 of the GET topic (as Kafka would)."""
    events.offset = np.array(list(offsets), dtype=np.int64)
    events.topic = np.zeros(len(events.offset), dtype=np.int64)
    events.partition = np.zeros(len(events.offset), dtype=np.int64)


def test_each_cause_is_found() -> None:
    rt = ResourceTable()
    # Offsets 0..5 in partition 0 of topic get; windows of 1 s.
    rows = [
        {"id": 1, "type": "GET", "resource": "a", "event_ts": T0 + 100, "ingress_ts": T0 + 100},
        {"id": 2, "type": "GET", "resource": "a", "event_ts": T0 + 200, "ingress_ts": T0 + 200},
        # id 3: arrives long after the watermark passed its time → late.
        {"id": 3, "type": "GET", "resource": "a", "event_ts": T0 + 300, "ingress_ts": T0 + 5000},
        # id 4: on time, read, window closed, missing from outputs → lost.
        {"id": 4, "type": "GET", "resource": "a", "event_ts": T0 + 1500, "ingress_ts": T0 + 1500},
        # id 5: its window [3000, 4000) ends after the final watermark → in flight.
        {"id": 5, "type": "GET", "resource": "a", "event_ts": T0 + 3500, "ingress_ts": T0 + 3600},
        # id 6: at offset 5, which no batch read, though batch 3 read 6..8 → skipped
        # (m1's restart from the latest offsets), whatever its window.
        {"id": 6, "type": "GET", "resource": "a", "event_ts": T0 + 600, "ingress_ts": T0 + 600},
    ]
    events = to_inputs(rows, rt)
    at_offsets(events, [0, 1, 4, 2, 3, 5])
    outs = to_outputs([{"window_start": T0, "resource": "a", "count": 2, "ids": [1, 2],
                        "ingress_ts": T0 + 2100},
                       {"window_start": T0 + 1000, "resource": "a", "count": 0, "ids": [],
                        "ingress_ts": T0 + 3100}], rt)
    ev = evaluate(events, outs, "sst", 1000)
    assert sorted(ev.expected.id_sorted[ev.validation.unprocessed_slots].tolist()) == [
        3, 4, 5, 6]
    prog = [progress(0, None, 2, 0), progress(1, 2, 4, T0 + 1000),
            progress(2, 4, 5, T0 + 2600)]
    out = explain_unprocessed(events, ev.expected, ev.validation, prog)
    # Without batch 3 nothing read past offset 5: id 6 may still be coming.
    assert out["counts"] == {"late": 1, "skipped": 0, "in-flight at end": 2, "lost": 1}
    out = explain_unprocessed(events, ev.expected, ev.validation,
                              [*prog, progress(3, 6, 9, T0 + 2600)])
    assert out["counts"] == {"late": 1, "skipped": 1, "in-flight at end": 1, "lost": 1}
    assert out["examples"] == {"late": [3], "skipped": [6], "in-flight at end": [5],
                               "lost": [4]}


def test_a_jobs_id_read_behind_the_watermark_is_late_or_lost_never_late() -> None:
    """A user's job: pgval knows the event time, not the window, so an ID read behind the
    watermark may be Spark's late drop or a loss: "late or lost"; one read on time and
    missing is lost."""
    from pgval.oracle.rows import expected_from_rows

    rt = ResourceTable()
    rows = [
        {"id": 1, "type": "GET", "resource": "a", "event_ts": T0 + 100, "ingress_ts": T0 + 100},
        {"id": 3, "type": "GET", "resource": "a", "event_ts": T0 + 300, "ingress_ts": T0 + 5000},
        {"id": 4, "type": "GET", "resource": "a", "event_ts": T0 + 1500, "ingress_ts": T0 + 1500},
    ]
    events = to_inputs(rows, rt)
    at_offsets(events, [0, 2, 1])
    keys = ResourceTable()
    expected = expected_from_rows(['{"id":1}', '{"id":3}', '{"id":4}'],
                                  np.array([1, 3, 4]), np.array([0, 1, 2, 3]), events, keys)
    import pyarrow as pa

    from pgval.records.parse import job_outputs_from_rows

    outs = job_outputs_from_rows(pa.table({"key": ['{"id":1}'], "ids": [[1]],
                                           "written_ms": [T0 + 2000]}), keys)
    ev = evaluate(events, outs, "job", 1000, expected=expected)
    out = explain_unprocessed(events, ev.expected, ev.validation,
                              [progress(0, None, 1, 0), progress(1, 1, 2, T0 + 1000),
                               progress(2, 2, 3, T0 + 9000)])
    assert out["counts"] == {"late": 0, "skipped": 0, "in-flight at end": 0, "lost": 1,
                             "late or lost": 1}
    assert out["examples"]["late or lost"] == [3] and out["examples"]["lost"] == [4]
    # Where the run's batches were replayed, Spark's rule kept ID 3 (it is still
    # expected): missing, it is lost.
    from pgval.checker.explain import summarize_causes, unprocessed_cause_codes

    prog = [progress(0, None, 1, 0), progress(1, 1, 2, T0 + 1000),
            progress(2, 2, 3, T0 + 9000)]
    codes = unprocessed_cause_codes(events, ev.expected, ev.validation, prog, ruled=True)
    ruled = summarize_causes(ev.expected.id_sorted[ev.validation.unprocessed_slots], codes)
    assert ruled["counts"] == {"late": 0, "skipped": 0, "in-flight at end": 0, "lost": 2}
    # Not replayed though Spark dropped rows: the run is no evidence, and says why.
    from pgval.checker.validity import evaluation_reasons
    from pgval.oracle.replay import LateDrops

    unsure = evaluate(events, outs, "job", 1000, expected=expected, progress=prog,
                      late=LateDrops.unused("the replay is not the run's batches", 7))
    said = [r.text for r in evaluation_reasons(unsure).reasons]
    assert any("Spark dropped 7 rows behind the watermark and pgval could not tell them "
               "from losses (the replay is not the run's batches)" in r for r in said), said
    assert unsure.summary()["dropped_behind_watermark"]["told_apart"] is False
    told = evaluate(events, outs, "job", 1000, expected=expected, progress=prog,
                    late=LateDrops(True, None, np.zeros(0, dtype=np.int64), 7))
    assert not [r for r in evaluation_reasons(told).reasons if "behind" in r.text]


def test_a_query_on_a_new_checkpoint_starts_without_a_watermark() -> None:
    """m1's restart is a new query (new checkpoint, batch ids from 0, no watermark): its
    batches must not inherit the crashed query's watermark, or the IDs whose window state
    died with the driver are called late. An a1 restart (same query id) re-runs ids and
    keeps the watermark."""
    first = [{"event": "started", "id": "q1"}, progress(0, None, 2, 0),
             progress(1, 2, 4, T0 + 5000), progress(2, 4, 6, T0 + 9000)]
    m1 = [*first, {"event": "started", "id": "q2"}, progress(0, 6, 8, 0),
          progress(1, 8, 10, T0 + 20_000)]
    starts, _ends, wms = batch_ranges(m1).ranges[(0, 0)]
    assert dict(zip(starts.tolist(), wms.tolist(), strict=True)) == {
        0: 0, 2: 0, 4: T0 + 5000, 6: 0, 8: 0}  # q2's batch 0 read 6..8 at watermark 0
    a1 = [*first, {"event": "started", "id": "q1"}, progress(2, 4, 6, T0 + 9000),
          progress(3, 6, 8, T0 + 12_000)]
    starts, _ends, wms = batch_ranges(a1).ranges[(0, 0)]
    assert dict(zip(starts.tolist(), wms.tolist(), strict=True))[6] == T0 + 9000


def test_recovery_metrics_see_an_outage() -> None:
    rt = ResourceTable()
    rate_per_s = 20
    rows, outs = [], []
    ident = 0
    for sec in range(60):
        for k in range(rate_per_s):
            ident += 1
            ts = T0 + sec * 1000 + k * (1000 // rate_per_s)
            rows.append({"id": ident, "type": "GET", "resource": "a", "event_ts": ts,
                         "ingress_ts": ts})
    events = to_inputs(rows, rt)
    exp_rows = evaluate(events, to_outputs([], rt), "sst", 1000).expected.to_records()
    for row in exp_rows:
        end = row["window_end"]
        # Outage: windows ending in [20 s, 30 s) are emitted only at 30 s.
        when = T0 + 30_000 + 50 if T0 + 20_000 <= end < T0 + 30_000 else end + 50
        outs.append({**row, "ingress_ts": when})
    ev = evaluate(events, to_outputs(outs, rt), "sst", 1000, Phases(T0, T0 + 20_000,
                                                                     T0 + 30_000))
    rec = recovery_metrics(ev.phases, ev.metrics, ev.window_ms, hold_s=5)
    assert rec.control_max_gap_s == pytest.approx(1.0)
    assert rec.downtime_s == pytest.approx(10.05, abs=0.1)
    assert rec.recovered and not rec.censored
    assert 9 <= rec.recovery_latency_s <= 12
    assert rec.catchup_s is not None and rec.catchup_s < 3


def _recovery_with_held_windows(from_ms: int, until_ms: int, window_ms: int = 1000,
                                t2_s: int = 30, t3_s: int = 60) -> Recovery:
    """A steady stream (T4 50 s after T3) whose windows ending in [from_ms, until_ms)
    after T0 all come out together at until_ms: one gap in the output."""
    rt = ResourceTable()
    events = to_inputs(steady_stream(t3_s + 60), rt)
    exp_rows = evaluate(events, to_outputs([], rt), "sst", window_ms).expected.to_records()
    outs = [{**r, "ingress_ts": (T0 + until_ms + 50
                                 if T0 + from_ms <= r["window_end"] < T0 + until_ms
                                 else r["window_end"] + 50)} for r in exp_rows]
    phases = Phases(T0, T0 + 1000 * t2_s, T0 + 1000 * t3_s, t4=T0 + 1000 * (t3_s + 50))
    return evaluate(events, to_outputs(outs, rt), "sst", window_ms, phases).recovery


def test_an_outage_that_starts_after_t2_is_not_recovered_from_before_it() -> None:
    """A crash point lands after T2 (pgval arms at T2, the crash waits for its batch):
    the calm seconds before the outage are not a recovery. (A matrix run reported
    'recovered 0.0 s after T2' for a crash 11.7 s after T2 and a 66 s outage.)"""
    # T2 at 30 s; all well until 45 s; windows ending in [45 s, 70 s) come out at 70 s.
    rec = _recovery_with_held_windows(45_000, 70_000)
    assert rec.downtime_s == pytest.approx(26.0, abs=0.1)
    assert rec.recovered
    assert rec.recovery_latency_s is not None and rec.recovery_latency_s >= 40
    assert rec.recovery_throughput_s is not None and rec.recovery_throughput_s >= 40
    assert rec.catchup_s is not None and rec.catchup_s >= 15  # includes the 15 s before


def test_a_gap_that_starts_after_t3_is_the_removal_s_not_the_fault_s_outage() -> None:
    """A crashed worker that comes back at T3 costs a cold executor's first batch: a gap
    after T3 that is longer than anything the crash itself caused. (Matrix run 39: the
    crash at T2 raised latency for 20 s without a gap, the worker's return at T3 left a
    16 s gap, and recovery was measured from that gap: 112.6 s, catch-up 96.6 s.)"""
    # T2 at 30 s, T3 at 60 s: all well until 65 s; windows ending in [65 s, 81 s) at 81 s.
    rec = _recovery_with_held_windows(65_000, 81_000)
    assert rec.downtime_s is not None and rec.downtime_s < 2  # the fault's: none
    assert rec.recovered
    assert rec.recovery_latency_s is not None and rec.recovery_latency_s < 15


def test_a_cold_restart_gap_that_straddles_t3_counts_only_up_to_t3() -> None:
    """With 10 s windows the last output before T3 comes seconds before it, so the
    returning worker's cold gap begins before T3. The silence before T3 is no longer than
    control's gaps: the part after T3 is the removal's, not the fault's outage."""
    # T2 at 60 s, T3 at 123 s: outputs at 120 s, then windows ending at 130 and 140 s
    # held until 146 s (a 26 s gap, of which 3 s before T3).
    rec = _recovery_with_held_windows(130_000, 146_000, window_ms=10_000, t2_s=60, t3_s=123)
    assert rec.control_max_gap_s == pytest.approx(10.0, abs=0.1)
    assert rec.downtime_s is not None and rec.downtime_s <= rec.control_max_gap_s
    assert rec.recovered
    assert rec.recovery_latency_s is not None and rec.recovery_latency_s < 15


def test_an_outage_already_long_at_t3_counts_in_full() -> None:
    """A driver crash silences the output from T2 and the restart takes seconds past T3:
    that whole gap is the fault's, T3 or not."""
    rec = _recovery_with_held_windows(70_000, 140_000, window_ms=10_000, t2_s=60, t3_s=123)
    assert rec.downtime_s == pytest.approx(80.0, abs=0.2)  # from the output at 60 s to 140 s
    assert rec.recovery_latency_s is not None and rec.recovery_latency_s >= 80


def test_steady_run_recovers_at_once_and_bursty_windows_do_not_censor() -> None:
    rt = ResourceTable()
    rows, ident = [], 0
    for sec in range(60):
        for k in range(20):
            ident += 1
            ts = T0 + sec * 1000 + k * 50
            rows.append({"id": ident, "type": "GET", "resource": "a", "event_ts": ts,
                         "ingress_ts": ts})
    events = to_inputs(rows, rt)
    exp = evaluate(events, to_outputs([], rt), "sst", 2000).expected.to_records()
    outs = [{**r, "ingress_ts": r["window_end"] + 300} for r in exp]  # one burst per 2 s
    ev = evaluate(events, to_outputs(outs, rt), "sst", 2000,
                  Phases(T0 + 5000, T0 + 20_000, T0 + 35_000))
    rec = ev.recovery
    assert rec.recovered and not rec.censored
    assert rec.recovery_throughput_s is not None and rec.recovery_throughput_s <= 1.0
    assert rec.downtime_s == pytest.approx(2.0, abs=0.1)
    assert rec.control_max_gap_s == pytest.approx(2.0, abs=0.1)


def steady_stream(seconds: int, per_s: int = 20, start: int = T0) -> list[dict]:
    rows, ident = [], 0
    for sec in range(seconds):
        for k in range(per_s):
            ident += 1
            ts = start + sec * 1000 + k * (1000 // per_s)
            rows.append({"id": ident, "type": "GET", "resource": "a", "event_ts": ts,
                         "ingress_ts": ts})
    return rows


def emitted(rows: list[dict], window_ms: int, rt: ResourceTable, delay_ms: int = 300,
            drop: tuple[int, int] | None = None, extra: list[dict] | None = None) -> tuple:
    """Events and the outputs a faithful query emits, minus windows ending inside ``drop``."""
    events = to_inputs(rows, rt)
    exp = evaluate(events, to_outputs([], rt), "sst", window_ms).expected.to_records()
    outs = [{**r, "ingress_ts": r["window_end"] + delay_ms} for r in exp
            if drop is None or not drop[0] <= r["window_end"] < drop[1]]
    return events, to_outputs(outs + (extra or []), rt)


@pytest.mark.parametrize("window_ms", [1000, 2000, 5000])
def test_steady_stream_with_the_ramp_in_control_is_never_censored(window_ms: int) -> None:
    """Control starts with the very first input: no output for a window, a ramp from zero."""
    rt = ResourceTable()
    events, outs = emitted(steady_stream(90), window_ms, rt)
    ph = Phases(T0, T0 + 30_000, T0 + 60_000, T0 + 90_000)
    ev = evaluate(events, outs, "sst", window_ms, ph)
    assert ev.recovery.recovered and not ev.recovery.censored, ev.recovery
    assert ev.recovery.recovery_throughput_s == 0.0
    # No fault: the longest silence after T2 is one window, as in control.
    assert ev.recovery.downtime_s == pytest.approx(window_ms / 1000, abs=0.1)


@pytest.mark.parametrize("window_ms", [1000, 2000])
@pytest.mark.parametrize("drop_s", [6, 10, 15])
def test_a_planted_outage_is_measured(drop_s: int, window_ms: int) -> None:
    """Windows ending in [T2, T2 + drop) are never emitted: downtime and throughput
    recovery time are both the planted drop, ± 1 s."""
    rt = ResourceTable()
    t2 = T0 + 30_000
    events, outs = emitted(steady_stream(90), window_ms, rt, drop=(t2, t2 + drop_s * 1000))
    ev = evaluate(events, outs, "sst", window_ms, Phases(T0, t2, T0 + 60_000, T0 + 90_000))
    rec = ev.recovery
    outage_s = -(-drop_s * 1000 // window_ms) * window_ms / 1000  # whole windows are dropped
    assert rec.downtime_s == pytest.approx(outage_s, abs=1.0)
    assert rec.recovery_throughput_s is not None
    assert rec.recovery_throughput_s == pytest.approx(outage_s, abs=1.0)
    assert not rec.censored


def test_silence_after_t4_is_not_downtime_and_not_judged() -> None:
    """The generators stop at T4; the closing output comes 40 s later (the drain)."""
    rt = ResourceTable()
    closing = {"window_start": T0 + 100_000, "resource": "a", "count": 0, "ids": [],
               "ingress_ts": T0 + 100_000}
    events, outs = emitted(steady_stream(60), 1000, rt, extra=[closing])
    ev = evaluate(events, outs, "sst", 1000, Phases(T0, T0 + 20_000, T0 + 40_000, T0 + 60_000))
    assert ev.recovery.downtime_s is not None and ev.recovery.downtime_s <= 1.5
    assert not ev.recovery.censored


def test_a_stream_that_never_comes_back_is_censored() -> None:
    rt = ResourceTable()
    t2 = T0 + 30_000
    events, outs = emitted(steady_stream(90), 1000, rt, drop=(t2, T0 + 200_000))
    ev = evaluate(events, outs, "sst", 1000, Phases(T0, t2, T0 + 60_000, T0 + 90_000))
    assert ev.recovery.censored and not ev.recovery.recovered
    assert ev.recovery.recovery_throughput_s is None


def test_late_uses_the_previous_batch_watermark_and_the_window_end() -> None:
    """Spark drops in batch k rows whose window ends at or before batch k-1's watermark.

    id 1 (window [0,1000)) is read by batch 1 whose own watermark is 5000 but whose
    predecessor's is 0: Spark keeps it, so it is lost, not late. id 2 (window
    [1000, 2000)) is read by batch 2, predecessor watermark 5000 ≥ 2000: late.
    id 3 (window [4000, 5000)): event time before the predecessor watermark 5000 yet
    window end 5000 <= 5000: late. id 4 window [5000, 6000): end > 5000, on time.
    """
    rt = ResourceTable()
    rows = [
        {"id": 1, "type": "GET", "resource": "a", "event_ts": T0 + 100, "ingress_ts": T0 + 100},
        {"id": 2, "type": "GET", "resource": "a", "event_ts": T0 + 1100, "ingress_ts": T0 + 9000},
        {"id": 3, "type": "GET", "resource": "a", "event_ts": T0 + 4900, "ingress_ts": T0 + 9000},
        {"id": 4, "type": "GET", "resource": "a", "event_ts": T0 + 5100, "ingress_ts": T0 + 9000},
    ]
    events = to_inputs(rows, rt)
    at_offsets(events, [0, 1, 2, 3])
    prog = [progress(0, None, 0, 0), progress(1, 0, 1, T0 + 5000),
            progress(2, 1, 4, T0 + 9000)]
    ev = evaluate(events, to_outputs([], rt), "sst", 1000, progress=prog)
    causes = ev.unprocessed_causes
    assert causes["counts"] == {"late": 2, "skipped": 0, "in-flight at end": 0, "lost": 2}
    assert causes["examples"]["late"] == [2, 3]
    assert causes["examples"]["lost"] == [1, 4]
    assert ev.summary()["unprocessed_causes"] == causes


def test_terminal_shows_recovery_and_causes() -> None:
    from rich.console import Console

    from pgval.checker.render import render_evaluation

    rt = ResourceTable()
    t2 = T0 + 30_000
    events, outs = emitted(steady_stream(90), 1000, rt, drop=(t2, t2 + 10_000))
    at_offsets(events, range(len(events)))
    prog = [progress(0, None, len(events), T0 + 95_000)]
    ev = evaluate(events, outs, "sst", 1000, Phases(T0, t2, T0 + 60_000, T0 + 90_000),
                  progress=prog)
    console = Console(record=True, width=200)
    render_evaluation(ev, console)
    text = console.export_text()
    assert "recovery: downtime 10." in text and "throughput back after 10.00 s" in text
    assert f"why unprocessed: lost {ev.validation.unprocessed:,}" in text


def test_control_still_starting_up_gives_no_baseline_and_says_why() -> None:
    """Outputs begin 25 s into a 30 s control: no steady baseline, so nothing is judged."""
    rt = ResourceTable()
    events, outs = emitted(steady_stream(90), 1000, rt, drop=(T0, T0 + 25_000))
    ev = evaluate(events, outs, "sst", 1000, Phases(T0, T0 + 30_000, T0 + 60_000, T0 + 90_000))
    rec = ev.recovery
    assert rec.recovered is None and not rec.censored and rec.recovery_throughput_s is None
    assert rec.note is not None and "lengthen --phase-seconds" in rec.note
