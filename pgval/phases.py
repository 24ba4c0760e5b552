"""Experiment phases by ingress time: warm-up, control, failure, recovery (paper Fig. 4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pgval.schema import PHASES

WARMUP = 0
CONTROL = 1
FAILURE = 2
RECOVERY = 3
PHASE_CODES = {"control": CONTROL, "failure": FAILURE, "recovery": RECOVERY}


@dataclass(frozen=True)
class Phases:
    """Boundaries in ms: control = [start, t2), failure = [t2, t3), recovery = [t3, ∞).

    Without boundaries everything is control (``Phases.unbounded()``), which is
    what validating a recorded stream without a fault means.
    """

    start: int
    t2: int
    t3: int

    @classmethod
    def unbounded(cls) -> Phases:
        big = np.iinfo(np.int64).max
        return cls(np.iinfo(np.int64).min, big, big)

    @classmethod
    def parse(cls, text: str) -> Phases:
        """Parse ``START,T2,T3`` (ms); raises ValueError with a plain message."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 3:
            raise ValueError("--phases takes three comma-separated times in ms: START,T2,T3")
        try:
            start, t2, t3 = (int(p) for p in parts)
        except ValueError as exc:
            raise ValueError("--phases values must be integers (ms)") from exc
        if not start <= t2 <= t3:
            raise ValueError("--phases must satisfy START <= T2 <= T3")
        return cls(start, t2, t3)

    def of(self, ts: np.ndarray) -> np.ndarray:
        """Phase code (WARMUP..RECOVERY) of every timestamp."""
        edges = np.array([self.start, self.t2, self.t3], dtype=np.int64)
        return np.searchsorted(edges, np.asarray(ts, dtype=np.int64), side="right").astype(
            np.int8)

    def bounded(self) -> bool:
        return self.t2 != np.iinfo(np.int64).max


__all__ = ["PHASES", "PHASE_CODES", "Phases", "WARMUP", "CONTROL", "FAILURE", "RECOVERY"]
