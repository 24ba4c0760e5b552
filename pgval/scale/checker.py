"""The paper's Algorithms 1 and 3 as Spark DataFrame operations.

The same rules as the numpy checker (:mod:`pgval.checker.validator`, docs/semantics.md),
written as joins and aggregations so that no process holds every ID of a run:

* every ID occurrence is joined to the output's expected row (by window and key) and to its
  own expected (input, row) pair: found there, it is the pair's, unless its output arrived
  before the input did (``output_before_input``) or its values differ from the expected
  row's (``wrong_value``) — both incorrect;
* a pair's first own occurrence in stream order (output ingress time, position, output, place
  in the output) makes it processed, every later one is a duplicate;
* any other occurrence is incorrect, charged to its own pair where it is there but early or
  wrong, else to the input's first processed pair (its first pair if none is): an input with
  an incorrect occurrence is not reliable there;
* Algorithm 3: pairs with no own occurrence are unprocessed.

Counts come back to the driver as a handful of numbers; the anomaly sets (unprocessed,
duplicate and incorrect IDs) are written as Parquet and never collected.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq

from pgval.checker.validator import ANOMALIES, PhaseCounts, guarantee_of
from pgval.core.schema import Topology
from pgval.oracle.rows import JOB
from pgval.records.phases import CONTROL, FAILURE, PHASES, RECOVERY, Phases

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass
class SparkValidation:
    """What the Spark checker counted; the anomaly sets are Parquet folders in ``sets``."""

    topology: str
    expected: int
    processed: int
    unprocessed: int
    duplicate: int
    incorrect: int
    reliable: int
    duplicated_ids: int
    incorrect_ids: int
    output_before_input: int
    wrong_value: int | None
    outputs: int
    correct_outputs: int
    expected_outputs: int
    missing_outputs: int
    expected_inputs: int | None
    malformed: int
    phases: dict[str, PhaseCounts]
    sets: dict[str, Path] = field(default_factory=dict)

    @property
    def guarantee(self) -> str:
        """As the numpy checker's: ``unknown`` when nothing was expected."""
        if self.expected == 0:
            return "unknown"
        return guarantee_of(self.unprocessed, self.duplicate, self.incorrect, self.malformed)

    def ids(self, kind: str) -> np.ndarray:
        """All distinct IDs of one anomaly kind, ascending, read from its Parquet set
        (for runs whose sets fit in memory: comparisons and tests)."""
        if kind not in ANOMALIES:
            raise ValueError(f"unknown anomaly kind {kind!r} (expected one of "
                             f"{', '.join(ANOMALIES)})")
        table = pq.read_table(self.sets[kind])
        return np.sort(table.column("id").to_numpy(zero_copy_only=False).astype(np.int64))

    def counts(self) -> dict[str, Any]:
        """The run-level figures by name (the fields :mod:`pgval.scale.agreement` compares)."""
        return {name: getattr(self, name) for name in COUNTED}


#: The run-level figures both checkers give, compared one by one.
COUNTED = ("expected", "processed", "unprocessed", "duplicate", "incorrect", "reliable",
           "duplicated_ids", "incorrect_ids", "output_before_input", "wrong_value", "outputs",
           "correct_outputs", "expected_outputs", "missing_outputs", "expected_inputs",
           "malformed")


def _phase_of(ts: Column, phases: Phases) -> Column:
    """The phase code of a time column, as :meth:`Phases.of` gives it."""
    from pyspark.sql import functions as F

    return (F.when(ts < F.lit(phases.start), 0).when(ts < F.lit(phases.t2), CONTROL)
            .when(ts < F.lit(phases.t3), FAILURE).otherwise(RECOVERY))


