"""When the pipeline is steady: the rule that ends the warm-up (ε) and starts control.

The paper collects metrics "ε seconds after the generator starts", once the system is
stable. A fixed ε is not that here: a fresh Spark query on the 2-core default cluster keeps
getting faster for about a minute after T1 (JIT, caches), although priming already ran it
on old windows. So the run watches what it can see live, the output topic, and judges each
closed window by the median of ``ingress − window_end`` over its outputs: Kafka's timestamp
is the output's ingress (LogAppendTime) and an event's time is its generation time, so that
is the paper's latency less the time the closing input takes to arrive, a live proxy.

A window **holds** when its median is not below ``(1 - DROP)`` × the smaller of the two
medians before it: latency no longer falling there. The pipeline is **steady** when the
latest :data:`CONFIRM` windows hold (so at the earliest at the fourth window with outputs).
The numbers, from runs on the default cluster (median per window, s, by window end after
T1; 10 s windows, 2,000 ev/s, 40 s phases):

* SST (lead's probe): 11.7, 6.7, 5.1, 4.6, 4.7, 3.5, 3.5, 3.5, 3.4, 3.4, 3.4, 4.4 — in the
  steady part consecutive medians differ by 1-4 % with single outliers of ±25 % (a GC, the
  4.4 s), so a drop of more than 15 % is a trend and not noise, and comparing with the
  *smaller* of two earlier windows keeps one high outlier from passing for a fall;
* MST: 32.6, 32.9, 30.1, 20.1, 16.5, 18.2, 17.8, 12.2, 14.0, … 11 — the first windows are a
  cold *plateau*, flat and three times the warm latency; one holding window (30.1 after
  32.9) is not steadiness, two in a row are (18.2, 17.8).

The first windows are cold (partly filled, classes loading), so the two before a judged
window are never enough on their own. A later plateau-then-drop (SST 4.7 → 3.5) is seen by
no local rule: control then starts slightly warm, and the acceptance check is that
control's p50 is within 1.5× of recovery's.

The rule is pure (:func:`holds`, :func:`is_steady`); :class:`WarmUp`
keeps the windows seen so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: A fall of more than this share between windows is a trend, not noise.
DROP = 0.15
#: Consecutive holding windows that make the pipeline steady.
CONFIRM = 2


def holds(medians: np.ndarray | list[float], drop: float = DROP) -> np.ndarray:
    """Per window from the third on: is its median not below ``(1 - drop)`` × the smaller
    of the two medians before it? (``result[k]`` judges window ``k + 2``.)"""
    m = np.asarray(medians, dtype=float)
    if len(m) < 3:
        return np.zeros(0, dtype=bool)
    return m[2:] >= (1 - drop) * np.minimum(m[1:-1], m[:-2])


def is_steady(medians: np.ndarray | list[float], drop: float = DROP,
              confirm: int = CONFIRM) -> bool:
    """Steady *now*: the latest ``confirm`` windows hold. (Windows can close together, in
    one slow batch: an earlier steady window followed by a falling one is not steady.)"""
    ok = holds(medians, drop)
    return len(ok) >= confirm and bool(ok[-confirm:].all())


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
        trend = ("steady" if is_steady(medians) else
                 "falling" if len(medians) > 1 and medians[-1] < medians[-2] else "settling")
        return f"window {len(medians)}, latency {medians[-1] / 1000:.1f} s, {trend}"

    def record(self, started_ms: int, max_seconds: float) -> dict[str, Any]:
        """What the run keeps: when control started, whether and at which window the
        pipeline settled, the medians it saw, and, if it never settled, why."""
        ends, medians, counts = self.closed()
        settled = is_steady(medians)
        out: dict[str, Any] = {
            "settled": settled, "seconds": round((started_ms - self.t1) / 1000, 3),
            "rule": f"the latest {CONFIRM} windows each with a median latency not below "
                    f"{1 - DROP:.2f} x the smaller of the two before it",
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
        if len(medians) < 2 + CONFIRM:
            return (f"only {len(medians)} window(s) with outputs closed {where} (latency "
                    f"{seen} s): control started before the rule could judge")
        return (f"latency was still falling {where} (last window medians {seen} s): "
                "control started warming")
