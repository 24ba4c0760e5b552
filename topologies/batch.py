"""A user's job run as a batch over a run's inputs: the rows its streaming run must give.

Structured Streaming promises that a streaming query's result equals the same query run
as a batch over the same input, less what the watermark drops (``withWatermark`` does
nothing in a batch: where the run's operators dropped rows, :func:`replay_if_dropped`
replays the run's micro-batches to tell which). :func:`batch_table` takes that promise as
the oracle: it gives the
job's ``build`` every input record of the run — pgval's own priming and closing events
too, as the stream read them — parsed by the very function the streaming query parses
them with (:func:`pgval.topologies.job_query.job_source`), and returns each output row's
key — ``to_json`` of the key
columns, the text the streaming query writes, in a session whose time zone is UTC like the
driver's — with its ``ids``, ready for :func:`pgval.oracle.rows.expected_from_rows`.

A streaming-only call has its batch meaning here (:func:`batch_meanings`):
``dropDuplicatesWithinWatermark``, which Spark refuses on a batch DataFrame, is
``dropDuplicates`` on the same columns — the stream's result when every copy of a row comes
within the watermark's delay of the first and the copies agree on every output column (the
batch keeps one copy, the stream the first to arrive). A copy that comes after the state
has expired is written again by the stream, as Spark documents, and counted a duplicate.

The batch oracle of a run is a process of its own, :mod:`pgval.topologies.batch_oracle`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgval.host import cds
from pgval.oracle.rows import occurrence_ranks, rows_of
from pgval.topologies.job import IDS, SOURCES, Job, JobError, check_result
from pgval.topologies.job_query import job_source, key_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The raw records a source is made of: Kafka's value, partition and offset.
RAW_SCHEMA = pa.schema([("value", pa.binary()), ("partition", pa.int32()),
                        ("offset", pa.int64())])
#: The batch oracle's file in a run's evidence: one row per expected output.
#: A job's expected rows: key text, IDs and value text (its columns but ids, as JSON: the
#: streaming query writes the same text with each output, :mod:`pgval.oracle.values`).
EXPECTED_SCHEMA = pa.schema([("key", pa.string()), ("ids", pa.list_(pa.int64())),
                             ("value", pa.string())])


def batch_sources(spark: SparkSession, records: Mapping[str, pa.Table], workdir: Path
                  ) -> dict[str, DataFrame]:
    """Each source as a batch DataFrame from raw records (:data:`RAW_SCHEMA`), parsed as
    the streaming query parses them. Every record, pgval's priming and closing events
    too: the stream read them, and their IDs leave the rows afterwards, as they leave the
    outputs (:func:`pgval.oracle.rows.set_aside_rows`). Through a Parquet file in
    ``workdir``: no per-record Python, no pandas (a run's inputs may be millions)."""
    import pyarrow.parquet as pq

    from pgval.core.files import private_temp_path

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


#: A topic's records as a job reading Kafka itself gets them in the batch: the Kafka
#: source's columns (``timestampType`` 1: the broker's LogAppendTime, as the run's topics).
KAFKA_SOURCE_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
                    "timestamp TIMESTAMP, timestampType INT")


def recorded_inputs(spark: SparkSession, run_dir: Path, topics: Mapping[str, str],
                    workdir: Path) -> Any:
    """The ``kafka`` of a job reading Kafka itself, over the records the run read back:
    each input a batch DataFrame with the Kafka source's columns and the run's topic
    names (so ``record_id()`` gives the IDs the stream gave). Through Parquet files in
    ``workdir``: no per-record Python."""
    import pyarrow.parquet as pq

    from pgval.core.files import private_temp_path
    from pgval.job import KafkaInputs

    workdir.mkdir(parents=True, exist_ok=True)
    frames = {}
    for name, table in kafka_tables(run_dir, topics).items():
        path = workdir / f"{name}.kafka.parquet"
        with private_temp_path(path) as tmp:  # 0600, never through a planted link
            pq.write_table(table, tmp)
        frames[name] = spark.read.schema(KAFKA_SOURCE_DDL).parquet(str(path))
    return KafkaInputs(spark, topics, {}, recorded=frames)


