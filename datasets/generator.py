"""Synthetic web-log generator: deterministic events, paced emission, one OS process per producer.

What an event is
    ``id`` (int64), ``type`` ("GET" | "POST"), ``resource`` (``schema.resource_name(i)``,
    ``0 <= i < resources``) and ``event_ts`` (ms). The validator identifies inputs by ``id``, so
    ids must be unique across all producers of a run:

        id = producer_index + producers * seq        (seq = 0, 1, 2, ... within one producer)

    hence ``producer = id % producers`` and ``seq = id // producers``.

Why the sequence is reproducible
    ``type`` and ``resource`` are a pure function of ``(seed, producer_index, seq)`` (a
    counter-based splitmix64 hash, vectorised with numpy), so the same seed gives exactly the
    same events per producer whatever the batch size, rate or timing. Resources come from a
    seeded permutation of ``range(resources)`` per block of ``resources`` consecutive events, so
    at every point of a producer's stream the counts per resource differ by at most 1. Types are
    independent draws with P(GET) = ``get_share``.

Event time
    ``event_time="wall"``: the wall clock (ms) when the event is handed to the sink, clamped to
    be non-decreasing per producer. ``event_time="synthetic"``: ``start_ts_ms + floor(seq *
    1000 / r)`` with ``r`` the per-producer synthetic rate: fully deterministic, for datasets.

Processes
    :class:`ProducerGroup` starts one spawn-context process per producer (own session, so a
    terminal Ctrl-C reaches only the parent, which then stops the children cleanly), releases
    them at one common instant, exposes live counters and a thread-safe :meth:`~ProducerGroup.stop`,
    and never leaves a child behind: stragglers get SIGTERM, then SIGKILL, and a child whose
    parent disappears stops on its own. :func:`run_producers` is the blocking wrapper.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pgval.core.clock import now_ms
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.core.schema import GET, POST, resource_name

if TYPE_CHECKING:
    from pgval.datasets.writers import Sink, SinkWriter

EventTime = Literal["wall", "synthetic"]

#: Pacing never owes more than this much backlog: after a stall (e.g. Kafka queue full) the
#: producer catches up at most this many seconds' worth of events at full speed, then the
#: schedule slides, so a long outage does not turn into an unbounded burst.
MAX_BACKLOG_S = 1.0
#: How long children get between "go" and the first event, so all start at the same instant.
_GO_DELAY_S = 0.05


class GeneratorError(EnvironmentFailure):
    """A producer could not start, or failed (plain message): its sink, a process."""


class GeneratorConfigError(UserMistake, ValueError):
    """A generator configuration with unusable values (plain message; a ``ValueError``
    too)."""


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratorConfig:
    """Everything that decides which events are produced and how fast.

    ``rate`` is the total target in events/s over all producers (each gets ``rate /
    producers``); ``None`` or ``0`` means as fast as the sink takes them. With a rate, a
    ``duration_s`` is turned into a fixed count (``round(rate * duration_s)`` events, split
    evenly), so paced runs are reproducible; without a rate it is a wall-clock limit. ``events``
    caps the total count. With neither, producers run until stopped.
    """

    resources: int = 16
    get_share: float = 0.995
    producers: int = 1
    rate: float | None = 10_000.0
    duration_s: float | None = None
    events: int | None = None
    seed: int = 0
    #: Events generated (vectorised) at a time; pacing hands them out in smaller chunks.
    batch_size: int = 20_000
    event_time: EventTime = "wall"
    #: Total events/s of synthetic event time; defaults to ``rate``.
    synthetic_rate: float | None = None
    #: Event time of seq 0 for ``event_time="synthetic"``; ``None`` = wall clock at start
    #: (set it for byte-identical datasets).
    start_ts_ms: int | None = None
    #: Pacing granularity: a paced producer hands events to its sink about this often. At
    #: 400 events/s into Kafka, 5 ms ticks took a core's 19 % and 20 ms ticks 6 %
    #: (docs/performance.md, "Generator"): CPU taken from the pipeline under test, for
    #: inputs handed over every 5 ms instead of every 20.
    tick_s: float = 0.02

    def validate(self) -> None:
        """Raise :class:`GeneratorConfigError` with a plain sentence for unusable values."""
        if self.resources < 1:
            raise GeneratorConfigError("resources must be at least 1")
        if not 0.0 <= self.get_share <= 1.0:
            raise GeneratorConfigError("get_share must be between 0 and 1")
        if self.producers < 1:
            raise GeneratorConfigError("producers must be at least 1")
        if self.rate is not None and (self.rate < 0 or not math.isfinite(self.rate)):
            raise GeneratorConfigError("rate must be a positive number of events/s (or unlimited)")
        if self.duration_s is not None and self.duration_s < 0:
            raise GeneratorConfigError("duration must not be negative")
        if self.events is not None and self.events < 0:
            raise GeneratorConfigError("events must not be negative")
        if self.batch_size < 1:
            raise GeneratorConfigError("batch_size must be at least 1")
        if self.tick_s <= 0:
            raise GeneratorConfigError("tick_s must be positive")
        if self.event_time not in ("wall", "synthetic"):
            raise GeneratorConfigError("event_time must be 'wall' or 'synthetic'")
        if self.event_time == "synthetic" and not (self.synthetic_rate or self.rate):
            raise GeneratorConfigError("synthetic event time needs a rate or synthetic_rate")
        if self.synthetic_rate is not None and self.synthetic_rate <= 0:
            raise GeneratorConfigError("synthetic_rate must be positive")
        if self.start_ts_ms is not None and self.start_ts_ms < 0:
            raise GeneratorConfigError("start_ts_ms must not be negative")

    @property
    def paced(self) -> bool:
        return bool(self.rate)

    def producer_rate(self) -> float | None:
        """Target events/s of one producer, ``None`` when unlimited."""
        return self.rate / self.producers if self.rate else None

    def total_events(self) -> int | None:
        """Total events of the run if it is bounded by count, else ``None``."""
        limits = []
        if self.events is not None:
            limits.append(self.events)
        if self.duration_s is not None and self.rate:
            limits.append(round(self.rate * self.duration_s))
        return min(limits) if limits else None

    def producer_events(self, producer_index: int) -> int | None:
        """Events producer ``producer_index`` emits (even split, the first ones get the rest)."""
        total = self.total_events()
        if total is None:
            return None
        base, rest = divmod(total, self.producers)
        return base + (1 if producer_index < rest else 0)

    def synthetic_producer_rate(self) -> float:
        rate = self.synthetic_rate or self.rate
        if not rate:
            raise GeneratorConfigError("synthetic event time needs a rate or synthetic_rate")
        return rate / self.producers

    def resolved(self, now_ms: int | None = None) -> GeneratorConfig:
        """Fix what is decided at start (the synthetic start time), shared by all producers."""
        if self.event_time == "synthetic" and self.start_ts_ms is None:
            return dataclasses.replace(self, start_ts_ms=now_ms if now_ms is not None else
                                       now_ms())
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------
# Deterministic event generation
# --------------------------------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_STREAM_TYPE = 1
_STREAM_RESOURCE = 2


@functools.lru_cache(maxsize=1024)
def _stream_key(seed: int, producer_index: int, stream: int) -> np.uint64:
    """Independent 64-bit keys per (seed, producer, stream); any int seed is accepted."""
    seq = np.random.SeedSequence([seed % (1 << 64), seed < 0, producer_index, stream])
    return seq.generate_state(1, dtype=np.uint64)[0]


def _hash64(key: np.uint64, seqs: np.ndarray) -> np.ndarray:
    """splitmix64 of ``key + (seq + 1) * golden``: a counter-based stream, one value per seq."""
    z = seqs.astype(np.uint64)
    z += np.uint64(1)
    z *= _GOLDEN
    z += key
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


@dataclass
class EventBatch:
    """Columnar events of one producer: ``len(ids)`` consecutive sequence numbers."""

    producer_index: int
    start_seq: int
    ids: np.ndarray  # int64
    is_post: np.ndarray  # bool
    resource: np.ndarray  # intp, index into resource names
    resources: int
    #: int64 ms for synthetic event time, ``None`` when event time is taken at emission.
    event_ts: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def slice(self, lo: int, hi: int) -> EventBatch:
        """A view of events ``lo:hi`` (no copy)."""
        return EventBatch(
            producer_index=self.producer_index,
            start_seq=self.start_seq + lo,
            ids=self.ids[lo:hi],
            is_post=self.is_post[lo:hi],
            resource=self.resource[lo:hi],
            resources=self.resources,
            event_ts=None if self.event_ts is None else self.event_ts[lo:hi],
        )

    def records(self, event_ts: int | np.ndarray | None = None) -> list[dict[str, Any]]:
        """Plain dicts (slow; for tests and small tools), event time from the batch or given."""
        ts = self.event_ts if event_ts is None else event_ts
        if ts is None:
            raise ValueError("this batch has no event time; pass event_ts")
        ts_list = np.broadcast_to(np.asarray(ts, dtype=np.int64), self.ids.shape).tolist()
        return [
            {"id": i, "type": POST if p else GET, "resource": resource_name(r), "event_ts": t}
            for i, p, r, t in zip(
                self.ids.tolist(), self.is_post.tolist(), self.resource.tolist(), ts_list,
                strict=True,
            )
        ]


def generate_range(
    cfg: GeneratorConfig, producer_index: int, start_seq: int, count: int
) -> EventBatch:
    """Events ``start_seq .. start_seq + count - 1`` of one producer (pure, no limits applied)."""
    if start_seq < 0 or count < 0:
        raise ValueError("start_seq and count must not be negative")
    seqs = np.arange(start_seq, start_seq + count, dtype=np.int64)
    ids = producer_index + cfg.producers * seqs

    u = _hash64(_stream_key(cfg.seed, producer_index, _STREAM_TYPE), seqs)
    # 53 random bits -> uniform in [0, 1); exact and platform independent.
    is_post = (u >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53)) >= cfg.get_share

    resources = cfg.resources
    if count == 0:
        resource = np.empty(0, dtype=np.intp)
    elif resources == 1:
        resource = np.zeros(count, dtype=np.intp)
    else:
        # Cover whole blocks of `resources` seqs; each block is argsort(random keys), i.e. a
        # seeded permutation, so the result does not depend on where batches are cut.
        first_block = start_seq // resources
        last_block = (start_seq + count - 1) // resources
        block_seqs = np.arange(first_block * resources, (last_block + 1) * resources,
                               dtype=np.int64)
        keys = _hash64(_stream_key(cfg.seed, producer_index, _STREAM_RESOURCE), block_seqs)
        perm = np.argsort(keys.reshape(-1, resources), axis=1, kind="stable").ravel()
        offset = start_seq - first_block * resources
        resource = perm[offset:offset + count]

    event_ts = None
    if cfg.event_time == "synthetic":
        if cfg.start_ts_ms is None:
            raise GeneratorConfigError("synthetic event time needs start_ts_ms (use "
                                       "cfg.resolved())")
        step = 1000.0 / cfg.synthetic_producer_rate()
        event_ts = cfg.start_ts_ms + np.floor(seqs * step).astype(np.int64)
    return EventBatch(producer_index, start_seq, ids, is_post, resource, resources, event_ts)


def generate_batch(cfg: GeneratorConfig, producer_index: int, batch_index: int) -> EventBatch:
    """Batch ``batch_index`` (``cfg.batch_size`` events) of a producer, cut at its event limit.

    Pure: the same arguments always give the same arrays; past the limit it is empty.
    """
    if not 0 <= producer_index < cfg.producers:
        raise ValueError(f"producer_index must be in [0, {cfg.producers})")
    start = batch_index * cfg.batch_size
    count = cfg.batch_size
    limit = cfg.producer_events(producer_index)
    if limit is not None:
        count = max(0, min(count, limit - start))
    return generate_range(cfg, producer_index, start, count)


def decode_id(event_id: int, producers: int) -> tuple[int, int]:
    """``(producer_index, seq)`` of an id (inverse of the id scheme)."""
    return event_id % producers, event_id // producers


# --------------------------------------------------------------------------------------------
# Reports and live progress
# --------------------------------------------------------------------------------------------


@dataclass
class ProducerReport:
    """What one producer did. Only ``delivered`` events are known to exist in the sink.

    ``sent`` counts events handed to the sink; each of them ends up in exactly one of
    ``delivered`` (acknowledged), ``failed`` (the sink reported an error; never counted as
    delivered) or ``undelivered`` (no answer by the end: flush timed out, or process killed).
    """

    index: int
    pid: int | None = None
    sent: int = 0
    delivered: int = 0
    failed: int = 0
    undelivered: int = 0
    target_rate: float | None = None
    #: ``sent`` / seconds from the common start to the last hand-over.
    achieved_rate: float = 0.0
    elapsed_s: float = 0.0
    first_emit_ms: int | None = None
    last_emit_ms: int | None = None
    #: True when stopped (stop(), SIGTERM, parent gone) before reaching its own limit.
    stopped_early: bool = False
    failed_ids: list[int] = field(default_factory=list)
    #: Error text -> occurrences (delivery failures and client errors), bounded in size.
    errors: dict[str, int] = field(default_factory=dict)
    #: Exception or abnormal exit of the producer process itself.
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProducerReport:
        return cls(**data)


@dataclass
class GeneratorReport:
    """Per-producer reports of one run plus the totals the runner and CLI print."""

    config: GeneratorConfig
    sink: str
    producers: list[ProducerReport]
    #: Wall clock (ms) of the common start instant.
    started_ms: int | None = None

    @property
    def sent(self) -> int:
        return sum(p.sent for p in self.producers)

    @property
    def delivered(self) -> int:
        return sum(p.delivered for p in self.producers)

    @property
    def failed(self) -> int:
        return sum(p.failed for p in self.producers)

    @property
    def undelivered(self) -> int:
        return sum(p.undelivered for p in self.producers)

    @property
    def elapsed_s(self) -> float:
        return max((p.elapsed_s for p in self.producers), default=0.0)

    @property
    def achieved_rate(self) -> float:
        """Total events/s: all events sent over the longest producer's run time."""
        elapsed = self.elapsed_s
        return self.sent / elapsed if elapsed > 0 else 0.0

    @property
    def errors(self) -> list[str]:
        return [f"producer {p.index}: {p.error}" for p in self.producers if p.error]

    @property
    def ok(self) -> bool:
        """Everything sent was delivered and no producer broke."""
        return not self.errors and self.failed == 0 and self.undelivered == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "sink": self.sink,
            "started_ms": self.started_ms,
            "sent": self.sent,
            "delivered": self.delivered,
            "failed": self.failed,
            "undelivered": self.undelivered,
            "achieved_rate": self.achieved_rate,
            "elapsed_s": self.elapsed_s,
            "producers": [p.to_dict() for p in self.producers],
        }

    def summary(self) -> str:
        """One line for logs and the CLI."""
        target = f"{self.config.rate:,.0f}" if self.config.rate else "unlimited"
        return (
            f"{self.sent:,} events sent by {len(self.producers)} producer(s) to {self.sink} in "
            f"{self.elapsed_s:.2f} s: {self.achieved_rate:,.0f} ev/s (target {target}); "
            f"delivered {self.delivered:,}, failed {self.failed:,}, "
            f"undelivered {self.undelivered:,}"
        )


