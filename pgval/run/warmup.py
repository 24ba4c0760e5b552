"""When the pipeline is steady: the rule that ends the warm-up (ε) and starts control.

The paper collects metrics "ε seconds after the generator starts", once the system is
stable. A fixed ε is not that here: a fresh Spark query on the 2-core default cluster keeps
getting faster for about a minute after T1 (JIT, caches), although priming already ran it
on old windows. So the run watches what it can see live, the output topic, and judges each
closed window by the median of ``ingress − window_end`` over its outputs: Kafka's timestamp
is the output's ingress (LogAppendTime) and an event's time is its generation time, so that
is the paper's latency less the time the closing input takes to arrive, a live proxy.

The pipeline is **steady** when its latency neither falls nor rises beyond the band
(:data:`DROP`, 15 %), step by step and as a trend:

* a window **holds** when its median is within ``[(1 - DROP) × the smaller, (1 + DROP) ×
  the larger]`` of the two medians before it, and the latest :data:`CONFIRM` windows hold;
* the **trend** over the latest :data:`SPAN` windows (the ones those steps read), the
  least-squares line through their medians, changes by at most DROP of their mean across
  them: a backlog draining 3 s a window (35.4, 32.4, 29.4, 26.4 s: each step under the
  band, −29 % in all) or a pipeline falling behind (5, 8, 12, 20 s) is a trend, not a level.

So at the earliest at the fourth window with outputs. The numbers, from runs on the default
cluster (median per window, s, by window end after T1; 10 s windows, 2,000 ev/s, 40 s
phases):

* SST (lead's probe): 11.7, 6.7, 5.1, 4.6, 4.7, 3.5, 3.5, 3.5, 3.4, 3.4, 3.4, 4.4 — in the
  steady part consecutive medians differ by 1-4 % with single outliers of ±25 % (a GC, the
  4.4 s), so a change of more than 15 % is a trend and not noise, and comparing with the
  *smaller* (the *larger*) of two earlier windows keeps one high outlier from passing for
  a fall (a rise). Noise of ±5 % moves the trend line by at most 12 % over four windows.
  The plateau at 4.6-4.7 s and the fall to 3.5 s after it are a trend over four windows:
  steady at 3.5, 3.47, 3.5, 3.4 s;
* MST: 32.6, 32.9, 30.1, 20.1, 16.5, 18.2, 17.8, 12.2, 14.0, … 11 — the first windows are a
  cold *plateau*, flat and three times the warm latency; one holding window (30.1 after
  32.9) is not steadiness, two in a row and a flat trend are (16.5 → 18.2, 17.8).

A flat cold plateau of four windows or more looks steady to any rule that sees only the
windows so far. The finished run sees what came after: control's latency p50 more than
:data:`pgval.checker.metrics.SETTLED_RATIO` (1.5) × recovery's means control was not yet
steady, and :func:`after_run` marks the warm-up so (``settled`` false, ``why``).

The rule is pure (:func:`holds`, :func:`trend`, :func:`is_steady`); :class:`WarmUp`
keeps the windows seen so far.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: A change of more than this share, between windows or as a trend, is not noise.
DROP = 0.15
#: Consecutive holding windows that make the pipeline steady.
CONFIRM = 2
#: Windows the trend is judged over: the latest CONFIRM and the two before them.
SPAN = CONFIRM + 2
#: What the record says of a latency still rising when the warm-up ran out.
RISING_WHY = ("the pipeline does not keep up with the input rate: `pgval oir` (with --job "
              "for your own job) finds the rate it can take")


def holds(medians: np.ndarray | list[float], drop: float = DROP) -> np.ndarray:
    """Per window from the third on: is its median within ``[(1 - drop)`` × the smaller,
    ``(1 + drop)`` × the larger] of the two medians before it? (``result[k]`` judges window
    ``k + 2``.)"""
    m = np.asarray(medians, dtype=float)
    if len(m) < 3:
        return np.zeros(0, dtype=bool)
    before = m[1:-1], m[:-2]
    return ((m[2:] >= (1 - drop) * np.minimum(*before))
            & (m[2:] <= (1 + drop) * np.maximum(*before)))


def trend(medians: np.ndarray | list[float], span: int = SPAN) -> float | None:
    """How much the least-squares line through the latest ``span`` medians changes across
    them, as a share of their mean (−0.29: falling by 29 %); None with fewer windows."""
    m = np.asarray(medians, dtype=float)[-span:]
    if len(m) < span or span < 2 or m.mean() <= 0:
        return None
    x = np.arange(span, dtype=float) - (span - 1) / 2
    slope = float((x * m).sum() / (x * x).sum())  # least squares
    return slope * (span - 1) / float(m.mean())


def is_steady(medians: np.ndarray | list[float], drop: float = DROP,
              confirm: int = CONFIRM) -> bool:
    """Steady *now*: the latest ``confirm`` windows hold and the trend over the latest
    :data:`SPAN` is within ``drop``. (Windows can close together, in one slow batch: an
    earlier steady window followed by a falling one is not steady.)"""
    ok = holds(medians, drop)
    change = trend(medians)
    return (len(ok) >= confirm and bool(ok[-confirm:].all())
            and change is not None and abs(change) <= drop)


def direction(medians: np.ndarray | list[float]) -> str:
    """``steady``, ``falling``, ``rising`` or ``settling`` (neither: too few windows, or a
    step outside the band without a trend)."""
    if is_steady(medians):
        return "steady"
    change = trend(medians)
    if change is None:
        m = np.asarray(medians, dtype=float)
        change = float(m[-1] / m[0] - 1) if len(m) > 1 and m[0] > 0 else 0.0
    return "falling" if change < -DROP else "rising" if change > DROP else "settling"


def after_run(record: Mapping[str, Any], unsettled: str | None) -> dict[str, Any]:
    """The warm-up's record once the run is over: when control turned out not yet steady
    (``unsettled``, :func:`pgval.checker.metrics.control_unsettled`), it never settled, and
    ``why`` says so; the window the rule took for steady is kept as ``rule_steady_window_end``."""
    out = dict(record)
    if not unsettled or not out:
        return out
    if out.get("settled"):
        out["rule_steady_window_end"] = out.pop("steady_window_end", None)
    out["settled"] = False
    out["why"] = f"{out['why']}; {unsettled}" if out.get("why") else unsettled
    return out


def window_medians(window_end: np.ndarray, ingress_ms: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(window ends ascending, median ``ingress − window_end`` in ms, outputs) per window."""
    ends, inverse, counts = np.unique(window_end, return_inverse=True, return_counts=True)
    lat = (np.asarray(ingress_ms, dtype=np.int64) - np.asarray(window_end, dtype=np.int64))
    order = np.lexsort((lat, inverse))
    sorted_lat = lat[order].astype(float)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    mid = starts + (counts - 1) // 2
    medians = (sorted_lat[mid] + sorted_lat[starts + counts // 2]) / 2
    return ends, medians, counts


@dataclass
class WarmUp:
    """The windows seen during one warm-up and the verdict on them.

    ``t1``: when the generators started; windows ending at or before it hold only pgval's
    priming events. A window is judged once *closed*: its end is at or below the watermark
    of a batch the query reported, which Spark reports after the sink wrote the window's
    outputs (append mode emits a window in the batch whose watermark passes its end)."""

    t1: int
    window_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ingress: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    watermark: int = 0
    #: Outputs read without a ``window_end`` while nothing had one: a user's job whose
    #: outputs carry no window, which the rule cannot time (the warm-up is then ε alone).
    untimed: int = 0

    def add(self, window_end: np.ndarray, ingress: np.ndarray, watermark: int) -> None:
        keep = np.asarray(window_end, dtype=np.int64) > self.t1
        self.window_end = np.r_[self.window_end, np.asarray(window_end, np.int64)[keep]]
        self.ingress = np.r_[self.ingress, np.asarray(ingress, np.int64)[keep]]
        self.watermark = max(self.watermark, watermark)

    def closed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        closed = self.window_end <= self.watermark
        return window_medians(self.window_end[closed], self.ingress[closed])

    def steady(self) -> bool:
        """Is the pipeline steady now (:func:`is_steady` over the closed windows)?"""
        return is_steady(self.closed()[1])

    def note(self) -> str:
        """What the live display shows: ``window 4, latency 4.6 s, falling``."""
        _, medians, _ = self.closed()
        if not len(medians):
            return "no window closed yet"
        return f"window {len(medians)}, latency {medians[-1] / 1000:.1f} s, {direction(medians)}"

    def record(self, started_ms: int, max_seconds: float) -> dict[str, Any]:
        """What the run keeps: when control started, whether and at which window the
        pipeline settled, the medians it saw, and, if it never settled, why."""
        ends, medians, counts = self.closed()
        settled = is_steady(medians)
        out: dict[str, Any] = {
            "settled": settled, "seconds": round((started_ms - self.t1) / 1000, 3),
            "rule": f"the latest {CONFIRM} windows each with a median latency within "
                    f"{1 - DROP:.2f} x the smaller and {1 + DROP:.2f} x the larger of the two "
                    f"before it, and the trend over the latest {SPAN} within ±{DROP:.0%}",
            "windows": [{"window_end": int(e), "median_ms": round(float(m), 1),
                         "outputs": int(c)} for e, m, c in zip(ends, medians, counts, strict=True)]}
        if settled:
            out["steady_window_end"] = int(ends[-1])
        else:
            out["why"] = self.why_not(max_seconds)
        return out

    def why_not(self, max_seconds: float) -> str:
        """Why the pipeline did not settle within the maximum warm-up (one sentence)."""
        _, medians, _ = self.closed()
        if self.untimed and not len(self.window_end):
            return (f"the job's outputs carry no window_end ({self.untimed:,} read), so the "
                    "rule had no window to time: control started after --warmup-seconds")
        where = f"within --warmup-max-seconds {max_seconds:g}"
        if not len(medians):
            return f"no window's outputs came {where}: control started cold"
        seen = ", ".join(f"{m / 1000:.1f}" for m in medians[-5:])
        if len(medians) < SPAN:
            return (f"only {len(medians)} window(s) with outputs closed {where} (latency "
                    f"{seen} s): control started before the rule could judge")
        way = direction(medians)
        if way == "rising":
            return (f"latency was still rising {where} (last window medians {seen} s): "
                    f"{RISING_WHY}")
        if way == "falling":
            return (f"latency was still falling {where} (last window medians {seen} s): "
                    "control started warming")
        return (f"latency had not yet held within ±{DROP:.0%} {where} (last window medians "
                f"{seen} s): control started before it was steady")
