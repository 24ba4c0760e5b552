"""Where generated events go: JSON-lines files, Kafka, or nowhere (benchmarks).

A *sink* is a small picklable description that crosses into each producer process; there it
:meth:`~Sink.open`\\ s a *writer* that takes chunks of events. The writer's accounting is what
the report trusts: an event counts as delivered only once the file write returned or Kafka
acknowledged it (acks=all); a failed delivery is recorded (count, sample ids, error text) and
never counted as delivered.

JSON is built for whole chunks at once with numpy: events whose fields have the same widths
share one byte matrix, filled column by column; Kafka values come out of it as one bytes
object per event with no per-record Python step (``bench_generator`` compares it with
per-record formatting).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from pgval.core.errors import EnvironmentFailure
from pgval.core.files import create_public, open_public
from pgval.core.schema import GET, POST, Topics, resource_name
from pgval.datasets.models import InputModel, PreparedModel

if TYPE_CHECKING:
    from pgval.datasets.generator import EventBatch, GeneratorConfig, ProducerReport

log = logging.getLogger(__name__)
# librdkafka's own log lines ("Connect to ... failed: Connection refused") come here; without
# a handler Python's last-resort handler printed them into the run's progress display
# whenever a broker was down (broker-crash). They are expected then, and what matters is
# counted: each undelivered event by its delivery report, the run's completeness by the
# read-back (as pgval's other clients: pgval.kafka.client.quiet_conf).
log.addHandler(logging.NullHandler())

#: Distinct error texts kept per producer; further ones are counted under one key.
MAX_ERROR_KINDS = 20
_OTHER_ERRORS = "(other errors)"


# --------------------------------------------------------------------------------------------
# Interfaces
# --------------------------------------------------------------------------------------------


@dataclass
class SinkResult:
    """Final accounting of one writer."""

    delivered: int
    failed: int = 0
    failed_ids: list[int] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


class SinkWriter(Protocol):
    """Per-producer writer; lives in the producer process."""

    @property
    def delivered(self) -> int:
        """Events known to be in the sink (exact once closed, never more than the truth)."""
        ...

    @property
    def failed(self) -> int:
        """Events the sink refused (never also counted as delivered)."""
        ...

    def write(
        self,
        chunk: EventBatch,
        event_ts: int | np.ndarray,
        emit_ms: int,
        should_stop: Callable[[], bool],
    ) -> int:
        """Hand over ``chunk``; returns how many were taken (fewer only if a stop came)."""
        ...

    def wait(self, seconds: float) -> None:
        """Idle for ``seconds`` while doing background work (Kafka delivery reports)."""
        ...

    def close(self, timeout_s: float | None) -> SinkResult:
        """Flush (waiting at most ``timeout_s``), release resources and account."""
        ...


class Sink(Protocol):
    """Picklable description of a destination, shared by all producers of a run."""

    def describe(self) -> str: ...

    def open(self, cfg: GeneratorConfig, producer_index: int) -> SinkWriter: ...

    def finalize(self, cfg: GeneratorConfig, reports: Sequence[ProducerReport]) -> None:
        """Parent-side step once every producer has finished (e.g. merge files)."""
        ...


# --------------------------------------------------------------------------------------------
# Vectorised JSON encoding
# --------------------------------------------------------------------------------------------

_PREFIX = b'{"id":'
_INGRESS_KEY = b',"ingress_ts":'
#: 1, 10, ..., 10**18: a non-negative int64 has searchsorted(_POW10, v, "right") digits.
_POW10 = 10 ** np.arange(19, dtype=np.int64)


@functools.lru_cache(maxsize=16)
def _middles(resources: int) -> tuple[np.ndarray, np.ndarray]:
    """``,"type":"T","resource":"NAME","event_ts":`` for code ``is_post * resources + r``:
    a NUL-padded byte matrix and each entry's length (the part between id and event time)."""
    entries = [b',"type":"%s","resource":"%s","event_ts":' % (kind.encode(),
                                                               resource_name(r).encode())
               for kind in (GET, POST) for r in range(resources)]
    width = max(len(e) for e in entries)
    table = np.zeros((len(entries), width), dtype=np.uint8)
    for i, entry in enumerate(entries):
        table[i, : len(entry)] = np.frombuffer(entry, np.uint8)
    return table, np.array([len(e) for e in entries], dtype=np.int64)


@functools.lru_cache(maxsize=16)
def resource_keys(resources: int) -> list[bytes]:
    """Kafka record keys (UTF-8 resource names) by resource index."""
    return [resource_name(i).encode() for i in range(resources)]


