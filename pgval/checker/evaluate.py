"""Library entry point: inputs + outputs → oracle → validator → metrics → one result.

The CLI (``pgval check``, on the columns :func:`pgval.records.parse.read_streams` reads), the
experiment runner (``pgval validate``), ``recheck`` and the benchmarks all call
:func:`evaluate`, on columns already in memory (the checker reads no files);
:meth:`Evaluation.summary` is the JSON contract of ``pgval check --json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from pgval.checker import anomalies
from pgval.checker.explain import CAUSES, summarize_causes, unprocessed_cause_codes
from pgval.checker.metrics import LatencyStats, Metrics, compute_metrics
from pgval.checker.recovery import Recovery, recovery_bounds, recovery_metrics
from pgval.checker.validator import Validation, validate
from pgval.core.schema import PHASES
from pgval.oracle.expected import ExpectedOutputs, expected_outputs
from pgval.oracle.replay import LateDrops
from pgval.oracle.rows import disagreement
from pgval.oracle.values import ValueCheck
from pgval.records.parse import InputEvents, OutputRecords
from pgval.records.phases import Phases


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
    #: The outputs judged, and each unprocessed ID's cause code (None without progress):
    #: what the full anomaly set (:meth:`anomalies`) names.
    outputs: OutputRecords | None = field(default=None, repr=False)
    cause_codes: np.ndarray | None = field(default=None, repr=False)
    #: A built-in job judged by its batch run: does pgval's own oracle of that topology
    #: expect the same? None: not compared; "" agreed; else where they differ.
    oracles: str | None = None
    #: Other readings of the same run: ``raw`` (a file sink read by listing its directory:
    #: :meth:`view`), ``clock`` (what the outputs' times are, for a sink without Kafka's),
    #: ``spark_check`` (the Spark checker's judgement held to this one: ``--checker both``).
    views: dict[str, Any] = field(default_factory=dict)
    #: A job without ``ids``, judged by its rows (:func:`by_rows`): what that can tell,
    #: and the real input records per phase (the expected rows have no input time).
    by_rows: str | None = None
    phase_inputs: dict[str, int] | None = None
    #: A user's job's values compared with its batch run's (None: not compared).
    values: ValueCheck | None = None
    #: What the run's watermark dropped by Spark's rule, per phase (None: nothing did).
    late: dict[str, Any] | None = None
    _anomalies: pa.Table | None = field(default=None, init=False, repr=False)

    def anomalies(self) -> pa.Table:
        """Every anomaly, one row each (:mod:`pgval.checker.anomalies`); built once."""
        if self.outputs is None:
            raise ValueError("this evaluation kept no outputs to name its anomalies by")
        if self._anomalies is None:
            self._anomalies = anomalies.build(
                self.expected, self.outputs, self.validation, self.phases, self.cause_codes,
                CAUSES, None if self.values is None else (self.values.expected,
                                                          self.values.written))
        return self._anomalies

    def _recovery(self) -> dict[str, object]:
        """The recovery numbers with a ``*_bound`` sibling for each the schedule capped."""
        rec = self.recovery.as_dict()
        outage = self.metrics.outage_at_t3
        return {**rec, **recovery_bounds(rec, None if outage is None else outage.as_dict())}

    def view(self) -> dict[str, object]:
        """The verdict and counts alone: another reading of a run beside its own."""
        v = self.validation
        return {"guarantee": v.guarantee, "expected": v.expected, "processed": v.processed,
                "duplicate": v.duplicate, "incorrect": v.incorrect,
                "unprocessed": v.unprocessed, "reliability": v.reliability,
                "duplicated_ids": [int(i) for i in v.ids("duplicate")[:20]],
                "unprocessed_ids": [int(i) for i in v.ids("unprocessed")[:20]]}

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
            "output_before_input": v.output_before_input,
            "malformed_inputs": v.malformed_inputs,
            "duplicate_inputs": v.duplicate_inputs,
            "outputs": v.outputs,
            "expected_outputs": v.expected_outputs,
            "missing_outputs": v.missing_outputs,
            "correct_outputs": v.correct_outputs,
            "correctness": v.correctness,
            "phase_reliability": {p: v.phases[p].reliability for p in PHASES},
            **self.metrics.as_dict(self.recovery.recovered),
            "recovery": self._recovery(),
            "unprocessed_causes": self.unprocessed_causes,
            "witnesses": {k: [[w, i] for w, i in pairs] for k, pairs in v.witnesses.items()},
        })
        if self.by_rows:
            out["by_rows"] = self.by_rows
        if v.expected_inputs is not None:  # a fan-out: the counts above are of pairs
            out["expected_inputs"] = v.expected_inputs
        if self.values is not None:
            out["values"] = {**self.values.as_dict(), "wrong_value": v.wrong_value}
        if self.late is not None:
            out["dropped_behind_watermark"] = self.late
        if self.views.get("clock"):
            out["latency_clock"] = self.views["clock"]
        if self.views.get("raw"):
            out["raw_read"] = self.views["raw"]
        if self.views.get("spark_check"):  # --checker both
            out["spark_check"] = self.views["spark_check"]
        if self.oracles is not None:
            out["oracles_agree"] = self.oracles == ""
            if self.oracles:
                out["oracles_disagreement"] = self.oracles
        return out


def evaluate(events: InputEvents, outputs: OutputRecords, topology: str, window_ms: int,
             phases: Phases | None = None,
             progress: Iterable[Mapping[str, Any]] | None = None,
             expected: ExpectedOutputs | None = None,
             cross_check: Mapping[str, Any] | None = None,
             values: ValueCheck | None = None, late: LateDrops | None = None) -> Evaluation:
    """Run oracle, validator, metrics and recovery over in-memory columns.

    ``progress`` (the driver's per-batch records) lets each unprocessed ID be
    given a cause; without it the causes stay empty. ``expected``: outputs another oracle
    computed (a user's job run as a batch: :func:`pgval.oracle.rows.expected_from_rows`);
    without it the topology's own oracle runs. ``cross_check``: ``{"topology",
    "window_ms"}`` of a built-in job whose ``expected`` came from its batch run: pgval's
    own oracle of that topology is computed too and compared (:attr:`Evaluation.oracles`).
    ``values``: the outputs' values compared with the expected rows'
    (:mod:`pgval.oracle.values`); an output whose values differ is incorrect. ``late``:
    what the run's watermark dropped by Spark's rule (:mod:`pgval.oracle.replay`), already
    out of ``expected``: counted per phase, apart.
    """
    phases = phases or Phases.unbounded()
    if expected is None:
        expected = expected_outputs(events, topology, window_ms)
    validation = validate(expected, outputs, phases,
                          wrong_value=None if values is None else values.wrong)
    validation.malformed_inputs = events.malformed
    metrics = compute_metrics(events, outputs, validation, window_ms, phases)
    recovery = recovery_metrics(phases, metrics, window_ms)
    codes = (None if progress is None
             else unprocessed_cause_codes(events, expected, validation, progress,
                                          ruled=late is not None and late.used))
    causes = ({} if codes is None else
              summarize_causes(expected.id_sorted[validation.unprocessed_slots], codes))
    oracles = None
    if cross_check is not None and expected is not None:
        own = expected_outputs(events, str(cross_check["topology"]),
                               int(cross_check["window_ms"]))
        oracles = disagreement(expected, own) or ""
    return Evaluation(topology, window_ms, phases, expected, validation, metrics, recovery,
                      causes, outputs, codes, oracles, values=values,
                      late=None if late is None else late_summary(late, events, phases))


def late_summary(late: LateDrops, events: InputEvents, phases: Phases) -> dict[str, Any]:
    """What the watermark dropped, as ``--json`` says it: inputs per phase (by their
    ingress time) and (input, row) pairs, or, where the replay could not stand for the
    run, why not and the rows Spark reported dropped."""
    from pgval.records.phases import PHASE_CODES

    out: dict[str, Any] = {"by": "the run's micro-batches replayed" if late.used else None,
                           "run_dropped_rows": late.run_dropped}
    if not late.used:
        return {**out, "told_apart": False, "why": late.why}
    ids = np.unique(late.dropped_ids)
    order = np.argsort(events.id)
    pos = np.minimum(np.searchsorted(events.id[order], ids), max(len(order) - 1, 0))
    ts = events.ingress_ts[order[pos]] if len(order) else np.zeros(0, dtype=np.int64)
    of = phases.of(np.asarray(ts, dtype=np.int64))
    return {**out, "told_apart": True, "inputs": len(ids), "pairs": len(late.dropped_ids),
            "phases": {p: int((of == code).sum()) for p, code in PHASE_CODES.items()},
            "examples": ids[:5].tolist()}



#: What a verdict by rows is: said with every such verdict.
BY_ROWS = ("a verdict by rows: the job carries no ids, so each output row was compared "
           "with its batch run's rows (found once, missing, duplicated, or with other "
           "values); it tells which rows, not which inputs, and rows carry no input time "
           "(no latency, no failure cost)")


def by_rows(evaluation: Evaluation, real_ingress: np.ndarray | None = None) -> Evaluation:
    """An evaluation of a job judged by its rows (each expected row one synthetic input,
    :func:`pgval.oracle.rows.match_rows`): its latencies and failure cost undefined (an
    output row's time minus the time of its own first copy is no latency), and
    :data:`BY_ROWS` said. ``real_ingress``: the real input records' ingress times, so a
    phase's load is judged by them (a phase in which no row came out is no phase without
    load)."""
    import dataclasses

    from pgval.records.phases import PHASE_CODES

    m = evaluation.metrics
    none = {p: LatencyStats.of(np.zeros(0), "undefined by rows: rows carry no input time")
            for p in m.latency}
    metrics = dataclasses.replace(
        m, latency=none, latency_karimov=dict(none), failure_cost_s=None,
        failure_cost_undefined="undefined by rows: rows carry no input time",
        latency_per_output_ms=np.full(len(m.latency_per_output_ms), np.nan))
    inputs = None
    if real_ingress is not None:
        of = evaluation.phases.of(np.asarray(real_ingress, dtype=np.int64))
        inputs = {p: int((of == code).sum()) for p, code in PHASE_CODES.items()}
    return dataclasses.replace(evaluation, metrics=metrics,
                               recovery=recovery_metrics(evaluation.phases, metrics,
                                                         evaluation.window_ms),
                               by_rows=BY_ROWS, phase_inputs=inputs)