@dataclass(frozen=True)
class ProducerProgress:
    """Live counters of one producer (read from shared memory, may lag by one chunk)."""

    index: int
    sent: int
    delivered: int
    failed: int


_COUNTERS = 3  # sent, delivered, failed per producer in the shared array


# --------------------------------------------------------------------------------------------
# The emission loop (runs inside a producer process, or in-process via `produce`)
# --------------------------------------------------------------------------------------------



class _Pacer:
    """When a producer's events are due: event ``k`` at ``t0 + k / rate``, handed over in
    chunks of at least about one tick, so sleeps are per chunk, never per record. A producer
    more than :data:`MAX_BACKLOG_S` behind slides its schedule instead of bursting."""

    def __init__(self, rate: float | None, limit: int | None, tick_s: float, t0: float
                 ) -> None:
        self.rate, self.limit, self.t0 = rate, limit, t0
        self.min_chunk = max(1, int(rate * tick_s)) if rate else 1

    def ready(self, seq: int, available: int, now: float) -> tuple[int, float | None]:
        """(events to hand over now, None), or (0, seconds to wait) when fewer than a chunk
        are due; ``seq`` were handed over so far, ``available`` are generated and waiting."""
        rate, limit = self.rate, self.limit
        if not rate:
            return available, None
        due = int((now - self.t0) * rate)
        if limit is not None:
            due = min(due, limit)
        backlog = due - seq
        if backlog > rate * MAX_BACKLOG_S:
            # Slide the schedule: owe at most MAX_BACKLOG_S worth of events.
            self.t0 = now - (seq + rate * MAX_BACKLOG_S) / rate
            backlog = int(rate * MAX_BACKLOG_S)
        want = self.min_chunk if limit is None else min(self.min_chunk, limit - seq)
        if backlog < want and backlog < available:
            return 0, max(0.0, self.t0 + (seq + want) / rate - now)
        return min(backlog, available), None


