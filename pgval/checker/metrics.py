"""Performance metrics from validated streams: reliable throughput, latency, failure cost.

* Reliable throughput (paper §3.4.3): unique expected IDs, correctly placed,
  counted at the ingress time of the output where each was first seen.
* Latency (paper §3.4.2): output ingress − ingress of the first input of the
  same resource whose event time is ≥ the window end (the input that lets the
  window close). Karimov's variant: − ingress of the last input of that resource
  with event time < window end. Both subtract timestamps of one broker, since
  partition p of every topic is led by the same broker. Both are summarised over
  the same outputs (those where both are defined), so they can be compared.
* Failure cost (§3.4.4): max latency in failure+recovery − median control latency.

A phase without outputs is a measurement, not a broken run: its throughput is 0 and its
latency is *undefined*, with the reason (``undefined`` in ``--json``). A number the run's
own schedule bounds is a *lower bound*: when the fault's outage was still on at T3 (no
output for longer than control's longest gap, or outputs further behind their inputs than
control's ever were), the recovery's numbers, the slowest output and the failure cost grow
with the time the fault was left in place (:func:`outage_at_removal`; ``*_bound:
"lower"``). The failure cost is a lower bound too when the recovery was not over by the
run's end (``recovered: false``): the slowest output may have been still to come
(:func:`failure_cost_bound`).

Two caveats of control itself, neither a validity reason: control's latency p50 more than
:data:`SETTLED_RATIO` × recovery's (control started before the pipeline was warm:
:func:`control_unsettled`), and outputs falling further behind their inputs through control
(the pipeline does not keep up with the input rate: :func:`falls_behind`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from pgval.checker.validator import Validation
from pgval.core.schema import Topology
from pgval.oracle.expected import deduplicate_inputs
from pgval.oracle.rows import JOB
from pgval.records.parse import InputEvents, OutputRecords
from pgval.records.phases import CONTROL, FAILURE, PHASES, RECOVERY, Phases

PERCENTILES = (50, 95, 99)
#: The 1 s series cover the run, not whatever a stray timestamp claims: inputs more than
#: SERIES_GAP_S apart are not one run, outputs count up to SERIES_TAIL_S after the last
#: input (the drain), and never more than MAX_SERIES_S in all.
SERIES_GAP_S = 3600
SERIES_TAIL_S = 3600
MAX_SERIES_S = 7 * 86_400
#: Latency is back to normal within control's p50 × (1 + TOLERANCE) + LATENCY_SLACK_S (a
#: per-second p50 of a few outputs is coarse: sub-second noise is no outage); shared with
#: :mod:`pgval.checker.recovery`, which judges "latency back" by the same rule.
TOLERANCE = 0.15
LATENCY_SLACK_S = 1.0
#: Why a phase's latency is undefined.
NO_OUTPUT = "no output in this phase"
NO_LATENCY = "no output in this phase has a defined latency (no later input closed its window)"
NO_PHASE = "no such phase (no phases given)"
#: Control's latency p50 may be at most this × recovery's: above it, control was measured
#: before the pipeline was warm (on the default cluster a cold control phase was 1.7-3×).
SETTLED_RATIO = 1.5
#: Why a failure cost is a lower bound when the recovery was censored at the run's end.
CENSORED_WHY = ("the recovery was not over when the load ended at T4 (recovered: false), "
                "so the slowest output may have been still to come: a longer recovery phase "
                "could give a larger number")


@dataclass
class LatencyStats:
    n: int = 0
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    #: Why there is no latency (None when there is one): e.g. :data:`NO_OUTPUT`.
    undefined: str | None = None
    #: Why ``max`` is a lower bound (the outage lasted until the removal), or None.
    max_bound_why: str | None = None

    @classmethod
    def of(cls, values_ms: np.ndarray, undefined: str = NO_OUTPUT) -> LatencyStats:
        """Percentiles of ``values_ms`` (NaN ignored); ``undefined`` says why, if none."""
        v = values_ms[~np.isnan(values_ms)]
        if len(v) == 0:
            return cls(undefined=undefined)
        p50, p95, p99 = (float(x) / 1000.0 for x in np.percentile(v, PERCENTILES))
        return cls(n=len(v), p50=p50, p95=p95, p99=p99, max=float(v.max()) / 1000.0)

    def as_dict(self) -> dict[str, float | int | str | None]:
        out: dict[str, float | int | str | None] = {
            "n": self.n, "p50_s": self.p50, "p95_s": self.p95, "p99_s": self.p99,
            "max_s": self.max}
        if self.undefined is not None:
            out["undefined"] = self.undefined
        if self.max_bound_why is not None:
            out.update(max_bound="lower", max_bound_why=self.max_bound_why)
        return out


@dataclass(frozen=True)
class Outage:
    """The fault's outage, still on when the fault was removed (T3). ``silent``: no output
    for longer than control's longest gap. ``rising``: outputs, further behind their inputs
    than control's ever were, and the slowest output came after the removal. ``behind``:
    as far behind, the slowest output before the removal. Every kind bounds the failure
    cost, the slowest outputs and the recovery's times: the failure phase ended before the
    pipeline had caught up, so how much slower it would still have got is not known.
    ``why`` is the sentence every bounded number carries. Runs stored before
    ``rising``/``behind`` say ``slow``."""

    kind: Literal["silent", "rising", "behind", "slow"]
    why: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "why": self.why}


@dataclass
class Metrics:
    """Per-phase performance numbers plus 1 s series for plots."""

    throughput: dict[str, float]  # reliable IDs / s per phase
    latency: dict[str, LatencyStats]  # paper's definition
    latency_karimov: dict[str, LatencyStats]
    failure_cost_s: float | None
    series_start_ms: int
    reliable_per_s: np.ndarray = field(repr=False)
    outputs_per_s: np.ndarray = field(repr=False)
    inputs_per_s: np.ndarray = field(repr=False)
    latency_per_output_ms: np.ndarray = field(repr=False)
    output_ingress_ms: np.ndarray = field(repr=False)
    #: Inputs and outputs whose ingress falls outside the series span (not in the 1 s
    #: series and plots, still validated and in every count).
    series_outside: dict[str, int] = field(default_factory=dict)
    #: Why the failure cost is undefined (None when it is a number).
    failure_cost_undefined: str | None = None
    #: The fault's outage when it was still on at T3 (then failure cost, max latencies and
    #: the recovery's numbers are lower bounds), else None.
    outage_at_t3: Outage | None = None
    #: Why control was not yet steady (:func:`control_unsettled`), or None.
    control_unsettled: str | None = None
    #: Why the pipeline does not keep up with the input rate (:func:`falls_behind`), or None.
    falls_behind: str | None = None

    def as_dict(self, recovered: bool | None = None) -> dict[str, object]:
        """The ``--json`` keys; ``recovered`` (the recovery's verdict) decides whether a
        failure cost is a bound because the run ended before the recovery did."""
        out: dict[str, object] = {
            "reliable_throughput": {p: round(v, 3) for p, v in self.throughput.items()},
            "latency": {p: s.as_dict() for p, s in self.latency.items()},
            "latency_karimov": {p: s.as_dict() for p, s in self.latency_karimov.items()},
            "failure_cost_s": self.failure_cost_s,
        }
        outage = None if self.outage_at_t3 is None else self.outage_at_t3.as_dict()
        bound = failure_cost_bound(outage, recovered)
        if self.failure_cost_undefined is not None:
            out["failure_cost_undefined"] = self.failure_cost_undefined
        elif bound is not None:
            out.update(failure_cost_bound="lower", failure_cost_bound_why=bound)
        out["schedule_bound"] = outage
        out["control_unsettled"] = self.control_unsettled
        out["falls_behind"] = self.falls_behind
        out["series_outside"] = self.series_outside
        return out


def failure_cost_bound(outage: Mapping[str, Any] | None, recovered: bool | None) -> str | None:
    """Why a failure cost is a lower bound, or None when it is a measurement: the fault's
    outage was on at T3 (``outage``, :meth:`Outage.as_dict`, as stored in ``schedule_bound``,
    any kind), or the recovery was not over by the run's end (``recovered`` False). A
    stored run's fields give the same answer as the live run."""
    if outage:
        return str(outage.get("why"))
    if recovered is False:
        return CENSORED_WHY
    return None


def topology_inputs(events: InputEvents, topology: str) -> InputEvents:
    """The events a topology reads: SST only GETs, MST both streams."""
    return events.take(np.flatnonzero(events.is_get)) if topology == Topology.SST else events


def reference_ingress(events: InputEvents, resource: np.ndarray, window_end: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per output: (paper reference ingress, Karimov reference ingress), NaN when undefined.

    Events are sorted by (resource, event_ts); a suffix minimum of ingress gives
    "first ingress among events with event_ts ≥ end", a prefix maximum gives
    "last ingress among events with event_ts < end". One pass per resource.
    """
    paper = np.full(len(resource), np.nan)
    karimov = np.full(len(resource), np.nan)
    if len(events) == 0 or len(resource) == 0:
        return paper, karimov
    order = np.lexsort((events.event_ts, events.resource))
    res = events.resource[order]
    ts = events.event_ts[order]
    ing = events.ingress_ts[order].astype(np.float64)
    bounds = np.flatnonzero(np.r_[True, res[1:] != res[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        code = res[a]
        outs = np.flatnonzero(resource == code)
        if len(outs) == 0:
            continue
        seg_ts = ts[a:b]
        seg_ing = ing[a:b]
        suffix_min = np.minimum.accumulate(seg_ing[::-1])[::-1]
        prefix_max = np.maximum.accumulate(seg_ing)
        pos = np.searchsorted(seg_ts, window_end[outs], side="left")
        has_next = pos < len(seg_ts)
        paper[outs[has_next]] = suffix_min[pos[has_next]]
        has_prev = pos > 0
        karimov[outs[has_prev]] = prefix_max[pos[has_prev] - 1]
    return paper, karimov


def _outside(ts_ms: np.ndarray, start_ms: int, n_bins: int) -> int:
    sec = (ts_ms - start_ms) // 1000
    return int(((sec < 0) | (sec >= n_bins)).sum())


def _per_second(ts_ms: np.ndarray, start_ms: int, n_bins: int) -> np.ndarray:
    if n_bins <= 0:
        return np.zeros(0, dtype=np.int64)
    sec = (ts_ms - start_ms) // 1000
    sec = sec[(sec >= 0) & (sec < n_bins)]
    return np.bincount(sec.astype(np.int64), minlength=n_bins)


def ids_reference_ingress(events: InputEvents, outputs: OutputRecords) -> np.ndarray:
    """Per output: the latest ingress among its IDs that are inputs (NaN when none is) —
    the input that completed it. The latency of a user's job, whose outputs need carry no
    window: for a windowed job it is Karimov's definition, for a stateless one the time
    from its input to it."""
    ev, _ = deduplicate_inputs(events)
    order = np.argsort(ev.id, kind="stable")
    ids_sorted, ingress = ev.id[order], ev.ingress_ts[order].astype(np.float64)
    out = np.full(len(outputs), np.nan)
    if not len(ids_sorted) or not len(outputs.ids):
        return out
    at = np.minimum(np.searchsorted(ids_sorted, outputs.ids), len(ids_sorted) - 1)
    per_id = np.where(ids_sorted[at] == outputs.ids, ingress[at], -np.inf)
    owner = np.repeat(np.arange(len(outputs)), outputs.lengths)
    latest = np.full(len(outputs), -np.inf)
    np.maximum.at(latest, owner, per_id)
    out[np.isfinite(latest)] = latest[np.isfinite(latest)]
    return out


def compute_metrics(events: InputEvents, outputs: OutputRecords, validation: Validation,
                    window_ms: int, phases: Phases | None = None) -> Metrics:
    """Reliable throughput, latency (both definitions; for a user's job, one:
    :func:`ids_reference_ingress`) and failure cost, per phase."""
    phases = phases or Phases.unbounded()
    consumed = topology_inputs(events, validation.topology)
    if validation.topology == JOB:
        paper_ref = karimov_ref = ids_reference_ingress(consumed, outputs)
    else:
        window_end = outputs.window_start + window_ms
        paper_ref, karimov_ref = reference_ingress(consumed, outputs.resource, window_end)
    out_ing = outputs.ingress_ts.astype(np.float64)
    lat_paper = out_ing - paper_ref
    lat_karimov = out_ing - karimov_ref
    out_phase = phases.of(outputs.ingress_ts)
    both = ~np.isnan(lat_paper) & ~np.isnan(lat_karimov)
    codes = dict(zip(PHASES, (CONTROL, FAILURE, RECOVERY), strict=True))
    why = {p: (NO_PHASE if not phases.bounded() and p != "control"
               else NO_LATENCY if (out_phase == c).any() else NO_OUTPUT)
           for p, c in codes.items()}
    latency = {p: LatencyStats.of(lat_paper[both & (out_phase == c)], why[p])
               for p, c in codes.items()}
    latency_k = {p: LatencyStats.of(lat_karimov[both & (out_phase == c)], why[p])
                 for p, c in codes.items()}

    first = validation.first_own_ingress
    throughput = _throughput(first, outputs.ingress_ts, phases)

    # Failure cost: only meaningful with a control baseline and something after it.
    failure_cost = None
    ctrl = lat_paper[(out_phase == CONTROL) & ~np.isnan(lat_paper)]
    after = lat_paper[((out_phase == FAILURE) | (out_phase == RECOVERY)) & ~np.isnan(lat_paper)]
    if len(ctrl) and len(after):
        failure_cost = float(after.max() - np.median(ctrl)) / 1000.0
    cost_undefined = (None if failure_cost is not None
                      else NO_PHASE if not phases.bounded()
                      else "no control latency to compare with" if not len(ctrl)
                      else "no latency after T2")
    outage = None
    if phases.bounded() and phases.removal_scheduled and len(ctrl):
        outage = outage_at_removal(phases, outputs.ingress_ts, lat_paper,
                                   float(np.median(ctrl)))
    if outage is not None:
        for p in ("failure", "recovery"):
            if latency[p].max is not None:
                latency[p].max_bound_why = outage.why
    behind = None
    if phases.bounded() and len(ctrl):
        behind = falls_behind(phases, outputs.ingress_ts, lat_paper,
                              _rate(consumed.ingress_ts, phases.start, phases.t2))

    series_start, n_bins = series_span(events, outputs)
    outside = {"inputs": _outside(events.ingress_ts, series_start, n_bins),
               "outputs": _outside(outputs.ingress_ts, series_start, n_bins)}
    return Metrics(
        throughput=throughput,
        latency=latency,
        latency_karimov=latency_k,
        failure_cost_s=failure_cost,
        series_start_ms=series_start,
        reliable_per_s=_per_second(first, series_start, n_bins),
        outputs_per_s=_per_second(outputs.ingress_ts, series_start, n_bins),
        inputs_per_s=_per_second(consumed.ingress_ts, series_start, n_bins),
        latency_per_output_ms=lat_paper,
        output_ingress_ms=outputs.ingress_ts,
        series_outside=outside,
        failure_cost_undefined=cost_undefined,
        outage_at_t3=outage,
        control_unsettled=control_unsettled(latency) if phases.bounded() else None,
        falls_behind=behind,
    )


def _throughput(first_own_ms: np.ndarray, output_ingress_ms: np.ndarray, phases: Phases
                ) -> dict[str, float]:
    """Reliable throughput per phase: first own occurrences / phase length (s)."""
    first_phase = phases.of(first_own_ms)
    firsts = {p: int((first_phase == c).sum())
              for p, c in zip(PHASES, (CONTROL, FAILURE, RECOVERY), strict=True)}
    span = ((int(output_ingress_ms.min()), int(output_ingress_ms.max()))
            if len(output_ingress_ms) else None)
    return phase_throughput(firsts, span, phases)


def phase_throughput(first_own: Mapping[str, int], output_span_ms: tuple[int, int] | None,
                     phases: Phases) -> dict[str, float]:
    """Reliable throughput per phase from its counts alone (the Spark checker's too): pairs
    first processed in the phase / its length (s); recovery lasts until the last output,
    and without phases control spans the outputs."""
    first_out, last_out = output_span_ms or (0, 0)
    if phases.bounded():
        spans = {"control": (phases.start, phases.t2), "failure": (phases.t2, phases.t3),
                 "recovery": (phases.t3, max(last_out, phases.t3 + 1000))}
    else:
        spans = {"control": (first_out, max(last_out, first_out + 1000)),
                 "failure": (0, 0), "recovery": (0, 0)}
    throughput = {}
    for p in PHASES:
        a, b = spans[p]
        dur = (b - a) / 1000.0
        throughput[p] = float(first_own.get(p, 0)) / dur if dur > 0 else 0.0
    return throughput


def _rate(ingress_ms: np.ndarray, start: int, end: int) -> float:
    """Inputs per second with ingress in ``[start, end)``."""
    seconds = (end - start) / 1000
    inside = (ingress_ms >= start) & (ingress_ms < end)
    return float(inside.sum()) / seconds if seconds > 0 else 0.0


def control_unsettled(latency: Mapping[str, LatencyStats]) -> str | None:
    """Why control was measured before the pipeline was warm: its latency p50 more than
    :data:`SETTLED_RATIO` × recovery's (the warm-up rule sees only a few windows, and a
    flat cold plateau looks steady to it; the finished run sees what came later). None when
    within the ratio or when either p50 is undefined."""
    ctrl, rec = latency["control"].p50, latency["recovery"].p50
    if ctrl is None or rec is None or rec <= 0 or ctrl <= SETTLED_RATIO * rec:
        return None
    return (f"control's latency p50 {ctrl:.1f} s is {ctrl / rec:.1f}× recovery's {rec:.1f} s "
            f"(more than {SETTLED_RATIO:g}×): the pipeline was not yet steady when control "
            "started, so control's numbers and the failure cost measured against them are "
            "not its steady state; a longer --warmup-seconds starts control later")


def falls_behind(phases: Phases, output_ingress_ms: np.ndarray, latency_ms: np.ndarray,
                 rate: float) -> str | None:
    """Why the pipeline does not keep up with the input rate, or None: through control the
    outputs fell further behind their inputs (the emission lag, :func:`emission_lags_ms`,
    whose least-squares line rises by more than TOLERANCE of the time elapsed and by more
    than LATENCY_SLACK_S in all). A pipeline that keeps up holds its lag (one burst per
    window); one that cannot take the rate falls behind by the share it cannot take, so its
    latencies grow with the run's length and say nothing of the rate it can take."""
    at, lag = emission_lags_ms(output_ingress_ms, latency_ms, (phases.start, phases.t2))
    ctrl = (at >= phases.start) & (at < phases.t2)
    if ctrl.sum() < 3 or np.ptp(at[ctrl]) <= 0:
        return None
    x = at[ctrl] - at[ctrl].mean()
    slope = float((x * lag[ctrl]).sum() / (x * x).sum())  # least squares: ms of lag per ms
    span = float(phases.t2 - phases.start)
    if slope <= TOLERANCE or slope * span <= 1000 * LATENCY_SLACK_S:
        return None
    return (f"the outputs fell {slope * span / 1000:.1f} s further behind their inputs over "
            f"control's {span / 1000:.0f} s ({slope:.2f} s a second): the pipeline does not "
            f"keep up with the input rate ({rate:,.0f} ev/s), so its latencies grow with the "
            "run's length; `pgval oir` (with --job for your own job) finds the rate it can "
            "take")


def control_max_gap_ms(out_ts: np.ndarray, phases: Phases) -> float | None:
    """The longest gap between consecutive outputs (``out_ts`` sorted) within control:
    windows make outputs bursty, so a silence is an outage only when longer than this."""
    if len(out_ts) < 2:
        return None
    starts, ends = out_ts[:-1], out_ts[1:]
    ctrl = (starts >= phases.start) & (ends < phases.t2)
    return float((ends - starts)[ctrl].max()) if ctrl.any() else None


def emission_lags_ms(output_ingress_ms: np.ndarray, latency_ms: np.ndarray,
                     breaks: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(time, lag) at the end of each second with outputs: how far the outputs were behind
    their inputs, i.e. the second's last output time minus the newest input (paper latency's
    reference ingress) any output so far had covered. A second is split at each of
    ``breaks`` (T2, T3), so no group straddles a phase boundary. A stall makes the lag grow
    a second a second; a catch-up burst cuts it at once, however old the windows it emits
    (their own latencies stay high, so a burst's median latency says nothing about being
    back)."""
    ok = ~np.isnan(latency_ms)
    ts = output_ingress_ms[ok].astype(np.float64)
    ref = ts - latency_ms[ok]
    order = np.argsort(ts, kind="stable")
    ts, ref = ts[order], ref[order]
    if not len(ts):
        return np.empty(0, np.float64), np.empty(0, np.float64)
    group = np.floor(ts / 1000) * (len(breaks) + 1) + np.searchsorted(
        np.asarray(breaks, np.float64), ts, side="right")
    last = np.r_[np.nonzero(np.diff(group))[0], len(ts) - 1]
    newest = np.maximum.accumulate(ref)
    return ts[last], ts[last] - newest[last]


def outage_at_removal(phases: Phases, output_ingress_ms: np.ndarray, latency_ms: np.ndarray,
                      control_p50_ms: float) -> Outage | None:
    """The fault's outage if it was still on when the fault was removed (T3), else None.

    On at T3 means ``silent`` — no output since T2 (or since the last one before it) for
    longer than control's longest gap — or the last output before T3 left the outputs
    further behind their inputs (:func:`emission_lags_ms`) than control's ever were ×
    (1 + TOLERANCE) + LATENCY_SLACK_S. Then the recovery was not over at the removal, and
    the recovery's times grow with the time the fault stayed: lower bounds, and so are the
    slowest output and the failure cost, whether the slowest output came after T3
    (``rising``) or before it (``behind``): a pipeline at half speed until T3 has its
    slowest output just before T3 and a failure cost that grows with the failure phase (a
    burst just before T3 that left the outputs still behind, as in the flagship MST
    delay-gt run, 19.6 s behind with control ≤ 8.6 s, does not show the stall was over).
    ``control_p50_ms`` is only quoted.
    """
    t2, t3 = phases.t2, phases.t3
    if t3 <= t2:
        return None
    order = np.argsort(output_ingress_ms, kind="stable")
    ts = output_ingress_ms[order]
    gap = control_max_gap_ms(ts, phases)
    held = f"{(t3 - t2) / 1000:.1f} s after T2"
    before = ts[ts < t3]
    silent_from = max(int(before[-1]), t2) if len(before) else t2
    if gap is not None and t3 - silent_from > gap:
        return Outage("silent", f"no output for the last {(t3 - silent_from) / 1000:.1f} s "
                                f"before the fault was removed at T3 ({held}; control's "
                                f"longest gap {gap / 1000:.1f} s): the removal ended the "
                                "outage, so a longer failure phase would give a larger number")
    at, lag = emission_lags_ms(output_ingress_ms, latency_ms, (t2, t3))
    ctrl = (at >= phases.start) & (at < t2)
    final = (at >= t2) & (at < t3)
    if not ctrl.any() or not final.any():
        return None
    ctrl_lag = float(lag[ctrl].max())
    lag_t3 = float(lag[final][-1])
    limit = ctrl_lag * (1 + TOLERANCE) + 1000 * LATENCY_SLACK_S
    if lag_t3 <= limit:
        return None
    behind = (f"the outputs were still {lag_t3 / 1000:.1f} s behind their inputs when the "
              f"fault was removed at T3 ({held}; control's at most {ctrl_lag / 1000:.1f} s, "
              f"latency p50 {control_p50_ms / 1000:.1f} s)")
    lat = latency_ms[order]
    known = ~np.isnan(lat)
    slowest_before = lat[known & (ts >= t2) & (ts < t3)].max(initial=-np.inf)
    # After T3, only the catch-up (until the lag is back) is the outage's; a slow output
    # later is another story.
    back = at[(at >= t3) & (lag <= limit)]
    until = back[0] // 1000 * 1000 + 1000 if len(back) else np.inf
    slowest_after = lat[known & (ts >= t3) & (ts < until)].max(initial=-np.inf)
    if slowest_after > slowest_before + 1000 * LATENCY_SLACK_S:
        return Outage("rising", f"{behind} and the slowest output came after it: the removal "
                                "ended the outage, so a longer failure phase would give a "
                                "larger number")
    return Outage("behind", f"{behind}: the failure phase ended before the pipeline had "
                            "caught up, so a longer failure phase could give a larger "
                            "failure cost and a longer recovery")


def series_span(events: InputEvents, outputs: OutputRecords) -> tuple[int, int]:
    """(start ms, number of 1 s bins) of the run: its inputs, then outputs to the drain.

    The run is the largest cluster of input ingress times with no gap over
    SERIES_GAP_S (all inputs, in any real run); the series ends at the last output at
    most SERIES_TAIL_S after it, and is never longer than MAX_SERIES_S. So one record
    stamped days away is counted outside the span instead of allocating days of bins.
    """
    ing = events.ingress_ts if len(events) else outputs.ingress_ts
    if len(ing) == 0:
        return 0, 0
    lo, hi = int(ing.min()), int(ing.max())
    if hi - lo > 1000 * SERIES_GAP_S:  # rare: find the cluster that holds the most inputs
        srt = np.sort(ing)
        cuts = np.flatnonzero(np.diff(srt) > 1000 * SERIES_GAP_S) + 1
        bounds = np.r_[0, cuts, len(srt)]
        k = int(np.argmax(np.diff(bounds)))
        lo, hi = int(srt[bounds[k]]), int(srt[bounds[k + 1] - 1])
    out = outputs.ingress_ts
    near = out[(out >= lo - 1000 * SERIES_GAP_S) & (out <= hi + 1000 * SERIES_TAIL_S)]
    first = min(lo, int(near.min())) if len(near) else lo
    last = max(hi, int(near.max())) if len(near) else hi
    start = (first // 1000) * 1000
    return start, int(min((last - start) // 1000 + 1, MAX_SERIES_S))
