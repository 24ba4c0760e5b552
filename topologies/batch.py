"""A user's job run as a batch over a run's inputs: the rows its streaming run must give.

Structured Streaming promises that a streaming query's result equals the same query run
as a batch over the same input, less what the watermark drops (``withWatermark`` does
nothing in a batch). :func:`batch_table` takes that promise as the oracle: it gives the
job's ``build`` every input record of the run — pgval's own priming and closing events
too, as the stream read them — parsed by the very function the streaming query parses
them with (:func:`pgval.topologies.job_query.job_source`), and returns each output row's
key — ``to_json`` of the key
columns, the text the streaming query writes, in a session whose time zone is UTC like the
driver's — with its ``ids``, ready for :func:`pgval.oracle.rows.expected_from_rows`.

``python -m pgval.topologies.batch --job REF --run-dir RUN`` is the batch oracle of a run:
a ``local[1]`` Spark process over the run's evidence (``get``/``post`` as read back from
Kafka) that writes ``evidence/expected.parquet`` (``key``, ``ids``), sealed with the rest,
so a re-check needs no Spark and gives the same answer. Exit 0 with one JSON line, 2 when
the job cannot be judged (one sentence on stderr), 1 when Spark failed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgval.oracle.rows import rows_of
from pgval.topologies.job import IDS, SOURCES, Job, JobError, check_result
from pgval.topologies.job_query import key_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The raw records a source is made of: Kafka's value, partition and offset.
RAW_SCHEMA = pa.schema([("value", pa.binary()), ("partition", pa.int32()),
                        ("offset", pa.int64())])
#: The batch oracle's file in a run's evidence: one row per expected output.
EXPECTED_SCHEMA = pa.schema([("key", pa.string()), ("ids", pa.list_(pa.int64()))])


def batch_sources(spark: SparkSession, records: Mapping[str, pa.Table], workdir: Path
                  ) -> dict[str, DataFrame]:
    """Each source as a batch DataFrame from raw records (:data:`RAW_SCHEMA`), parsed as
    the streaming query parses them. Every record, pgval's priming and closing events
    too: the stream read them, and their IDs leave the rows afterwards, as they leave the
    outputs (:func:`pgval.oracle.rows.set_aside_rows`). Through a Parquet file in
    ``workdir``: no per-record Python, no pandas (a run's inputs may be millions)."""
    import pyarrow.parquet as pq

    from pgval.core.files import private_temp_path
    from pgval.topologies.job_query import job_source

    workdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in SOURCES:
        table = records.get(name)
        table = (RAW_SCHEMA.empty_table() if table is None
                 else table.select(RAW_SCHEMA.names).cast(RAW_SCHEMA))
        path = workdir / f"{name}.parquet"
        with private_temp_path(path) as tmp:  # 0600, never through a planted link
            pq.write_table(table, tmp)
        out[name] = job_source(spark.read.schema("value BINARY, partition INT, offset BIGINT")
                               .parquet(str(path)))
    return out


def batch_table(job: Job, spark: SparkSession, sources: Mapping[str, DataFrame]) -> pa.Table:
    """``job`` run as a batch over ``sources``: one row per output, ``key`` (the key text)
    and ``ids`` (:data:`EXPECTED_SCHEMA`); the job's output is checked as the streaming one
    is (``ids`` widened to array<bigint>: a job may collect ints)."""
    from pyspark.sql import functions as F

    result = job.build(spark, dict(sources))
    key = check_result(job, result, streaming=None)
    table = to_arrow(result.select(key_column(key).alias("key"),
                                   F.col(f"`{IDS}`").cast("array<bigint>").alias("ids")))
    table = table.cast(EXPECTED_SCHEMA)
    if pc.list_flatten(table.column("ids")).null_count:
        raise JobError(f"--job {job.ref}: the batch result has a null among its ids")
    return table


def to_arrow(df: DataFrame) -> pa.Table:
    """A batch DataFrame collected as Arrow: ``toArrow`` (Spark 4), or the record batches
    Spark 3.5's ``_collect_as_arrow`` gives (no pandas either way)."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    batches = df._collect_as_arrow()
    if batches:
        return pa.Table.from_batches(batches)
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(df.schema).empty_table()


def batch_rows(job: Job, spark: SparkSession, records: Mapping[str, pa.Table], workdir: Path
               ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(keys, ids, offsets) of ``job`` run as a batch over raw ``records`` (see
    :func:`batch_sources`)."""
    keys, ids, offsets = rows_of(batch_table(job, spark, batch_sources(spark, records,
                                                                       workdir)))
    return keys.to_pylist(), ids, offsets


# ---------------------------------------------------------------- the batch oracle process
def _evidence_records(run_dir: Path) -> dict[str, pa.Table]:
    """The run's input records as read back (raw)."""
    from pgval.evidence.bundle import load_topic

    records = {}
    for name in SOURCES:
        recs = load_topic(run_dir, name)
        records[name] = pa.table({"value": recs.values, "partition": recs.partitions,
                                  "offset": recs.offsets}, schema=RAW_SCHEMA)
    return records


def _session(conf: Mapping[str, str], heap_mb: int = 1024) -> SparkSession:
    """A ``local[1]`` session, small and without UI, with the driver's defaults (UTC) and
    then the user's Spark settings, as the driver applies them: the key text of a
    timestamp is the streaming query's only in the same session time zone, so a
    ``spark.sql.session.timeZone`` the user sets applies to both."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[1]").appName("pgval-batch-oracle")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", f"{int(heap_mb)}m")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    # pgval's own, after the user's: a local process on loopback.
    return (builder.config("spark.master", "local[1]")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())


def main(argv: Sequence[str] | None = None) -> int:
    import os

    from pgval.evidence.bundle import save_expected
    from pgval.topologies.builtin import builtin_of
    from pgval.topologies.job_query import load_job_for_spark

    ap = argparse.ArgumentParser(prog="python -m pgval.topologies.batch",
                                 description="A run's batch oracle: its job run as a batch "
                                             "over its evidence.")
    ap.add_argument("--job", required=True, metavar="PATH.py:FUNCTION")
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--heap-mb", type=int, default=1024,
                    help="the session's heap (spark.driver.memory), MiB")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        job = load_job_for_spark(args.job)
        records = _evidence_records(args.run_dir)
        conf = json.loads(os.environ.get("PGVAL_SPARK_CONF") or "{}")
        spark = _session(conf, args.heap_mb)
        workdir = args.run_dir / "batch-oracle"
        try:
            spark.sparkContext.setLogLevel("ERROR")
            table = batch_table(job, spark, batch_sources(spark, records, workdir))
        finally:
            spark.stop()
            shutil.rmtree(workdir, ignore_errors=True)  # a copy of every input record
    except JobError as exc:
        print(f"pgval-batch: {exc}", file=sys.stderr)
        return 2
    path = save_expected(args.run_dir, table)
    n_ids = int(pc.sum(pc.list_value_length(table.column("ids"))).as_py() or 0)
    print(json.dumps({"rows": table.num_rows, "ids": n_ids, "file": str(path),
                      "seconds": round(time.monotonic() - t0, 3),
                      "builtin": builtin_of(job.build)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
