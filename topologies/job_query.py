"""A user's job as the driver runs it: the generator's streams parsed into the job's sources,
the job's ``build``, and its rows as (key, value) for pgval's sinks.

The sources have the columns :data:`pgval.topologies.job.SOURCE_COLUMNS`, parsed from the
Kafka records exactly as SST and MST parse them (records that are not the generator's JSON
are dropped, and the validator counts them as malformed inputs); the job sets its own
watermark. Each output row becomes one Kafka record: key and ``_pgval_key`` the canonical
key text (:func:`key_column`, the text the batch oracle's rows
carry), value the row as JSON with ``_pgval_key`` added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgval.records.parse import JOB_KEY
from pgval.topologies.job import Job, check_result, load

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pgval.job import KafkaInputs
    from pgval.topologies.query import TopologyConfig


def key_column(key: tuple[str, ...]) -> Any:
    """``to_json(struct(key columns))``: one text per output key, the same in the
    streaming query and in the batch (both sessions in UTC)."""
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*[F.col(f"`{k}`") for k in key]))


def value_column(result: DataFrame) -> Any:
    """``to_json(struct(every column but ids))``: an output's values as one text, the same
    in the streaming query and in the batch (both sessions in UTC), so equal values are
    equal texts (:mod:`pgval.oracle.values`)."""
    from pyspark.sql import functions as F

    from pgval.topologies.job import IDS

    return F.to_json(F.struct(*[F.col(f"`{f.name}`") for f in result.schema.fields
                                if f.name != IDS]))


def _kafka_records(result: DataFrame, keyed: DataFrame) -> DataFrame:
    """A keyed result (its key text first) as Kafka records: key the key text, value the
    row as JSON with, where the job carries ids, its values as one text too
    (``_pgval_value``), which the evaluation compares with the batch's."""
    from pyspark.sql import functions as F

    from pgval.records.parse import JOB_VALUE
    from pgval.topologies.job import has_ids

    if has_ids([(f.name, f.dataType.simpleString()) for f in result.schema.fields]):
        keyed = keyed.select(F.col(JOB_KEY), value_column(result).alias(JOB_VALUE),
                             *[F.col(f"`{c}`") for c in keyed.columns if c != JOB_KEY])
    return keyed.select(F.col(JOB_KEY).alias("key"),
                        F.to_json(F.struct(*[F.col(f"`{c}`") for c in keyed.columns]))
                        .alias("value"))


