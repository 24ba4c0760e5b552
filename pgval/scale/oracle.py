"""SST's and MST's expected outputs as Spark jobs: the oracle of :mod:`pgval.oracle.expected`
over an inputs table, written as the checker's ``rows`` and ``slots`` tables.

The same rules (docs/semantics.md): the events the topology reads (SST: GETs; MST: both
types), an ID kept at its first ingress only (a retried produce counts once; a tie goes to
the event read first), tumbling windows by floor division of the event time (negative times
too), one row per (window, resource), MST's only where both types occur. Rows are numbered
by (window, resource). A built-in topology never expects one input in two rows, so an
input's ID is its slot.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pgval.core.schema import Topology
from pgval.scale.checker import fit_shuffle

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def expected_on_spark(spark: SparkSession, inputs: Path, topology: str, window_ms: int,
                      folder: Path) -> tuple[dict[str, Path], int]:
    """The ``rows`` and ``slots`` tables of ``topology`` over the inputs table ``inputs``
    (:func:`pgval.scale.frames.write_inputs`), written into ``folder``; with the number of
    inputs set aside as a second ingress of an ID."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if topology not in (Topology.SST, Topology.MST):
        raise ValueError(f"the Spark oracle knows sst and mst, not {topology!r}")
    if window_ms <= 0:
        raise ValueError("window_ms must be positive")
    events = spark.read.parquet(str(inputs))
    fit_shuffle(spark, events.count())
    if topology == Topology.SST:
        events = events.filter("is_get")
    first = Window.partitionBy("id").orderBy("ingress_ts", "pos")
    ranked = events.withColumn("nth", F.row_number().over(first)).cache()
    kept = (ranked.filter(F.col("nth") == 1)
            .withColumn("window_start",
                        F.col("event_ts") - F.pmod(F.col("event_ts"), F.lit(window_ms))))
    duplicates = ranked.filter(F.col("nth") > 1).count()
    groups = kept.groupBy("window_start", "resource").agg(
        F.sum(F.col("is_get").cast("long")).alias("gets"), F.count(F.lit(1)).alias("n"))
    if topology == Topology.MST:
        groups = (groups.withColumn("posts", F.col("n") - F.col("gets"))
                  .filter((F.col("gets") > 0) & (F.col("posts") > 0)))
    else:
        groups = groups.withColumn("posts", F.lit(0).cast("long"))
    # Rows are few (windows × keys): numbered in one partition.
    rows = (groups.withColumn("row", F.row_number().over(
        Window.orderBy("window_start", "resource")) - 1)
        .select("row", "window_start", "resource", "gets", "posts"))
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"rows": folder / "rows", "slots": folder / "slots"}
    rows.write.mode("overwrite").parquet(str(paths["rows"]))
    rows = spark.read.parquet(str(paths["rows"]))
    slots = (kept.join(rows, ["window_start", "resource"])
             .select(F.col("id").alias("slot"), "id", "row",
                     F.col("ingress_ts").alias("ingress")))
    slots.write.mode("overwrite").parquet(str(paths["slots"]))
    ranked.unpersist()
    return paths, int(duplicates)
