"""A run judged on Spark, as the rest of pgval reads a judged run: an
:class:`~pgval.checker.evaluate.Evaluation` made of the Spark checker's figures, and the
re-judging of the tables a run kept.

What the Spark checker counts is the numpy checker's, figure for figure (the verdict, the
counts, the three phase rows, the inputs set aside as retries, the reliable throughput).
What it does not give, because it needs every ID's times in one process, says so instead of
a number: latency, failure cost, the recovery's measures, the 1 s series, the witnesses and
the causes of unprocessed IDs. The anomaly sets are Parquet folders beside the tables
(:attr:`SparkValidation.sets`), not the numpy anomaly table.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.dataset as ds

from pgval.checker.evaluate import Evaluation
from pgval.checker.metrics import LatencyStats, Metrics, phase_throughput
from pgval.checker.recovery import Recovery
from pgval.checker.result import Reason
from pgval.checker.validator import ANOMALIES, PhaseCounts, Validation
from pgval.core.schema import Topology
from pgval.oracle.expected import expected_outputs
from pgval.oracle.rows import JOB
from pgval.records.parse import InputEvents
from pgval.records.phases import PHASES, Phases
from pgval.scale.checker import SparkValidation, validate_on_spark
from pgval.scale.job_rows import job_tables_on_spark
from pgval.scale.oracle import expected_on_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: What stands where a figure the Spark checker does not compute would be.
NOT_ON_SPARK = ("judged on Spark: latency, failure cost and recovery need every ID's times "
                "in one process (--checker numpy gives them)")
#: How many IDs of each anomaly set a judged run shows (the sets themselves are Parquet).
EXAMPLES = 20


def as_evaluation(judged: SparkValidation | None, topology: str, window_ms: int,
                  phases: Phases | None, malformed_inputs: int) -> Evaluation:
    """The Spark checker's figures as an :class:`Evaluation` the store, the report and the
    verdict read; everything per ID is left empty, with :data:`NOT_ON_SPARK` as the
    reason where a number would be. None (an incomplete read, judged by nobody): nothing
    expected, so the verdict is unknown."""
    phases = phases or Phases.unbounded()
    empty = np.zeros(0, dtype=np.int64)
    if judged is None:
        judged = SparkValidation(topology, 0, 0, 0, 0, 0, 0, 0, 0, 0, None, 0, 0, 0, 0, None,
                                 0, {p: PhaseCounts() for p in PHASES})
    validation = Validation(
        topology=judged.topology, expected=judged.expected, processed=judged.processed,
        unprocessed=judged.unprocessed, duplicate=judged.duplicate,
        incorrect=judged.incorrect, malformed=judged.malformed, reliable=judged.reliable,
        outputs=judged.outputs, correct_outputs=judged.correct_outputs,
        expected_outputs=judged.expected_outputs, missing_outputs=judged.missing_outputs,
        phases=dict(judged.phases), witnesses={}, first_own_ingress=empty,
        output_ingress=empty, output_known_key=empty, malformed_inputs=malformed_inputs,
        duplicate_inputs=judged.duplicate_inputs or 0,
        duplicated_ids=judged.duplicated_ids, incorrect_ids=judged.incorrect_ids,
        output_before_input=judged.output_before_input, wrong_value=judged.wrong_value,
        expected_inputs=judged.expected_inputs)
    latency = {p: LatencyStats.of(np.zeros(0), NOT_ON_SPARK) for p in PHASES}
    metrics = Metrics(
        throughput=phase_throughput(judged.first_own, judged.output_span_ms, phases),
        latency=latency, latency_karimov=dict(latency), failure_cost_s=None,
        series_start_ms=int(phases.start or 0), reliable_per_s=empty, outputs_per_s=empty,
        inputs_per_s=empty, latency_per_output_ms=np.zeros(0), output_ingress_ms=empty,
        failure_cost_undefined=NOT_ON_SPARK)
    # Nothing per ID: the oracle's rows are Spark's (a job's expectation is its own kind).
    expected = expected_outputs(InputEvents.empty(),
                                Topology.SST if judged.topology == JOB else judged.topology,
                                window_ms)
    expected.topology = judged.topology
    expected.duplicate_inputs = judged.duplicate_inputs or 0
    return Evaluation(judged.topology, window_ms, phases, expected, validation, metrics,
                      Recovery(note=NOT_ON_SPARK))


def read_reasons(read: Mapping[str, Any], input_topics: list[str], delivered: int,
                 own_events: int, generator_valid: bool) -> list[Reason]:
    """Why a run judged on Spark is unknown by its read (``SparkReadBack.as_dict``): the
    read's problems (then nothing was judged), else the input records read reconciled with
    the input partitions' ends and with what the generator delivered (and pgval's own
    events), as the numpy read-back's are."""
    from pgval.checker.validity import reconcile_inputs

    if not read.get("complete"):
        return [Reason("readback", f"the Spark read-back is incomplete: {p}")
                for p in read.get("problems") or ["no record of its read"]]
    parts = [p for p in read.get("partitions") or []
             if isinstance(p, dict) and p.get("topic") in input_topics]
    _, said = reconcile_inputs(sum(int(p.get("records") or 0) for p in parts),
                               sum(int(p.get("end") or 0) for p in parts), delivered,
                               own_events, generator_valid)
    return list(said.reasons)


