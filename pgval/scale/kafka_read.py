"""Read-back as a Spark job: Kafka's batch source read to the run's end-offset snapshot,
written as the tables the Spark oracle and checker read, so no process holds the run.

The same proof as pgval's own reader (:mod:`pgval.kafka.reader`): one snapshot of every
partition's end (its high watermark; under ``read_committed`` once every transaction below it
is committed or aborted) taken before the read, and
a log that no longer starts at offset 0 is a problem. Spark then reads exactly
``[0, end)`` of each partition with ``failOnDataLoss=true``: its Kafka consumer skips only
offsets Kafka reports invisible (transaction markers, aborted records) and fails the job on
any offset it cannot fetch (``KafkaDataConsumer.fetchRecord``), so a job that finishes read
every committed record of the snapshot. What each partition gave (records, last offset) is
kept beside the snapshot.

Records become rows as :mod:`pgval.records.parse` makes them: an input needs ``id``,
``type`` (GET or POST), ``resource`` and times within ±MAX_MS, an output ``window_start``,
``resource`` and ``ids`` without a null; anything else is malformed and counted. pgval's own
control IDs are set aside (an output left with none of the run's IDs is dropped), resource
names become the dense codes the oracle's rows use, and an output's stream position is its
rank by (ingress time, partition, offset).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.core.schema import GET, POST, resource_name
from pgval.kafka.client import java_client_options
from pgval.kafka.reader import SETTLE_S, offsets_snapshot, reader_conf, records_after
from pgval.records.parse import JOB_KEY, JOB_VALUE
from pgval.records.phases import MAX_MS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: A record some field of which Spark could not convert (``"count":"3"``, ``1.5`` for an
#: integer, a number past int64) gets its text here: malformed, as the parser has it.
CORRUPT = "_corrupt"
INPUT_SCHEMA = f"id BIGINT, type STRING, resource STRING, event_ts BIGINT, {CORRUPT} STRING"
OUTPUT_SCHEMA = ("window_start BIGINT, window_end BIGINT, resource STRING, count BIGINT, "
                 f"gets BIGINT, posts BIGINT, ids ARRAY<BIGINT>, {CORRUPT} STRING")
#: A user's job's output as :func:`pgval.records.parse.job_outputs_from_kafka` reads it: its
#: key text, its IDs and its values as one text; the job's own columns are not read.
JOB_OUTPUT_SCHEMA = (f"{JOB_KEY} STRING, ids ARRAY<BIGINT>, {JOB_VALUE} STRING, "
                     f"{CORRUPT} STRING")
#: An input's place for the oracle's tie-break (two ingresses of one ID at one time: the one
#: read first): topic, partition and offset in one number.
_PARTITION_SHIFT, _TOPIC_SHIFT = 40, 56


@dataclass
class PartitionRead:
    """One partition: the snapshot's end, and what the Spark job read below it."""

    topic: str
    partition: int
    end: int
    records: int
    last_offset: int | None


@dataclass
class SparkReadBack:
    """The tables written (``inputs``, ``outputs``, ``occurrences``), their counts and the
    proof per partition; ``problems`` (a topic Kafka would not describe, a log that lost its
    first records) make the read incomplete."""

    tables: dict[str, Path]
    partitions: list[PartitionRead]
    inputs: int
    control_inputs: int
    malformed_inputs: int
    outputs: int
    control_outputs: int
    malformed_outputs: int
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"complete": self.complete, "problems": self.problems,
                "inputs": self.inputs, "control_inputs": self.control_inputs,
                "malformed_inputs": self.malformed_inputs, "outputs": self.outputs,
                "control_outputs": self.control_outputs,
                "malformed_outputs": self.malformed_outputs,
                "partitions": [vars(p) for p in self.partitions]}


def _kafka(spark: SparkSession, bootstrap: str, options: Mapping[str, str], topic: str,
           ends: Mapping[int, int], isolation: str) -> DataFrame:
    """Partitions ``[0, end)`` of ``topic`` through Spark's Kafka batch source."""
    reader = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("assign", json.dumps({topic: sorted(ends)}))
              .option("startingOffsets", json.dumps({topic: {str(p): 0 for p in ends}}))
              .option("endingOffsets", json.dumps({topic: {str(p): e for p, e in ends.items()}}))
              .option("failOnDataLoss", "true"))
    for key, value in options.items():
        reader = reader.option(f"kafka.{key}", str(value))
    # After the user's settings: the read's proof rests on it.
    return reader.option("kafka.isolation.level", isolation).load()