def _phase_rows(slot_stats: DataFrame, duplicates: DataFrame, incorrect: DataFrame
                ) -> dict[str, PhaseCounts]:
    """Each phase's row: pairs by their input's ingress, occurrences by their output's."""
    from pyspark.sql import functions as F

    by_phase = {int(r["phase"]): r for r in slot_stats.groupBy("phase").agg(
        F.count(F.lit(1)).alias("expected"),
        F.sum((F.col("own") > 0).cast("long")).alias("processed"),
        F.sum(((F.col("own") == 1) & (F.col("foreign") == 0)).cast("long")).alias("reliable"),
        F.sum((F.col("own") > 1).cast("long")).alias("duplicated_ids"),
        F.sum((F.col("foreign") > 0).cast("long")).alias("incorrect_ids")).collect()}
    dup = {int(r["phase"]): int(r["n"]) for r in
           duplicates.groupBy("phase").agg(F.count(F.lit(1)).alias("n")).collect()}
    inc = {int(r["phase"]): int(r["n"]) for r in
           incorrect.groupBy("phase").agg(F.count(F.lit(1)).alias("n")).collect()}
    rows: dict[str, PhaseCounts] = {}
    for name, code in zip(PHASES, (CONTROL, FAILURE, RECOVERY), strict=True):
        r = by_phase.get(code)
        expected = int(r["expected"]) if r else 0
        processed = int(r["processed"]) if r else 0
        rows[name] = PhaseCounts(
            expected=expected, processed=processed, unprocessed=expected - processed,
            duplicate=dup.get(code, 0), incorrect=inc.get(code, 0),
            reliable=int(r["reliable"]) if r else 0,
            duplicated_ids=int(r["duplicated_ids"]) if r else 0,
            incorrect_ids=int(r["incorrect_ids"]) if r else 0)
    return rows


def _write_set(ids: DataFrame, path: Path) -> Path:
    """One anomaly set: its distinct IDs as Parquet (replacing an earlier one)."""
    if path.exists():
        shutil.rmtree(path)
    ids.select("id").distinct().write.parquet(str(path))
    return path