def set_examples(sets: Mapping[str, Path], limit: int = EXAMPLES) -> dict[str, list[int]]:
    """The first ``limit`` IDs of each anomaly set, ascending among those read (a set is
    read only as far as that: it may hold millions)."""
    out: dict[str, list[int]] = {}
    for kind in ANOMALIES:
        path = sets.get(kind)
        if path is None or not Path(path).exists():
            continue
        head = ds.dataset(str(path), format="parquet").head(limit, columns=["id"])
        out[kind] = sorted(int(i) for i in head.column("id").to_pylist())
    return out


def rejudge_kept(spark: SparkSession, tables: Path, topology: str, window_ms: int,
                 phases: Phases | None, out: Path, malformed_outputs: int,
                 job: KeptJob | None = None) -> SparkValidation:
    """A run judged again from the tables its Spark read-back kept (``inputs``,
    ``outputs``, ``occurrences`` under ``tables``): the Spark oracle and checker (a user's
    job's: the rows its batch run kept, ``job``), their expected rows and anomaly sets
    written under ``out`` (replaced)."""
    if out.exists():
        shutil.rmtree(out)
    read = {name: tables / name for name in ("inputs", "outputs", "occurrences")}
    if job is not None:
        made = job_tables_on_spark(spark, job.batch_rows, read, job.control_ids,
                                   job.tolerance, out / "expected")
        if made.problem is not None:
            raise ValueError(f"the kept rows of the job's batch run: {made.problem}")
        judged = validate_on_spark(spark, made.frames, topology, phases, out / "sets",
                                   malformed_outputs, made.values_compared)
        judged.duplicate_inputs = made.duplicate_inputs
        return judged
    made_rows, duplicates = expected_on_spark(spark, read["inputs"], topology, window_ms,
                                              out / "expected")
    frames = {**made_rows, "outputs": read["outputs"], "occurrences": read["occurrences"]}
    judged = validate_on_spark(spark, frames, topology, phases, out / "sets", malformed_outputs)
    judged.duplicate_inputs = duplicates
    return judged


@dataclass(frozen=True)
class KeptJob:
    """What a re-check of a user's job judged on Spark needs beside the read's tables: the
    rows its batch run kept, pgval's own IDs (a range) and the values' tolerance."""

    batch_rows: Path
    control_ids: Sequence[int] | None
    tolerance: float


def recount_read(spark: SparkSession, tables: Path, read: Mapping[str, Any]
                 ) -> dict[str, Any]:
    """A kept Spark read with each partition's records counted again from the staged tables
    it kept (``staged_inputs``, ``staged_outputs``), so a re-check reconciles what the
    tables hold, not what the run said they held; a partition they lack counts 0."""
    from pyspark.sql import functions as F

    counted: dict[tuple[str, int], int] = {}
    for name in ("staged_inputs", "staged_outputs"):
        if not (tables / name).is_dir():
            continue
        rows = (spark.read.parquet(str(tables / name)).groupBy("topic", "partition")
                .agg(F.count(F.lit(1)).alias("n")).collect())
        counted.update({(str(r["topic"]), int(r["partition"])): int(r["n"]) for r in rows})
    parts = [{**p, "records": counted.get((str(p.get("topic")), int(p.get("partition", -1))),
                                          0)}
             for p in read.get("partitions") or [] if isinstance(p, dict)]
    return {**read, "partitions": parts, "recounted": True}


def same_sets(spark: SparkSession, kept: Mapping[str, Path], now: Mapping[str, Path]
              ) -> dict[str, Any]:
    """The anomaly sets a run kept against those judged again, ID for ID, on Spark (a set
    may hold millions): ``same``, the count of each, and a sentence (as
    :func:`pgval.evidence.recheck.compare_anomalies` says it of the numpy set)."""
    differ, counted = [], {}
    for kind in ANOMALIES:
        now_ids = spark.read.parquet(str(now[kind]))
        counted[kind] = now_ids.count()
        path = kept.get(kind)
        if path is None or not Path(path).exists():
            differ.append(f"{kind}: the run kept no set")
            continue
        kept_ids = spark.read.parquet(str(path))
        only_kept = kept_ids.subtract(now_ids).count()
        only_now = now_ids.subtract(kept_ids).count()
        if only_kept or only_now:
            differ.append(f"{kind}: {only_kept:,} IDs only in the kept set, {only_now:,} "
                          "only now")
    if differ:
        return {"same": False, "now": counted,
                "note": "the Spark checker's anomaly sets differ from the kept ones: "
                        + "; ".join(differ)}
    total = sum(counted.values())
    return {"same": True, "now": counted,
            "note": f"anomaly sets: the {total:,} kept IDs recomputed exactly (Spark)"}
