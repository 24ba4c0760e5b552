"""Experiment phases by ingress time: warm-up, control, failure, recovery (paper Fig. 4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pgval.core.schema import PHASES

WARMUP = 0
CONTROL = 1
FAILURE = 2
RECOVERY = 3
#: Year 9999 in epoch ms: larger "times" are typos, and would overflow int64 arithmetic.
MAX_MS = 253_402_300_799_999
PHASE_CODES = {"control": CONTROL, "failure": FAILURE, "recovery": RECOVERY}


@dataclass(frozen=True)
class Phases:
    """Boundaries in ms: control = [start, t2), failure = [t2, t3), recovery = [t3, ∞).

    ``t4`` (optional) is when the generators stopped: inputs end there, so recovery
    metrics judge nothing after it. Without boundaries everything is control
    (``Phases.unbounded()``), which is what validating a recorded stream without a
    fault means.

    ``removal_scheduled``: T3 is a time the experimenter chose (the fault removed at the
    planned T3), so an outage that lasts until T3 is capped by the schedule and what it
    makes is a lower bound. False when the removal is the job's own recovery (a crashed
    process restarted at once, as a supervisor does): an outage until then is Spark's.
    """

    start: int
    t2: int
    t3: int
    t4: int | None = None
    removal_scheduled: bool = True

    @classmethod
    def unbounded(cls) -> Phases:
        big = np.iinfo(np.int64).max
        return cls(np.iinfo(np.int64).min, big, big)

    @classmethod
    def parse(cls, text: str) -> Phases:
        """Parse ``START,T2,T3[,T4]`` (ms); raises ValueError with a plain message."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) not in (3, 4):
            raise ValueError("--phases takes three or four comma-separated times in ms: "
                             "START,T2,T3[,T4]")
        try:
            values = [int(p) for p in parts]
        except ValueError as exc:
            raise ValueError("--phases values must be integers (ms)") from exc
        if any(not 0 <= v <= MAX_MS for v in values):
            raise ValueError(f"--phases values must be epoch milliseconds between 0 and {MAX_MS}")
        if values != sorted(values):
            raise ValueError("--phases must satisfy START <= T2 <= T3 <= T4")
        return cls(*values)

    def of(self, ts: np.ndarray) -> np.ndarray:
        """Phase code (WARMUP..RECOVERY) of every timestamp."""
        edges = np.array([self.start, self.t2, self.t3], dtype=np.int64)
        return np.searchsorted(edges, np.asarray(ts, dtype=np.int64), side="right").astype(
            np.int8)

    def bounded(self) -> bool:
        return self.t2 != np.iinfo(np.int64).max


__all__ = ["MAX_MS", "PHASES", "PHASE_CODES", "Phases", "WARMUP", "CONTROL", "FAILURE", "RECOVERY"]