def _emit(
    cfg: GeneratorConfig,
    producer_index: int,
    writer: SinkWriter,
    should_stop: Callable[[], bool],
    t0: float,
    on_progress: Callable[[int, int, int], None] | None = None,
) -> ProducerReport:
    """Generate and hand events to ``writer`` until the limit, the duration, or a stop.

    Pacing is by deadline (:class:`_Pacer`): each loop hands over all events that are due,
    so the long-run rate stays exact even when single sleeps overshoot.
    """
    rate = cfg.producer_rate()
    limit = cfg.producer_events(producer_index)
    wall_end = t0 + cfg.duration_s if (cfg.duration_s is not None and not rate) else math.inf
    pacer = _Pacer(rate, limit, cfg.tick_s, t0)
    report = ProducerReport(index=producer_index, pid=os.getpid(), target_rate=rate)

    batch: EventBatch | None = None
    batch_pos = 0
    batch_index = 0
    seq = 0
    last_wall = 0
    t_last = t0
    while True:
        if limit is not None and seq >= limit:
            break
        if should_stop():
            report.stopped_early = True
            break
        if batch is None or batch_pos >= len(batch):
            batch = generate_batch(cfg, producer_index, batch_index)
            batch_index += 1
            batch_pos = 0
            if len(batch) == 0:
                break
        now = time.monotonic()
        if now >= wall_end:
            break
        n, wait_s = pacer.ready(seq, len(batch) - batch_pos, now)
        if wait_s is not None:
            writer.wait(wait_s)
            continue

        wall = max(last_wall, now_ms())
        last_wall = wall
        chunk = batch.slice(batch_pos, batch_pos + n)
        event_ts: int | np.ndarray = wall if chunk.event_ts is None else chunk.event_ts
        written = writer.write(chunk, event_ts, wall, should_stop)
        if written > 0:
            if report.first_emit_ms is None:
                report.first_emit_ms = wall
            report.last_emit_ms = wall
            t_last = time.monotonic()
        seq += written
        batch_pos += written
        if on_progress is not None:
            on_progress(seq, writer.delivered, writer.failed)
        if written < n:  # the sink gave up because a stop was requested
            report.stopped_early = True
            break

    report.sent = seq
    report.elapsed_s = max(0.0, t_last - pacer.t0)
    report.achieved_rate = seq / report.elapsed_s if report.elapsed_s > 0 else 0.0
    return report


