"""The paper's Algorithms 1 and 3 as Spark DataFrame operations.

The same rules as the numpy checker (:mod:`pgval.checker.validator`, docs/semantics.md),
written as joins and aggregations so that no process holds every ID of a run:

* every ID occurrence is joined to the output's expected row (by window and key) and to its
  own expected (input, row) pair: found there, it is the pair's, unless its output arrived
  before the input did (``output_before_input``) or its values differ from the expected
  row's (``wrong_value``) — both incorrect;
* a pair's first own occurrence in stream order (output ingress time, position, output, place
  in the output) makes it processed, every later one is a duplicate (counted per phase as
  the own occurrences there less the first ones: an aggregation, not a sort);
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

from pgval.checker.validator import PhaseCounts, check_kind, verdict_of
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
    #: Inputs the Spark oracle set aside as a second ingress of an ID (None: no Spark oracle).
    duplicate_inputs: int | None = None
    #: Pairs first processed in each phase (by their first own output's ingress time), and
    #: the first and last output's ingress time: the reliable throughput's figures.
    first_own: dict[str, int] = field(default_factory=dict)
    output_span_ms: tuple[int, int] | None = None

    @property
    def guarantee(self) -> str:
        """As the numpy checker's: ``unknown`` when nothing was expected."""
        return verdict_of(self)

    def ids(self, kind: str) -> np.ndarray:
        """All distinct IDs of one anomaly kind, ascending, read from its Parquet set
        (for runs whose sets fit in memory: comparisons and tests)."""
        check_kind(kind)
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


#: Rows a shuffle partition is given: its sort then fits a small heap (4 partitions of 10M
#: IDs ran a 1 GiB driver out of memory), and small runs are not cut into dozens of tasks.
ROWS_PER_PARTITION = 250_000


