"""Reading topics back: every record up to an end-offset snapshot, with the proof.

The one consumer of pgval's evidence. :func:`read_topics` takes one end-offset snapshot of
all its topics (their high watermarks; under read_committed once every transaction below
them is committed or aborted), then reads every partition from its log start up to it;
:func:`read_topic` is the same for one topic, in this process. What comes back is a
:class:`~pgval.kafka.topic_records.TopicRecords` per topic: the columns and how far each
partition got, with every reason a read stopped short — a time-out, nothing arriving, a
transaction left open, a Kafka error, records deleted before they were read — so a short
read is never silent. The consumer settings of every read are :func:`reader_conf`'s.

Speed: librdkafka fetches and decompresses in its own thread; each batch of up to
:data:`READ_BATCH` records becomes columns with one C-driven pass per field (the only
per-record cost is the client's message object). Reading is bound by that cost (~1.3 µs
of CPU per message on the development machine), and one Python process cannot spread it
over cores, so big reads are split between reader processes: by default half the cores
read (the other half is left to a local broker); on the 2-core development machine that
is one reader, as two were no faster there with the broker on the same cores
(docs/performance.md, "Rates").

Each reader process sends its columns back as an Arrow IPC stream over a pipe (no
pickling of records); the parent merges them per topic with the per-partition proof. A
reader that dies or says nothing leaves its partitions short, which the proof shows.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import multiprocessing.connection as mpc
import operator
import os
import signal
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.kafka.client import quiet_conf
from pgval.kafka.jvm_reader import (
    JVM_FAILED,
    ChunkNote,
    Taker,
    Task,
    jvm_unusable,
    read_tasks_jvm,
)
from pgval.kafka.topic_records import RECORD_SCHEMA, TopicRecords

#: Records asked of librdkafka per consume() call; each batch becomes one Arrow chunk.
#: Measured: 10k batches consume ~2x faster than 100k (the message objects of a batch stay
#: in cache), and smaller ones gain nothing.
READ_BATCH = 10_000
_timestamp_ms = operator.itemgetter(1)


class _Columns:
    """Column chunks of a read, one per consumed batch."""

    def __init__(self) -> None:
        self.keys: list[pa.Array] = []
        self.values: list[pa.Array] = []
        self.ts: list[np.ndarray] = []
        self.parts: list[np.ndarray] = []
        self.offs: list[np.ndarray] = []
        self.count = 0

    def add(self, msgs: list[Message], end: np.ndarray, reached: dict[int, int],
            todo: set[int]) -> None:
        """Take a batch of data messages: one C-driven pass per field, no loop per record.

        Records at or past their partition's end offset were written after the read looked
        at the ends: not part of this snapshot, dropped. ``reached`` and ``todo`` are
        updated per partition exactly as a record-by-record read would.
        """
        n = len(msgs)
        parts = np.fromiter(map(Message.partition, msgs), dtype=np.int32, count=n)
        offs = np.fromiter(map(Message.offset, msgs), dtype=np.int64, count=n)
        ts = np.fromiter(map(_timestamp_ms, map(Message.timestamp, msgs)), dtype=np.int64,
                         count=n)
        keys = pa.array(list(map(Message.key, msgs)), type=pa.binary())
        values = pa.array(list(map(Message.value, msgs)), type=pa.binary())
        ends = end[parts]
        for p in np.flatnonzero(np.bincount(parts)).tolist():
            # Offsets only grow within a partition: the batch's last record of p tells how
            # far p got; past the end means p is at its end.
            top = int(offs[parts == p].max())
            reached[p] = max(reached[p], min(top + 1, int(end[p])))
            if reached[p] >= end[p]:
                todo.discard(p)
        keep = offs < ends
        if not keep.all():
            mask = pa.array(keep)
            keys, values = keys.filter(mask), values.filter(mask)
            parts, offs, ts = parts[keep], offs[keep], ts[keep]
        self.keys.append(keys)
        self.values.append(values)
        self.ts.append(ts)
        self.parts.append(parts)
        self.offs.append(offs)
        self.count += len(offs)

    def table(self) -> pa.Table:
        """The read's records as one :data:`RECORD_SCHEMA` table (one chunk per batch)."""
        def cat(chunks: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)

        return pa.table({"partition": cat(self.parts, np.int32),
                         "offset": cat(self.offs, np.int64),
                         "timestamp": cat(self.ts, np.int64),
                         "key": pa.chunked_array(self.keys, type=pa.binary()),
                         "value": pa.chunked_array(self.values, type=pa.binary())},
                        schema=RECORD_SCHEMA)