def kafka_tables(run_dir: Path, topics: Mapping[str, str]) -> dict[str, pa.Table]:
    """Each input of a job reading Kafka itself as the records the run read back, with the
    Kafka source's columns (:data:`KAFKA_SOURCE_DDL`) and the run's topic names."""
    from pgval.evidence.bundle import load_topic

    tables = {}
    for (name, topic), role in zip(topics.items(), SOURCES, strict=False):
        recs = load_topic(run_dir, role)
        n = len(recs)
        tables[name] = pa.table({"key": recs.keys, "value": recs.values,
                                 "topic": pa.array([topic] * n, pa.string()),
                                 "partition": pa.array(recs.partitions, pa.int32()),
                                 "offset": pa.array(recs.offsets, pa.int64()),
                                 "timestamp": pa.array(recs.timestamps, pa.int64()).cast(
                                     pa.timestamp("ms", tz="UTC")),
                                 "timestampType": pa.array(np.ones(n, dtype=np.int32))})
    return tables


def without_own(kafka: Any) -> Any:
    """The same ``kafka`` without pgval's own records (Kafka key :data:`OWN_KEY`)."""
    from pyspark.sql import functions as F

    from pgval.core.record_ids import OWN_KEY
    from pgval.job import KafkaInputs

    own = F.lit(bytearray(OWN_KEY))
    frames = {name: kafka.reader(name).load().where(F.col("key").isNull()
                                                    | (F.col("key") != own))
              for name in kafka.names}
    return KafkaInputs(kafka.spark, kafka.topics, {}, recorded=frames)


def rows_table(job: Job, spark: SparkSession, kafka: Any) -> pa.Table:
    """A job without ``ids`` run as a batch twice, over every record and over the real
    records alone: its rows as key text and row text (the value the stream writes), each
    marked ``own`` when it is not a row of the second run (a row of pgval's priming or
    closing records, set aside on both sides). A row is expected as often as both runs
    have it."""
    import pyarrow.compute as pc

    from pgval.evidence.bundle import EXPECTED_ROWS_SCHEMA

    every = _texts(job, spark, kafka)
    real = _texts(job, spark, without_own(kafka))
    text = pc.binary_join_element_wise(every.column("key"), every.column("value"), "\x00")
    real_text = pc.binary_join_element_wise(real.column("key"), real.column("value"),
                                            "\x00")
    both = pa.concat_arrays([text.combine_chunks(), real_text.combine_chunks()])
    codes = pc.dictionary_encode(both).indices.to_numpy(zero_copy_only=False)
    n = every.num_rows
    in_real = np.bincount(codes[n:], minlength=int(codes.max(initial=-1)) + 1)
    own = occurrence_ranks(codes[:n].astype(np.int64)) >= in_real[codes[:n]]
    return pa.table({"key": every.column("key"), "value": every.column("value"),
                     "own": pa.array(own)}, schema=EXPECTED_ROWS_SCHEMA)


def _texts(job: Job, spark: SparkSession, sources: Any) -> pa.Table:
    """A job's batch rows as (key text, row text)."""
    from pyspark.sql import functions as F

    from pgval.topologies.job_query import with_key

    result = job.build(spark, sources)
    written = with_key(job, result, rows=False, streaming=None)
    return to_arrow(written.select(F.col("key").cast("string").alias("key"),
                                   F.col("value").cast("string").alias("value")))