def job_source(records: DataFrame) -> DataFrame:
    """Raw records (``value``, ``partition``, ``offset``) as a job's source."""
    from pyspark.sql import functions as F

    from pgval.topologies.query import INPUT_VALUE_DDL

    parsed = records.select(
        F.from_json(F.col("value").cast("string"), INPUT_VALUE_DDL).alias("e"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"))
    return parsed.select(
        F.col("e.id").alias("id"), F.col("e.type").alias("type"),
        F.col("e.resource").alias("resource"),
        F.timestamp_millis(F.col("e.event_ts")).alias("event_ts"), "partition", "offset",
    ).where(F.col("id").isNotNull() & F.col("resource").isNotNull()
            & F.col("event_ts").isNotNull())


def job_rows(spark: SparkSession, job: Job, get_records: DataFrame,
             post_records: DataFrame) -> DataFrame:
    """The rows of ``job`` over raw input records, its key text first (``_pgval_key``), as
    a file sink or a user's sink writes them; the job's result is checked
    (:func:`pgval.topologies.job.check_output`) before anything starts."""
    from pyspark.sql import functions as F

    result = job.build(spark, {"get": job_source(get_records),
                               "post": job_source(post_records)})
    key = check_result(job, result, result.isStreaming)
    refuse_rows_verdict(job, result, sink_rows=True)
    return result.select(key_column(key).alias(JOB_KEY),
                         *[F.col(f"`{f.name}`") for f in result.schema.fields])


def job_plan(spark: SparkSession, job: Job, get_records: DataFrame,
             post_records: DataFrame) -> DataFrame:
    """The (key, value) stream of ``job`` over raw input records (:func:`job_rows` as
    Kafka records: key and ``_pgval_key`` the key text, value the row as JSON)."""

    rows = job_rows(spark, job, get_records, post_records)
    return _kafka_records(rows.drop(JOB_KEY), rows)


def build_job_topology(spark: SparkSession, cfg: TopologyConfig, job: Job,
                       rows: bool = False) -> DataFrame:
    """:func:`job_plan` (``rows``: :func:`job_rows`) over the run's topics; a job that
    reads Kafka itself gets the ``kafka`` object (:func:`kafka_inputs`)."""
    from pgval.topologies.query import kafka_records

    if job.reads_kafka:
        return with_key(job, job.build(spark, kafka_inputs(spark, cfg)), rows)
    make = job_rows if rows else job_plan
    return make(spark, job, kafka_records(spark, cfg, cfg.topics.get),
                kafka_records(spark, cfg, cfg.topics.post))


def refuse_rows_verdict(job: Job, result: DataFrame, sink_rows: bool) -> None:
    """A result without ``ids`` is judged by its rows, through the Kafka sink, of a job
    that reads Kafka itself; anything else without ``ids`` is one sentence here, in the
    driver, before any event is generated."""
    from pgval.topologies.job import IDS, JobError, has_ids

    if has_ids([(f.name, f.dataType.simpleString()) for f in result.schema.fields]):
        return
    if not job.reads_kafka:
        raise JobError(f"--job {job.ref}: the result has no {IDS!r} column; a job over the "
                       "web log's sources carries ids (F.collect_list('id')), and a job "
                       "without them is judged by its rows when it reads Kafka itself "
                       "(build(spark, kafka))")
    if sink_rows:
        raise JobError(f"--job {job.ref}: a job without {IDS!r} is judged by its rows "
                       "through the Kafka sink (--sink kafka); its rows in files or your "
                       "own sink carry nothing to judge them by")


def kafka_inputs(spark: SparkSession, cfg: TopologyConfig) -> KafkaInputs:
    """The ``kafka`` a job reading Kafka itself gets in the driver: each input's reader
    set to the run's brokers, the run's security settings and topic, from the earliest
    offset and with lost offsets recorded rather than fatal (as SST and MST read), and
    pgval's --max-offsets-per-trigger if given; the job's own options come after."""
    from pgval.job import KafkaInputs

    options = {"kafka.bootstrap.servers": cfg.bootstrap, "startingOffsets": "earliest",
               "failOnDataLoss": "false",
               **({"maxOffsetsPerTrigger": str(int(cfg.max_offsets_per_trigger))}
                  if cfg.max_offsets_per_trigger else {}),
               **cfg.source_options}
    topics = dict(zip(cfg.input_names, cfg.topics.inputs, strict=False))
    return KafkaInputs(spark, topics, options)


def with_key(job: Job, result: DataFrame, rows: bool, streaming: bool | None = True
             ) -> DataFrame:
    """A job's result checked and with its key text first (``_pgval_key``): as rows
    (``rows``), or as Kafka records (key and value)."""
    from pyspark.sql import functions as F

    key = check_result(job, result, result.isStreaming if streaming else streaming)
    refuse_rows_verdict(job, result, rows)
    out = result.select(key_column(key).alias(JOB_KEY),
                        *[F.col(f"`{f.name}`") for f in result.schema.fields])
    if rows:
        return out
    return _kafka_records(result, out)


def load_job_for_spark(ref: str) -> Job:
    """:func:`pgval.topologies.job.load`, and a job loaded from a file registered with
    PySpark's cloudpickle to travel by value: a Python UDF the job defines then reaches the
    executors with its code, although they cannot import the user's file."""
    from pgval import job as job_interface

    # A served driver's earlier query set its own topics: a job that calls record_id() as
    # it is imported sees none, as in a fresh driver (its build gets this run's).
    job_interface._RUN_TOPICS = ()
    job = load(ref)
    if job.ref.is_file:
        import sys

        from pyspark import cloudpickle

        module = sys.modules.get(getattr(job.build, "__module__", ""), None)
        if module is not None:
            cloudpickle.register_pickle_by_value(module)
    return job