def _kafka_problem(exc: Exception) -> str:
    """A read's problem line for a Kafka client error or a plain runtime error."""
    text = exc.args[0].str() if isinstance(exc, KafkaException) else exc
    return f"Kafka error: {text}"


def reader_conf(bootstrap: str, isolation: str,
                config: Mapping[str, object] | None = None) -> dict[str, object]:
    """Consumer settings of every read-back (no group offsets, partition ends reported);
    ``config`` adds client settings (the user's SASL/SSL for an external cluster); the
    settings the read's proof rests on are pgval's, whatever ``config`` says."""
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"unknown isolation level {isolation!r}")
    return {
        **quiet_conf(bootstrap),
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "queued.min.messages": 1_000_000,
        "queued.max.messages.kbytes": 256 * 1024,
        "fetch.wait.max.ms": 50,
        **(config or {}),
        "group.id": f"pgval-read-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        # Every read starts at an explicit offset; one that falls out of the log while it
        # reads (retention, truncation) is an error, never a silent jump.
        "auto.offset.reset": "error",
    }


def end_snapshot(consumer: Consumer, bootstrap: str, topic: str, timeout_s: float
                 ) -> tuple[dict[int, int], dict[int, int], list[str]]:
    """(end, start, problems) per partition of ``topic``: what a read must reach.

    The end is the "high" offset ``consumer`` is told: the high watermark for a
    read_uncommitted client, the last stable offset for a read_committed one. A log that
    no longer starts at 0 lost records: a problem.
    """
    md = consumer.list_topics(topic=topic, timeout=min(timeout_s, 30.0))
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        why = tmd.error.str() if tmd is not None and tmd.error is not None else "no metadata"
        raise EnvironmentFailure(f"cannot read topic {topic} at {bootstrap}: {why}")
    end: dict[int, int] = {}
    starts: dict[int, int] = {}
    problems: list[str] = []
    for p in sorted(tmd.partitions):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=min(timeout_s, 30.0), cached=False
        )
        end[p], starts[p] = high, low
        if low > 0:
            problems.append(f"partition {p} starts at offset {low}: earlier records "
                            f"were deleted")
    return end, starts, problems


