"""The SST and MST topologies as PySpark Structured Streaming DataFrames (docs/semantics.md).

Only built-in column functions are used on the per-record path, so every row stays in the
JVM: a Python UDF would ship each record to a Python worker and measure pickling, not Spark.

Both topologies emit in *append* mode: a window's output is written once, when the
watermark (max event time seen minus ``watermark_ms``) passes the window's end. That is
what makes "one output per key" hold without retractions; events arriving behind the
watermark are dropped by Spark and show up as *unprocessed* in the validator.

The result of :func:`build_topology` has exactly two string columns, ``key`` (the resource,
so Kafka's default murmur2 partitioner puts an output on the partition of its inputs) and
``value`` (the output JSON with the fields of :data:`pgval.core.schema.SST_OUTPUT_FIELDS` or
:data:`pgval.core.schema.MST_OUTPUT_FIELDS`), ready for either sink.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pgval.core import schema

#: DDL of an input record's JSON value (the fields of :data:`pgval.core.schema.INPUT_FIELDS`).
INPUT_VALUE_DDL = "id BIGINT, type STRING, resource STRING, event_ts BIGINT"


@dataclass(frozen=True)
class TopologyConfig:
    """Everything that shapes the streaming plan; the driver's CLI maps onto it one to one."""

    topology: str
    bootstrap: str
    window_ms: int
    watermark_ms: int
    max_offsets_per_trigger: int | None = None
    #: The run's topics (a prefix per run on a shared cluster).
    topics: schema.Topics = field(default_factory=schema.Topics)
    #: Extra options for the Kafka source (``kafka.*`` consumer settings, ``minPartitions``...).
    source_options: Mapping[str, str] = field(default_factory=dict)
    #: A job's input names, in slot order (:attr:`DriverDocument.input_names`).
    input_names: tuple[str, ...] = ("get", "post")

    def __post_init__(self) -> None:
        if self.topology not in schema.TOPOLOGIES:
            raise ValueError(f"unknown topology '{self.topology}'; use one of "
                             f"{', '.join(schema.TOPOLOGIES)}")
        if self.window_ms <= 0:
            raise ValueError("window_ms must be positive")
        if self.watermark_ms < 0:
            raise ValueError("watermark_ms must not be negative")


def _interval(ms: int) -> str:
    """Spark interval string; milliseconds keep any W exact (no rounding to seconds)."""
    return f"{int(ms)} milliseconds"


def kafka_records(spark: SparkSession, cfg: TopologyConfig, topic: str) -> DataFrame:
    """One input topic's records as Spark's Kafka source gives them (``value``, ``partition``,
    ``offset``, ...).

    ``startingOffsets=earliest`` so a run consumes everything the generators wrote, also
    what arrived before the query started; ``failOnDataLoss=false`` so a broker fault that
    makes offsets vanish is recorded as lost data (the validator sees it) instead of
    killing the query.
    """
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(int(cfg.max_offsets_per_trigger)))
    for key, value in cfg.source_options.items():
        reader = reader.option(key, value)
    return reader.load()


