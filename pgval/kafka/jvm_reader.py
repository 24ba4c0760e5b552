"""The bulk read-back: Kafka's Java consumer hands whole column chunks to Python.

Why: librdkafka's Python client makes one message object per record (~1.3 µs of CPU each
here, docs/performance.md), which caps a read at ~600k records/s on a core. The Java
consumer decodes record batches without per-record Python work; ``ColumnReader.java``
(compiled once against the broker's kafka-clients, :mod:`pgval.host.javac`) writes each
chunk of up to 64k records as the Arrow layout of :data:`RECORD_SCHEMA`'s columns, and
this module wraps the buffers as Arrow arrays without copying a record.

The proof is the same as :mod:`pgval.kafka.reader`'s: Python takes the end-offset snapshot,
hands the offset ranges over, and gets back how far each partition got and every reason a
read stopped short. The reader is used where it is known to read exactly what the
librdkafka reader reads (tests/test_jvm_reader.py compares them, aborted transactions
included): client settings it cannot translate, or no JDK, keep the librdkafka reader,
and :func:`jvm_unusable` says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa

from pgval.errors import RuntimeErrorPlain
from pgval.host.jars import default_cache_dir, ensure_jars, java_executable
from pgval.host.javac import build_jar, find_javac, jar_path
from pgval.kafka.client import java_client_options
from pgval.kafka.topic_records import RECORD_SCHEMA

SOURCE = Path(__file__).with_name("jvm") / "ColumnReader.java"
MAIN_CLASS = "ColumnReader"
#: The reader's heap: a chunk is ≤ 16 MiB of values, a fetch ≤ 64 MiB.
HEAP = "512m"
#: Client settings the Java consumer understands as librdkafka does (or that
#: :func:`java_client_options` translates); any other setting keeps the librdkafka reader.
TRANSLATABLE = frozenset({
    "bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
    "sasl.username", "sasl.password", "sasl.jaas.config", "isolation.level", "fetch.max.bytes",
    "max.partition.fetch.bytes",
})
#: librdkafka-only settings of :func:`~pgval.kafka.reader.reader_conf` with no meaning here.
_LIBRDKAFKA_ONLY = frozenset({
    "log_level", "logger", "group.id", "enable.auto.commit", "enable.auto.offset.store",
    "enable.partition.eof", "auto.offset.reset", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms",
})
_PR_SET_PDEATHSIG = 1
# (topic, partition, start, end): an offset range to read.
Task = tuple[str, int, int, int]
# Takes one topic's records, how far each partition got and the problems.
Taker = Callable[[str, pa.Table, dict[int, int], list[str]], None]


def jvm_unusable(conf: Mapping[str, object]) -> str | None:
    """Why the Java reader cannot read with these librdkafka settings, or None."""
    odd = sorted(k for k in conf if k not in TRANSLATABLE and k not in _LIBRDKAFKA_ONLY)
    if odd:
        return f"client settings without a Java translation: {', '.join(odd)}"
    for key, value in conf.items():
        if key not in _LIBRDKAFKA_ONLY and any(c in str(value) for c in "\t\n\r"):
            return f"client setting {key} holds a tab or line break"
    if java_executable() is None:
        return "no java on PATH"
    if find_javac() is None and not _cached_jar().is_file():
        return "no javac (a JDK) to build the reader"
    return None


def _classpath() -> str:
    return ensure_jars(spark=False).kafka_classpath_str


def _cached_jar() -> Path:
    return jar_path(default_cache_dir(), "pgval-reader", {SOURCE.name: SOURCE.read_text()})


def ensure_reader_jar() -> Path:
    """The reader's jar, compiled against the broker's kafka-clients on first use."""
    return build_jar(default_cache_dir(), "pgval-reader", {SOURCE.name: SOURCE.read_text()},
                     _classpath(), "the bulk read-back")


def java_settings(conf: Mapping[str, object]) -> dict[str, str]:
    """The Java consumer's settings for a read with librdkafka settings ``conf``."""
    kept = {k: str(v) for k, v in conf.items() if k not in _LIBRDKAFKA_ONLY}
    return {**java_client_options(kept), "max.poll.records": "100000",
            "receive.buffer.bytes": str(4 << 20), "fetch.max.wait.ms": "50",
            "client.id": "pgval-read"}


def _archive_path(jar: Path) -> Path:
    """The class archive of ``jar`` with this classpath and this java (a JVM refuses an
    archive made with other ones: it would never be rebuilt)."""
    key = hashlib.sha256(f"{java_executable()}\0{_classpath()}".encode()).hexdigest()[:12]
    return jar.with_name(f"{jar.stem}-{key}.jsa")


def _class_archive(jar: Path) -> tuple[Path | None, list[str]]:
    """The JVM flags that share the reader's classes (AppCDS): the archive of a first run
    (dumped at its exit, ~1.4 s, kept only when that run ended well) maps them in later:
    a read's fixed cost went from ~1.45 s to ~1.0 s (three small topics, SASL login).
    Returns (the archive this run dumps, or None; the flags)."""
    kept = _archive_path(jar)
    if kept.is_file():
        return None, [f"-XX:SharedArchiveFile={kept}"]
    part = kept.with_suffix(f".{os.getpid()}.part")
    return part, [f"-XX:ArchiveClassesAtExit={part}"]