def _read_partitions(consumer: Consumer, topic: str, end: dict[int, int],
                     reached: dict[int, int], problems: list[str], timeout_s: float,
                     idle_timeout_s: float, batch_size: int = READ_BATCH,
                     on_progress: Callable[[int], None] | None = None) -> _Columns:
    """Read the partitions of ``topic`` in ``end`` from ``reached`` (their log starts, or
    any offset: parallel readers split a partition) up to ``end``, updating ``reached`` as
    it goes and adding to ``problems`` why it stopped short (a time-out, nothing
    arriving); a Kafka error is raised (``reached`` shows how far it got).
    """
    columns = _Columns()
    end_by_partition = np.zeros(max(end, default=-1) + 1, dtype=np.int64)
    for p, e in end.items():
        end_by_partition[p] = e
    todo = {p for p, e in end.items() if e > reached[p]}
    if todo:
        consumer.assign([TopicPartition(topic, p, reached[p]) for p in sorted(todo)])
    deadline = time.monotonic() + timeout_s
    last_data = time.monotonic()
    while todo:
        now = time.monotonic()
        if now > deadline:
            problems.append(f"read time-out after {timeout_s:.0f} s")
            break
        if now - last_data > idle_timeout_s:
            problems.append(f"nothing arrived for {idle_timeout_s:.0f} s")
            break
        batch = consumer.consume(num_messages=batch_size, timeout=0.1)
        if not batch:
            continue
        last_data = time.monotonic()
        errors = list(map(Message.error, batch))
        # any(), not errors.count(None): KafkaError's == against None leaves a TypeError
        # pending in confluent-kafka 2.x; an error object is always true, None false.
        if any(errors):
            # Partition ends (and errors) are rare: a few per read, looked at one by one.
            for msg, err in zip(batch, errors, strict=True):
                if err is None:
                    continue
                if err.code() != KafkaError._PARTITION_EOF:
                    raise EnvironmentFailure(f"reading {topic}: {err.str()}")
                p = msg.partition()
                if p in todo:
                    reached[p] = max(reached[p], msg.offset())
                    if msg.offset() >= end[p]:
                        todo.discard(p)
            batch = [m for m, err in zip(batch, errors, strict=True) if err is None]
        if batch:
            columns.add(batch, end_by_partition, reached, todo)
            if on_progress is not None:
                on_progress(columns.count)
    return columns


def _short_read_problems(end: dict[int, int], reached: dict[int, int], problems: list[str]
                         ) -> list[str]:
    """``problems`` plus a line naming every partition that did not reach its end."""
    short = {p: (reached.get(p, 0), e) for p, e in end.items() if reached.get(p, 0) < e}
    if not short:
        return problems
    head = [] if problems else ["stopped early"]
    return [*problems, *head, "short partitions: " + ", ".join(
        f"{p} at {r} of {e}" for p, (r, e) in sorted(short.items()))]



#: Below this many records in all, reading in this process is faster than starting readers.
PARALLEL_MIN_RECORDS = 500_000
#: From this many records on, the Java reader (:mod:`pgval.kafka.jvm_reader`) reads when it
#: can. Measured (docs/performance.md, "The Java reader"): it costs ~0.6 s more to start
#: than librdkafka (1.0 s against 0.4 s for three small topics) and reads ~1.4M records/s
#: against ~0.73M, so it pays from ~0.9M records on.
JVM_MIN_RECORDS = 1_000_000
READERS = ("auto", "jvm", "librdkafka")
_PR_SET_PDEATHSIG = 1