def _finish(report: ProducerReport, writer: SinkWriter, flush_timeout_s: float | None) -> None:
    """Close the writer and fold its delivery accounting into ``report``."""
    result = writer.close(flush_timeout_s)
    report.delivered = result.delivered
    report.failed = result.failed
    report.undelivered = max(0, report.sent - result.delivered - result.failed)
    report.failed_ids = list(result.failed_ids)
    report.errors = dict(result.errors)


def produce(
    cfg: GeneratorConfig,
    sink: Sink,
    producer_index: int = 0,
    should_stop: Callable[[], bool] | None = None,
    flush_timeout_s: float | None = None,
) -> ProducerReport:
    """Run one producer in the calling process (benchmarks, tests, single-process tools).

    The sink's parent-side ``finalize`` is not called; use :func:`run_producers` for that.
    """
    cfg.validate()
    cfg = cfg.resolved()
    writer = sink.open(cfg, producer_index)
    report = ProducerReport(index=producer_index, pid=os.getpid())
    try:
        report = _emit(cfg, producer_index, writer, should_stop or (lambda: False),
                       time.monotonic())
    except BaseException as exc:
        report.error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _finish(report, writer, flush_timeout_s)
    return report


def _set_own_session() -> None:
    with contextlib.suppress(OSError):
        os.setsid()