def _die_with_parent() -> None:
    """In the reader's child: SIGKILL when pgval dies (it holds nothing to clean up)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _read_exactly(stream: IO[bytes], size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            raise EOFError(f"the reader stopped after {got} of {size} bytes")
        got += n
    return buf


def _binary(lengths: np.ndarray, data: bytearray) -> pa.Array:
    """An Arrow binary array over ``data`` from per-record lengths (-1: null), no copy."""
    valid = lengths >= 0
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(np.where(valid, lengths, 0), out=offsets[1:])
    nulls = len(lengths) - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.BinaryArray.from_buffers(pa.binary(), len(lengths),
                                       [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                       null_count=nulls)


def _chunk(stream: IO[bytes]) -> pa.RecordBatch:
    """One 'C' frame (after its tag) as a record batch of :data:`RECORD_SCHEMA`."""
    head = _read_exactly(stream, 20)
    n = int(np.frombuffer(head, "<i4", 1)[0])
    key_bytes, value_bytes = (int(x) for x in np.frombuffer(head, "<i8", 2, offset=4))
    cols = _read_exactly(stream, n * 28)  # int32, int64, int64, int32, int32 per record
    parts = np.frombuffer(cols, "<i4", n, 0)
    offs = np.frombuffer(cols, "<i8", n, 4 * n)
    ts = np.frombuffer(cols, "<i8", n, 12 * n)
    key_lens = np.frombuffer(cols, "<i4", n, 20 * n)
    value_lens = np.frombuffer(cols, "<i4", n, 24 * n)
    keys = _binary(key_lens, _read_exactly(stream, key_bytes))
    values = _binary(value_lens, _read_exactly(stream, value_bytes))
    return pa.RecordBatch.from_arrays([pa.array(parts), pa.array(offs), pa.array(ts),
                                       keys, values], schema=RECORD_SCHEMA)


def read_tasks_jvm(conf: Mapping[str, object], tasks: Sequence[Task], timeout_s: float,
                   idle_timeout_s: float, on_topic: Taker,
                   on_progress: Callable[[int], None] | None = None) -> None:
    """Read ``tasks`` (at most one range per partition) in one Java reader; hand every
    topic's records, how far each partition got and the problems to ``on_topic``, as
    :func:`pgval.kafka.reader._read_tasks` does. A reader that fails leaves its topics
    short, with its last words as the problem; it never outlives this call or pgval."""
    java = java_executable()
    if java is None:
        raise RuntimeErrorPlain("the bulk read-back needs java on PATH")
    jar = ensure_reader_jar()
    lines = [f"conf\t{k}\t{v}" for k, v in java_settings(conf).items()]
    lines.append(f"limits\t{int(timeout_s * 1000)}\t{int(idle_timeout_s * 1000)}")
    lines += [f"task\t{t}\t{p}\t{s}\t{e}" for t, p, s, e in tasks]
    lines.append("go")
    topics = list(dict.fromkeys(t for t, *_ in tasks))
    starts = {(t, p): s for t, p, s, _ in tasks}
    done: set[str] = set()
    with tempfile.TemporaryFile() as err:
        archive, sharing = _class_archive(jar)
        proc = subprocess.Popen(
            [java, f"-Xmx{HEAP}", "-XX:+UseSerialGC", "-Xss1m", *sharing,
             "-Xlog:disable", "-Xlog:all=warning:stderr",
             "-cp", f"{jar}:{_classpath()}", MAIN_CLASS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            preexec_fn=_die_with_parent)
        assert proc.stdin is not None and proc.stdout is not None
        # The reader stops itself at the time-out; this covers a JVM that hangs anyway.
        watchdog = threading.Timer(timeout_s + 60.0, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        count = 0
        batches: list[pa.RecordBatch] = []
        problem: str | None = None
        try:
            proc.stdin.write(("\n".join(lines) + "\n").encode())
            proc.stdin.close()
            while True:
                tag = proc.stdout.read(1)
                if tag == b"C":
                    batch = _chunk(proc.stdout)
                    batches.append(batch)
                    count += batch.num_rows
                    if on_progress is not None:
                        on_progress(count)
                elif tag == b"T":
                    size = int(np.frombuffer(_read_exactly(proc.stdout, 4), "<i4")[0])
                    info = json.loads(bytes(_read_exactly(proc.stdout, size)))
                    topic = info["topic"]
                    table = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
                    batches = []
                    on_topic(topic, table, {int(p): int(r) for p, r in info["reached"].items()},
                             list(info["problems"]))
                    done.add(topic)
                elif tag == b"D":
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=30.0)  # a first run writes its class archive
                    break
                elif not tag:
                    raise EOFError("the reader ended without finishing")
                else:  # not a frame: the JVM itself talking (it cannot start, say)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5.0)  # let it finish its sentence
                    proc.kill()
                    said = (tag + proc.stdout.read(4000)).decode(errors="replace")
                    raise EOFError(" | ".join(said.strip().splitlines()[:3]))
        except (EOFError, OSError, ValueError) as exc:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-3:]
            problem = f"the Java reader failed: {exc}" + (f" ({' | '.join(tail)})"
                                                         if tail else "")
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if archive is not None:
                if proc.returncode == 0 and archive.is_file():
                    archive.replace(_archive_path(jar))
                archive.unlink(missing_ok=True)
    for topic in topics:
        if topic not in done:  # short: it got nowhere past its starts
            on_topic(topic, RECORD_SCHEMA.empty_table(),
                     {p: s for (t, p), s in starts.items() if t == topic},
                     [problem or "the Java reader ended without this topic"])
