"""Where generated events go: JSON-lines files, Kafka, or nowhere (benchmarks).

A *sink* is a small picklable description that crosses into each producer process; there it
:meth:`~Sink.open`\\ s a *writer* that takes chunks of events. The writer's accounting is what
the report trusts: an event counts as delivered only once the file write returned or Kafka
acknowledged it (acks=all); a failed delivery is recorded (count, sample ids, error text) and
never counted as delivered.

JSON is built for whole chunks at once with numpy (a fixed-width byte matrix with NUL padding,
compacted by dropping the NULs): about twice as fast as per-record formatting, see
``bench_generator``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from pgval.schema import GET_TOPIC, POST_TOPIC, resource_name

if TYPE_CHECKING:
    from pgval.datasets.generator import EventBatch, GeneratorConfig, ProducerReport

log = logging.getLogger(__name__)

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

    delivered: int
    failed: int

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

_PREFIX = np.frombuffer(b'{"id":', np.uint8)
_TYPE_KEY = np.frombuffer(b',"type":"', np.uint8)
_RESOURCE_KEY = np.frombuffer(b'","resource":"', np.uint8)
_EVENT_TS_KEY = np.frombuffer(b'","event_ts":', np.uint8)
_INGRESS_KEY = np.frombuffer(b',"ingress_ts":', np.uint8)
_END = np.frombuffer(b"}\n", np.uint8)
#: "GET" / "POST", NUL padded to one width; row index = is_post.
_TYPES = np.array([list(b"GET\0"), list(b"POST")], dtype=np.uint8)
_TEN = np.uint64(10)
_ZERO_CHAR = np.uint8(ord("0"))


@functools.lru_cache(maxsize=16)
def _name_table(resources: int) -> np.ndarray:
    """Resource names as a (resources, width) NUL-padded byte matrix."""
    names = [resource_name(i).encode() for i in range(resources)]
    width = max(len(n) for n in names)
    table = np.zeros((resources, width), dtype=np.uint8)
    for i, name in enumerate(names):
        table[i, : len(name)] = np.frombuffer(name, np.uint8)
    return table


@functools.lru_cache(maxsize=16)
def resource_keys(resources: int) -> list[bytes]:
    """Kafka record keys (UTF-8 resource names) by resource index."""
    return [resource_name(i).encode() for i in range(resources)]


def _digit_count(value: int) -> int:
    return len(str(value))


def _put(out: np.ndarray, pos: int, part: np.ndarray) -> int:
    out[:, pos : pos + part.shape[-1]] = part
    return pos + part.shape[-1]


def _put_int(out: np.ndarray, pos: int, value: int | np.ndarray) -> int:
    """Decimal digits of a scalar (one constant) or per-row non-negative ints, NUL left-padded."""
    if not isinstance(value, np.ndarray):
        return _put(out, pos, np.frombuffer(b"%d" % value, np.uint8))
    if value.shape[0] and int(value.min()) < 0:
        raise ValueError("only non-negative integers are encoded")
    width = _digit_count(int(value.max())) if value.shape[0] else 1
    v = value.astype(np.uint64)
    for k in range(width):
        q = v // _TEN
        digit = (v - q * _TEN).astype(np.uint8)
        digit += _ZERO_CHAR
        if k:
            digit[v == 0] = 0  # leading zero -> NUL, dropped when compacting
        out[:, pos + width - 1 - k] = digit
        v = q
    return pos + width


def _int_width(value: int | np.ndarray) -> int:
    if isinstance(value, np.ndarray):
        return _digit_count(int(value.max())) if value.shape[0] else 1
    return _digit_count(value)


def encode_json_lines(
    chunk: EventBatch,
    event_ts: int | np.ndarray,
    ingress_ts: int | np.ndarray | None = None,
) -> bytes:
    """Compact JSON lines ``{"id","type","resource","event_ts"[,"ingress_ts"]}`` + ``\\n``.

    ``event_ts``/``ingress_ts`` are one value for the whole chunk or one per event. The output
    equals ``orjson.dumps(record) + b"\\n"`` per event, in order (tests check that).
    """
    n = len(chunk)
    if n == 0:
        return b""
    if isinstance(event_ts, np.ndarray) and event_ts.shape[0] == 0:
        raise ValueError("event_ts array does not match the chunk")
    names = _name_table(chunk.resources)
    width = (
        len(_PREFIX) + _int_width(chunk.ids) + len(_TYPE_KEY) + _TYPES.shape[1]
        + len(_RESOURCE_KEY) + names.shape[1] + len(_EVENT_TS_KEY) + _int_width(event_ts)
        + (len(_INGRESS_KEY) + _int_width(ingress_ts) if ingress_ts is not None else 0)
        + len(_END)
    )
    out = np.empty((n, width), dtype=np.uint8)
    pos = _put(out, 0, _PREFIX)
    pos = _put_int(out, pos, chunk.ids)
    pos = _put(out, pos, _TYPE_KEY)
    pos = _put(out, pos, _TYPES[chunk.is_post.astype(np.intp)])
    pos = _put(out, pos, _RESOURCE_KEY)
    pos = _put(out, pos, names[chunk.resource])
    pos = _put(out, pos, _EVENT_TS_KEY)
    pos = _put_int(out, pos, event_ts)
    if ingress_ts is not None:
        pos = _put(out, pos, _INGRESS_KEY)
        pos = _put_int(out, pos, ingress_ts)
    pos = _put(out, pos, _END)
    assert pos == width
    flat = out.reshape(-1)
    return flat[flat != 0].tobytes()


def encode_values(chunk: EventBatch, event_ts: int | np.ndarray) -> list[bytes]:
    """Kafka record values (compact JSON without ingress time), one per event."""
    if len(chunk) == 0:
        return []
    return encode_json_lines(chunk, event_ts).split(b"\n")[:-1]


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
        tmp = target.with_name(f"{target.name}.merging")
        with open(tmp, "wb") as out:
            for i in range(cfg.producers):
                part = self.part_path(i, cfg.producers)
                if part.exists():
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 22)
            if self.fsync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, target)
        for i in range(cfg.producers):
            self.part_path(i, cfg.producers).unlink(missing_ok=True)


class _FileWriter:
    def __init__(self, path: Path, ingress: str, fsync: bool, buffer_bytes: int) -> None:
        self.path = path
        self.ingress = ingress
        self.fsync = fsync
        self.delivered = 0
        self.failed = 0
        self._file = open(path, "wb", buffering=buffer_bytes)  # noqa: SIM115 - closed in close()

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
    """Kafka topics ``get``/``post``; key = resource name, value = compact JSON event.

    Idempotent producer with ``acks=all``: an event counts as delivered only when its delivery
    report says so. Failed reports are counted with a sample of ids and the error texts. After
    the flush timeout, whatever is still outstanding is reported as undelivered (it may or may
    not have reached the broker: read the topics to know). The ingress time is the broker's
    LogAppendTime, so no timestamp is set here. ``config`` overrides any librdkafka setting.
    """

    bootstrap_servers: str
    get_topic: str = GET_TOPIC
    post_topic: str = POST_TOPIC
    linger_ms: int = 10
    compression: str = "lz4"
    batch_bytes: int = 1_000_000
    message_timeout_ms: int = 300_000
    flush_timeout_s: float = 30.0
    max_failed_ids: int = 100
    config: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"kafka {self.bootstrap_servers} ({self.get_topic}/{self.post_topic})"

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


class KafkaFatalError(RuntimeError):
    """The producer hit a fatal error (e.g. idempotence broken) and cannot go on."""


class _KafkaWriter:
    def __init__(self, sink: KafkaSink, cfg: GeneratorConfig, producer_index: int) -> None:
        from confluent_kafka import Producer  # imported here: file sinks need no librdkafka

        self.sink = sink
        self.delivered = 0
        self.failed = 0
        self.failed_ids: list[int] = []
        self.errors: dict[str, int] = {}
        self._client_error_keys: dict[str, str] = {}
        self._fatal: str | None = None
        self._closed = False
        self._keys = resource_keys(cfg.resources)
        self._topics = (sink.get_topic, sink.post_topic)
        conf = sink.producer_config(producer_index)
        conf["on_delivery"] = self._on_delivery
        conf["error_cb"] = self._on_error
        conf.setdefault("logger", log)
        self._producer = Producer(conf)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
            return
        if self._closed:
            return  # purged after the flush timeout: reported as undelivered, not failed
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
        values = encode_values(chunk, event_ts)
        resources = chunk.resource.tolist()
        posts = chunk.is_post.tolist()
        keys = self._keys
        topics = self._topics
        producer = self._producer
        produce = producer.produce
        n = len(values)
        i = 0
        while i < n:
            try:
                while i < n:
                    produce(topics[posts[i]], values[i], keys[resources[i]])
                    i += 1
            except BufferError:
                # Local queue full: serve delivery reports until there is room; never drop.
                producer.poll(0.05)
                if should_stop() or self._fatal is not None:
                    break
        producer.poll(0)
        return i

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._producer.poll(remaining)

    def close(self, timeout_s: float | None) -> SinkResult:
        timeout = self.sink.flush_timeout_s if timeout_s is None else timeout_s
        if not self._closed:
            outstanding = self._producer.flush(timeout)
            self._closed = True
            if outstanding:
                log.warning("%d Kafka messages still undelivered after %.1f s flush",
                            outstanding, timeout)
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._producer.poll(0)
        return SinkResult(
            delivered=self.delivered,
            failed=self.failed,
            failed_ids=list(self.failed_ids),
            errors=dict(self.errors),
        )