def _producer_main(
    cfg: GeneratorConfig,
    sink: Sink,
    index: int,
    conn: mpc.Connection,
    go: Any,
    go_at: Any,
    stop: Any,
    counters: Any,
    flush_timeout_s: float | None,
) -> None:
    """Body of a producer process: open the sink, say ready, wait for go, emit, report."""
    # Own session: a terminal's Ctrl-C goes to the parent only, which stops us cleanly, and
    # `pgval cleanup` can kill the group from the pid file.
    _set_own_session()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: terminated.set())
    parent = os.getppid()

    def should_stop() -> bool:
        # getppid changes when the parent dies (we are re-parented): never outlive it.
        return terminated.is_set() or stop.is_set() or os.getppid() != parent

    def send(kind: str, payload: Any) -> None:
        with contextlib.suppress(OSError, EOFError):
            conn.send((kind, payload))

    report = ProducerReport(index=index, pid=os.getpid(), target_rate=cfg.producer_rate())
    try:
        writer = sink.open(cfg, index)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one sentence
        report.error = f"cannot open sink: {type(exc).__name__}: {exc}"
        send("done", report.to_dict())
        return
    send("ready", os.getpid())

    base = index * _COUNTERS

    def on_progress(sent: int, delivered: int, failed: int) -> None:
        counters[base] = sent
        counters[base + 1] = delivered
        counters[base + 2] = failed

    try:
        while not go.wait(0.1):
            if should_stop():
                break
        if not should_stop():
            delay = go_at.value - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        t0 = max(go_at.value, time.monotonic() - 1.0)
        report = _emit(cfg, index, writer, should_stop, t0, on_progress)
    except BaseException as exc:  # noqa: BLE001 - the parent gets it in the report
        report.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
    try:
        _finish(report, writer, flush_timeout_s)
    except BaseException as exc:  # noqa: BLE001
        report.error = (report.error or "") + f"closing the sink failed: {exc}"
    on_progress(report.sent, report.delivered, report.failed)
    send("done", report.to_dict())


