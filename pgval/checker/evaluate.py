"""Library entry point: inputs + outputs → oracle → validator → metrics → one result.

The CLI (``pgval check``, on the columns :func:`pgval.records.read_streams` reads), the
experiment runner (``pgval validate``), ``recheck`` and the benchmarks all call
:func:`evaluate`, on columns already in memory (the checker reads no files);
:meth:`Evaluation.summary` is the JSON contract of ``pgval check --json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pgval.checker.explain import explain_unprocessed
from pgval.checker.metrics import Metrics, compute_metrics
from pgval.checker.recovery import Recovery, recovery_metrics
from pgval.checker.validator import Validation, validate
from pgval.oracle.expected import ExpectedOutputs, expected_outputs
from pgval.phases import Phases
from pgval.records import InputEvents, OutputRecords
from pgval.schema import PHASES


@dataclass
class Evaluation:
    topology: str
    window_ms: int
    phases: Phases
    expected: ExpectedOutputs
    validation: Validation
    metrics: Metrics
    recovery: Recovery = field(default_factory=Recovery)
    #: Counts and examples per cause (pgval/checker/explain.py); empty without batch progress.
    unprocessed_causes: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        """The ``pgval check --json`` object: contract keys first, then extras."""
        v = self.validation
        out: dict[str, object] = {
            "expected": v.expected,
            "processed": v.processed,
            "duplicate": v.duplicate,
            "incorrect": v.incorrect,
            "unprocessed": v.unprocessed,
            "malformed": v.malformed,
            "reliability": v.reliability,
            "guarantee": v.guarantee,
            "phases": {p: v.phases[p].as_dict() for p in PHASES},
        }
        out.update({
            "topology": self.topology,
            "window_ms": self.window_ms,
            "malformed_inputs": v.malformed_inputs,
            "duplicate_inputs": v.duplicate_inputs,
            "outputs": v.outputs,
            "expected_outputs": v.expected_outputs,
            "missing_outputs": v.missing_outputs,
            "correct_outputs": v.correct_outputs,
            "correctness": v.correctness,
            "phase_reliability": {p: v.phases[p].reliability for p in PHASES},
            **self.metrics.as_dict(),
            "recovery": self.recovery.as_dict(),
            "unprocessed_causes": self.unprocessed_causes,
            "witnesses": {k: [[w, i] for w, i in pairs] for k, pairs in v.witnesses.items()},
        })
        return out


def evaluate(events: InputEvents, outputs: OutputRecords, topology: str, window_ms: int,
             phases: Phases | None = None,
             progress: Iterable[Mapping[str, Any]] | None = None) -> Evaluation:
    """Run oracle, validator, metrics and recovery over in-memory columns.

    ``progress`` (the driver's per-batch records) lets each unprocessed ID be
    given a cause; without it the causes stay empty.
    """
    phases = phases or Phases.unbounded()
    expected = expected_outputs(events, topology, window_ms)
    validation = validate(expected, outputs, phases)
    validation.malformed_inputs = events.malformed
    metrics = compute_metrics(events, outputs, validation, window_ms, phases)
    recovery = recovery_metrics(phases, metrics, window_ms)
    causes = ({} if progress is None
              else explain_unprocessed(events, expected, validation, progress))
    return Evaluation(topology, window_ms, phases, expected, validation, metrics, recovery,
                      causes)