def events(records: DataFrame, watermark_ms: int) -> DataFrame:
    """Records (``value``, ``partition``, ``offset``) as (id, type, resource, ts, partition,
    offset) with a watermark on ``ts``.

    ``partition`` and ``offset`` say which record an event is: MST collapses its join's
    pair multiplicity by them, so an ID that is in the topic twice stays twice. Records
    whose value is not the expected JSON are dropped here; the validator counts them as
    malformed inputs. Any streaming source with those three columns gives the plan pgval
    runs (the tests feed files).
    """
    parsed = records.select(
        F.from_json(F.col("value").cast("string"), INPUT_VALUE_DDL).alias("e"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
    )
    rows = parsed.select(
        F.col("e.id").alias("id"),
        F.col("e.type").alias("type"),
        F.col("e.resource").alias("resource"),
        F.timestamp_millis(F.col("e.event_ts")).alias("ts"),
        "partition",
        "offset",
    ).where(
        F.col("id").isNotNull() & F.col("resource").isNotNull() & F.col("ts").isNotNull()
    )
    return rows.withWatermark("ts", _interval(watermark_ms))


def _window(ts: Column | str, window_ms: int) -> Column:
    """Tumbling window aligned to the epoch: start = floor(ts / W) * W, as the oracle computes."""
    return F.window(ts, _interval(window_ms))


def flat_rows(df: DataFrame, fields: tuple[str, ...]) -> DataFrame:
    """A topology's rows as plain columns, exactly ``fields`` in that order, the window as
    ``window_start``/``window_end`` in epoch ms."""
    return df.select(
        F.unix_millis(F.col("window.start")).alias("window_start"),
        F.unix_millis(F.col("window.end")).alias("window_end"),
        *[F.col(f) for f in fields if f not in ("window_start", "window_end")],
    )


def _to_output(flat: DataFrame, fields: tuple[str, ...]) -> DataFrame:
    """(key, value) strings; ``value`` holds exactly ``fields`` in that order."""
    return flat.select(
        F.col("resource").alias("key"),
        F.to_json(F.struct(*[F.col(f) for f in fields])).alias("value"),
    )


def sst_rows(gets: DataFrame, window_ms: int) -> DataFrame:
    """Single-stream topology: GETs per (window, resource) -> count and IDs, as the plain
    columns of :data:`pgval.core.schema.SST_OUTPUT_FIELDS`.

    ``count`` is ``count(*)`` and ``ids`` is ``collect_list`` (not a set): every record
    read is one occurrence, so an input that is in Kafka twice, or that reached Spark's
    state twice, is visible in the output as a duplicate rather than hidden.
    """
    agg = gets.groupBy(_window("ts", window_ms).alias("window"), "resource").agg(
        F.count(F.lit(1)).alias("count"),
        F.collect_list("id").alias("ids"),
    )
    return flat_rows(agg, schema.SST_OUTPUT_FIELDS)


def sst(gets: DataFrame, window_ms: int) -> DataFrame:
    """:func:`sst_rows` as (key, value) for the sinks."""
    return _to_output(sst_rows(gets, window_ms), schema.SST_OUTPUT_FIELDS)


def mst_rows(gets: DataFrame, posts: DataFrame, window_ms: int) -> DataFrame:
    """Multi-stream topology: GET ⋈ POST on (resource, window), then counted per key, as the
    plain columns of :data:`pgval.core.schema.MST_OUTPUT_FIELDS`.

    The join is an inner stream-stream join whose condition includes equality of the two
    event-time windows: that is what lets Spark evict a window's join state once the
    watermark passes its end (without it, join state would grow forever). The join emits
    one row per (GET, POST) pair, so the aggregation collapses that multiplicity by the
    *record* (``collect_set`` of (id, partition, offset) per side; ``count_distinct`` is
    rejected in streaming aggregations), not by the ID: like SST, every record is one
    occurrence, and an ID that is in Kafka twice is listed twice (docs/semantics.md,
    "Input events"). ``gets``/``posts`` count those records. A key without a partner
    produces no row at all, exactly the semantics' "one output per key having at least one
    GET and one POST". The second window is taken over ``window_time(window)`` (window end
    minus 1 µs), the join output's event-time column, so it is the same window again and
    is emitted when the watermark passes its end.
    """
    def side(df: DataFrame, name: str) -> DataFrame:
        return df.select(
            F.struct("id", "partition", "offset").alias(name),
            F.col("resource").alias(f"{name}_resource"),
            _window("ts", window_ms).alias(f"{name}_window"),
        )

    joined = side(gets, "g").join(
        side(posts, "p"),
        (F.col("g_resource") == F.col("p_resource")) & (F.col("g_window") == F.col("p_window")),
        "inner",
    )
    agg = joined.groupBy(
        _window(F.window_time(F.col("g_window")), window_ms).alias("window"),
        F.col("g_resource").alias("resource"),
    ).agg(
        F.collect_set("g").alias("get_records"),
        F.collect_set("p").alias("post_records"),
    )
    counted = agg.select(
        "window",
        "resource",
        F.size("get_records").cast("long").alias("gets"),
        F.size("post_records").cast("long").alias("posts"),
        F.concat(F.col("get_records.id"), F.col("post_records.id")).alias("ids"),
    )
    return flat_rows(counted, schema.MST_OUTPUT_FIELDS)


def mst(gets: DataFrame, posts: DataFrame, window_ms: int) -> DataFrame:
    """:func:`mst_rows` as (key, value) for the sinks."""
    return _to_output(mst_rows(gets, posts, window_ms), schema.MST_OUTPUT_FIELDS)


def plan(topology: str, get_records: DataFrame, post_records: DataFrame | None,
         window_ms: int, watermark_ms: int) -> DataFrame:
    """The (key, value) output stream of ``topology`` over raw input records (see
    :func:`events`); MST needs ``post_records``."""
    gets = events(get_records, watermark_ms).where(F.col("type") == schema.GET)
    if topology == schema.Topology.SST:
        return sst(gets, window_ms)
    if post_records is None:
        raise ValueError("MST joins two streams: post_records is missing")
    posts = events(post_records, watermark_ms).where(F.col("type") == schema.POST)
    return mst(gets, posts, window_ms)


def build_topology(spark: SparkSession, cfg: TopologyConfig) -> DataFrame:
    """The (key, value) output stream of ``cfg.topology``, read from the run's topics."""
    posts = (kafka_records(spark, cfg, cfg.topics.post)
             if cfg.topology == schema.Topology.MST else None)
    return plan(cfg.topology, kafka_records(spark, cfg, cfg.topics.get), posts,
                cfg.window_ms, cfg.watermark_ms)
