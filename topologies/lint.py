"""A job tried on a small sample, with no Kafka and no cluster (``pgval lint``): the same
``build`` run as a stream over the sample cut into micro-batches, and as a batch over the
whole sample, in one ``local[2]`` session.

The sample is a folder of Parquet files, one per micro-batch and input
(``SAMPLE/INPUT/batch-NNNN.parquet``), with the raw records the job would read from Kafka:
``value``, ``partition``, ``offset`` for a job over the web log's sources (parsed by the
function the driver parses Kafka records with), or the Kafka source's own columns for a job
that reads Kafka itself. The stream reads one file of each input per micro-batch
(``maxFilesPerTrigger`` 1, ``Trigger.AvailableNow``), so the batches are the sample's, in
order, and the watermark moves between them as it would between a run's micro-batches.

What this process finds is data for :mod:`pgval.run.lint`, which compares and words it:
``OUT/expected.parquet`` (the batch's rows: key, ids, value; or key, value, own for a job
judged by its rows), ``OUT/stream.parquet`` (the stream's rows, the same columns) and
``OUT/lint.json`` (the problems found on the way: a job that does not load, an operator the
table refuses, a query Spark will not start; each stream batch's watermark and the rows
Spark dropped behind it). Exit 0 when ``lint.json`` was written, 1 when Spark failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.core.errors import UserMistake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pgval.topologies.job import Job

#: What the sample folder says of itself (written by :mod:`pgval.run.lint`).
SAMPLE_FILE = "sample.json"
#: The raw columns of a web-log input, as the driver reads them from Kafka.
RAW_DDL = "value BINARY, partition INT, offset BIGINT"
#: How long the stream may take over the whole sample.
STREAM_TIMEOUT_S = 120.0


def sample_frames(spark: SparkSession, sample: Path, names: Sequence[str], ddl: str,
                  streaming: bool) -> dict[str, DataFrame]:
    """Each input of the sample as a DataFrame: a stream of one file per micro-batch, or
    the whole of it as a batch."""
    frames = {}
    for name in names:
        folder = str(sample / name)
        if streaming:
            frames[name] = (spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1)
                            .parquet(folder))
        else:
            frames[name] = spark.read.schema(ddl).parquet(folder)
    return frames


def job_inputs(spark: SparkSession, job: Job, sample: Path, info: Mapping[str, Any],
               streaming: bool) -> Any:
    """What ``build`` gets over the sample: the web log's ``sources`` parsed as the driver
    parses Kafka records, or the ``kafka`` of a job that reads Kafka itself, whose readers
    give the sample's records with the Kafka source's columns."""
    from pgval.job import KafkaInputs
    from pgval.topologies.batch import KAFKA_SOURCE_DDL
    from pgval.topologies.job_query import job_source

    topics: dict[str, str] = dict(info["inputs"])
    if job.reads_kafka:
        frames = sample_frames(spark, sample, list(topics), KAFKA_SOURCE_DDL, streaming)
        return KafkaInputs(spark, topics, {}, recorded=frames)
    frames = sample_frames(spark, sample, list(topics), RAW_DDL, streaming)
    return {name: job_source(frame) for name, frame in frames.items()}


def keyed_rows(job: Job, result: DataFrame, streaming: bool | None) -> DataFrame:
    """A result checked as the driver checks it, as (key, ids, value) rows, or (key,
    value) for a job judged by its rows."""
    from pyspark.sql import functions as F

    from pgval.topologies.job import IDS, check_result, has_ids
    from pgval.topologies.job_query import key_column, value_column

    key = check_result(job, result, streaming)
    fields = [(f.name, f.dataType.simpleString()) for f in result.schema.fields]
    if has_ids(fields):
        return result.select(key_column(key).alias("key"),
                             F.col(f"`{IDS}`").cast("array<bigint>").alias("ids"),
                             value_column(result).alias("value"))
    # The row as the Kafka sink writes it, the text the batch's rows carry (rows_table).
    from pgval.topologies.job_query import with_key

    written = with_key(job, result, rows=False, streaming=streaming)
    return written.select(F.col("key").cast("string").alias("key"),
                          F.col("value").cast("string").alias("value"))


def to_arrow(df: DataFrame) -> Any:
    from pgval.topologies.batch import to_arrow as collect

    return collect(df)


def _plan(result: DataFrame) -> str:
    try:
        return str(result._jdf.queryExecution().analyzed().toString())
    except Exception:  # not a JVM-backed DataFrame: nothing to read
        return ""


def run_stream(spark: SparkSession, job: Job, rows: DataFrame, work: Path, name: str,
               timeout_s: float = STREAM_TIMEOUT_S, over: str = "the sample"
               ) -> tuple[DataFrame, list[dict[str, Any]]]:
    """The job's keyed streaming rows over the sample, into a memory table: (its rows,
    each batch's progress). A query Spark refuses or that fails is a :class:`UserMistake`."""
    import shutil

    checkpoint = work / f"checkpoint-{name}"
    shutil.rmtree(checkpoint, ignore_errors=True)
    try:
        query = (rows.writeStream.format("memory").queryName(name).outputMode("append")
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
    except Exception as exc:  # Spark's AnalysisException: the query cannot start
        raise UserMistake(f"--job {job.ref}: {start_refusal(exc)}") from None
    try:
        if not query.awaitTermination(timeout_s):
            raise UserMistake(f"--job {job.ref}: the stream did not end within "
                              f"{timeout_s:.0f} s over {over}")
    except UserMistake:
        raise
    except Exception as exc:  # the query failed in a batch: the job's own error
        raise UserMistake(f"--job {job.ref}: {failure('the stream', exc)}") from None
    finally:
        # Spark 4 gives progress objects, 3.5 dicts.
        progress = [p if isinstance(p, dict) else json.loads(p.json)
                    for p in query.recentProgress]
        if query.isActive:
            query.stop()
    return spark.table(name), [_batch_progress(p) for p in progress]


def _batch_progress(progress: Mapping[str, Any]) -> dict[str, Any]:
    """What the comparison needs of one batch's progress: its number, rows read, the
    watermark it used and the rows its stateful operators dropped behind it."""
    watermark = (progress.get("eventTime") or {}).get("watermark")
    dropped = sum(int(op.get("numRowsDroppedByWatermark") or 0)
                  for op in progress.get("stateOperators") or [])
    return {"batch": progress.get("batchId"), "rows": progress.get("numInputRows"),
            "watermark": watermark, "dropped": dropped}


def first_line(exc: BaseException) -> str:
    """An exception's first line without the JVM's class prefix."""
    text = (getattr(exc, "desc", None) or str(exc)).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line.split(": ", 1)[1] if line.startswith(("org.", "java.")) and ": " in line \
        else line


def failure(what: str, exc: BaseException) -> str:
    """A run of the job that failed, in one sentence: a missing package named as such, a
    Python worker's error by its last line (the exception), else Spark's first line."""
    from pgval.topologies.job import MISSING_PACKAGE, missing_package

    text = str(exc)
    if name := missing_package(text):
        return f"{what} needs {name}, {MISSING_PACKAGE.format(name=name)}"
    python = [ln.strip() for ln in text.splitlines()
              if re.match(r"\s*[A-Za-z_][\w.]*(Error|Exception)\b:?", ln)
              and "Traceback" not in ln]
    if "PYTHON_EXCEPTION" in text and python:
        return f"{what} failed over the sample in the job's Python code: {python[-1]}"
    return f"{what} failed over the sample: {first_line(exc)}"


def start_refusal(exc: BaseException) -> str:
    """A query Spark would not start, in one sentence; an aggregation in append mode
    without a watermark gets pgval's reason (the driver writes in append mode)."""
    line = first_line(exc)
    if "without watermark" in line and ("append" in line or "Append" in line):
        return ("the job aggregates without withWatermark on its event time: pgval writes "
                "each output once, in append mode, which Spark allows only with a watermark "
                "(update and complete mode are not judged)")
    return f"Spark will not start the query: {line}"


def try_job(spark: SparkSession, ref: str, sample: Path, work: Path, name: str = "pgval_lint"
            ) -> dict[str, Any]:
    """Everything :mod:`pgval.run.lint` needs of one job over ``sample``: ``problems``
    (sentences), and, where the job ran, the batch's and the stream's rows as Arrow
    tables (``expected``, ``stream``), the batches' ``progress``, ``by_rows``, the job's
    ``tolerance`` and the operator that may fan out (``fan_out``). The streaming plan is
    checked first, so an operator the table refuses costs no run."""
    from pgval.topologies.job_query import load_job_for_spark

    info = json.loads((sample / SAMPLE_FILE).read_text())
    out: dict[str, Any] = {"problems": []}
    try:
        job = load_job_for_spark(ref)
        if job.reads_kafka != (info["kind"] == "kafka"):
            raise UserMistake(
                f"--job {ref}: a job that reads Kafka itself is tried on its input model "
                "(--replay, --input or --inputs-spec)" if job.reads_kafka else
                f"--job {ref}: a job over the web log's sources (build(spark, sources)) "
                "takes no input model; one that reads Kafka itself does (build(spark, kafka))")
        out["tolerance"] = job.tolerance
        rows, out["fan_out"] = _streaming_rows(spark, job, sample, info)
        out.update(_batch_rows(spark, job, sample, info))
        stream, out["progress"] = run_stream(spark, job, rows, work, name)
        out["stream"] = to_arrow(stream)
    except UserMistake as exc:  # JobError among them: the job cannot be judged as it is
        out["problems"].append(str(exc))
    return out


def _streaming_rows(spark: SparkSession, job: Job, sample: Path, info: Mapping[str, Any]
                    ) -> tuple[DataFrame, str | None]:
    """The job built over the streaming sample and checked as the driver checks it: its
    keyed rows, and the operator that may fan out."""
    from pgval.topologies.job import fan_out_operator

    result = _built(job, spark, job_inputs(spark, job, sample, info, streaming=True))
    return keyed_rows(job, result, getattr(result, "isStreaming", True)), fan_out_operator(
        _plan(result))


def _built(job: Job, spark: SparkSession, inputs: Any) -> DataFrame:
    """``build`` called; its own exception (a bad column, a typo) is one sentence."""
    try:
        return job.build(spark, inputs if job.reads_kafka else dict(inputs))
    except UserMistake:
        raise
    except Exception as exc:
        raise UserMistake(f"--job {job.ref}: {failure('build(spark, …)', exc)}") from None


def _batch_rows(spark: SparkSession, job: Job, sample: Path, info: Mapping[str, Any]
                ) -> dict[str, Any]:
    """The job as a batch over the whole sample: ``expected`` rows and ``by_rows``."""
    from pgval.topologies.batch import carries_ids, rows_table

    inputs = job_inputs(spark, job, sample, info, streaming=False)
    try:
        if not carries_ids(job, spark, inputs):
            return {"by_rows": True, "expected": rows_table(job, spark, inputs)}
        return {"by_rows": False,
                "expected": to_arrow(keyed_rows(job, _built(job, spark, inputs), None))}
    except UserMistake:
        raise
    except Exception as exc:  # Spark or the job's Python failed in the batch run
        raise UserMistake(f"--job {job.ref}: {failure('the batch run', exc)}") from None


def lint_session(conf: Mapping[str, str]) -> SparkSession:
    """A ``local[2]`` session set as the batch oracle's (UTC, small, no UI, the driver's
    jars and the user's Spark settings), with the batch meaning of streaming-only calls."""
    from pgval.topologies.batch import batch_meanings, batch_session

    # Mapping the batch sessions' class archive, never recording it: a lint answers in
    # seconds, and a batch oracle's session records it.
    spark = batch_session(conf, heap_mb=768, cores=2, record=False)
    batch_meanings(spark)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    import pyarrow.parquet as pq

    from pgval.core.files import private_temp_path, write_private_json

    ap = argparse.ArgumentParser(prog="python -m pgval.topologies.lint",
                                 description="A job as a stream and as a batch over a sample.")
    ap.add_argument("--job", required=True, metavar="PATH.py:FUNCTION")
    ap.add_argument("--sample", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = lint_session(json.loads(os.environ.get("PGVAL_SPARK_CONF") or "{}"))
    try:
        found = try_job(spark, args.job, args.sample, args.out)
    finally:
        spark.stop()
    for name in ("expected", "stream"):
        if (table := found.pop(name, None)) is not None:
            with private_temp_path(args.out / f"{name}.parquet") as tmp:
                pq.write_table(table, tmp)
    found["seconds"] = round(time.monotonic() - t0, 3)
    write_private_json(args.out / "lint.json", found)
    print(json.dumps({"rows": None, "problems": len(found["problems"]),
                      "seconds": found["seconds"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