def default_workers() -> int:
    """Half the cores, at least one: the other half is for a broker on the same machine."""
    return max(1, (os.cpu_count() or 2) // 2)


def split_tasks(tasks: Sequence[Task], workers: int) -> list[list[Task]]:
    """Offset ranges for ``workers`` readers, equal in records: the partitions are laid end
    to end and cut into equal contiguous shares, so a big partition may be split between
    two readers, and no reader gets two ranges of one partition."""
    total = sum(e - s for _, _, s, e in tasks)
    if total == 0:
        return []
    workers = max(1, workers)
    share = -(-total // workers)
    groups: list[list[Task]] = [[]]
    room = share
    for topic, p, start, end in tasks:
        while start < end:
            if room == 0:
                groups.append([])
                room = share
            take = min(end - start, room)
            groups[-1].append((topic, p, start, start + take))
            start += take
            room -= take
    return groups


def merge_ranges(ranges: Sequence[tuple[int, int, int]], start: int) -> int:
    """How far a partition read in ranges (start, stop, reached) got: to the end of the
    contiguous prefix of complete ranges, or into the first short one."""
    at = start
    for lo, stop, reached in sorted(ranges):
        if lo > at:
            break
        at = max(at, min(reached, stop))
        if reached < stop:
            break
    return at


def _read_tasks(conf: dict[str, object], tasks: Sequence[Task], timeout_s: float,
                idle_timeout_s: float, batch_size: int,
                on_topic: Taker, on_progress: Callable[[int], None] | None = None) -> None:
    """Read each topic's offset ranges of ``tasks`` (at most one per partition); hand every
    topic's records, how far each partition got and the problems to ``on_topic``."""
    by_topic: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, p, start, end in tasks:
        by_topic.setdefault(topic, {})[p] = (start, end)
    done = 0
    for topic, parts in by_topic.items():
        end = {p: e for p, (_, e) in parts.items()}
        reached = {p: s for p, (s, _) in parts.items()}
        problems: list[str] = []
        table = RECORD_SCHEMA.empty_table()
        consumer = None

        def progress(n: int, base: int = done) -> None:
            if on_progress is not None:
                on_progress(base + n)

        try:
            consumer = Consumer(conf)
            columns = _read_partitions(consumer, topic, end, reached, problems, timeout_s,
                                       idle_timeout_s, batch_size, progress)
            table = columns.table()
        except (KafkaException, PgvalError) as exc:
            problems.append(_kafka_problem(exc))
        finally:
            if consumer is not None:
                with contextlib.suppress(Exception):
                    consumer.close()
        done += len(table)
        on_topic(topic, table, reached, problems)


def _die_with_parent(parent: int) -> bool:
    """SIGKILL from the kernel when the parent dies (a reader holds nothing to clean up, and
    a SIGKILLed pgval must not leave readers behind); False if it is already gone."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent


def _reader_main(conn: mpc.Connection, parent: int, conf: dict[str, object],
                 tasks: list[Task], timeout_s: float, idle_timeout_s: float,
                 batch_size: int) -> None:
    """A reader process: its partitions, topic by topic, each sent back as Arrow IPC."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us; Ctrl-C is its
    if not _die_with_parent(parent):
        return
    last = [0.0]

    def progress(n: int) -> None:
        if time.monotonic() - last[0] >= 1.0:
            last[0] = time.monotonic()
            conn.send(("progress", n))

    def send(topic: str, table: pa.Table, reached: dict[int, int], problems: list[str]) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, RECORD_SCHEMA) as writer:
            writer.write_table(table)
        conn.send(("topic", topic, reached, problems))
        conn.send_bytes(sink.getvalue())

    try:
        _read_tasks(conf, tasks, timeout_s, idle_timeout_s, batch_size, send, progress)
        conn.send(("done",))
    except (BrokenPipeError, EOFError):
        pass  # the parent is gone or stopped listening
    finally:
        conn.close()


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed",
               timeout_s: float = 120.0, idle_timeout_s: float = 10.0, strict: bool = True,
               batch_size: int = READ_BATCH, on_progress: Callable[[int], None] | None = None,
               config: Mapping[str, object] | None = None, reader: str = "librdkafka"
               ) -> TopicRecords:
    """Read all of ``topic`` from the beginning up to its current end, as columns, in this
    process (:func:`read_topics` with one topic and no reader process).

    The end is the high watermark; under ``read_committed`` the read first waits until
    every transaction below it is committed or aborted (:func:`offsets_snapshot`), and
    aborted records are skipped. Reading stops when every
    partition has reached it, when nothing arrived for ``idle_timeout_s``, at ``timeout_s``,
    or on a Kafka error. With ``strict`` (the default) a read that stopped short raises
    :class:`PgvalError`; with ``strict=False`` it returns what it read, with the
    reasons in ``problems`` (``complete`` is then False) — the experiment stores that and
    marks the run unknown rather than guessing. ``config``: more client settings (a
    cluster's login, the user's SASL/SSL for an external cluster). ``on_progress`` gets the
    number of records read so far after each batch. ``reader``: as :func:`read_topics`'s
    ("librdkafka" by default: in this process).
    """
    return read_topics(bootstrap, [topic], isolation, timeout_s, idle_timeout_s, strict,
                       workers=1, batch_size=batch_size, on_progress=on_progress,
                       config=config, reader=reader)[topic]