# --------------------------------------------------------------------------------------------
# The group of producer processes
# --------------------------------------------------------------------------------------------


class ProducerGroup:
    """One OS process per producer; start, watch, stop from any thread, and clean up.

    Children are started with the ``spawn`` method (no forked copies of the caller's threads or
    Kafka clients), so the calling program's main module must be importable and guarded by
    ``if __name__ == "__main__":`` (true for the CLI, pytest and ``python -m`` modules).

    Use as a context manager (or call :meth:`close`) so that no child survives an exception::

        with ProducerGroup(cfg, FileSink(path)) as group:
            group.start()
            ...                      # group.progress(), group.stop() from another thread
            report = group.join()
    """

    def __init__(
        self,
        cfg: GeneratorConfig,
        sink: Sink,
        *,
        pid_dir: Path | None = None,
        start_timeout_s: float = 60.0,
        flush_timeout_s: float | None = None,
    ) -> None:
        cfg.validate()
        self.cfg = cfg.resolved()
        self.sink = sink
        self.pid_dir = pid_dir
        self.start_timeout_s = start_timeout_s
        self.flush_timeout_s = flush_timeout_s
        self._ctx = mp.get_context("spawn")
        self._stop = self._ctx.Event()
        self._go = self._ctx.Event()
        self._go_at = self._ctx.Value("d", 0.0, lock=False)
        self._counters = self._ctx.Array("q", cfg.producers * _COUNTERS, lock=False)
        self._procs: list[Any] = []
        self._conns: list[mpc.Connection | None] = []
        self._reports: dict[int, ProducerReport] = {}
        self._ready: set[int] = set()
        self._started_ms: int | None = None
        self._finalized = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start all producers and release them together once every sink is open."""
        self.prepare()
        self.go()

    def prepare(self) -> None:
        """Start every producer and wait until each has its sink open; none writes before
        :meth:`go`. A run prepares them while the query warms up, so their start-up (a
        process, its imports, a Kafka login each) is not paid at T1."""
        if self._procs:
            raise GeneratorError("this producer group was already started")
        try:
            for i in range(self.cfg.producers):
                recv, send = self._ctx.Pipe(duplex=False)
                proc = self._ctx.Process(
                    target=_producer_main,
                    name=f"pgval-generator-{i}",
                    args=(self.cfg, self.sink, i, send, self._go, self._go_at, self._stop,
                          self._counters, self.flush_timeout_s),
                    daemon=True,
                )
                proc.start()
                send.close()
                self._procs.append(proc)
                self._conns.append(recv)
                self._write_pid_file(i, proc.pid)
            deadline = time.monotonic() + self.start_timeout_s
            while len(self._ready) + len(self._reports) < self.cfg.producers:
                if time.monotonic() > deadline:
                    raise GeneratorError(
                        f"generator producers not ready within {self.start_timeout_s:.0f} s"
                    )
                self._collect(0.1)
            if self._reports:
                failed = next(iter(self._reports.values()))
                hint = ""
                if failed.error and "without a report" in failed.error:
                    hint = (" (see its stderr; with the spawn start method the main module must"
                            " be an importable file guarded by `if __name__ == '__main__':`)")
                raise GeneratorError(
                    f"generator producer {failed.index} failed: {failed.error}{hint}"
                )
        except BaseException:
            self.kill()
            raise

    def go(self) -> None:
        """Release the prepared producers together: their first events are sent from now."""
        if not self._procs:
            raise GeneratorError("this producer group was not prepared")
        if self._started_ms is not None:
            raise GeneratorError("this producer group was already released")
        self._go_at.value = time.monotonic() + _GO_DELAY_S
        self._started_ms = now_ms() + int(_GO_DELAY_S * 1000)
        self._go.set()

    def stop(self) -> None:
        """Ask every producer to stop after its current chunk and flush (any thread)."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def progress(self) -> list[ProducerProgress]:
        """Live counters per producer (sent, delivered, failed); cheap, any thread."""
        c = self._counters
        return [
            ProducerProgress(i, c[i * _COUNTERS], c[i * _COUNTERS + 1], c[i * _COUNTERS + 2])
            for i in range(self.cfg.producers)
        ]

    def done(self) -> bool:
        """True once every producer has reported or exited."""
        self._collect(0)
        return self._all_finished()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until all producers are finished or ``timeout_s`` passes; True if finished."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._all_finished():
            remaining = 0.5 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._collect(min(remaining, 0.5))
        return True

    def join(self, timeout_s: float | None = None) -> GeneratorReport:
        """Wait for all producers (killing those still running after ``timeout_s``) and report."""
        if not self._procs:
            raise GeneratorError("the producer group was not started")
        if not self.wait(timeout_s):
            self.kill(grace_s=self._stop_grace_s())
        self._reap()
        report = self._report()
        if not self._finalized:
            self._finalized = True
            try:
                self.sink.finalize(self.cfg, report.producers)
            except Exception as exc:  # noqa: BLE001 - surfaced in the report, not lost
                report.producers[0].error = (report.producers[0].error or "") + (
                    f"finalizing the sink failed: {exc}"
                )
        return report

    def kill(self, grace_s: float = 0.0) -> None:
        """Stop now: ask, wait up to ``grace_s``, then SIGTERM and finally SIGKILL stragglers."""
        self._stop.set()
        if grace_s > 0:
            self.wait(grace_s)
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(timeout=2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        self._collect(0)
        self._reap()

    def close(self) -> None:
        """Make sure no producer process is left; idempotent."""
        if any(p.is_alive() for p in self._procs):
            self.kill(grace_s=self._stop_grace_s())
        self._reap()

    def __enter__(self) -> ProducerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def started_ms(self) -> int | None:
        """Wall-clock ms at which all producers were released together (T1), once started."""
        return self._started_ms

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    # -- internals ---------------------------------------------------------------------------

    def _stop_grace_s(self) -> float:
        flush = self.flush_timeout_s if self.flush_timeout_s is not None else 30.0
        return flush + 5.0

    def _all_finished(self) -> bool:
        return len(self._reports) == len(self._procs)

    def _collect(self, timeout_s: float) -> None:
        """Read messages from children; a child that exited without a report gets one."""
        live = [c for c in self._conns if c is not None]
        if live:
            for conn in mpc.wait(live, timeout=timeout_s):
                assert isinstance(conn, mpc.Connection)
                index = self._conns.index(conn)
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    conn.close()
                    self._conns[index] = None
                    continue
                if kind == "ready":
                    self._ready.add(index)
                elif kind == "done":
                    self._reports[index] = ProducerReport.from_dict(payload)
                    conn.close()
                    self._conns[index] = None
        for i, proc in enumerate(self._procs):
            if i not in self._reports and self._conns[i] is None and not proc.is_alive():
                self._reports[i] = self._lost_report(i, proc.exitcode)

    def _lost_report(self, index: int, exitcode: int | None) -> ProducerReport:
        """A producer died without reporting: what the shared counters say, rest undelivered."""
        p = self.progress()[index]
        return ProducerReport(
            index=index,
            pid=self._procs[index].pid,
            sent=p.sent,
            delivered=p.delivered,
            failed=p.failed,
            undelivered=max(0, p.sent - p.delivered - p.failed),
            target_rate=self.cfg.producer_rate(),
            error=f"producer process exited with code {exitcode} without a report",
        )

    def _reap(self) -> None:
        for proc in self._procs:
            if proc.exitcode is None:
                proc.join(timeout=0.1)
        for i in range(len(self._procs)):
            if not self._procs[i].is_alive():
                self._remove_pid_file(i)
            conn = self._conns[i]
            if conn is not None and not self._procs[i].is_alive() and i in self._reports:
                conn.close()
                self._conns[i] = None

    def _report(self) -> GeneratorReport:
        for i, proc in enumerate(self._procs):
            if i not in self._reports:
                self._reports[i] = self._lost_report(i, proc.exitcode)
        return GeneratorReport(
            config=self.cfg,
            sink=self.sink.describe(),
            producers=[self._reports[i] for i in range(len(self._procs))],
            started_ms=self._started_ms,
        )

    def _pid_file(self, index: int) -> Path | None:
        return None if self.pid_dir is None else self.pid_dir / f"generator-{index}.json"

    def _write_pid_file(self, index: int, pid: int | None) -> None:
        path = self._pid_file(index)
        if path is None or pid is None:
            return
        from pgval.host.procs import write_pid_file

        # The child makes itself a session (and group) leader, so pgid == pid; the record
        # carries its start ticks, so cleanup never signals a reused pid.
        write_pid_file(path, f"generator-{index}", pid)

    def _remove_pid_file(self, index: int) -> None:
        path = self._pid_file(index)
        if path is not None:
            path.unlink(missing_ok=True)


def run_producers(
    cfg: GeneratorConfig,
    sink: Sink,
    *,
    stop_event: threading.Event | None = None,
    on_progress: Callable[[Sequence[ProducerProgress]], None] | None = None,
    progress_interval_s: float = 0.5,
    timeout_s: float | None = None,
    pid_dir: Path | None = None,
    flush_timeout_s: float | None = None,
    on_start: Callable[[ProducerGroup], None] | None = None,
) -> GeneratorReport:
    """Run ``cfg.producers`` producer processes to completion and return their report.

    Stops early when ``stop_event`` is set (from any thread) or after ``timeout_s``. On an
    exception or KeyboardInterrupt, the producers are stopped (and killed if they do not
    finish in time) before it propagates. ``on_start`` receives the running group, e.g. to
    keep a handle for :meth:`ProducerGroup.stop`.
    """
    group = ProducerGroup(cfg, sink, pid_dir=pid_dir, flush_timeout_s=flush_timeout_s)
    with group:
        group.start()
        if on_start is not None:
            on_start(group)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        next_progress = time.monotonic()
        while not group.wait(0.05):
            now = time.monotonic()
            if stop_event is not None and stop_event.is_set():
                group.stop()
            if deadline is not None and now >= deadline:
                group.stop()
            if on_progress is not None and now >= next_progress:
                on_progress(group.progress())
                next_progress = now + progress_interval_s
        if on_progress is not None:
            on_progress(group.progress())
        return group.join()
