"""What a run returns, and what the live display is sent while it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.checker.evaluate import Evaluation
from pgval.checker.validity import Validity
from pgval.records.phases import Phases


@dataclass
class Status:
    """What the live display shows; sent about once a second."""

    phase: str
    elapsed_s: float
    total_s: float
    generated: int
    input_rate: float
    outputs: int
    batches: int
    note: str = ""


@dataclass
class ExperimentResult:
    run_id: int | None
    evaluation: Evaluation
    timings: dict[str, float]
    phases: Phases
    generator: dict[str, Any]
    batches: list[dict[str, Any]]
    fault_log: list[dict[str, Any]]
    validity: Validity = field(default_factory=Validity)
    readback: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None
    #: Every bound of the timeline (:attr:`pgval.run.experiment.Experiment.phase_bounds`).
    bounds: dict[str, int | None] = field(default_factory=dict)
    #: The warm-up's measurement (:meth:`pgval.run.warmup.WarmUp.record`).
    warmup: dict[str, Any] = field(default_factory=dict)
    #: Who judged the run (``--checker``: numpy, spark or both), and how Spark did.
    judged_by: dict[str, Any] = field(default_factory=dict)

    def warmup_line(self) -> str:
        """The warm-up in one line: how long the pipeline took to settle, or why it never
        did (a caveat of the metrics, not of the verdict)."""
        w = self.warmup
        if not w:
            return ""
        if w.get("settled"):
            windows = w.get("windows") or []
            at = next((k for k, x in enumerate(windows)
                       if x["window_end"] == w.get("steady_window_end")), len(windows) - 1)
            return (f"warm-up: steady after {w['seconds']:.1f} s (window {at + 1}, latency "
                    f"{windows[at]['median_ms'] / 1000:.1f} s); control started then")
        return f"warm-up: never steady; control started after {w['seconds']:.1f} s: {w['why']}"

    def summary(self) -> dict[str, Any]:
        out = self.evaluation.summary()
        out.update(self.validity.as_dict())
        out.update({"run_id": self.run_id, "run_dir": str(self.run_dir), "timings": self.timings,
                    "readback": self.readback, "warmup": self.warmup,
                    "judged_by": self.judged_by,
                    "phase_bounds_ms": {**self.bounds, "start": self.phases.start,
                                        "t2": self.phases.t2, "t3": self.phases.t3},
                    "generator": {k: self.generator.get(k) for k in (
                        "sent", "delivered", "failed", "undelivered", "achieved_rate")},
                    "batches": len(self.batches), "fault_log": self.fault_log})
        return out
