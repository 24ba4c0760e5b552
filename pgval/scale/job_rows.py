"""A user's job judged on Spark: the rows of its batch run (its oracle) and its outputs read
from Kafka as the checker's tables (:mod:`pgval.scale.frames`), so no process holds the run.

The rules are the numpy path's (:func:`pgval.evidence.bundle.job_streams_from_records`,
:mod:`pgval.oracle.rows`, docs/semantics.md), written as DataFrame operations:

* pgval's own IDs leave every row, and a row left without an ID goes
  (:func:`pgval.oracle.rows.set_aside_rows`); the outputs lost them in the read-back;
* rows whose key texts repeat while each has exactly one ID are keyed by their ID, and so
  are the outputs with one ID (:func:`pgval.oracle.rows.key_by_single_id`);
* a row is expected output ``row`` (window 0, key code ``row``), each of its IDs one (input,
  row) pair whose ingress is the input's first; an input retried into Kafka counts once;
* an output's key text finds its row; its values are compared with the row's where the two
  texts differ, by :func:`pgval.oracle.values.wrong_values` itself in Spark's Python workers
  (equal texts are equal values, and most are equal);
* a result the validator cannot use — a null key, two rows with one key, an ID twice in a
  row, an ID that is no input — is said in one sentence, and nothing is judged.

Known difference: an incorrect occurrence in none of a fan-out input's rows is charged to
the input's first processed pair; "first" is by key text here, by the batch's row order on
the numpy path. Counts differ only when that input also has a pair written twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pgval.oracle.rows import ID_SEPARATOR
from pgval.oracle.values import wrong_values
from pgval.scale.checker import fit_shuffle

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: What every sentence of a batch result the validator cannot use starts with.
NOT_JUDGEABLE = "the job cannot be judged ID by ID: "


@dataclass
class JobTables:
    """The checker's four tables of a job's run (``frames``), or why there are none
    (``problem``), with what the numpy path reports of its rows."""

    frames: dict[str, Path] = field(default_factory=dict)
    problem: str | None = None
    rows: int = 0
    ids: int = 0
    by_id: bool = False
    duplicate_inputs: int = 0
    values_compared: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "ids": self.ids, "keyed_by_id": self.by_id,
                "values_compared": self.values_compared, "problem": self.problem}


def _not_control(control_ids: Sequence[int] | None) -> Any:
    """A predicate on one ID: not one of pgval's own (an inclusive range ``(lo, hi)``)."""
    from pyspark.sql import functions as F

    if not control_ids:
        return lambda x: F.lit(True)
    lo, hi = (int(i) for i in control_ids)
    return lambda x: (x < F.lit(lo)) | (x > F.lit(hi))


def _kept(control_ids: Sequence[int] | None) -> tuple[Column, Column]:
    """(a row's IDs without pgval's own, whether the row stays): a row left without an ID
    goes; one that had none from the start stays (it expects nothing, but it is an
    expected output)."""
    from pyspark.sql import functions as F

    kept = F.filter("ids", _not_control(control_ids))
    return kept, (F.size(kept) > 0) | (F.size("ids") == 0)


def kept_rows(rows: DataFrame, control_ids: Sequence[int] | None) -> DataFrame:
    """The batch's rows without pgval's own IDs (:func:`_kept`)."""

    kept, keep = _kept(control_ids)
    return rows.filter(keep).select("key", kept.alias("ids"), "value")


def _survey(batch: DataFrame, control_ids: Sequence[int] | None) -> dict[str, Any]:
    """One pass over the batch's rows: a null among any row's IDs (``null_ids``), and of the
    rows kept (:func:`kept_rows`) their number, distinct keys, null keys, fewest and most
    IDs and IDs in all; and the values any row gives."""
    from pyspark.sql import functions as F

    kept, keep = _kept(control_ids)
    size = F.when(keep, F.size(kept))
    got = batch.agg(
        F.sum(F.exists("ids", lambda x: x.isNull()).cast("long")).alias("null_ids"),
        F.count(F.when(keep, F.lit(1))).alias("n"),
        F.countDistinct(F.when(keep, F.col("key"))).alias("keys"),
        F.count(F.when(keep & F.col("key").isNull(), F.lit(1))).alias("null_keys"),
        F.min(size).alias("least"), F.max(size).alias("most"), F.sum(size).alias("ids"),
        F.count("value").alias("values")).collect()[0]
    return {k: int(got[k] or 0) for k in got.asDict()}


