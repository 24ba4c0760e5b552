"""A user's job judged on recorded streams, offline (``pgval check --job``): its batch
oracle over the recorded inputs, and the recorded outputs keyed as the stream keys them.

The inputs are the web log's events as ``pgval check`` reads them (JSON lines: ``id``,
``type``, ``resource``, ``event_ts``, ``ingress_ts``); the job's ``build(spark, sources)``
gets them as its ``get`` and ``post`` sources, parsed by the function the streaming query
parses them with. The outputs are the job's rows as JSON lines (its columns, ``ids`` and
``ingress_ts``: what ``pgval record`` keeps of an output topic the job wrote with
``to_json``), read with the schema of the job's own batch result, so each output's key and
value texts are Spark's, the same as the batch rows'.

``python -m pgval.topologies.check_job --job REF --inputs IN --outputs OUT --out DIR`` is a
``local[1]`` Spark process; it writes ``DIR/expected.parquet`` (``key``, ``ids``,
``value``) and ``DIR/outputs.parquet`` (``key``, ``ids``, ``value``, ``ingress_ts``,
``line``). Exit 0 with one JSON line, 2 when the job or the files cannot be judged (one
sentence on stderr), 1 when Spark failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pgval.core.errors import UserMistake
from pgval.topologies.job import IDS, JobError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pgval.topologies.job import Job

#: The extra column each recorded output must have besides the job's own and ``ids``.
INGRESS = "ingress_ts"


def recorded_sources(spark: SparkSession, inputs: Path, workdir: Path) -> dict[str, Any]:
    """The recorded input events as the job's two sources: each line a raw record of its
    type's source (``partition`` 0, ``offset`` its line number), parsed as the stream
    parses Kafka records (:func:`pgval.topologies.batch.batch_sources`)."""
    import pyarrow.compute as pc

    from pgval.topologies.batch import batch_sources

    lines = pa.array([ln for ln in Path(inputs).read_bytes().splitlines() if ln.strip()],
                     pa.binary())
    kinds = pc.extract_regex(lines.cast(pa.string()), r'"type"\s*:\s*"(?P<t>[A-Z]+)"')
    kind = pc.struct_field(kinds, "t")
    offsets = pa.array(range(len(lines)), pa.int64())
    records = {}
    for name, word in (("get", "GET"), ("post", "POST")):
        mine = pc.equal(kind, word).fill_null(False)
        records[name] = pa.table({"value": lines.filter(mine),
                                  "partition": pa.nulls(int(pc.sum(mine.cast(pa.int64()))
                                                            .as_py() or 0), pa.int32())
                                  .fill_null(0),
                                  "offset": offsets.filter(mine)})
    return batch_sources(spark, records, workdir)


def recorded_outputs(spark: SparkSession, job: Job, result: DataFrame, outputs: Path
                     ) -> pa.Table:
    """The recorded outputs read with the batch result's schema and keyed as the stream
    keys its rows: ``key`` (the key columns' ``to_json``), ``ids``, ``value`` (every
    column but ``ids``), ``ingress_ts`` and ``line`` (the record's number, from 0)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    from pgval.topologies.batch import to_arrow
    from pgval.topologies.job import check_result
    from pgval.topologies.job_query import key_column, value_column

    key = check_result(job, result, streaming=None)
    schema = StructType([*result.schema.fields, StructField(INGRESS, LongType())])
    rows = spark.read.schema(schema).option("mode", "PERMISSIVE").json(str(outputs))
    rows = rows.withColumn("line", F.monotonically_increasing_id())
    return to_arrow(rows.select(key_column(key).alias("key"),
                                F.col(f"`{IDS}`").cast("array<bigint>").alias("ids"),
                                value_column(result).alias("value"),
                                F.col(INGRESS).alias("ingress_ts"), "line"))


def main(argv: Sequence[str] | None = None) -> int:
    import os
    import shutil

    import pyarrow.parquet as pq

    from pgval.core.files import private_temp_path
    from pgval.topologies.batch import (
        batch_meanings,
        batch_session,
        batch_table,
        job_columns,
        stop_batch_session,
    )
    from pgval.topologies.job_query import load_job_for_spark

    ap = argparse.ArgumentParser(prog="python -m pgval.topologies.check_job",
                                 description="A job's batch oracle over recorded streams.")
    ap.add_argument("--job", required=True, metavar="PATH.py:FUNCTION")
    ap.add_argument("--inputs", required=True, type=Path)
    ap.add_argument("--outputs", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        spark = batch_session(json.loads(os.environ.get("PGVAL_SPARK_CONF") or "{}"))
        batch_meanings(spark)
        workdir = args.out / "sources"
        try:
            spark.sparkContext.setLogLevel("ERROR")
            job = load_job_for_spark(args.job)
            if job.reads_kafka:
                raise JobError(f"--job {job.ref}: check --job judges a job over the web "
                               "log's sources (build(spark, sources)); a job that reads "
                               "Kafka itself is judged from a run's evidence (pgval recheck)")
            sources = recorded_sources(spark, args.inputs, workdir)
            expected = batch_table(job, spark, sources)
            result = job.build(spark, dict(sources))
            outputs = recorded_outputs(spark, job, result, args.outputs)
        finally:
            stop_batch_session(spark)
            shutil.rmtree(workdir, ignore_errors=True)
    except UserMistake as exc:
        print(f"pgval-check-job: {exc}", file=sys.stderr)
        return 2
    for name, table in (("expected", expected), ("outputs", outputs)):
        with private_temp_path(args.out / f"{name}.parquet") as tmp:  # 0600, no planted link
            pq.write_table(table, tmp)
    print(json.dumps({"rows": expected.num_rows, "outputs": outputs.num_rows,
                      "tolerance": job.tolerance, "columns": job_columns(expected),
                      "seconds": round(time.monotonic() - t0, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