def _digits(values: np.ndarray) -> np.ndarray:
    """Decimal digits of each non-negative int64."""
    return np.maximum(np.searchsorted(_POW10, values, side="right"), 1)


def _ints(value: int | np.ndarray, n: int) -> bytes | tuple[np.ndarray, np.ndarray]:
    """One integer for the whole chunk (its digits, constant) or one per event."""
    if not isinstance(value, np.ndarray):
        if value < 0:
            raise ValueError("only non-negative integers are encoded")
        return b"%d" % value
    if value.shape != (n,):
        raise ValueError("a per-event array does not match the chunk")
    value = value.astype(np.int64, copy=False)
    if n and int(value.min()) < 0:
        raise ValueError("only non-negative integers are encoded")
    return value, _digits(value)


# A segment of every row: constant bytes, per-event integers (values, digit counts) or
# per-event table rows (table, lengths, row codes).
_Segment = bytes | tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]


def _groups(widths: list[np.ndarray], n: int) -> list[np.ndarray | None]:
    """Row indices of each combination of segment widths (None: all rows, in order)."""
    groups: list[np.ndarray | None] = [None]
    for w in widths:
        present = np.flatnonzero(np.bincount(w))
        if len(present) == 1:
            continue
        split: list[np.ndarray | None] = []
        for g in groups:
            wg = w if g is None else w[g]
            for width in present:
                sel = np.flatnonzero(wg == width)
                if len(sel):
                    split.append(sel if g is None else g[sel])
        groups = split
    return groups


def _encode_rows(chunk: EventBatch, event_ts: int | np.ndarray,
                 ingress_ts: int | np.ndarray | None, end: bytes) -> np.ndarray:
    """Each event's compact JSON as one item of a fixed-width bytes array (``S<width>``),
    left-aligned and NUL-padded, so ``tolist()`` gives every record's exact bytes.

    Rows whose variable parts (id digits, type and resource, time digits) have the same
    widths have every field at the same column, so each such group is filled column by
    column with no per-record step; a chunk has only a handful of groups.
    """
    n = len(chunk)
    table, lengths = _middles(chunk.resources)
    code = chunk.resource + chunk.resources * chunk.is_post.astype(np.intp)
    segments: list[_Segment] = [_PREFIX, _ints(chunk.ids, n), (table, lengths[code], code),
                                _ints(event_ts, n)]
    if ingress_ts is not None:
        segments += [_INGRESS_KEY, _ints(ingress_ts, n)]
    segments.append(end)
    merged: list[_Segment] = []  # adjacent constants joined
    for seg in segments:
        if isinstance(seg, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] = merged[-1] + seg
        else:
            merged.append(seg)
    variable = [seg[1] for seg in merged if not isinstance(seg, bytes)]
    groups = _groups(variable, n)
    rows: list[tuple[np.ndarray | None, np.ndarray]] = []
    for g in groups:
        first = 0 if g is None else int(g[0])
        m = n if g is None else len(g)
        width = sum(len(s) if isinstance(s, bytes) else int(s[1][first]) for s in merged)
        out = np.empty((m, width), dtype=np.uint8)
        col = 0
        for seg in merged:
            if isinstance(seg, bytes):
                out[:, col : col + len(seg)] = np.frombuffer(seg, np.uint8)
                col += len(seg)
            elif len(seg) == 2:
                values, digits = seg
                w = int(digits[first])
                v = values if g is None else values[g]
                for k in range(w - 1, -1, -1):
                    q = v // 10
                    out[:, col + k] = v - q * 10 + 48
                    v = q
                col += w
            else:
                tab, tab_len, codes = seg
                w = int(tab_len[first])
                out[:, col : col + w] = tab[codes if g is None else codes[g], :w]
                col += w
        rows.append((g, out.view(f"S{width}").ravel()))
    if len(rows) == 1:
        return rows[0][1]
    result = np.empty(n, dtype=f"S{max(r.dtype.itemsize for _, r in rows)}")
    for g, r in rows:
        result[g] = r
    return result