def validate_on_spark(spark: SparkSession, frames: dict[str, Path], topology: str,
                      phases: Phases | None, out_dir: Path, malformed: int = 0,
                      values_compared: bool = False) -> SparkValidation:
    """Classify every ID occurrence and every expected pair of the tables ``frames``
    (:func:`pgval.scale.frames.write_frames`) with Spark; the anomaly sets go to
    ``out_dir`` (``unprocessed``, ``duplicate``, ``incorrect``, each a Parquet folder of
    distinct ``id``). ``values_compared``: the outputs' ``wrong_value`` column was filled
    by a value check (its count is then reported, as the numpy checker reports it)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    phases = phases or Phases.unbounded()
    rows = spark.read.parquet(str(frames["rows"]))
    slots = spark.read.parquet(str(frames["slots"]))
    outputs = spark.read.parquet(str(frames["outputs"]))
    occurrences = spark.read.parquet(str(frames["occurrences"]))

    # Each output's expected row by key (the smallest row of that key, as the numpy
    # checker's stable search finds it), -1 where none has the key.
    row_of_key = rows.groupBy("window_start", "resource").agg(F.min("row").alias("out_row"))
    keyed = (outputs.join(row_of_key, ["window_start", "resource"], "left")
             .withColumn("out_row", F.coalesce("out_row", F.lit(-1)))
             .withColumn("phase", _phase_of(F.col("ingress_ts"), phases))
             .persist(StorageLevel.MEMORY_AND_DISK))

    first_slot = slots.groupBy("id").agg(F.min("slot").alias("first_slot"))
    pair = (slots.groupBy("id", "row")
            .agg(F.min("slot").alias("pair_slot"), F.min("ingress").alias("pair_ingress"))
            .withColumnRenamed("row", "out_row"))
    occ = (occurrences
           .join(keyed.select("output", "out_row", "ingress_ts", "position", "wrong_value",
                              "phase"), "output")
           .join(first_slot, "id", "left")
           .join(pair, ["id", "out_row"], "left"))
    own_key = F.col("pair_slot").isNotNull()
    early = own_key & (F.col("ingress_ts") < F.col("pair_ingress"))
    bad_value = own_key & ~early & F.col("wrong_value")
    occ = (occ.withColumn("found", F.col("first_slot").isNotNull())
           .withColumn("own_key", own_key)
           .withColumn("early", early)
           .withColumn("bad_value", bad_value)
           .withColumn("own", own_key & ~early & ~bad_value)
           .persist(StorageLevel.MEMORY_AND_DISK))

    own = occ.filter("own")
    own_count = own.groupBy(F.col("pair_slot").alias("slot")).agg(F.count(F.lit(1)).alias("own"))
    with_own = (slots.join(own_count, "slot", "left")
                .withColumn("own", F.coalesce("own", F.lit(0))))
    # Where an incorrect occurrence in no row of its input is charged: the input's first
    # processed pair, else its first pair.
    charged = with_own.groupBy("id").agg(
        F.coalesce(F.min(F.when(F.col("own") > 0, F.col("slot"))), F.min("slot"))
        .alias("charged_slot"))
    foreign = (occ.filter(F.col("found") & ~F.col("own"))
               .join(charged, "id", "left")
               .select(F.when(F.col("own_key"), F.col("pair_slot"))
                       .otherwise(F.col("charged_slot")).alias("slot")))
    foreign_count = foreign.groupBy("slot").agg(F.count(F.lit(1)).alias("foreign"))
    slot_stats = (with_own.join(foreign_count, "slot", "left")
                  .withColumn("foreign", F.coalesce("foreign", F.lit(0)))
                  .withColumn("phase", _phase_of(F.col("ingress"), phases))
                  .persist(StorageLevel.MEMORY_AND_DISK))

    stream_order = Window.partitionBy("pair_slot").orderBy("ingress_ts", "position", "output",
                                                           "k")
    duplicates = (own.withColumn("nth", F.row_number().over(stream_order))
                  .filter(F.col("nth") > 1))
    incorrect = occ.filter(~F.col("own"))

    totals = slot_stats.agg(
        F.count(F.lit(1)).alias("expected"),
        F.sum((F.col("own") > 0).cast("long")).alias("processed"),
        F.sum("own").alias("own"),
        F.sum(((F.col("own") == 1) & (F.col("foreign") == 0)).cast("long")).alias("reliable"),
        F.sum((F.col("own") > 1).cast("long")).alias("duplicated_ids"),
        F.sum((F.col("foreign") > 0).cast("long")).alias("incorrect_ids"),
        F.countDistinct("id").alias("inputs")).collect()[0]
    n_exp = int(totals["expected"])
    processed = int(totals["processed"] or 0)
    occ_totals = occ.agg(
        F.sum((~F.col("own")).cast("long")).alias("incorrect"),
        F.sum(F.col("early").cast("long")).alias("early"),
        F.sum(F.col("bad_value").cast("long")).alias("bad_value")).collect()[0]

    n_rows = rows.count()
    known = F.col("out_row") >= 0
    if topology == JOB:  # a job's own columns are not read: its number of IDs
        counts_ok = F.col("n_ids") == F.col("exp_gets")
    elif topology == Topology.SST:
        counts_ok = F.col("count") == F.col("exp_gets")
    else:
        counts_ok = (F.col("gets") == F.col("exp_gets")) & (F.col("posts") == F.col("exp_posts"))
    correct = known & counts_ok & (~F.col("wrong_value") if values_compared else F.lit(True))
    judged = keyed.join(rows.select(F.col("row").alias("out_row"),
                                    F.col("gets").alias("exp_gets"),
                                    F.col("posts").alias("exp_posts")), "out_row", "left")
    out_totals = judged.agg(
        F.count(F.lit(1)).alias("outputs"),
        F.sum(F.coalesce(correct, F.lit(False)).cast("long")).alias("correct"),
        F.countDistinct(F.when(known, F.col("out_row"))).alias("keys_seen"),
        F.sum(F.col("wrong_value").cast("long")).alias("wrong_outputs")).collect()[0]

    out_dir.mkdir(parents=True, exist_ok=True)
    sets = {
        "unprocessed": _write_set(slot_stats.filter(F.col("own") == 0), out_dir / "unprocessed"),
        "duplicate": _write_set(slot_stats.filter(F.col("own") > 1), out_dir / "duplicate"),
        "incorrect": _write_set(incorrect, out_dir / "incorrect"),
    }
    phase_rows = _phase_rows(slot_stats, duplicates, incorrect)
    for df in (keyed, occ, slot_stats):
        df.unpersist()
    inputs = int(totals["inputs"])
    return SparkValidation(
        topology=topology, expected=n_exp, processed=processed,
        unprocessed=n_exp - processed, duplicate=int(totals["own"] or 0) - processed,
        incorrect=int(occ_totals["incorrect"] or 0),
        reliable=int(totals["reliable"] or 0),
        duplicated_ids=int(totals["duplicated_ids"] or 0),
        incorrect_ids=int(totals["incorrect_ids"] or 0),
        output_before_input=int(occ_totals["early"] or 0),
        wrong_value=int(occ_totals["bad_value"] or 0) if values_compared else None,
        outputs=int(out_totals["outputs"]), correct_outputs=int(out_totals["correct"] or 0),
        expected_outputs=int(n_rows),
        missing_outputs=int(n_rows) - int(out_totals["keys_seen"]),
        expected_inputs=inputs if n_exp > inputs else None,
        malformed=malformed, phases=phase_rows, sets=sets)
