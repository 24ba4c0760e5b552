"""The two sinks whose processing guarantees pgval measures.

``a1`` — Spark's built-in Kafka sink. Spark records a micro-batch as done (commit log)
only *after* the sink has written it, and after a failure it re-runs the last uncommitted
batch with the same offsets. Its Kafka producer is not transactional, so whatever that
batch had already written before the failure is written again: at-least-once.

``e1`` — a ``foreachBatch`` sink writing with a transactional producer. Every batch's
outputs and a marker record ``{"batch_id": n, ...}`` (key = query name) go to Kafka in
ONE transaction; the marker lands in the compacted :data:`pgval.core.schema.MARKER_TOPIC`.
A restarted driver first calls ``init_transactions`` with the same ``transactional.id``
(which fences a zombie driver and finishes or aborts whatever transaction it left open),
then reads the markers with ``read_committed`` and skips every batch id it finds
committed. Since Spark re-runs a batch id with exactly the same offsets (offset log),
a batch's outputs become visible to ``read_committed`` consumers exactly once.

What that rests on: (1) Spark's offset log fixes a batch's input before it runs, and a
windowed append-mode aggregation over the same input and state yields the same rows
again; (2) the batch is executed (``collect``) before the transaction, so its state-store
versions exist whenever its marker does; (3) markers carry the checkpoint's query id, so
a fresh checkpoint under an old query name starts from scratch. A ``read_uncommitted``
consumer can still see aborted writes: e1 promises nothing to it.

Sabotage (self-test only). ``TransactionalSink(sabotage=parse_sabotage("drop-batch:N"))``
(or ``dup-batch:N``; the driver's ``--sabotage``) breaks e1 ON PURPOSE, once, so that a
canary test can check that pgval catches a known fault; it is a test of pgval, never a
guarantee, and no experiment should run with it. The target is the N-th batch this sink
instance commits that has at least one *real* output row, i.e. a row whose value's
``"ids"`` list holds an ID >= 0 (the runner's priming and closing events have negative
IDs). Skipped re-runs and empty batches are not counted, nor are batches whose rows hold
only negative IDs. In the target batch, ``drop`` writes none of the real rows but still
commits the marker (so a re-run skips the batch instead of repairing it), and ``dup``
writes every real row twice in the same transaction; rows of that batch with only
negative IDs are written once, as usual. Before the commit the sink reports
``{"event": "sabotage", "kind", "batch_id", "nth", "rows", "ids", "negative_ids"}``
(``ids``: the real IDs of the affected rows; the driver puts it in its progress file),
and the batch's marker carries ``"sabotage": "<spec>"``. The count lives in the sink
object, i.e. one driver process: a restarted driver counts from zero and sabotages again.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from pgval.core import schema
from pgval.core.clock import now_ms

log = logging.getLogger(__name__)

#: How long one commit may keep retrying retriable errors (a broker restarting, say).
COMMIT_RETRY_S = 60.0

#: The one error message for a bad ``--sabotage`` spec.
SABOTAGE_USAGE = "--sabotage takes drop-batch:N or dup-batch:N with N >= 1"
_SABOTAGE_RE = re.compile(r"(drop|dup)-batch:([0-9]+)")


@dataclass(frozen=True)
class Sabotage:
    """SELF-TEST of pgval only: drop (``"drop"``) or duplicate (``"dup"``) the real output
    rows of the ``nth`` real batch the e1 sink commits (see the module docstring)."""

    kind: str
    nth: int

    def __post_init__(self) -> None:
        if self.kind not in ("drop", "dup") or isinstance(self.nth, bool) or self.nth < 1:
            raise ValueError(SABOTAGE_USAGE)

    def __str__(self) -> str:
        return f"{self.kind}-batch:{self.nth}"


def parse_sabotage(text: str) -> Sabotage:
    """``"drop-batch:N"`` or ``"dup-batch:N"`` (N >= 1) → :class:`Sabotage`; else ValueError."""
    match = _SABOTAGE_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(2)) < 1:
        raise ValueError(SABOTAGE_USAGE)
    return Sabotage(match.group(1), int(match.group(2)))


def _row_ids(value: str | bytes | None) -> tuple[list[int], int]:
    """The real (>= 0) IDs of one output value's ``"ids"`` list and its negative-ID count.

    A value that is not a JSON object with an ``"ids"`` list, and entries that are not
    integers, count as no ID at all (such a row is never a sabotage target).
    """
    try:
        ids = json.loads(value).get("ids") if value is not None else None
    except (ValueError, TypeError, AttributeError):
        return [], 0
    if not isinstance(ids, list):
        return [], 0
    ints = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
    return [i for i in ints if i >= 0], sum(1 for i in ints if i < 0)


def _base_writer(df: DataFrame, checkpoint: str, query_name: str,
                 trigger_ms: int | str) -> DataStreamWriter:
    """The append-mode writer (update-mode in Real-time Mode); ``trigger_ms`` a
    processing-time interval in ms (0: as soon as possible), or a job's own trigger
    (``processing-time:5 seconds``, ``real-time:5 seconds``:
    :func:`pgval.core.schema.parse_trigger`)."""
    writer = (
        df.writeStream.outputMode("append")
        .queryName(query_name)
        .option("checkpointLocation", checkpoint)
    )
    if isinstance(trigger_ms, str):
        kind, interval = schema.parse_trigger(trigger_ms)
        if kind == "real-time":
            # Spark 4.2's Real-time Mode takes Update only (STREAMING_REAL_TIME_MODE.
            # OUTPUT_MODE_NOT_SUPPORTED for Append); for the stateless queries it runs,
            # Update writes each row once, as Append does.
            return writer.outputMode("update").trigger(realTime=interval)
        return writer.trigger(processingTime=interval)
    if trigger_ms > 0:
        writer = writer.trigger(processingTime=f"{int(trigger_ms)} milliseconds")
    return writer


def kafka_sink(df: DataFrame, bootstrap: str, checkpoint: str, query_name: str,
               trigger_ms: int | str, topic: str = schema.OUTPUT_TOPIC,
               kafka_options: dict[str, str] | None = None) -> DataStreamWriter:
    """a1: Spark's Kafka sink; at-least-once because a re-run batch is written again.
    ``kafka_options``: the user's client settings (SASL, SSL, …), given as ``kafka.KEY``."""
    writer = _base_writer(df, checkpoint, query_name, trigger_ms)
    for key, value in (kafka_options or {}).items():
        writer = writer.option(f"kafka.{key}", value)
    return (
        writer
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        # Explicit although they are kafka-clients' defaults: a lost ack must be retried,
        # so that the only source of duplicates is the batch re-run, not the producer.
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
        # An output row carries its inputs' IDs: as large as the topic takes.
        .option("kafka.max.request.size", str(schema.MAX_RECORD_BYTES))
    )


