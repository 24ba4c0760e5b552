"""Recovery metrics from the other fault studies, on top of the paper's phases.

* downtime (paper 002): the longest gap between consecutive outputs that ends
  after T2 and begins before T3 — the fault's; a gap that begins after T3 is the
  removal's, e.g. a restarted worker's cold first batch, and one that straddles T3
  counts past T3 only if it was already longer than control's gaps at T3 — beside the
  longest gap seen in control (windows make outputs bursty, so a gap is only news when
  it is longer than control's);
* recovery time (paper 000's detector): seconds from T2 until the 1 s series is
  back within ``tolerance`` (15 %) of its control baseline and stays there for
  ``hold_s``, looked for only after the outage (the downtime gap, when longer than
  control's): a crash point lands seconds after T2, and the calm before it is no
  recovery — for reliable throughput (trailing mean over whole windows, at least
  5 s, dated by the first second with output in the first trailing window that is
  back, so the smoothing adds no lag) and, separately, for
  latency (p50 of outputs per second, not above baseline + 15 % + 1 s). A metric
  that has not recovered by T4 (the generators stop, nothing after is load) is
  *censored* and flagged;
* catch-up (paper 002): latency recovery time minus downtime.

When the fault's outage was still on at T3 (:func:`pgval.checker.metrics.outage_at_removal`),
the removal ended it: downtime (for a silent outage) and the recovery times are then lower
bounds, set by how long the run left the fault in place (:func:`recovery_bounds`).

The throughput baseline is the median of the smoothed series over the *steady*
part of control: seconds whose trailing window lies wholly after the first output.
Counting the ramp from zero (no output before the first window closes) would put
the baseline below the steady rate and censor even a fault-free run. The latency
baseline uses the outputs of the same seconds. When that steady part is shorter
than the hold and two smoothing widths (a query still starting up through most of
control), nothing is judged and ``note`` says why: a guess against a start-up
transient would be worse than no number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pgval.checker.metrics import LATENCY_SLACK_S, TOLERANCE, Metrics, control_max_gap_ms
from pgval.records.phases import CONTROL, Phases

HOLD_S = 10.0
SMOOTH_S = 5
#: The recovery numbers a fault's outage at T3 bounds (downtime only for a silent outage).
BOUNDED = ("downtime_s", "recovery_throughput_s", "recovery_latency_s")


@dataclass
class Recovery:
    downtime_s: float | None = None
    control_max_gap_s: float | None = None
    recovery_throughput_s: float | None = None
    recovery_latency_s: float | None = None
    catchup_s: float | None = None
    recovered: bool | None = None
    censored: bool = False
    #: Seconds of steady control the baselines came from, and the throughput baseline.
    steady_control_s: float | None = None
    baseline_throughput: float | None = None
    #: Why nothing was judged, when control gave no baseline (then ``recovered`` is None).
    note: str | None = None

    def as_dict(self) -> dict[str, float | bool | None]:
        """The fields, as stored (``runs``' recovery columns)."""
        return asdict(self)


def recovery_bounds(recovery: Mapping[str, Any], outage: Mapping[str, Any] | None
                    ) -> dict[str, str]:
    """Sibling keys for the recovery numbers the schedule bounds (``downtime_bound: "lower"``,
    ``downtime_bound_why``, …), from a recovery's fields and the metrics' ``schedule_bound``
    (:class:`pgval.checker.metrics.Outage` as a dict): a stored run's columns and summary
    give the same answer as the live run."""
    if not outage:
        return {}
    out: dict[str, str] = {}
    for name in BOUNDED:
        if recovery.get(name) is None or (name == "downtime_s"
                                          and outage.get("kind") != "silent"):
            continue
        key = name.removesuffix("_s")
        out[f"{key}_bound"] = "lower"
        out[f"{key}_bound_why"] = str(outage.get("why"))
    return out


def _trailing_mean(values: np.ndarray, width: int) -> np.ndarray:
    """Mean of the last ``width`` values at every index (fewer at the start)."""
    csum = np.cumsum(np.r_[0.0, values.astype(np.float64)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - width, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def _first_stable(ok: np.ndarray, hold: int) -> int | None:
    """Index of the first run of ``hold`` consecutive True values, or None."""
    if hold <= 1:
        hits = np.flatnonzero(ok)
        return int(hits[0]) if len(hits) else None
    run = 0
    for i, v in enumerate(ok.tolist()):  # a few hundred seconds: a loop is fine here
        run = run + 1 if v else 0
        if run >= hold:
            return i - hold + 1
    return None


def _median_per_second(sec: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Median of ``values`` per second index in [0, n), NaN where a second has none."""
    out = np.full(n, np.nan)
    keep = (sec >= 0) & (sec < n)
    sec, values = sec[keep], values[keep]
    if len(sec) == 0:
        return out
    order = np.lexsort((values, sec))
    sec, values = sec[order], values[order]
    bounds = np.flatnonzero(np.r_[True, sec[1:] != sec[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):  # one step per second
        out[sec[a]] = np.median(values[a:b])
    return out


def recovery_metrics(phases: Phases, metrics: Metrics, window_ms: int,
                     tolerance: float = TOLERANCE, hold_s: float | None = None) -> Recovery:
    """Downtime, recovery times and catch-up of one run (needs bounded phases).

    ``hold_s`` defaults to HOLD_S, shortened to a third of the failure phase for short
    runs (a 10 s hold cannot be met inside a 15 s recovery phase).
    """
    ph = phases
    if not ph.bounded():
        return Recovery()
    if hold_s is None:
        hold_s = min(HOLD_S, max(2.0, (ph.t3 - ph.t2) / 3000))
    m = metrics
    out_ts = np.sort(m.output_ingress_ms)
    # Nothing after T4 is judged: the generators have stopped, so silence there is the
    # end of the load (and the drain), not an outage.
    end_ms = ph.t4 if ph.t4 is not None else (int(out_ts[-1]) if len(out_ts) else ph.t3)
    rec = Recovery()
    # Recovery is looked for only once the outage (a gap longer than control's) is over:
    # a crash point lands after T2, and the calm seconds before it are not a recovery.
    outage_end_ms = ph.t2
    if len(out_ts) >= 2:
        ends = out_ts[1:]
        starts = out_ts[:-1]
        # The fault's gaps begin in the failure phase. One that begins after T3 is the
        # removal's (a restarted worker's cold executor), not an outage of the fault.
        after = (ends >= ph.t2) & (starts < min(end_ms, ph.t3))
        ctrl_gap = control_max_gap_ms(out_ts, ph)
        rec.control_max_gap_s = None if ctrl_gap is None else ctrl_gap / 1000
        if after.any():
            # A gap that straddles T2 counts from T2, one that straddles T4 up to T4.
            begin = np.maximum(starts[after], ph.t2)
            end = np.minimum(ends[after], end_ms)
            # One that straddles T3 is the fault's in full only if it was already an outage
            # at T3 (longer than control's gaps); otherwise only its part before T3 is: with
            # 10 s windows the last output before T3 comes seconds before a returning
            # worker's cold batch starts its silence.
            ctrl_gap_ms = 1000 * (rec.control_max_gap_s or 0.0)
            at_t3 = np.minimum(end, ph.t3)
            end = np.where(at_t3 - begin > ctrl_gap_ms, end, at_t3)
            g = end - begin
            rec.downtime_s = float(g.max()) / 1000
            if rec.control_max_gap_s is None or rec.downtime_s > rec.control_max_gap_s:
                outage_end_ms = int(end[int(np.argmax(g))])
    n = len(m.reliable_per_s)
    t = m.series_start_ms + 1000 * np.arange(n)
    # Outputs come once per window and key, so per-second throughput is bursty: smooth
    # over whole windows, at least SMOOTH_S (trailing, so recovery is never seen early).
    per_window = max(1, -(-window_ms // 1000))
    window_s = per_window * max(1, -(-SMOOTH_S // per_window))
    thr = _trailing_mean(m.reliable_per_s, window_s)
    in_ctrl = (t >= ph.start) & (t < ph.t2)
    after_t2 = (t >= ph.t2) & (t <= end_ms)
    after_outage = t >= outage_end_ms - 999  # from the second holding the outage's end
    hold = max(1, int(round(hold_s)))
    first_out = int(out_ts[0]) if len(out_ts) else ph.t2
    steady = in_ctrl & (t >= first_out + 1000 * (window_s - 1))
    rec.steady_control_s = float(steady.sum())
    # A baseline needs the pipeline in its steady state for a while: at least the hold and
    # two smoothing widths. Otherwise say so instead of judging against a start-up transient.
    needed = max(hold, 2 * window_s)
    if ph.t2 > ph.start and rec.steady_control_s < needed:
        rec.note = (f"no baseline: control had {rec.steady_control_s:.0f} s of steady output "
                    f"(first output {max(0, first_out - ph.start) / 1000:.0f} s into it), "
                    f"{needed} s needed; lengthen --phase-seconds")
        return rec
    if in_ctrl.any() and after_t2.any():
        base = float(np.median(thr[steady]))
        rec.baseline_throughput = base
        judged = after_t2 & after_outage
        if ph.t4 is None:
            # Without T4, stop where the trailing mean starts to see the end of the outputs.
            judged = judged & (t <= end_ms - 1000 * window_s)
        ok = np.abs(thr - base) <= tolerance * base
        idx = _first_stable(ok[judged], hold)
        if idx is not None:
            at = int(np.flatnonzero(judged)[idx])
            # Date it by the first second with output inside that trailing window, not by
            # the window's end: the smoothing alone would add up to window_s of lag.
            lo = max(at - window_s + 1, 0)
            fed = np.flatnonzero(m.reliable_per_s[lo:at + 1] > 0)
            first = lo + int(fed[0]) if len(fed) else at
            rec.recovery_throughput_s = max(0.0, float(t[first] - ph.t2) / 1000)
    lat = m.latency_per_output_ms
    sec = (m.output_ingress_ms - m.series_start_ms) // 1000
    valid = ~np.isnan(lat)
    # The latency baseline, too, comes from control's steady part only.
    steady_out = (ph.of(m.output_ingress_ms) == CONTROL) & (
        m.output_ingress_ms >= first_out + 1000 * (window_s - 1))
    ctrl_lat = lat[valid & steady_out]
    if len(ctrl_lat):
        base_lat = float(np.median(ctrl_lat))
        p50 = _median_per_second(sec[valid], lat[valid], n)
        # A second without outputs keeps the last output's verdict only while the silence is
        # no longer than control's longest gap; a longer silence is an outage, not recovery.
        allowed_gap = int(np.ceil(rec.control_max_gap_s or 1.0)) + 1
        filled = p50.copy()
        since = np.zeros(n, dtype=np.int64)
        for i in range(1, n):
            if np.isnan(filled[i]):
                filled[i] = filled[i - 1]
                since[i] = since[i - 1] + 1
        limit = base_lat * (1 + tolerance) + 1000 * LATENCY_SLACK_S
        ok = (filled <= limit) & (since <= allowed_gap)
        judged = after_t2 & after_outage & ~np.isnan(filled)
        idx = _first_stable(ok[judged], hold)
        if idx is not None:
            rec.recovery_latency_s = float(t[judged][idx] - ph.t2) / 1000
    rec.recovered = rec.recovery_throughput_s is not None and rec.recovery_latency_s is not None
    rec.censored = not rec.recovered
    if rec.recovery_latency_s is not None and rec.downtime_s is not None:
        rec.catchup_s = max(0.0, rec.recovery_latency_s - rec.downtime_s)
    return rec