#: How long a snapshot waits for transactions under way at it to be committed or aborted:
#: longer than the e1 sink's transaction time-out (60 s) and the coordinator's check for
#: timed-out transactions (10 s), after which Kafka aborts a transaction left open.
SETTLE_S = 75.0


def offsets_snapshot(conf: dict[str, object], bootstrap: str, topics: Sequence[str],
                     timeout_s: float
                     ) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]],
                                dict[str, list[str]]]:
    """(ends, starts, problems) per topic: the snapshot every reader reads up to.

    The end is each partition's high watermark, whatever the isolation level: every record
    written before the snapshot. Under read_committed the snapshot then waits (up to
    :data:`SETTLE_S`, or ``timeout_s`` if shorter) until the last stable offset passes it,
    i.e. every transaction with records below it is committed or aborted: a transaction
    whose commit had returned but whose markers were still being written must be read, not
    cut off. One still open after the wait is a problem line (the read is not complete).
    A topic it cannot look at gets no partitions and a problem line."""
    ends: dict[str, dict[int, int]] = {t: {} for t in topics}
    starts: dict[str, dict[int, int]] = {t: {} for t in topics}
    problems: dict[str, list[str]] = {t: [] for t in topics}
    committed = conf.get("isolation.level") == "read_committed"
    consumers: list[Consumer] = []
    try:
        # The high watermark comes from a read_uncommitted client: a read_committed one
        # answers with the last stable offset.
        consumers.append(Consumer({**conf, "isolation.level": "read_uncommitted"}))
        for topic in topics:
            try:
                ends[topic], low, problems[topic] = end_snapshot(consumers[0], bootstrap,
                                                                 topic, timeout_s)
                starts[topic] = dict(low)
            except (KafkaException, PgvalError) as exc:
                problems[topic].append(_kafka_problem(exc))
        if committed:
            consumers.append(Consumer(conf))
            _settle_transactions(consumers[1], ends, problems, min(SETTLE_S, timeout_s))
    except KafkaException as exc:  # a client that cannot even start
        for topic in topics:
            problems[topic].append(_kafka_problem(exc))
    finally:
        for consumer in consumers:
            with contextlib.suppress(Exception):
                consumer.close()
    return ends, starts, problems


def _settle_transactions(consumer: Consumer, ends: dict[str, dict[int, int]],
                         problems: dict[str, list[str]], wait_s: float) -> None:
    """Wait until every partition's last stable offset (``consumer`` reads committed) has
    reached its end in ``ends``. A partition still held back after ``wait_s`` by a
    transaction neither committed nor aborted gets a problem line naming its end, and is
    read only up to its last stable offset (read_committed gets no further)."""
    held = {(t, p): e for t, parts in ends.items() for p, e in parts.items() if e > 0}
    stable: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + wait_s
    while held:
        for (topic, p), end in list(held.items()):
            left = max(1.0, min(10.0, deadline - time.monotonic()))
            try:
                _, lso = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                        timeout=left, cached=False)
            except KafkaException as exc:
                problems[topic].append(_kafka_problem(exc))
                del held[topic, p]
                continue
            stable[topic, p] = lso
            if lso >= end:
                del held[topic, p]
        if not held or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for (topic, p), end in sorted(held.items()):
        lso = stable.get((topic, p))
        problems[topic].append(
            f"partition {p}: a transaction with records from offset {lso} below the end "
            f"{end} was neither committed nor aborted within {wait_s:.0f} s")
        if lso is not None and 0 <= lso < end:
            ends[topic][p] = lso