def file_sink(rows: DataFrame, out_dir: str, checkpoint: str, query_name: str,
              trigger_ms: int | str) -> DataStreamWriter:
    """``--sink files``: Spark's file sink, Parquet into ``out_dir``, exactly-once for
    readers that go through its ``_spark_metadata`` log (:mod:`pgval.run.sink_files`)."""
    return (_base_writer(rows, checkpoint, query_name, trigger_ms).format("parquet")
            .option("path", out_dir))


def user_sink(rows: DataFrame, writer: Any, checkpoint: str, query_name: str,
              trigger_ms: int | str) -> DataStreamWriter:
    """``--sink PATH.py:FUNCTION``: the user's ``foreachBatch`` function, through
    :class:`pgval.topologies.user_sink.SinkWriter`."""
    return _base_writer(rows, checkpoint, query_name, trigger_ms).foreachBatch(writer)


#: Spark settings a session needs to write Delta tables (besides Delta's jars).
DELTA_CONF = {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
              "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}


def delta_write(table_dir: str, app_id: str) -> Callable[[DataFrame, int], None]:
    """``--sink delta``: a ``foreachBatch`` function appending each micro-batch to a Delta
    table with Delta's idempotent writes: ``txnAppId`` (the query's name) and
    ``txnVersion`` (the batch id), so a batch id the table already recorded for the app id
    is skipped — the batch Spark runs again after a crash is not written twice."""
    def write(df: DataFrame, batch_id: int) -> None:
        (df.write.format("delta").mode("append").option("txnAppId", app_id)
         .option("txnVersion", batch_id).save(table_dir))

    return write


def transactional_sink(df: DataFrame, sink: TransactionalSink, checkpoint: str,
                       query_name: str, trigger_ms: int | str) -> DataStreamWriter:
    """e1: ``foreachBatch(sink)``; exactly-once into Kafka for read_committed consumers."""
    return _base_writer(df, checkpoint, query_name, trigger_ms).foreachBatch(sink)


def _checkpoint_query_id(checkpoint: str) -> str | None:
    """The query's persistent id (``<checkpoint>/metadata``), same across restarts."""
    path = Path(checkpoint.removeprefix("file://")) / "metadata"
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        try:
            value = json.loads(line).get("id")
        except (ValueError, AttributeError):
            continue
        if isinstance(value, str):
            return value
    return None


def last_committed_batch(bootstrap: str, query_name: str, query_id: str | None,
                         marker_topic: str = schema.MARKER_TOPIC,
                         timeout_s: float = 90.0,
                         client_conf: dict[str, Any] | None = None) -> int:
    """Highest batch id a committed marker of this query carries, or -1.

    Markers of another query (same name, different checkpoint) are ignored, so a fresh
    checkpoint never skips batches because an old run used the same name.
    """
    from pgval.kafka.reader import read_topic  # numpy-heavy import, only needed here

    records = read_topic(bootstrap, marker_topic, isolation="read_committed",
                         timeout_s=timeout_s, idle_timeout_s=min(10.0, timeout_s),
                         config=client_conf)
    want = query_name.encode()
    best = -1
    for key, value in zip(records.keys.to_pylist(), records.values.to_pylist(), strict=True):
        if key != want or value is None:
            continue
        try:
            marker = json.loads(value)
            batch_id = int(marker["batch_id"])
        except (ValueError, KeyError, TypeError):
            continue
        if query_id is not None and marker.get("query_id") not in (None, query_id):
            continue
        best = max(best, batch_id)
    return best


class TransactionalSink:
    """e1: the ``foreachBatch`` function; one Kafka transaction per non-empty batch.

    The producer and the last committed batch id are set up lazily on the first call,
    which runs after Spark has created (or recovered) the checkpoint, so the query id
    is known. Any producer error aborts the transaction and is raised: the query fails,
    nothing of the batch is visible to ``read_committed`` readers, and a restart re-runs it.
    ``sabotage`` (SELF-TEST of pgval only, see the module docstring) breaks one batch.
    """

    def __init__(self, bootstrap: str, query_name: str, checkpoint: str,
                 topic: str = schema.OUTPUT_TOPIC,
                 marker_topic: str = schema.MARKER_TOPIC,
                 producer_conf: dict[str, Any] | None = None,
                 on_batch: Callable[[dict[str, Any]], None] | None = None,
                 sabotage: Sabotage | None = None) -> None:
        self.bootstrap = bootstrap
        self.query_name = query_name
        self.checkpoint = checkpoint
        self.topic = topic
        self.marker_topic = marker_topic
        self.transactional_id = schema.transactional_id(query_name)
        self.producer_conf = dict(producer_conf or {})
        self.on_batch = on_batch
        #: SELF-TEST only (module docstring): break one batch on purpose.
        self.sabotage = sabotage
        self.real_batches = 0  # committed batches with a real row (counted while armed)
        self.sabotaged_batch: int | None = None
        self.commits = 0
        self.query_id: str | None = None
        self.last_committed: int | None = None
        self.skipped: list[int] = []
        self._producer: Producer | None = None
        self._delivery_error: str | None = None
        self.last_error: str | None = None

    # ---- setup ---------------------------------------------------------------------------

    def _open(self) -> None:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "transactional.id": self.transactional_id,
            # Java's partitioner, so an output lands on the partition of its inputs (and the
            # a1 sink's choice): the validator's latency needs both on one broker.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "transaction.timeout.ms": 60_000,
            # An output row carries its inputs' IDs: as large as the topic takes.
            "message.max.bytes": schema.MAX_RECORD_BYTES,
            **self.producer_conf,
        }
        t0 = time.monotonic()
        producer = Producer(conf)
        # Fences an older incarnation and settles its open transaction; must happen before
        # the markers are read, or a commit still in flight could be missed.
        producer.init_transactions(COMMIT_RETRY_S)
        self.query_id = _checkpoint_query_id(self.checkpoint)
        self.last_committed = last_committed_batch(
            self.bootstrap, self.query_name, self.query_id, self.marker_topic,
            client_conf=self.producer_conf)
        self._producer = producer
        log.info("transactional sink %s ready; last committed batch %s",
                 self.transactional_id, self.last_committed)
        self._report({"event": "sink_open", "transactional_id": self.transactional_id,
                      "last_committed": self.last_committed,
                      "open_s": round(time.monotonic() - t0, 3)})

    def close(self) -> None:
        """Drop the producer (nothing is open between batches)."""
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None

    # ---- per batch -----------------------------------------------------------------------

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        try:
            self._run_batch(df, batch_id)
        except Exception as exc:
            # Spark wraps this in a long Py4J traceback; keep a one-line reason for the driver.
            self.last_error = f"batch {batch_id}: {type(exc).__name__}: {exc}"
            if self._delivery_error:
                self.last_error += f" (first failed delivery: {self._delivery_error})"
            self._report({"event": "sink_error", "batch_id": batch_id, "error": self.last_error})
            raise

    def _run_batch(self, df: DataFrame, batch_id: int) -> None:
        if self._producer is None:
            self._open()
        assert self._producer is not None and self.last_committed is not None
        # Run the batch even when it will be skipped: executing it is what feeds Spark the
        # batch's max event time, so the watermark after a re-run equals the original one
        # (a skipped, never-executed batch would leave it lower for one batch).
        rows = df.select("key", "value").collect()
        if batch_id <= self.last_committed:
            # Already in Kafka: Spark re-runs it because its commit log lags our marker.
            self.skipped.append(batch_id)
            self._report({"batch_id": batch_id, "rows": len(rows), "skipped": True})
            return
        if not rows:
            return  # nothing to make visible; a re-run would be empty too
        t0 = time.monotonic()
        pairs = [(r["key"], r["value"]) for r in rows]
        to_write, real, sabotage_event = self._sabotage_plan(batch_id, pairs)
        if sabotage_event is not None:
            self._report(sabotage_event)  # before the commit: recorded even if we die then
        self._write(batch_id, to_write,
                    sabotage=str(self.sabotage) if sabotage_event is not None else None)
        self.last_committed = batch_id
        self.commits += 1
        # Counted only once the batch is committed: a failed, re-run batch counts once.
        self.real_batches += int(real)
        report: dict[str, Any] = {"batch_id": batch_id, "rows": len(rows), "skipped": False,
                                  "write_ms": round((time.monotonic() - t0) * 1000, 1)}
        if sabotage_event is not None:
            self.sabotaged_batch = batch_id
            report.update(sabotage=sabotage_event["kind"], written=len(to_write))
        self._report(report)

    def _sabotage_plan(self, batch_id: int, pairs: list[tuple[str | None, str]]
                       ) -> tuple[list[tuple[str | None, str]], bool, dict[str, Any] | None]:
        """SELF-TEST only: (rows to write, whether the batch has a real row, the sabotage
        event or None). Changes no state; ``_run_batch`` counts once the commit succeeded.

        Without an armed sabotage (none given, or already done) the rows pass unchanged
        and nothing is parsed. A row is *real* when its ``"ids"`` hold an ID >= 0; only
        real rows are dropped or duplicated, rows with negative IDs alone are kept as is.
        """
        if self.sabotage is None or self.sabotaged_batch is not None:
            return pairs, False, None
        parsed = [_row_ids(value) for _, value in pairs]
        hit = [bool(real) for real, _ in parsed]
        if not any(hit):
            return pairs, False, None
        nth = self.real_batches + 1
        if nth != self.sabotage.nth:
            return pairs, True, None
        if self.sabotage.kind == "drop":
            out = [pair for pair, h in zip(pairs, hit, strict=True) if not h]
        else:  # dup: every real row once more, after the batch, in the same transaction
            out = pairs + [pair for pair, h in zip(pairs, hit, strict=True) if h]
        event = {
            "event": "sabotage", "kind": self.sabotage.kind, "batch_id": batch_id, "nth": nth,
            "rows": sum(hit), "ids": [i for real, _ in parsed for i in real],
            "negative_ids": sum(neg for real, neg in parsed if real),
        }
        log.warning("SABOTAGE (self-test): %s batch %s, %d rows, %d real IDs",
                    self.sabotage, batch_id, event["rows"], len(event["ids"]))
        return out, True, event

    def _report(self, info: dict[str, Any]) -> None:
        """Hand a bookkeeping record (``event`` defaults to ``sink_batch``) to ``on_batch``."""
        if self.on_batch is not None:
            self.on_batch(info)

    def _write(self, batch_id: int, rows: list[tuple[str | None, str]],
               sabotage: str | None = None) -> None:
        producer = self._producer
        assert producer is not None
        fields: dict[str, Any] = {
            "batch_id": batch_id, "query_id": self.query_id, "rows": len(rows),
            "committed_at": now_ms(),
        }
        if sabotage is not None:  # self-test: the marker says this batch was broken on purpose
            fields["sabotage"] = sabotage
        marker = json.dumps(fields)
        producer.begin_transaction()
        try:
            for key, value in rows:
                self._produce(producer, self.topic, key.encode() if key else None,
                              value.encode())
            self._produce(producer, self.marker_topic, self.query_name.encode(),
                          marker.encode())
            self._commit(producer)
        except BaseException as exc:
            self._abort(producer, exc)
            raise

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        """Remember the first failed delivery: commit_transaction only says "n failed"."""
        if err is not None and self._delivery_error is None:
            self._delivery_error = f"{msg.topic()}: {err.str()}"

    def _produce(self, producer: Producer, topic: str, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                return
            except BufferError:  # local queue full: let deliveries drain, then retry
                producer.poll(0.1)

    @staticmethod
    def _commit(producer: Producer) -> None:
        """commit_transaction, retried while librdkafka calls the error retriable."""
        deadline = time.monotonic() + COMMIT_RETRY_S
        while True:
            try:
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue
                raise

    def _abort(self, producer: Producer, cause: BaseException) -> None:
        """Abort so nothing of the batch becomes visible; a fatal producer is dropped."""
        try:
            producer.abort_transaction(30)
        except KafkaException as exc:
            log.error("aborting the transaction after %r failed too: %s", cause, exc)
        self._producer = None  # re-created (and re-fenced) if this process goes on