def carries_ids(job: Job, spark: SparkSession, sources: Any) -> bool:
    """The job's result has an ``ids`` column (its plan only: nothing runs). A job without
    one is judged by its rows, which needs a job that reads Kafka itself (its own records
    are told apart by their Kafka key there)."""
    from pgval.topologies.job import has_ids

    result = job.build(spark, sources if job.reads_kafka else dict(sources))
    fields = [(f.name, f.dataType.simpleString()) for f in result.schema.fields]
    if not has_ids(fields) and not job.reads_kafka:
        raise JobError(f"--job {job.ref}: the result has no {IDS!r} column; a job over the "
                       "web log's sources carries ids (F.collect_list('id')), and a job "
                       "without them is judged by its rows when it reads Kafka itself "
                       "(build(spark, kafka))")
    return has_ids(fields)


def batch_table(job: Job, spark: SparkSession, sources: Mapping[str, DataFrame] | Any
                ) -> pa.Table:
    """``job`` run as a batch over ``sources`` (the parsed web log, or the ``kafka`` of
    :func:`recorded_inputs`): one row per output, ``key`` (the key text) and ``ids``
    (:data:`EXPECTED_SCHEMA`); the job's output is checked as the streaming one is
    (``ids`` widened to array<bigint>: a job may collect ints)."""
    result, rows = _batch_result(job, spark, sources)
    table = to_arrow(rows).cast(EXPECTED_SCHEMA)
    if pc.list_flatten(table.column("ids")).null_count:
        raise JobError(f"--job {job.ref}: the batch result has a null among its ids")
    # The job's columns, which a sink's values are compared on (not the sink's own).
    columns = [f.name for f in result.schema.fields if f.name != IDS]
    return table.replace_schema_metadata({"columns": json.dumps(columns)})


def batch_rows_on_spark(job: Job, spark: SparkSession, staged_inputs: Path,
                        topics: Mapping[str, str], folder: Path) -> Path:
    """``job`` run as a batch over every input record a Spark read-back staged
    (``staged_inputs``: each record's ``topic``, ``partition``, ``offset`` and raw
    ``value``; :func:`pgval.scale.kafka_read.read_back_on_spark` with ``job``), each source
    parsed as the streaming query parses it; its rows (:data:`EXPECTED_SCHEMA`) written as
    Parquet into ``folder``, never collected: the oracle of a run judged on Spark
    (:func:`pgval.scale.judge.judge_job_on_spark`). ``topics``: the run's topic of each
    source. A job reading Kafka itself, or one without ``ids``, is judged by numpy alone."""
    from pyspark.sql import functions as F

    if job.reads_kafka:
        raise JobError(f"--job {job.ref}: a job that reads Kafka itself is judged by "
                       "--checker numpy (its IDs are its records' coordinates)")
    staged = spark.read.parquet(str(staged_inputs))
    sources = {name: job_source(staged.filter(F.col("topic") == topics[name])
                                .select("value", "partition", "offset"))
               for name in SOURCES}
    carries_ids(job, spark, sources)
    _batch_result(job, spark, sources)[1].write.mode("overwrite").parquet(str(folder))
    return folder


def _batch_result(job: Job, spark: SparkSession, sources: Mapping[str, DataFrame] | Any
                  ) -> tuple[DataFrame, DataFrame]:
    """``job``'s batch result over ``sources``, checked as the streaming one is, and its
    rows: ``key`` (the key text), ``ids`` (widened to array<bigint>: a job may collect
    ints) and ``value`` (its other columns as one text)."""
    from pyspark.sql import functions as F

    from pgval.topologies.job_query import refuse_rows_verdict, value_column

    result = job.build(spark, sources if job.reads_kafka else dict(sources))
    key = check_result(job, result, streaming=None)
    refuse_rows_verdict(job, result, sink_rows=True)  # no ids: rows_table's, not this
    return result, result.select(key_column(key).alias("key"),
                                 F.col(f"`{IDS}`").cast("array<bigint>").alias("ids"),
                                 value_column(result).alias("value"))