def records_after(bootstrap: str, config: Mapping[str, object] | None, topic: str,
                  ends: Mapping[int, int]) -> list[str]:
    """Problems if ``topic`` holds records past ``ends``, the snapshot a read read to: after
    a run's drain nothing may write to its output topic, so a sink still writing (a zombie
    task's late send, a transaction begun after the snapshot), or an end the snapshot took
    too low, means the read may not be the run's final output. Transaction markers written
    after the snapshot (a commit settling) are not records and count for nothing."""
    if not ends:
        return []
    conf = reader_conf(bootstrap, "read_uncommitted", config)
    now, _, problems = offsets_snapshot(conf, bootstrap, [topic], 30.0)
    if problems[topic]:
        return []  # the read itself was complete; a check that could not look adds nothing
    grown = {p: (e, now[topic][p]) for p, e in ends.items() if now[topic].get(p, e) > e}
    late = {p: n for p, n in records_past(conf, topic, grown).items() if n} if grown else {}
    if not late:
        return []
    return ["records past the read-back's snapshot (the sink was still writing, or the "
            "snapshot's end was too low): " + ", ".join(
                f"partition {p}: {n} after offset {grown[p][0]}" for p, n in sorted(late.items()))]


def records_past(conf: Mapping[str, object], topic: str, ranges: Mapping[int, tuple[int, int]],
                 timeout_s: float = 30.0) -> dict[int, int]:
    """How many records (transaction markers are none) each partition of ``topic`` holds in
    ``[start, stop)`` of ``ranges``, as a client with ``conf`` sees them."""
    end = {p: stop for p, (_, stop) in ranges.items()}
    reached = {p: start for p, (start, _) in ranges.items()}
    consumer = Consumer(dict(conf))
    try:
        columns = _read_partitions(consumer, topic, end, reached, [], timeout_s,
                                   min(10.0, timeout_s))
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    parts = np.concatenate(columns.parts) if columns.parts else np.zeros(0, np.int32)
    return {p: int((parts == p).sum()) for p in ranges}


@dataclass(frozen=True)
class _ReadPlan:
    """What one :func:`read_topics` call reads and how: the ranges past the snapshot's
    starts, and the settings every attempt at reading them shares."""

    conf: dict[str, object]
    topics: Sequence[str]
    tasks: list[Task]
    timeout_s: float
    idle_timeout_s: float
    batch_size: int
    workers: int
    parallel_min_records: int
    on_progress: Callable[[int], None] | None
    on_chunk: ChunkNote | None = None

    @property
    def total(self) -> int:
        return sum(e - s for _, _, s, e in self.tasks)


def _read_once(plan: _ReadPlan, reached: dict[str, dict[int, int]], jvm: bool,
               notes: dict[str, list[object]] | None = None
               ) -> tuple[dict[str, dict[int, pa.Table]], dict[str, list[str]]]:
    """One whole read of the plan's ranges: each topic's tables by reader and the problems
    its readers met; moves ``reached`` to how far each partition got. The Java reader's
    notes of its chunks (``plan.on_chunk``) go to ``notes``."""
    tasks = plan.tasks
    groups = ([tasks] if jvm or plan.total < plan.parallel_min_records else
              split_tasks(tasks, plan.workers)) if tasks else []
    # How far each reader's range of a partition got: (topic, partition) -> reader -> range.
    ranges: dict[tuple[str, int], dict[int, list[int]]] = {}
    for k, group in enumerate(groups):
        for t, p, s, e in group:
            ranges.setdefault((t, p), {})[k] = [s, e, s]
    tables: dict[str, dict[int, pa.Table]] = {t: {} for t in plan.topics}
    met: dict[str, list[str]] = {t: [] for t in plan.topics}

    def taker(k: int) -> Taker:
        def take(topic: str, table: pa.Table, got: dict[int, int], why: list[str]) -> None:
            tables[topic][k] = table
            for p, r in got.items():
                ranges[(topic, p)][k][2] = max(ranges[(topic, p)][k][2], r)
            met[topic].extend(why)
        return take

    if jvm:
        said = read_tasks_jvm(plan.conf, tasks, plan.timeout_s, plan.idle_timeout_s,
                              taker(0), plan.on_progress, plan.on_chunk)
        if notes is not None:
            notes.update(said)
    elif len(groups) == 1:
        _read_tasks(plan.conf, groups[0], plan.timeout_s, plan.idle_timeout_s,
                    plan.batch_size, taker(0), plan.on_progress)
    elif groups:
        _run_readers(plan.conf, groups, plan.timeout_s, plan.idle_timeout_s, plan.batch_size,
                     taker, met, plan.on_progress)
    for (t, p), by_reader in ranges.items():
        reached[t][p] = merge_ranges([(s, e, r) for s, e, r in by_reader.values()],
                                     reached[t][p])
    return tables, met


