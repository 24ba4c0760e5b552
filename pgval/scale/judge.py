"""A run judged on Spark from Kafka to its verdict: read-back, oracle and checker, each a
Spark job writing Parquet, so no process holds the run's IDs.

An incomplete read (:class:`pgval.scale.kafka_read.SparkReadBack`) is judged by nobody: the
verdict is unknown, with the read's problems as the reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.checker.validator import PhaseCounts
from pgval.oracle.rows import JOB
from pgval.records.phases import Phases
from pgval.scale.checker import SparkValidation, validate_on_spark
from pgval.scale.job_rows import job_tables_on_spark
from pgval.scale.kafka_read import PartitionRead, SparkReadBack, read_back_on_spark
from pgval.scale.oracle import expected_on_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class SparkJudgement:
    """What was read, what the checker found (None: the read was incomplete) and how long
    each Spark step took."""

    read: SparkReadBack
    validation: SparkValidation | None
    stages_s: dict[str, float] = field(default_factory=dict)
    #: A user's job: what its batch run gave (:meth:`JobTables.as_dict`), None otherwise.
    job: dict[str, Any] | None = None
    #: Why a complete read was not judged (a job's rows the validator cannot use, rows
    #: Spark's watermark dropped), in one sentence.
    unjudged: str | None = None

    @property
    def guarantee(self) -> str:
        return "unknown" if self.validation is None else self.validation.guarantee

    @property
    def reason(self) -> str | None:
        """Why the verdict is unknown (None when it is not)."""
        if self.validation is None:
            return self.unjudged or ("the read-back is incomplete: "
                                     + "; ".join(self.read.problems))
        return None if self.guarantee != "unknown" else "nothing was expected"

    def as_dict(self) -> dict[str, Any]:
        return {"guarantee": self.guarantee, "reason": self.reason, "read": self.read.as_dict(),
                "counts": None if self.validation is None else self.validation.counts(),
                "stages_s": self.stages_s,
                **({"job": self.job} if self.job is not None else {})}

    def to_record(self) -> dict[str, Any]:
        """Everything, as JSON: what a checker process hands back (:meth:`from_record`)."""
        v = self.validation
        return {"read": {**self.read.as_dict(),
                         "tables": {k: str(p) for k, p in self.read.tables.items()}},
                "validation": None if v is None else {
                    **{f.name: getattr(v, f.name) for f in dataclasses.fields(v)},
                    "phases": {p: dataclasses.asdict(c) for p, c in v.phases.items()},
                    "sets": {k: str(p) for k, p in v.sets.items()}},
                "stages_s": self.stages_s, "job": self.job, "unjudged": self.unjudged}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SparkJudgement:
        read = dict(record["read"])
        read_back = SparkReadBack(
            {k: Path(p) for k, p in read.pop("tables").items()},
            [PartitionRead(**p) for p in read.pop("partitions")],
            problems=list(read.pop("problems")),
            **{k: int(read[k]) for k in ("inputs", "control_inputs", "malformed_inputs",
                                         "outputs", "control_outputs", "malformed_outputs")})
        v = record.get("validation")
        validation = None if v is None else SparkValidation(**{
            **v, "phases": {p: PhaseCounts(**c) for p, c in v["phases"].items()},
            "sets": {k: Path(p) for k, p in v["sets"].items()},
            "output_span_ms": None if v.get("output_span_ms") is None
            else tuple(v["output_span_ms"])})
        return cls(read_back, validation, dict(record.get("stages_s") or {}),
                   record.get("job"), record.get("unjudged"))


def judge_on_spark(spark: SparkSession, bootstrap: str, inputs: Mapping[str, str],
                   output: str, topology: str, window_ms: int, folder: Path,
                   phases: Phases | None = None, resources: int = 0,
                   control_ids: Sequence[int] | None = None,
                   config: Mapping[str, Any] | None = None) -> SparkJudgement:
    """Read the run's topics to their end offsets, compute ``topology``'s expected outputs
    and classify every ID, all on ``spark``; tables and anomaly sets go under ``folder``."""
    stages: dict[str, float] = {}
    t = time.perf_counter()
    read = read_back_on_spark(spark, bootstrap, inputs, output, folder / "read", resources,
                              control_ids, config)
    stages["read back"] = time.perf_counter() - t
    if not read.complete:
        return SparkJudgement(read, None, stages)
    t = time.perf_counter()
    made, duplicates = expected_on_spark(spark, read.tables["inputs"], topology, window_ms,
                                         folder / "expected")
    stages["oracle"] = time.perf_counter() - t
    t = time.perf_counter()
    frames = {**made, "outputs": read.tables["outputs"],
              "occurrences": read.tables["occurrences"]}
    validation = validate_on_spark(spark, frames, topology, phases, folder / "sets",
                                   read.malformed_outputs)
    validation.duplicate_inputs = duplicates
    stages["checker"] = time.perf_counter() - t
    return SparkJudgement(read, validation, stages)


def judge_job_on_spark(spark: SparkSession, bootstrap: str, inputs: Mapping[str, str],
                       output: str, folder: Path, batch: Callable[[Path, Path], Path],
                       tolerance: float, phases: Phases | None = None,
                       control_ids: Sequence[int] | None = None,
                       config: Mapping[str, Any] | None = None) -> SparkJudgement:
    """A user's job's run judged on Spark: its topics read to their end offsets, the job
    run as a batch over every input record read (``batch(staged_inputs, rows_folder)``
    writes its rows and returns their folder), its rows and outputs made the checker's
    tables (:mod:`pgval.scale.job_rows`), every ID classified; all under ``folder``."""
    stages: dict[str, float] = {}
    t = time.perf_counter()
    read = read_back_on_spark(spark, bootstrap, inputs, output, folder / "read", 0,
                              control_ids, config, job=True)
    stages["read back"] = time.perf_counter() - t
    if not read.complete:
        return SparkJudgement(read, None, stages)
    t = time.perf_counter()
    rows = batch(folder / "read" / "staged_inputs", folder / "batch")
    stages["batch oracle"] = time.perf_counter() - t
    t = time.perf_counter()
    tables = job_tables_on_spark(spark, rows, read.tables, control_ids, tolerance,
                                 folder / "expected")
    stages["job tables"] = time.perf_counter() - t
    said = {**tables.as_dict(), "tolerance": tolerance}
    if tables.problem is not None:
        return SparkJudgement(read, None, stages, said, tables.problem)
    t = time.perf_counter()
    validation = validate_on_spark(spark, tables.frames, JOB, phases, folder / "sets",
                                   read.malformed_outputs, tables.values_compared)
    validation.duplicate_inputs = tables.duplicate_inputs
    stages["checker"] = time.perf_counter() - t
    return SparkJudgement(read, validation, stages, said)
