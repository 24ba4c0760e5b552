"""Read several topics back with parallel reader processes, same proof as ``read_topic``.

Why processes: reading is bound by the Kafka client's cost per message (librdkafka's and
confluent-kafka's message objects, ~1.3 µs of CPU on the development machine), and one
Python process cannot spread that over cores. By default half the cores read (the other
half is left to a local broker): on the 2-core development machine that is one reader, as
two were no faster there with the broker on the same cores (docs/performance.md, "Rates").
The evidence still comes through a Kafka client with the requested isolation level, to one
end-offset snapshot taken before any reader starts.

Each reader sends its columns back as an Arrow IPC stream over a pipe (no pickling of
records); the parent merges them per topic with the per-partition proof (end offsets, how
far each partition got, what went wrong). A reader that dies or says nothing leaves its
partitions short, which the proof shows: never a silent partial read.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaException

from pgval.errors import RuntimeErrorPlain
from pgval.kafka.broker import (
    READ_BATCH,
    TopicRecords,
    end_snapshot,
    kafka_problem,
    read_partitions,
    reader_conf,
    short_read_problems,
)

#: Below this many records in all, reading in this process is faster than starting readers.
PARALLEL_MIN_RECORDS = 500_000
_PR_SET_PDEATHSIG = 1
_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()),
                     ("timestamp", pa.int64()), ("key", pa.binary()), ("value", pa.binary())])
# (topic, partition, start, end): an offset range a reader reads.
Task = tuple[str, int, int, int]
# Takes one topic's records, how far each partition got and the problems.
Taker = Callable[[str, pa.Table, dict[int, int], list[str]], None]


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
        table = _SCHEMA.empty_table()
        consumer = None

        def progress(n: int, base: int = done) -> None:
            if on_progress is not None:
                on_progress(base + n)

        try:
            consumer = Consumer(conf)
            columns = read_partitions(consumer, topic, end, reached, problems, timeout_s,
                                      idle_timeout_s, batch_size, progress)
            recs = columns.records()
            table = pa.table({"partition": recs.partitions, "offset": recs.offsets,
                              "timestamp": recs.timestamps, "key": recs.keys,
                              "value": recs.values}, schema=_SCHEMA)
        except (KafkaException, RuntimeErrorPlain) as exc:
            problems.append(kafka_problem(exc))
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
        with pa.ipc.new_stream(sink, _SCHEMA) as writer:
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


def read_topics(bootstrap: str, topics: Sequence[str], isolation: str = "read_committed",
                timeout_s: float = 120.0, idle_timeout_s: float = 10.0, strict: bool = True,
                workers: int | None = None, batch_size: int = READ_BATCH,
                on_progress: Callable[[int], None] | None = None,
                parallel_min_records: int = PARALLEL_MIN_RECORDS,
                config: Mapping[str, object] | None = None) -> dict[str, TopicRecords]:
    """Every record of ``topics`` up to one end-offset snapshot, as :func:`read_topic`
    gives each (same columns, same proof: ``end_offsets``, ``reached``, ``problems``).

    With ``workers`` > 1 (default: half the cores) and at least ``parallel_min_records``
    records to read, the partitions are split between that many reader processes; else
    they are read here.
    ``on_progress`` gets the number of records read so far (about once a second);
    ``config`` adds client settings (the user's SASL/SSL), for the readers too.
    """
    conf = reader_conf(bootstrap, isolation, config)
    ends: dict[str, dict[int, int]] = {t: {} for t in topics}
    reached: dict[str, dict[int, int]] = {t: {} for t in topics}
    problems: dict[str, list[str]] = {t: [] for t in topics}
    consumer = None
    try:
        consumer = Consumer(conf)
        for topic in topics:
            try:
                ends[topic], starts, problems[topic] = end_snapshot(consumer, bootstrap, topic,
                                                                    timeout_s)
                reached[topic] = dict(starts)
            except (KafkaException, RuntimeErrorPlain) as exc:
                problems[topic].append(kafka_problem(exc))
    except KafkaException as exc:  # a client that cannot even start
        for topic in topics:
            problems[topic].append(kafka_problem(exc))
    finally:
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()
    tasks = [(t, p, reached[t][p], e) for t in topics for p, e in sorted(ends[t].items())
             if e > reached[t][p]]
    total = sum(e - s for _, _, s, e in tasks)
    if workers is None:
        workers = default_workers()
    groups = (split_tasks(tasks, workers) if total >= parallel_min_records
              else [tasks] if tasks else [])
    # How far each reader's range of a partition got: (topic, partition) -> reader -> range.
    ranges: dict[tuple[str, int], dict[int, list[int]]] = {}
    for k, group in enumerate(groups):
        for t, p, s, e in group:
            ranges.setdefault((t, p), {})[k] = [s, e, s]
    tables: dict[str, dict[int, pa.Table]] = {t: {} for t in topics}

    def taker(k: int) -> Taker:
        def take(topic: str, table: pa.Table, got: dict[int, int], why: list[str]) -> None:
            tables[topic][k] = table
            for p, r in got.items():
                ranges[(topic, p)][k][2] = max(ranges[(topic, p)][k][2], r)
            problems[topic].extend(why)
        return take

    if len(groups) == 1:
        _read_tasks(conf, groups[0], timeout_s, idle_timeout_s, batch_size, taker(0),
                    on_progress)
    elif groups:
        _run_readers(conf, groups, timeout_s, idle_timeout_s, batch_size, taker, problems,
                     on_progress)
    for (t, p), by_reader in ranges.items():
        reached[t][p] = merge_ranges([(s, e, r) for s, e, r in by_reader.values()],
                                     reached[t][p])

    out: dict[str, TopicRecords] = {}
    for topic in topics:
        # Reader k's ranges precede reader k+1's within a partition: offset order is kept.
        parts = [tables[topic][k] for k in sorted(tables[topic])]
        table = pa.concat_tables(parts) if parts else _SCHEMA.empty_table()
        recs = TopicRecords(keys=table.column("key"), values=table.column("value"),
                            timestamps=_numpy(table, "timestamp", np.int64),
                            partitions=_numpy(table, "partition", np.int32),
                            offsets=_numpy(table, "offset", np.int64), topic=topic,
                            end_offsets=ends[topic], reached=reached[topic])
        recs.problems = short_read_problems(ends[topic], reached[topic], problems[topic])
        if strict and not recs.complete:
            raise RuntimeErrorPlain(f"could not read all of topic {topic} at {bootstrap}: "
                                    + "; ".join(recs.problems or ["partitions missing"]))
        out[topic] = recs
    return out


def _numpy(table: pa.Table, name: str, dtype: type) -> np.ndarray:
    col = table.column(name)
    if len(col) == 0:
        return np.zeros(0, dtype=dtype)
    return col.to_numpy().astype(dtype, copy=False)


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