def job_columns(table: pa.Table) -> list[str] | None:
    """The job's columns (but ids) :func:`batch_table` recorded with its rows."""
    meta = table.schema.metadata or {}
    return json.loads(meta[b"columns"]) if b"columns" in meta else None


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
def evidence_records(run_dir: Path) -> dict[str, pa.Table]:
    """The run's input records as read back (raw)."""
    from pgval.evidence.bundle import load_topic

    records = {}
    for name in SOURCES:
        recs = load_topic(run_dir, name)
        records[name] = pa.table({"value": recs.values, "partition": recs.partitions,
                                  "offset": recs.offsets}, schema=RAW_SCHEMA)
    return records


#: The batch session's JVM options (a user's ``spark.driver.extraJavaOptions`` replaces them).
BATCH_JAVA_OPTS = "-XX:+UseSerialGC"


def batch_class_archive() -> cds.ClassArchive | None:
    """The local batch session's class archive (:mod:`pgval.host.cds`): the Java and the
    Spark jars PySpark's spark-submit runs; None when class sharing is off."""
    from pyspark.find_spark_home import _find_spark_home

    from pgval.host.jars import java_executable

    java = java_executable()
    return cds.archive("batch-session", java, [Path(_find_spark_home()) / "jars"]) if java \
        else None


def batch_session(conf: Mapping[str, str], heap_mb: int = 1024, cores: int = 1,
                  record: bool = True) -> SparkSession:
    """A ``local[cores]`` session (one core: the batch oracle), small and without UI,
    with the driver's defaults (UTC) and
    then the user's Spark settings, as the driver applies them: the key text of a
    timestamp is the streaming query's only in the same session time zone, so a
    ``spark.sql.session.timeZone`` the user sets applies to both.

    Its JVM maps the batch sessions' class archive where one was recorded (a session
    starts about 2.5 s sooner on 2 cores; docs/performance.md); with ``record``, a session that
    finds none records it, written by :func:`stop_batch_session`."""
    import os

    from pyspark.sql import SparkSession

    from pgval.host.jars import ensure_jars

    # Python workers run this Python, as the driver's do (else ``python3`` from PATH, which
    # may lack the job's packages: pandas for a pandas UDF).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    archive = batch_class_archive()
    if archive is not None and archive.recording and not record:
        archive = None
    java_opts = " ".join([BATCH_JAVA_OPTS, cds.flags_text(archive)]).strip()
    builder = (SparkSession.builder.master(f"local[{cores}]").appName("pgval-batch-oracle")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", f"{int(heap_mb)}m")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    # The jars the streaming query has (spark-avro's from_avro among them), and the user's.
    jars = ",".join(filter(None, (conf.get("spark.jars"),
                                  ensure_jars(spark=True).spark_jars_csv)))
    builder = builder.config("spark.jars", jars)
    # pgval's own, after the user's: a local process on loopback.
    return (builder.config("spark.master", f"local[{cores}]")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())


def stop_batch_session(spark: SparkSession) -> str | None:
    """Stop a :func:`batch_session`; one that records the class archive writes it first
    (once a machine: a few seconds). Returns what became of the archive, in words (None:
    nothing to record); a failed dump never fails the session's work."""
    note = None
    try:
        opts = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "") or ""
        archive = batch_class_archive() if "-XX:+RecordDynamicDumpInfo" in opts else None
        if archive is not None and archive.recording:
            pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
            note = archive.dump(pid)
    except Exception as exc:  # the JVM gone: the next session records it
        note = f"the dump failed: {exc}"
    if note is not None and note.startswith("the dump failed"):
        with contextlib.suppress(Exception):  # a JVM the dump broke: the work is done
            spark.stop()
    else:
        spark.stop()
    return note