def _read_with_best_reader(plan: _ReadPlan, reached: dict[str, dict[int, int]], reader: str,
                           jvm_min_records: int, notes: dict[str, list[object]]
                           ) -> tuple[dict[str, dict[int, pa.Table]], dict[str, list[str]],
                                      str]:
    """:func:`_read_once` with the Java reader when ``reader`` asks for it and it can, else
    (or after it died, under "auto") with librdkafka; also says which read it and why not
    the Java one. ``notes`` gets the Java reader's notes of its chunks when its read
    stands."""
    log_starts = {t: dict(r) for t, r in reached.items()}
    used, why_not = "librdkafka", None
    if reader != "librdkafka" and plan.tasks and (reader == "jvm"
                                                  or plan.total >= jvm_min_records):
        why_not = jvm_unusable(plan.conf)
        if why_not is None:
            try:
                tables, met = _read_once(plan, reached, jvm=True, notes=notes)
                used = "jvm"
            except PgvalError as exc:  # it could not start: no JDK, no jar
                why_not = str(exc)
            else:
                failed = next((w for ws in met.values() for w in ws
                               if w.startswith(JVM_FAILED)), None)
                if failed is not None and reader == "auto":  # it died: read it again
                    why_not = failed
                    reached.update({t: dict(r) for t, r in log_starts.items()})
    if used != "jvm" or why_not is not None:
        notes.clear()  # they were of the read that is read again
        tables, met = _read_once(plan, reached, jvm=False)
        used = "librdkafka" if why_not is None else \
            f"librdkafka (the Java reader could not: {why_not})"
    return tables, met, used


def read_topics(bootstrap: str, topics: Sequence[str], isolation: str = "read_committed",
                timeout_s: float = 120.0, idle_timeout_s: float = 10.0, strict: bool = True,
                workers: int | None = None, batch_size: int = READ_BATCH,
                on_progress: Callable[[int], None] | None = None,
                parallel_min_records: int = PARALLEL_MIN_RECORDS,
                config: Mapping[str, object] | None = None, reader: str = "auto",
                jvm_min_records: int = JVM_MIN_RECORDS,
                on_chunk: ChunkNote | None = None) -> dict[str, TopicRecords]:
    """Every record of ``topics`` up to one end-offset snapshot, as :func:`read_topic`
    gives each (same columns, same proof: ``end_offsets``, ``reached``, ``problems``).

    With ``workers`` > 1 (default: half the cores) and at least ``parallel_min_records``
    records to read, the partitions are split between that many reader processes; else
    they are read here.
    ``on_progress`` gets the number of records read so far (about once a second);
    ``config`` adds client settings (the user's SASL/SSL), for the readers too.

    ``reader``: "jvm" reads with Kafka's Java consumer (:mod:`pgval.kafka.jvm_reader`,
    one process, no per-record Python object), "librdkafka" with confluent-kafka here or
    in ``workers`` processes; "auto" takes the Java reader from ``jvm_min_records`` records
    on unless it cannot read with these settings. Each result's ``reader`` says which read
    it (and why not the Java one, when that was wanted and could not be).

    ``on_chunk``: work on each chunk of values while the Java reader reads on (it runs on
    one core, this process on the other); its notes are each result's ``chunk_notes``,
    one per chunk of ``values`` (None where the Java reader did not read).
    """
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r}: one of {', '.join(READERS)}")
    conf = reader_conf(bootstrap, isolation, config)
    ends, reached, problems = offsets_snapshot(conf, bootstrap, topics, timeout_s)
    tasks = [(t, p, reached[t][p], e) for t in topics for p, e in sorted(ends[t].items())
             if e > reached[t][p]]
    plan = _ReadPlan(conf, topics, tasks, timeout_s, idle_timeout_s, batch_size,
                     default_workers() if workers is None else workers, parallel_min_records,
                     on_progress, on_chunk)
    notes: dict[str, list[object]] = {}
    tables, met, used = _read_with_best_reader(plan, reached, reader, jvm_min_records, notes)
    out: dict[str, TopicRecords] = {}
    for topic in topics:
        # Reader k's ranges precede reader k+1's within a partition: offset order is kept.
        parts = [tables[topic][k] for k in sorted(tables[topic])]
        table = pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()
        recs = TopicRecords.from_table(table, topic)
        recs.end_offsets, recs.reached = ends[topic], reached[topic]
        recs.problems = _short_read_problems(ends[topic], reached[topic],
                                             problems[topic] + met[topic])
        recs.reader = used
        if topic in notes and len(notes[topic]) == recs.values.num_chunks:
            recs.chunk_notes = notes[topic]
        if strict and not recs.complete:
            raise EnvironmentFailure(f"could not read all of topic {topic} at {bootstrap}: "
                                    + "; ".join(recs.problems or ["partitions missing"]))
        out[topic] = recs
    return out