def encode_json_lines(
    chunk: EventBatch,
    event_ts: int | np.ndarray,
    ingress_ts: int | np.ndarray | None = None,
) -> bytes:
    """Compact JSON lines ``{"id","type","resource","event_ts"[,"ingress_ts"]}`` + ``\\n``.

    ``event_ts``/``ingress_ts`` are one value for the whole chunk or one per event. The output
    equals ``orjson.dumps(record) + b"\\n"`` per event, in order (tests check that).
    """
    if len(chunk) == 0:
        return b""
    rows = _encode_rows(chunk, event_ts, ingress_ts, b"}\n")
    flat = rows.view(np.uint8)
    return flat[flat != 0].tobytes()  # drop the padding (JSON text holds no NUL)


def encode_values(chunk: EventBatch, event_ts: int | np.ndarray) -> list[bytes]:
    """Kafka record values (compact JSON without ingress time), one per event."""
    if len(chunk) == 0:
        return []
    return _encode_rows(chunk, event_ts, None, b"}").tolist()


def _count_error(errors: dict[str, int], key: str) -> None:
    if key in errors or len(errors) < MAX_ERROR_KINDS:
        errors[key] = errors.get(key, 0) + 1
    else:
        errors[_OTHER_ERRORS] = errors.get(_OTHER_ERRORS, 0) + 1


# --------------------------------------------------------------------------------------------
# Null sink (benchmarks of generation and encoding alone)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NullSink:
    """Discards events (after encoding them, unless ``encode=False``)."""

    encode: bool = True

    def describe(self) -> str:
        return "null"

    def open(self, cfg: GeneratorConfig, producer_index: int) -> SinkWriter:
        return _NullWriter(self.encode)

    def finalize(self, cfg: GeneratorConfig, reports: Sequence[ProducerReport]) -> None:
        return None


class _NullWriter:
    def __init__(self, encode: bool) -> None:
        self.encode = encode
        self.delivered = 0
        self.failed = 0
        self.bytes = 0

    def write(self, chunk: EventBatch, event_ts: int | np.ndarray, emit_ms: int,
              should_stop: Callable[[], bool]) -> int:
        if self.encode:
            self.bytes += len(encode_json_lines(chunk, event_ts, emit_ms))
        self.delivered += len(chunk)
        return len(chunk)

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self, timeout_s: float | None) -> SinkResult:
        return SinkResult(delivered=self.delivered)


# --------------------------------------------------------------------------------------------
# JSON-lines files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileSink:
    """JSON lines ``{"id","type","resource","event_ts","ingress_ts"}`` for ``pgval check --inputs``.

    One line per event, so the file can be fed straight to the validator as the input set.

    ``ingress_ts`` is the wall clock (ms, non-decreasing per producer) when the line was
    written, like a broker's LogAppendTime; ``ingress="event"`` copies ``event_ts`` instead,
    which together with synthetic event time and a fixed ``start_ts_ms`` makes the file
    byte-for-byte reproducible.

    ``merge=True``: one file at ``path`` (with several producers each writes
    ``<path>.partNNN`` and the parent concatenates them in producer order at the end).
    ``merge=False``: ``path`` is a directory with ``producer-NNN.jsonl`` per producer.
    """

    path: Path
    merge: bool = True
    ingress: Literal["wall", "event"] = "wall"
    fsync: bool = False
    buffer_bytes: int = 1 << 20

    def describe(self) -> str:
        return f"file {self.path}"

    def part_path(self, producer_index: int, producers: int) -> Path:
        path = Path(self.path)
        if not self.merge:
            return path / f"producer-{producer_index:03d}.jsonl"
        if producers == 1:
            return path
        return path.with_name(f"{path.name}.part{producer_index:03d}")

    def output_paths(self, producers: int) -> list[Path]:
        """The files that hold the events once the run is finished."""
        if self.merge:
            return [Path(self.path)]
        return [self.part_path(i, producers) for i in range(producers)]

    def open(self, cfg: GeneratorConfig, producer_index: int) -> SinkWriter:
        part = self.part_path(producer_index, cfg.producers)
        part.parent.mkdir(parents=True, exist_ok=True)
        return _FileWriter(part, self.ingress, self.fsync, self.buffer_bytes)

    def finalize(self, cfg: GeneratorConfig, reports: Sequence[ProducerReport]) -> None:
        if not self.merge or cfg.producers == 1:
            return
        target = Path(self.path)
        with open_public(target) as out:  # replaced whole, never through a link
            for i in range(cfg.producers):
                part = self.part_path(i, cfg.producers)
                if part.exists():
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 22)
            if self.fsync:
                out.flush()
                os.fsync(out.fileno())
        for i in range(cfg.producers):
            self.part_path(i, cfg.producers).unlink(missing_ok=True)