def _is_time(col: Column) -> Column:
    return col.between(-MAX_MS, MAX_MS)


def _is_control(col: Column, control_ids: Sequence[int] | None) -> Column:
    """pgval's own IDs: a built-in topology's inclusive range ``(lo, hi)``."""
    from pyspark.sql import functions as F

    if control_ids is None or len(control_ids) == 0:
        return F.lit(False)
    if not isinstance(control_ids, tuple | list) or len(control_ids) != 2:
        raise ValueError("the Spark read-back knows control IDs as a range (lo, hi) only")
    lo, hi = control_ids
    return col.between(int(lo), int(hi))


def _parsed(schema: str) -> Column:
    from pyspark.sql import functions as F

    return F.from_json(F.col("value").cast("string"), schema,
                       {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})


def _one_line() -> Column:
    """A value the parser can judge at all: present and without a line break (the parser
    reads values as lines: :func:`pgval.records.parse.parse_values`)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.instr(F.col("value").cast("string"), "\n") == 0, F.lit(False))


def _staged_inputs(raw: DataFrame, control_ids: Sequence[int] | None, job: bool = False
                   ) -> DataFrame:
    """Parsed input records: their fields, ``good`` (judgeable), ``control`` and proof
    columns; for a user's job also the record's ``value`` as it came (its batch run parses
    every record, pgval's own and malformed ones too, as the stream did)."""
    from pyspark.sql import functions as F

    parsed = raw.select(_parsed(INPUT_SCHEMA).alias("v"), _one_line().alias("one_line"),
                        F.unix_millis("timestamp").alias("ingress_ts"),
                        "topic", "partition", "offset", "code",
                        *(["value"] if job else []))
    good = (F.col("one_line") & F.col(f"v.{CORRUPT}").isNull() & F.col("v.id").isNotNull()
            & F.col("v.resource").isNotNull() & F.col("v.type").isin(GET, POST)
            & _is_time(F.col("v.event_ts")) & _is_time(F.col("ingress_ts")))
    return parsed.select(
        F.col("v.id").alias("id"), (F.col("v.type") == GET).alias("is_get"),
        F.col("v.resource").alias("name"), F.col("v.event_ts").alias("event_ts"),
        "ingress_ts", "topic", "partition", "offset",
        (F.col("code").cast("long") * (1 << _TOPIC_SHIFT)
         + F.col("partition").cast("long") * (1 << _PARTITION_SHIFT) + F.col("offset"))
        .alias("pos"),
        F.coalesce(good, F.lit(False)).alias("good"),
        F.coalesce(good & _is_control(F.col("v.id"), control_ids), F.lit(False))
        .alias("control"), *(["value"] if job else []))


def _staged_outputs(raw: DataFrame, control_ids: Sequence[int] | None) -> DataFrame:
    """Parsed output records, their run IDs (control IDs taken out), ``good``, ``dropped``
    (held control IDs only)."""
    from pyspark.sql import functions as F

    parsed = raw.select(_parsed(OUTPUT_SCHEMA).alias("v"), _one_line().alias("one_line"),
                        F.unix_millis("timestamp").alias("ingress_ts"),
                        "topic", "partition", "offset")
    ids = F.col("v.ids")
    good = (F.col("one_line") & F.col(f"v.{CORRUPT}").isNull()
            & F.col("v.window_start").isNotNull() & F.col("v.resource").isNotNull()
            & ids.isNotNull() & _is_time(F.col("ingress_ts"))
            & ~F.exists(ids, lambda x: x.isNull()))
    kept = F.filter(ids, lambda x: ~_is_control(x, control_ids))
    return parsed.select(
        F.col("v.window_start").alias("window_start"), F.col("v.resource").alias("name"),
        *(F.coalesce(F.col(f"v.{c}"), F.lit(-1)).alias(c) for c in ("count", "gets", "posts")),
        kept.alias("ids"), "ingress_ts", "topic", "partition", "offset",
        F.coalesce(good, F.lit(False)).alias("good"),
        F.coalesce(good & (F.size(kept) == 0) & (F.size(ids) > 0), F.lit(False))
        .alias("dropped"))


def _staged_job_outputs(raw: DataFrame, control_ids: Sequence[int] | None) -> DataFrame:
    """A user's job's output records parsed: ``key`` and ``value`` texts, run IDs (control
    IDs taken out), ``good`` and ``dropped``, as :func:`_staged_outputs` has them (a job's
    output has no window: its key text carries one, if any)."""
    from pyspark.sql import functions as F

    parsed = raw.select(_parsed(JOB_OUTPUT_SCHEMA).alias("v"), _one_line().alias("one_line"),
                        F.unix_millis("timestamp").alias("ingress_ts"),
                        "topic", "partition", "offset")
    ids = F.col("v.ids")
    good = (F.col("one_line") & F.col(f"v.{CORRUPT}").isNull()
            & F.col(f"v.{JOB_KEY}").isNotNull() & ids.isNotNull()
            & _is_time(F.col("ingress_ts")) & ~F.exists(ids, lambda x: x.isNull()))
    kept = F.filter(ids, lambda x: ~_is_control(x, control_ids))
    return parsed.select(
        F.col(f"v.{JOB_KEY}").alias("key"), F.col(f"v.{JOB_VALUE}").alias("value"),
        kept.alias("ids"), "ingress_ts", "topic", "partition", "offset",
        F.coalesce(good, F.lit(False)).alias("good"),
        F.coalesce(good & (F.size(kept) == 0) & (F.size(ids) > 0), F.lit(False))
        .alias("dropped"))


def _names(spark: SparkSession, inputs: DataFrame, outputs: DataFrame, resources: int
           ) -> DataFrame:
    """(name, resource) for every name of the run: the generator's ``r0000``… first (as
    :func:`pgval.evidence.bundle.streams_from_records` codes them), then the others in
    sorted order (codes are the run's own; the checkers compare IDs, never codes)."""
    known = [resource_name(r) for r in range(resources)]
    seen = sorted({r[0] for r in inputs.filter("good").select("name")
                   .union(outputs.filter("good").select("name")).distinct().collect()}
                  - set(known))
    from pyspark.sql import functions as F

    names = F.array(*(F.lit(n) for n in known + seen))  # built in the JVM: no Python worker
    return (spark.range(1).select(F.posexplode(names).alias("resource", "name"))
            .select("name", F.col("resource").cast("int")))


def _tallies(staged_in: DataFrame, staged_out: DataFrame,
             ends: Mapping[str, Mapping[int, int]]) -> tuple[list[PartitionRead], dict[str, int]]:
    """The proof per partition (records read, last offset) and the read's counts (good,
    control, malformed inputs and outputs), in one aggregation over both staged tables:
    one Spark job, where a job each cost as much again on a small run."""
    from pyspark.sql import functions as F

    def side(df: DataFrame, name: str, flag: str) -> DataFrame:
        return df.select(F.lit(name).alias("side"), "topic", "partition", "offset",
                         F.col("good").cast("long").alias("good"),
                         F.col(flag).cast("long").alias("flag"))

    rows = (side(staged_in, "in", "control").unionByName(side(staged_out, "out", "dropped"))
            .groupBy("side", "topic", "partition")
            .agg(F.count(F.lit(1)).alias("n"), F.max("offset").alias("last"),
                 F.sum("good").alias("good"), F.sum("flag").alias("flag")).collect())
    got: dict[tuple[str, int], tuple[int, int | None]] = {}
    for r in rows:  # a topic read both as an input and as the output: both reads' records
        n, last = got.get((r["topic"], r["partition"]), (0, None))
        offsets = [o for o in (last, r["last"]) if o is not None]
        got[r["topic"], r["partition"]] = (n + r["n"], max(offsets) if offsets else None)
    proof = [PartitionRead(t, p, end, *got.get((t, p), (0, None)))
             for t, parts in ends.items() for p, end in sorted(parts.items())]
    total = {(name, what): sum(int(r[what] or 0) for r in rows if r["side"] == name)
             for name in ("in", "out") for what in ("n", "good", "flag")}
    counts = {"inputs": total["in", "good"] - total["in", "flag"],
              "control_inputs": total["in", "flag"],
              "malformed_inputs": total["in", "n"] - total["in", "good"],
              "outputs": total["out", "good"] - total["out", "flag"],
              "control_outputs": total["out", "flag"],
              "malformed_outputs": total["out", "n"] - total["out", "good"]}
    return proof, counts


def _write(df: DataFrame, path: Path) -> Path:
    df.write.mode("overwrite").parquet(str(path))
    return path


def _snapshot(bootstrap: str, topics: Sequence[str], config: Mapping[str, object],
              isolation: str, timeout_s: float) -> tuple[dict[str, dict[int, int]], list[str]]:
    """The end of every partition, and the problems that make a read incomplete."""
    conf = reader_conf(bootstrap, isolation, config)
    ends, _, problems = offsets_snapshot(conf, bootstrap, topics, timeout_s)
    said = [f"{t}: {p}" for t in topics for p in problems[t]]
    said += [f"{t}: no partitions" for t in topics if not ends[t] and not problems[t]]
    return ends, said


def read_back_on_spark(spark: SparkSession, bootstrap: str, inputs: Mapping[str, str],
                       output: str, folder: Path, resources: int = 0,
                       control_ids: Sequence[int] | None = None,
                       config: Mapping[str, Any] | None = None,
                       isolation: str = "read_committed", timeout_s: float = SETTLE_S,
                       job: bool = False) -> SparkReadBack:
    """Read the input topics (``{"get": topic, "post": topic}``) and the output topic to
    their end-offset snapshot with Spark, and write the ``inputs`` table (the Spark
    oracle's, :func:`pgval.scale.frames.write_inputs`) and the ``outputs`` and
    ``occurrences`` tables (the checker's) into ``folder``. ``job``: the outputs are a user's
    job's (:data:`JOB_OUTPUT_SCHEMA`); their ``outputs`` table holds each one's ``key`` and
    ``value`` texts and its ``one_id`` (its ID where it has exactly one), which
    :mod:`pgval.scale.job_rows` keys and compares, and ``staged_inputs`` keeps every input
    record's value for the job's batch run."""
    topics = [*inputs.values(), output]
    ends, problems = _snapshot(bootstrap, topics, config or {}, isolation, timeout_s)
    if problems:  # nothing read is judged: say why, read nothing
        return SparkReadBack({}, [], 0, 0, 0, 0, 0, 0, problems)
    options = java_client_options({k: str(v) for k, v in (config or {}).items()})
    folder.mkdir(parents=True, exist_ok=True)
    with _row_reader_for_lists(spark):
        read = _read_and_write(spark, bootstrap, options, inputs, output, ends, isolation,
                               control_ids, resources, folder, job)
    # As the numpy path's read-back (pgval.run.readback): nothing may write after the drain.
    read.problems += records_after(bootstrap, config, output, ends[output])
    return read


@contextlib.contextmanager
def _row_reader_for_lists(spark: SparkSession) -> Iterator[None]:
    """Staged outputs hold their IDs as one list a row (thousands of IDs in a window's
    output): Spark's vectorized reader would hold 4,096 such rows at once and run a small
    heap out of memory, so list columns are read row by row while the read-back runs."""
    key = "spark.sql.parquet.enableNestedColumnVectorizedReader"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _read_and_write(spark: SparkSession, bootstrap: str, options: Mapping[str, str],
                    inputs: Mapping[str, str], output: str,
                    ends: Mapping[str, Mapping[int, int]], isolation: str,
                    control_ids: Sequence[int] | None, resources: int, folder: Path,
                    job: bool = False) -> SparkReadBack:
    """The read and the tables of :func:`read_back_on_spark` after its snapshot."""
    from pyspark.sql import functions as F

    try:
        staged_in, staged_out = _staged(spark, bootstrap, options, inputs, output, ends,
                                        isolation, control_ids, folder, job)
    except Exception as exc:  # noqa: BLE001 - pyspark's errors have no common base
        if "data may have been lost" not in str(exc):
            raise
        return SparkReadBack({}, [], 0, 0, 0, 0, 0, 0, [
            "Spark could not read every offset of the snapshot (records were deleted while "
            "it read)"])
    judged_in = staged_in.filter("good AND NOT control")
    judged_out = staged_out.filter("good AND NOT dropped")
    if job:  # a job's rows are keyed by text: no resource codes
        judged_in = judged_in.withColumn("resource", F.lit(0))
    else:
        names = F.broadcast(_names(spark, staged_in, staged_out, resources))
        judged_in, judged_out = judged_in.join(names, "name"), judged_out.join(names, "name")
    tables = {"inputs": _write(judged_in.select("id", "is_get", "resource", "event_ts",
                                                "ingress_ts", "pos"), folder / "inputs")}
    tables.update(_write_outputs(judged_out, folder, job))
    proof, counts = _tallies(staged_in, staged_out, ends)
    return SparkReadBack(tables, proof, **counts)


def _staged(spark: SparkSession, bootstrap: str, options: Mapping[str, str],
            inputs: Mapping[str, str], output: str, ends: Mapping[str, Mapping[int, int]],
            isolation: str, control_ids: Sequence[int] | None, folder: Path,
            job: bool = False) -> tuple[DataFrame, DataFrame]:
    """The one read of Kafka: every input and output record parsed, written as Parquet
    (``staged_inputs``, ``staged_outputs``) and read back, so later steps never read Kafka."""
    from pyspark.sql import functions as F

    frames = [_kafka(spark, bootstrap, options, t, ends[t], isolation)
              .withColumn("code", F.lit(code)) for code, t in enumerate(inputs.values())
              if ends[t]]
    staged_in = _write(_staged_inputs(_union(spark, frames, with_code=True), control_ids, job),
                       folder / "staged_inputs")
    out = ([_kafka(spark, bootstrap, options, output, ends[output], isolation)]
           if ends[output] else [])
    stage = _staged_job_outputs if job else _staged_outputs
    staged_out = _write(stage(_union(spark, out, with_code=False), control_ids),
                        folder / "staged_outputs")
    return spark.read.parquet(str(staged_in)), spark.read.parquet(str(staged_out))


def _union(spark: SparkSession, frames: list[DataFrame], with_code: bool) -> DataFrame:
    """The frames as one (an empty Kafka-shaped frame where there are none)."""
    if frames:
        out = frames[0]
        for other in frames[1:]:
            out = out.unionByName(other)
        return out
    from pyspark.sql import functions as F

    columns = [("key", "binary"), ("value", "binary"), ("topic", "string"),
               ("partition", "int"), ("offset", "bigint"), ("timestamp", "timestamp")]
    columns += [("code", "int")] if with_code else []
    return spark.range(0).select(*(F.lit(None).cast(t).alias(c) for c, t in columns))


def _write_outputs(outputs: DataFrame, folder: Path, job: bool = False) -> dict[str, Path]:
    """The ``outputs`` and ``occurrences`` tables. An output's number and stream position
    are ``partition × 2**40 + offset``: the checker orders occurrences by (ingress time,
    position, …), so this is the order by (ingress time, partition, offset) of the parser
    path, with no global sort of the outputs. A job's outputs keep their texts instead of
    the built-in columns (:func:`read_back_on_spark`)."""
    from pyspark.sql import functions as F

    where = F.col("partition").cast("long") * (1 << _PARTITION_SHIFT) + F.col("offset")
    numbered = outputs.withColumn("output", where)
    columns = (["key", "value", F.when(F.size("ids") == 1, F.col("ids")[0]).alias("one_id")]
               if job else ["window_start", "resource", "count", "gets", "posts"])
    return {"outputs": _write(numbered.select(
                "output", "ingress_ts", F.col("output").alias("position"), *columns,
                F.size("ids").cast("long").alias("n_ids"), F.lit(False).alias("wrong_value")),
                folder / "outputs"),
            "occurrences": _write(numbered.select(
                "output", F.posexplode("ids").alias("k", "id"))
                .select("output", F.col("k").cast("long").alias("k"), "id"),
                folder / "occurrences")}