def batch_meanings(spark: SparkSession) -> None:
    """Give this process's DataFrames the batch meaning of Spark's streaming-only calls
    (the module docstring); the batch oracle is a process of its own, so nothing else
    sees the change. A streaming DataFrame keeps Spark's own call."""
    # A batch transformWithState keeps its state in a state store, whose coordinator the
    # driver registers when the session's StreamingQueryManager is made (lazily, by the
    # first stream): without this, a batch run of it fails "Cannot find endpoint:
    # StateStoreCoordinator" in a session that never streamed.
    _ = spark.streams
    DataFrame = type(spark.range(0))  # noqa: N806 (Spark 4's classic DataFrame, 3.5's own)

    streaming_only = DataFrame.dropDuplicatesWithinWatermark
    if getattr(streaming_only, "pgval_batch_meaning", False):
        return

    def drop_duplicates_within_watermark(self: DataFrame, subset: Any = None) -> DataFrame:
        if self.isStreaming:
            return streaming_only(self, subset)
        return self.dropDuplicates(subset)

    drop_duplicates_within_watermark.pgval_batch_meaning = True  # type: ignore[attr-defined]
    drop_duplicates_within_watermark.spark_own = streaming_only  # type: ignore[attr-defined]
    DataFrame.dropDuplicatesWithinWatermark = drop_duplicates_within_watermark  # type: ignore[method-assign]

    GroupedData = type(spark.range(0).groupBy())  # noqa: N806
    with_state = GroupedData.applyInPandasWithState

    def apply_in_pandas_with_state(self: Any, func: Any, outputStructType: Any,  # noqa: N803
                                   stateStructType: Any, outputMode: str,  # noqa: N803
                                   timeoutConf: str) -> DataFrame:  # noqa: N803
        if self._df.isStreaming:
            return with_state(self, func, outputStructType, stateStructType, outputMode,
                              timeoutConf)
        return self.applyInPandas(one_batch(func, outputStructType), outputStructType)

    GroupedData.applyInPandasWithState = apply_in_pandas_with_state  # type: ignore[method-assign]


class BatchGroupState:
    """The ``GroupState`` a group gets in :class:`OneBatch`: empty at first, never timed out,
    its watermark and clock unknown (a timeout is refused before: :func:`operator_problem
    <pgval.topologies.job.operator_problem>`)."""

    hasTimedOut = False

    def __init__(self) -> None:
        self._value: tuple[Any, ...] | None = None

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self._value is None:
            raise ValueError("State is either not defined or has already been removed")
        return self._value

    @property
    def getOption(self) -> tuple[Any, ...] | None:  # noqa: N802 (Spark's name)
        return self._value

    def update(self, new_value: tuple[Any, ...]) -> None:
        self._value = tuple(new_value)

    def remove(self) -> None:
        self._value = None

    def setTimeoutDuration(self, _ms: Any) -> None:  # noqa: N802 (Spark's name)
        raise ValueError("a timeout has no batch meaning")

    setTimeoutTimestamp = setTimeoutDuration  # noqa: N815 (Spark's name)

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 (Spark's name)
        raise ValueError("the job reads the stream's watermark in applyInPandasWithState, "
                         "which its batch run does not have: its outputs cannot be judged")

    def getCurrentProcessingTimeMs(self) -> int:  # noqa: N802 (Spark's name)
        raise ValueError("the job reads the stream's clock in applyInPandasWithState, "
                         "which a batch run does not repeat: its outputs cannot be judged")


def one_batch(func: Any, schema: Any) -> Any:
    """``applyInPandasWithState``'s batch meaning: ``func`` called once per group with all
    of its rows and an empty state, as a stream calls it when one micro-batch holds the
    whole input. A function whose outputs depend on how its input is cut into
    micro-batches shows it here: ``pgval lint`` compares the two. (A plain function of
    ``(key, frame)``: ``applyInPandas`` passes the key by the function's arity.)"""
    from pyspark.sql.types import StructType, _parse_datatype_string

    parsed = schema if isinstance(schema, StructType) else _parse_datatype_string(schema)
    names = [f.name for f in parsed.fields]

    def whole(key: Any, frame: Any) -> Any:
        import pandas as pd

        out = [f for f in func(key, iter([frame]), BatchGroupState()) if len(f)]
        if not out:
            return pd.DataFrame({name: [] for name in names})
        return pd.concat(out, ignore_index=True)[names]

    return whole