def _run_readers(conf: dict[str, object], groups: list[list[Task]], timeout_s: float,
                 idle_timeout_s: float, batch_size: int, taker: Callable[[int], Taker],
                 problems: dict[str, list[str]],
                 on_progress: Callable[[int], None] | None) -> None:
    """Start one reader process per group, collect their topics, always stop them."""
    ctx = mp.get_context("spawn")
    procs: list[Any] = []
    conns: dict[int, mpc.Connection] = {}
    progress = [0] * len(groups)
    finished: set[int] = set()
    received: dict[int, set[str]] = {k: set() for k in range(len(groups))}
    try:
        for k, group in enumerate(groups):
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_reader_main, name=f"pgval-reader-{k}", daemon=True,
                               args=(send, os.getpid(), conf, group,
                                     timeout_s, idle_timeout_s, batch_size))
            proc.start()
            send.close()
            procs.append(proc)
            conns[k] = recv
        # Readers stop themselves at the time-out; the margin covers start-up and sending.
        deadline = time.monotonic() + timeout_s + 60.0
        while conns and time.monotonic() < deadline:
            for conn in mpc.wait(list(conns.values()), timeout=1.0):
                assert isinstance(conn, mpc.Connection)
                k = next(i for i, c in conns.items() if c is conn)
                try:
                    msg = conn.recv()
                    if msg[0] == "topic":
                        _, topic, got, why = msg
                        data = conn.recv_bytes()
                        try:
                            table = pa.ipc.open_stream(data).read_all()
                        except pa.ArrowException as exc:  # its ranges stay short
                            problems[topic].append(f"reader {k} sent unreadable records: {exc}")
                        else:
                            taker(k)(topic, table, got, why)
                        received[k].add(topic)
                        continue
                    if msg[0] == "progress":
                        progress[k] = msg[1]
                        if on_progress is not None:
                            on_progress(sum(progress))
                        continue
                    finished.add(k)
                except (EOFError, OSError):
                    pass
                conn.close()
                del conns[k]
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        for conn in conns.values():
            conn.close()
    for k, group in enumerate(groups):
        if k not in finished:
            code = procs[k].exitcode if k < len(procs) else None
            for topic in sorted({t for t, *_ in group} - received[k]):
                problems[topic].append(f"reader process {k} ended without finishing "
                                       f"(exit code {code})")