class _FileWriter:
    def __init__(self, path: Path, ingress: str, fsync: bool, buffer_bytes: int) -> None:
        self.path = path
        self.ingress = ingress
        self.fsync = fsync
        self.delivered = 0
        self.failed = 0
        self._file = create_public(path, buffering=buffer_bytes)  # closed in close()

    def write(self, chunk: EventBatch, event_ts: int | np.ndarray, emit_ms: int,
              should_stop: Callable[[], bool]) -> int:
        ingress = emit_ms if self.ingress == "wall" else event_ts
        self._file.write(encode_json_lines(chunk, event_ts, ingress))
        self.delivered += len(chunk)
        return len(chunk)

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self, timeout_s: float | None) -> SinkResult:
        if not self._file.closed:
            self._file.flush()
            if self.fsync:
                os.fsync(self._file.fileno())
            self._file.close()
        return SinkResult(delivered=self.delivered)


# --------------------------------------------------------------------------------------------
# Kafka
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaSink:
    """Kafka topics ``topics.get``/``topics.post``; key = resource name, value = compact JSON.

    Idempotent producer with ``acks=all``: an event counts as delivered only when Kafka
    acknowledged it. Failed deliveries are counted with a sample of ids and the error texts.
    After the flush timeout, whatever is still outstanding is reported as undelivered (it may
    or may not have reached the broker: read the topics to know). The ingress time is the
    broker's LogAppendTime, so no timestamp is set here. ``topics`` names the run's topics (a
    run on a shared cluster has its own prefix); ``config`` overrides any librdkafka setting.
    """

    bootstrap_servers: str
    topics: Topics = field(default_factory=Topics)
    linger_ms: int = 10
    compression: str = "lz4"
    batch_bytes: int = 1_000_000
    message_timeout_ms: int = 300_000
    flush_timeout_s: float = 30.0
    max_failed_ids: int = 100
    config: dict[str, Any] = field(default_factory=dict)
    #: The user's input model (:mod:`pgval.datasets.models`) and the seed of its draws;
    #: None: the web log. Its first input goes to ``topics.get``, its second to ``post``.
    model: InputModel | None = None
    model_seed: int = 0

    def describe(self) -> str:
        return f"kafka {self.bootstrap_servers} ({self.topics.get}/{self.topics.post})"

    def producer_config(self, producer_index: int) -> dict[str, Any]:
        """librdkafka settings of producer ``producer_index`` (before callbacks are added)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": f"pgval-generator-{producer_index}",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": self.linger_ms,
            "batch.size": self.batch_bytes,
            "batch.num.messages": 100_000,
            "compression.type": self.compression,
            "message.timeout.ms": self.message_timeout_ms,
            "queue.buffering.max.messages": 1_000_000,
            # Same key -> partition mapping as the Java clients (Spark, the validator).
            "partitioner": "murmur2_random",
        }
        conf.update(self.config)
        return conf

    def open(self, cfg: GeneratorConfig, producer_index: int) -> SinkWriter:
        return _KafkaWriter(self, cfg, producer_index)

    def finalize(self, cfg: GeneratorConfig, reports: Sequence[ProducerReport]) -> None:
        return None


class KafkaFatalError(EnvironmentFailure):
    """The producer hit a fatal error (e.g. idempotence broken) and cannot go on."""


#: After a flush time-out, how long the purged messages' reports are waited for.
_PURGE_WAIT_S = 5.0


class _KafkaWriter:
    """One producer's Kafka client and its exact delivery accounting.

    Why there is no Python call per acknowledged message: librdkafka reports every produced
    message exactly once, acknowledged or failed, and a message stays in the client's queue
    (``len(producer)``) until its report has been served by ``poll``/``flush``. With
    ``delivery.report.only.error`` the client skips the Python callback for acknowledged
    messages (it still serves their reports in C), so the callback sees failures only. Hence:

    * while running, ``delivered = sent - failed - len(producer)`` is a lower bound (the queue
      length also counts reports and events not yet served);
    * once the queue is empty every sent message that did not fail was acknowledged, so
      ``delivered = sent - failed - undelivered`` is exact, where ``undelivered`` counts the
      messages purged after the flush time-out (their reports say so) plus any message whose
      report never came.
    """

    def __init__(self, sink: KafkaSink, cfg: GeneratorConfig, producer_index: int) -> None:
        from confluent_kafka import KafkaError, Producer  # file sinks need no librdkafka

        self.sink = sink
        self.sent = 0
        self.failed = 0
        self.undelivered = 0
        self.failed_ids: list[int] = []
        self.errors: dict[str, int] = {}
        self._client_error_keys: dict[str, str] = {}
        self._fatal: str | None = None
        self._closing = False
        self._final_delivered: int | None = None
        self._purged_codes = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
        # Per-event keys and topics come from these tables by numpy indexing (no Python loop).
        self._keys = np.array(resource_keys(cfg.resources), dtype=object)
        self._topics = np.array([sink.topics.get, sink.topics.post], dtype=object)
        self._model = (None if sink.model is None
                       else PreparedModel(sink.model, sink.model_seed))
        conf = sink.producer_config(producer_index)
        conf["delivery.report.only.error"] = True
        conf["on_delivery"] = self._on_failure
        conf["error_cb"] = self._on_error
        conf.setdefault("logger", log)
        self._producer = Producer(conf)

    @property
    def delivered(self) -> int:
        """Acknowledged events: exact after :meth:`close`, a lower bound before."""
        if self._final_delivered is not None:
            return self._final_delivered
        return max(0, self.sent - self.failed - len(self._producer))

    def _on_failure(self, err: Any, msg: Any) -> None:
        if self._closing and err.code() in self._purged_codes:
            self.undelivered += 1  # purged after the flush time-out: no answer, not failed
            return
        self.failed += 1
        _count_error(self.errors, f"delivery {err.name()}: {err.str()}")
        if len(self.failed_ids) < self.sink.max_failed_ids:
            value = msg.value() or b""
            with contextlib.suppress(ValueError):
                self.failed_ids.append(int(value[6 : value.index(b",")]))

    def _on_error(self, err: Any) -> None:
        # Client-level errors (e.g. all brokers down): kept by kind, first text as example.
        key = self._client_error_keys.get(err.name())
        if key is None:
            key = f"client {err.name()}: {err.str()}"
            self._client_error_keys[err.name()] = key
        _count_error(self.errors, key)
        if err.fatal():
            self._fatal = f"{err.name()}: {err.str()}"

    def write(self, chunk: EventBatch, event_ts: int | np.ndarray, emit_ms: int,
              should_stop: Callable[[], bool]) -> int:
        if self._fatal is not None:
            raise KafkaFatalError(f"Kafka producer failed fatally: {self._fatal}")
        if self._model is not None:
            slots, keys, values = self._model.records(chunk.ids, event_ts)
            topics = self._topics[slots].tolist()
        else:
            values = encode_values(chunk, event_ts)
            topics = self._topics[chunk.is_post.astype(np.intp)].tolist()
            keys = self._keys[chunk.resource].tolist()
        produce = self._producer.produce
        n = len(values)
        done = 0
        try:
            while done < n:
                rest = iter(values[done:] if done else values)
                try:
                    # The one unavoidable call per event, driven from C by map(), not by a
                    # Python loop.
                    deque(map(produce, topics[done:] if done else topics, rest,
                              keys[done:] if done else keys), maxlen=0)
                    done = n
                except BufferError:
                    # Local queue full. map() had taken the refused event from ``rest`` too,
                    # so it is the one before what is left. Serve reports until there is
                    # room; never drop.
                    done = n - operator.length_hint(rest) - 1
                    self._producer.poll(0.05)
                    if should_stop() or self._fatal is not None:
                        break
                except BaseException:
                    done = n - operator.length_hint(rest) - 1  # what was produced counts
                    raise
        finally:
            self.sent += done
        self._producer.poll(0)
        return done

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._producer.poll(remaining)

    def close(self, timeout_s: float | None) -> SinkResult:
        timeout = self.sink.flush_timeout_s if timeout_s is None else timeout_s
        if self._final_delivered is None:
            producer = self._producer
            outstanding = producer.flush(timeout)
            if outstanding:
                log.warning("%d Kafka messages still undelivered after %.1f s flush",
                            outstanding, timeout)
                self._closing = True
                producer.purge(in_queue=True, in_flight=True, blocking=False)
                deadline = time.monotonic() + _PURGE_WAIT_S
                while len(producer) and time.monotonic() < deadline:
                    producer.poll(0.1)
                # A message whose report never came is undelivered too (the queue length
                # may also count client events: then delivered is a lower bound).
                self.undelivered += len(producer)
            self._final_delivered = max(0, self.sent - self.failed - self.undelivered)
        return SinkResult(
            delivered=self._final_delivered,
            failed=self.failed,
            failed_ids=list(self.failed_ids),
            errors=dict(self.errors),
        )