def _single_id_key(key: Column, one_id: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(one_id.isNotNull(), F.concat(key, F.lit(ID_SEPARATOR),
                                               one_id.cast("string"))).otherwise(key)


def _first_problem(survey: dict[str, Any], rows: DataFrame, pairs: DataFrame) -> str | None:
    """Why these rows cannot be judged ID by ID (one sentence, as the numpy path says it),
    or None."""
    from pyspark.sql import functions as F

    if survey["null_keys"]:
        return NOT_JUDGEABLE + "the batch result has a row whose key is null"
    twice_key = (rows.groupBy("key").count().filter("count > 1")
                 .agg(F.min("key").alias("k")).collect()[0]["k"])
    if twice_key is not None:
        return (NOT_JUDGEABLE + f"the batch result has two rows with the key {twice_key}: "
                "the key columns do not identify an output (declare build.key)")
    found = (pairs.groupBy("row", "id").agg(F.count(F.lit(1)).alias("n"),
                                            F.first("ingress").alias("ingress"))
             .agg(F.min(F.when(F.col("n") > 1, F.col("id"))).alias("twice"),
                  F.min(F.when(F.col("ingress").isNull(), F.col("id"))).alias("stray"))
             .collect()[0])
    if found["twice"] is not None:
        return (NOT_JUDGEABLE + f"the batch result lists input ID {int(found['twice'])} "
                "twice in one row (collect_list after an explode or a join can; "
                "collect_set or array_distinct lists each input once)")
    if found["stray"] is not None:
        return (NOT_JUDGEABLE + f"the batch result lists ID {int(found['stray'])}, which is "
                "no input of the run")
    return None


def _wrong_batches(batches: Iterator[pa.RecordBatch], tolerance: float
                   ) -> Iterator[pa.RecordBatch]:
    """Spark's Python workers: each output whose value text differs from its row's, judged
    field by field as the numpy path judges it."""
    for b in batches:
        wrong = wrong_values(b.column("expected"), b.column("written"), tolerance)
        yield pa.RecordBatch.from_arrays([b.column("output"), pa.array(wrong)],
                                         names=["output", "wrong"])


def _outputs(outputs: DataFrame, rows: DataFrame, by_id: bool, tolerance: float,
             values_compared: bool) -> DataFrame:
    """The checker's ``outputs``: each output with its row (``resource``; -1 where no row has
    its key) and ``wrong_value``."""
    from pyspark.sql import functions as F

    key = _single_id_key(F.col("key"), F.col("one_id")) if by_id else F.col("key")
    keyed = (outputs.withColumn("key", key)
             .join(rows.select("key", F.col("row").alias("matched"),
                               F.col("value").alias("expected")), "key", "left"))
    if values_compared:
        differ = (F.col("matched").isNotNull() & F.col("expected").isNotNull()
                  & F.col("value").isNotNull() & (F.col("expected") != F.col("value")))
        wrong = (keyed.filter(differ)
                 .select("output", "expected", F.col("value").alias("written"))
                 .mapInArrow(partial(_wrong_batches, tolerance=tolerance),
                             "output bigint, wrong boolean"))
        keyed = (keyed.drop("wrong_value").join(wrong, "output", "left")
                 .withColumn("wrong_value", F.coalesce("wrong", F.lit(False))))
    return keyed.select(
        "output", "ingress_ts", "position", F.lit(0).cast("long").alias("window_start"),
        F.coalesce("matched", F.lit(-1)).cast("long").alias("resource"),
        *(F.lit(-1).cast("long").alias(c) for c in ("count", "gets", "posts")),
        "n_ids", "wrong_value")


def job_tables_on_spark(spark: SparkSession, batch_rows: Path, read: dict[str, Path],
                        control_ids: Sequence[int] | None, tolerance: float, folder: Path
                        ) -> JobTables:
    """The checker's tables of a job's run, under ``folder``: from the rows of its batch run
    (``batch_rows``: ``key``, ``ids``, ``value``) and the Spark read-back's tables of a job
    (``read``: ``inputs``, ``outputs``, ``occurrences``; :func:`pgval.scale.kafka_read.
    read_back_on_spark` with ``job``)."""
    from pyspark.sql import functions as F

    folder.mkdir(parents=True, exist_ok=True)
    inputs = spark.read.parquet(str(read["inputs"]))
    fit_shuffle(spark, inputs.count())
    # A row whose ids are null lists no input, as the numpy path reads it (``fill_null``).
    batch = spark.read.parquet(str(batch_rows)).withColumn(
        "ids", F.coalesce("ids", F.array().cast("array<bigint>")))
    survey = _survey(batch, control_ids)
    tables = JobTables(rows=survey["n"], ids=survey["ids"])
    if survey["null_ids"]:
        tables.problem = NOT_JUDGEABLE + "the batch result has a null among its ids"
        return tables
    rows = kept_rows(batch, control_ids)
    # Keyed by their ID where the key texts repeat and every row has exactly one ID.
    tables.by_id = bool(survey["n"] and survey["keys"] != survey["n"]
                        and survey["least"] == 1 and survey["most"] == 1)
    if tables.by_id:
        rows = rows.withColumn("key", _single_id_key(F.col("key"), F.col("ids")[0]))
    # Rows numbered in key order (a distributed sort; the numbers' gaps differ from one
    # session to the next, their order does not): a re-check finds the same first pairs.
    rows_path = folder / "job_rows"
    (rows.orderBy("key").withColumn("row", F.monotonically_increasing_id())
     .write.mode("overwrite").parquet(str(rows_path)))
    rows = spark.read.parquet(str(rows_path))
    first = inputs.groupBy("id").agg(F.min("ingress_ts").alias("ingress"),
                                     F.count(F.lit(1)).alias("n"))
    pairs = (rows.select("row", F.explode("ids").alias("id")).join(first, "id", "left"))
    tables.problem = _first_problem(survey, rows, pairs)
    if tables.problem is not None:
        return tables
    tables.duplicate_inputs = int(first.agg(F.sum(F.col("n") - 1)).collect()[0][0] or 0)
    outputs = spark.read.parquet(str(read["outputs"]))
    # Compared where the batch gave values and any output record the parser reads wrote
    # one (a control-only output too), as :func:`pgval.evidence.bundle.written_values`.
    staged = spark.read.parquet(str(read["outputs"].parent / "staged_outputs"))
    tables.values_compared = bool(survey["values"]) and bool(
        staged.filter(F.col("value").isNotNull()).limit(1).count())
    paths = {name: folder / name for name in ("rows", "slots", "outputs")}
    rows.select("row", F.lit(0).cast("long").alias("window_start"),
                F.col("row").alias("resource"), F.size("ids").cast("long").alias("gets"),
                F.lit(0).cast("long").alias("posts")).write.mode("overwrite").parquet(
        str(paths["rows"]))
    # One slot per pair, ascending by ID then row (sorted within partitions of an ID).
    (pairs.repartition("id").sortWithinPartitions("id", "row")
     .select(F.monotonically_increasing_id().alias("slot"), "id", "row", "ingress")
     .write.mode("overwrite").parquet(str(paths["slots"])))
    (_outputs(outputs, rows, tables.by_id, tolerance, tables.values_compared)
     .write.mode("overwrite").parquet(str(paths["outputs"])))
    tables.frames = {**paths, "occurrences": read["occurrences"]}
    return tables