def fit_shuffle(spark: SparkSession, rows: int) -> int:
    """Set the session's shuffle partitions for a job over ``rows`` rows; the number set."""
    partitions = max(2, min(2000, -(-rows // ROWS_PER_PARTITION)))
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    return partitions


def _by_phase(df: DataFrame, *sums: Column) -> dict[int, Any]:
    """One aggregation per phase code: its row of ``sums`` (named columns) by code."""
    return {int(r["phase"]): r for r in df.groupBy("phase").agg(*sums).collect()}


def _total(by_phase: dict[int, Any], name: str) -> int:
    """A figure over the whole run (warm-up included): its phases' rows added up."""
    return sum(int(r[name] or 0) for r in by_phase.values())


def _phase_rows(slots: dict[int, Any], occurrences: dict[int, Any], duplicates: dict[int, int]
                ) -> dict[str, PhaseCounts]:
    """Each phase's row: pairs by their input's ingress, occurrences by their output's."""
    rows: dict[str, PhaseCounts] = {}
    for name, code in zip(PHASES, (CONTROL, FAILURE, RECOVERY), strict=True):
        r = slots.get(code)
        expected = int(r["expected"]) if r else 0
        processed = int(r["processed"] or 0) if r else 0
        rows[name] = PhaseCounts(
            expected=expected, processed=processed, unprocessed=expected - processed,
            duplicate=duplicates.get(code, 0),
            incorrect=int(occurrences[code]["incorrect"] or 0) if code in occurrences else 0,
            reliable=int(r["reliable"] or 0) if r else 0,
            duplicated_ids=int(r["duplicated_ids"] or 0) if r else 0,
            incorrect_ids=int(r["incorrect_ids"] or 0) if r else 0)
    return rows


def _write_set(ids: DataFrame, path: Path) -> Path:
    """One anomaly set: its distinct IDs as Parquet (replacing an earlier one)."""
    if path.exists():
        shutil.rmtree(path)
    ids.select("id").distinct().write.parquet(str(path))
    return path


def _keyed_outputs(rows: DataFrame, outputs: DataFrame, phases: Phases) -> DataFrame:
    """Each output with its expected row by key (the smallest row of that key, as the numpy
    checker's stable search finds it; -1 where no row has the key) and its phase."""
    from pyspark.sql import functions as F

    row_of_key = rows.groupBy("window_start", "resource").agg(F.min("row").alias("out_row"))
    return (outputs.join(row_of_key, ["window_start", "resource"], "left")
            .withColumn("out_row", F.coalesce("out_row", F.lit(-1)))
            .withColumn("phase", _phase_of(F.col("ingress_ts"), phases)))


def _classified(occurrences: DataFrame, keyed: DataFrame, slots: DataFrame) -> DataFrame:
    """Every occurrence with its output's row, time and phase, the input's first pair
    (``found``), its own pair in that row (``own_key``) and what it is: ``early`` (its output
    arrived before the input), ``bad_value`` (the output's values are wrong), ``own``."""
    from pyspark.sql import functions as F

    # Per input: its first pair, and every pair (row, slot, ingress) to find the one in the
    # output's row among (one join for both; a built-in topology's input has one pair).
    by_id = slots.groupBy("id").agg(
        F.min("slot").alias("first_slot"),
        F.collect_list(F.struct("row", "slot", "ingress")).alias("pairs"))
    occ = (occurrences
           .join(keyed.select("output", "out_row", "ingress_ts", "position", "wrong_value",
                              "phase"), "output")
           .join(by_id, "id", "left"))
    # The pair in the output's row, the smallest slot if two (sorted by row, then slot).
    pair = F.try_element_at(
        F.array_sort(F.filter("pairs", lambda p: p["row"] == F.col("out_row"))), F.lit(1))
    occ = (occ.withColumn("pair_slot", pair["slot"]).withColumn("pair_ingress", pair["ingress"])
           .drop("pairs"))
    own_key = F.col("pair_slot").isNotNull()
    early = own_key & (F.col("ingress_ts") < F.col("pair_ingress"))
    bad_value = own_key & ~early & F.col("wrong_value")
    return (occ.withColumn("found", F.col("first_slot").isNotNull())
            .withColumn("own_key", own_key)
            .withColumn("early", early)
            .withColumn("bad_value", bad_value)
            .withColumn("own", own_key & ~early & ~bad_value))


def _slot_stats(slots: DataFrame, occ: DataFrame, phases: Phases) -> DataFrame:
    """Every expected pair with its own occurrences (``own``), the incorrect ones charged to
    it (``foreign``) and its phase. An incorrect occurrence in its own pair (early, wrong
    value) is charged there; one in no row of its input to the input's first processed pair,
    else its first pair."""
    from pyspark.sql import functions as F

    # A pair's own occurrences, and the first of them in stream order (output ingress time,
    # position, output, place in it): the one that processed it, every later one a duplicate.
    own_count = (occ.filter("own").groupBy(F.col("pair_slot").alias("slot"))
                 .agg(F.count(F.lit(1)).alias("own"),
                      F.min(F.struct("ingress_ts", "position", "output", "k")).alias("first")))
    with_own = (slots.join(own_count, "slot", "left")
                .withColumn("own", F.coalesce("own", F.lit(0))))
    charged = with_own.groupBy("id").agg(
        F.coalesce(F.min(F.when(F.col("own") > 0, F.col("slot"))), F.min("slot"))
        .alias("charged_slot"))
    foreign = (occ.filter(F.col("found") & ~F.col("own"))
               .join(charged, "id", "left")
               .select(F.when(F.col("own_key"), F.col("pair_slot"))
                       .otherwise(F.col("charged_slot")).alias("slot")))
    foreign_count = foreign.groupBy("slot").agg(F.count(F.lit(1)).alias("foreign"))
    return (with_own.join(foreign_count, "slot", "left")
            .withColumn("foreign", F.coalesce("foreign", F.lit(0)))
            .withColumn("phase", _phase_of(F.col("ingress"), phases))
            .withColumn("first_phase", _phase_of(F.col("first.ingress_ts"), phases))
            .drop("first"))


#: What :func:`_slot_figures` adds up per phase of the expected pairs.
SLOT_FIGURES = ("expected", "processed", "own", "reliable", "duplicated_ids", "incorrect_ids")


def _slot_figures(stats: DataFrame) -> tuple[dict[int, dict[str, int]], dict[int, int]]:
    """Each phase's figures of the expected pairs (by their input's ingress), and the first
    own occurrences by their output's phase (``first_phase``), from one aggregation by both
    phases: one Spark job for what took two."""
    from pyspark.sql import functions as F

    own, long_ = F.col("own"), "long"
    groups = stats.groupBy("phase", "first_phase").agg(
        F.count(F.lit(1)).alias("expected"), F.sum((own > 0).cast(long_)).alias("processed"),
        F.sum(own).alias("own"),
        F.sum(((own == 1) & (F.col("foreign") == 0)).cast(long_)).alias("reliable"),
        F.sum((own > 1).cast(long_)).alias("duplicated_ids"),
        F.sum((F.col("foreign") > 0).cast(long_)).alias("incorrect_ids")).collect()
    by_phase: dict[int, dict[str, int]] = {}
    firsts: dict[int, int] = {}
    for r in groups:
        into = by_phase.setdefault(int(r["phase"]), dict.fromkeys(SLOT_FIGURES, 0))
        for name in SLOT_FIGURES:
            into[name] += int(r[name] or 0)
        if r["processed"]:  # a pair without own occurrences has no first one
            code = int(r["first_phase"])
            firsts[code] = firsts.get(code, 0) + int(r["processed"])
    return by_phase, firsts


def _output_totals(rows: DataFrame, keyed: DataFrame, topology: str, values_compared: bool
                   ) -> tuple[int, int, int, int, tuple[int, int] | None]:
    """(outputs, correct outputs, expected outputs, expected outputs never written, the
    outputs' first and last ingress time): an output is correct at an expected key with the
    expected count (a job's: its number of IDs) and, where values were compared, the
    expected values."""
    from pyspark.sql import functions as F

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
    got = judged.agg(
        F.count(F.lit(1)).alias("outputs"),
        F.sum(F.coalesce(correct, F.lit(False)).cast("long")).alias("correct"),
        F.countDistinct(F.when(known, F.col("out_row"))).alias("keys_seen"),
        F.min("ingress_ts").alias("first"), F.max("ingress_ts").alias("last")).collect()[0]
    n_rows = rows.count()
    span = None if got["first"] is None else (int(got["first"]), int(got["last"]))
    return (int(got["outputs"]), int(got["correct"] or 0), n_rows,
            n_rows - int(got["keys_seen"]), span)


def validate_on_spark(spark: SparkSession, frames: dict[str, Path], topology: str,
                      phases: Phases | None, out_dir: Path, malformed: int = 0,
                      values_compared: bool = False) -> SparkValidation:
    """Classify every ID occurrence and every expected pair of the tables ``frames``
    (:func:`pgval.scale.frames.write_frames`) with Spark; the anomaly sets go to
    ``out_dir`` (``unprocessed``, ``duplicate``, ``incorrect``, each a Parquet folder of
    distinct ``id``). ``values_compared``: the outputs' ``wrong_value`` column was filled
    by a value check (its count is then reported, as the numpy checker reports it)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    phases = phases or Phases.unbounded()
    rows, slots, outputs, occurrences = (spark.read.parquet(str(frames[name])) for name in
                                         ("rows", "slots", "outputs", "occurrences"))
    fit_shuffle(spark, occurrences.count() + slots.count())
    keyed = _keyed_outputs(rows, outputs, phases).persist(StorageLevel.MEMORY_AND_DISK)
    occ = _classified(occurrences, keyed, slots).persist(StorageLevel.MEMORY_AND_DISK)
    stats = _slot_stats(slots, occ, phases).persist(StorageLevel.MEMORY_AND_DISK)
    own, long_ = F.col("own"), "long"
    by_slot, firsts = _slot_figures(stats)
    by_occ = _by_phase(occ, F.sum((~own).cast(long_)).alias("incorrect"),
                       F.sum(own.cast(long_)).alias("own"),
                       F.sum(F.col("early").cast(long_)).alias("early"),
                       F.sum(F.col("bad_value").cast(long_)).alias("bad_value"))
    # Duplicates per phase (of their outputs): own occurrences there less the first ones.
    by_dup = {code: int(r["own"] or 0) - firsts.get(code, 0) for code, r in by_occ.items()}
    n_out, correct, n_rows, missing, span = _output_totals(rows, keyed, topology,
                                                           values_compared)
    out_dir.mkdir(parents=True, exist_ok=True)
    sets = {"unprocessed": _write_set(stats.filter(own == 0), out_dir / "unprocessed"),
            "duplicate": _write_set(stats.filter(own > 1), out_dir / "duplicate"),
            "incorrect": _write_set(occ.filter(~own), out_dir / "incorrect")}
    inputs = stats.select("id").distinct().count()
    for df in (keyed, occ, stats):
        df.unpersist()
    n_exp, processed = _total(by_slot, "expected"), _total(by_slot, "processed")
    return SparkValidation(
        topology=topology, expected=n_exp, processed=processed,
        unprocessed=n_exp - processed, duplicate=_total(by_slot, "own") - processed,
        incorrect=_total(by_occ, "incorrect"), reliable=_total(by_slot, "reliable"),
        duplicated_ids=_total(by_slot, "duplicated_ids"),
        incorrect_ids=_total(by_slot, "incorrect_ids"),
        output_before_input=_total(by_occ, "early"),
        wrong_value=_total(by_occ, "bad_value") if values_compared else None,
        outputs=n_out, correct_outputs=correct, expected_outputs=n_rows,
        missing_outputs=missing, expected_inputs=inputs if n_exp > inputs else None,
        malformed=malformed, phases=_phase_rows(by_slot, by_occ, by_dup), sets=sets,
        first_own={name: firsts.get(code, 0) for name, code in zip(
            PHASES, (CONTROL, FAILURE, RECOVERY), strict=True)},
        output_span_ms=span)
