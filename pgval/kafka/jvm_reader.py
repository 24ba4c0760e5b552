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
librdkafka reader reads (tests/test_kafka_runtime.py compares them, aborted transactions
included): client settings it cannot translate, or no JDK, keep the librdkafka reader,
and :func:`jvm_unusable` says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa

from pgval.core.errors import EnvironmentFailure
from pgval.host import cds
from pgval.host.jars import default_cache_dir, ensure_jars, java_executable
from pgval.host.javac import build_jar
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
#: How a problem of a Java reader that died begins (``read_topics`` then reads again).
JVM_FAILED = "the Java reader failed"
# (topic, partition, start, end): an offset range to read.
Task = tuple[str, int, int, int]
# Takes one topic's records, how far each partition got and the problems.
Taker = Callable[[str, pa.Table, dict[int, int], list[str]], None]
# Given each chunk's values as it arrives, returns the caller's note of it: work done on
# one core while the JVM reads on the other (pgval's own inputs decoded, say).
ChunkNote = Callable[[pa.BinaryArray], object]


def jvm_unusable(conf: Mapping[str, object]) -> str | None:
    """Why the Java reader cannot read as librdkafka would with these settings, or None.

    Only what both clients read the same way passes: no TLS (the JVM trusts its own
    cacerts, librdkafka the system's), PLAIN or SCRAM logins given as user and password
    or as JAAS, every bootstrap address with its port."""
    odd = sorted(k for k in conf if k not in TRANSLATABLE and k not in _LIBRDKAFKA_ONLY)
    if odd:
        return f"client settings without a Java translation: {', '.join(odd)}"
    for key, value in conf.items():
        if key not in _LIBRDKAFKA_ONLY and any(c in str(value) for c in "\t\n\r"):
            return f"client setting {key} holds a tab or line break"
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return f"security.protocol {protocol} (TLS trusts other certificates in Java)"
    if protocol == "SASL_PLAINTEXT":
        mechanism = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI")))
        if mechanism.upper() != "PLAIN" and not mechanism.upper().startswith("SCRAM-"):
            return f"sasl mechanism {mechanism}"
        if "sasl.jaas.config" not in conf and "sasl.username" not in conf:
            return "a SASL login without a user name or JAAS settings"
    if any(":" not in host for host in str(conf.get("bootstrap.servers", "")).split(",")):
        return "a bootstrap address without its port"
    if java_executable() is None:
        return "no java on PATH"
    return None


def prepare() -> tuple[str, Path, str]:
    """(java, the reader's jar, its classpath), building the jar on first use; a missing
    JDK, Maven cache or compiler is a :class:`PgvalError` (the caller reads with
    librdkafka then)."""
    java = java_executable()
    if java is None:
        raise EnvironmentFailure("the bulk read-back needs java on PATH")
    try:
        classpath = _classpath()
        return java, ensure_reader_jar(classpath), classpath
    except OSError as exc:
        raise EnvironmentFailure(f"cannot build the Java reader: {exc}") from exc


def _classpath() -> str:
    return ensure_jars(spark=False).kafka_classpath_str


def ensure_reader_jar(classpath: str) -> Path:
    """The reader's jar, compiled against the broker's kafka-clients on first use (a
    new classpath, a new jar)."""
    return build_jar(default_cache_dir(), "pgval-reader", {SOURCE.name: SOURCE.read_text()},
                     classpath, "the bulk read-back", salt=classpath.encode())


def java_settings(conf: Mapping[str, object]) -> dict[str, str]:
    """The Java consumer's settings for a read with librdkafka settings ``conf``."""
    kept = {k: str(v) for k, v in conf.items() if k not in _LIBRDKAFKA_ONLY}
    return {**java_client_options(kept), "max.poll.records": "10000",
            "receive.buffer.bytes": str(4 << 20), "fetch.max.wait.ms": "50",
            "client.id": "pgval-read"}


def _archive_path(java: str, jar: Path) -> Path:
    """The class archive of ``jar`` with this JVM (a JVM refuses an archive made by
    another, and it would never be rebuilt): keyed by the real java and its libjvm."""
    key = hashlib.sha256("\0".join(cds.java_stamps(java)).encode()).hexdigest()[:12]
    return jar.with_name(f"{jar.stem}-{key}.jsa")


def _class_archive(java: str, jar: Path) -> tuple[Path | None, list[str]]:
    """The JVM flags that share the reader's classes (AppCDS): the archive of a first run
    (dumped at its exit, ~1.4 s, kept only when that run ended well) maps them in later:
    a read's fixed cost went from ~1.45 s to ~1.0 s (three small topics, SASL login).
    Returns (the archive this run dumps, or None; the flags)."""
    kept = _archive_path(java, jar)
    if kept.is_file():
        return None, [f"-XX:SharedArchiveFile={kept}"]
    for old in kept.parent.glob(f"{kept.name}.*.part"):  # a dump killed half-way
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > 3600:
                old.unlink()
    part = kept.with_name(f"{kept.name}.{uuid.uuid4().hex}.part")
    return part, [f"-XX:ArchiveClassesAtExit={part}"]


def _death_signal() -> Callable[[], None]:
    """What the reader's child runs before exec: SIGKILL when pgval dies (the reader holds
    nothing to clean up). libc is looked up here, in the parent: no dlopen after fork."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return lambda: None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return arm


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
    if int(offsets[-1]) != len(data):
        raise ValueError(f"a chunk's lengths add up to {int(offsets[-1])} bytes, not "
                         f"{len(data)}: the stream is out of step")
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
    cols = _read_exactly(stream, n * 28)  # int64, int64, int32, int32, int32 per record
    offs = np.frombuffer(cols, "<i8", n, 0)
    ts = np.frombuffer(cols, "<i8", n, 8 * n)
    parts = np.frombuffer(cols, "<i4", n, 16 * n)
    key_lens = np.frombuffer(cols, "<i4", n, 20 * n)
    value_lens = np.frombuffer(cols, "<i4", n, 24 * n)
    keys = _binary(key_lens, _read_exactly(stream, key_bytes))
    values = _binary(value_lens, _read_exactly(stream, value_bytes))
    return pa.RecordBatch.from_arrays([pa.array(parts), pa.array(offs), pa.array(ts),
                                       keys, values], schema=RECORD_SCHEMA)


def _last_words(stderr: bytes) -> str:
    """The JVM's explanation from its stderr: the first exception or error line, else the
    last lines (never a bare stack frame)."""
    lines = [ln.strip() for ln in stderr.decode(errors="replace").strip().splitlines()
             if ln.strip() and not ln.lstrip().startswith("at ")]
    first = next((k for k, ln in enumerate(lines) if "Exception" in ln or "Error" in ln),
                 max(0, len(lines) - 3))
    said = lines[first:first + 3]
    return f" ({' | '.join(said)})" if said else ""


def _frames(stream: IO[bytes], frames: queue.SimpleQueue[tuple[str, object]]) -> None:
    """Read the reader's frames into ``frames`` until 'D', the end of the stream or a byte
    that is no frame: a thread of its own, so the JVM never waits while Python works on a
    chunk (the pipe's reads let go of the GIL)."""
    try:
        while True:
            tag = stream.read(1)
            if tag == b"C":
                frames.put(("C", _chunk(stream)))
            elif tag == b"T":
                size = int(np.frombuffer(_read_exactly(stream, 4), "<i4")[0])
                frames.put(("T", json.loads(bytes(_read_exactly(stream, size)))))
            elif tag == b"D":
                frames.put(("D", None))
                return
            else:  # the end, or the JVM itself talking (it cannot start, say)
                frames.put(("X", tag))
                return
    except (EOFError, OSError, ValueError, MemoryError) as exc:
        frames.put(("E", exc))
    except BaseException as exc:  # noqa: BLE001 - the taker must never wait for nothing
        frames.put(("E", EOFError(f"reading the Java reader's frames failed: {exc!r}")))


def _next_frame(frames: queue.SimpleQueue[tuple[str, object]], reader: threading.Thread
                ) -> tuple[str, object]:
    """The next frame :func:`_frames` read; a reading thread that ended without its last
    word is an :class:`EOFError`, never a wait without end."""
    while True:
        try:
            return frames.get(timeout=1.0)
        except queue.Empty:
            if not reader.is_alive():
                try:
                    return frames.get_nowait()  # its last word, put as it ended
                except queue.Empty:
                    raise EOFError("the Java reader's frames stopped without an end") from None


def _exchange(proc: subprocess.Popen[bytes], request: str, on_topic: Taker,
              on_progress: Callable[[int], None] | None, done: set[str],
              on_chunk: ChunkNote | None = None,
              notes_by_topic: dict[str, list[object]] | None = None) -> None:
    """Send the reader its request and take its frames until 'D'; ``on_chunk`` sees each
    chunk's values as it arrives, while the JVM reads on, and a topic's notes (one per
    chunk of its values, in order) go to ``notes_by_topic``."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(request.encode())
    proc.stdin.close()
    # Unbounded: every chunk is kept until its topic ends anyway.
    frames: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
    reader = threading.Thread(target=_frames, args=(proc.stdout, frames),
                              name="pgval-read-frames", daemon=True)
    reader.start()
    count = 0
    batches: list[pa.RecordBatch] = []
    notes: list[object] | None = [] if on_chunk is not None else None
    while True:
        kind, item = _next_frame(frames, reader)
        if kind == "C":
            assert isinstance(item, pa.RecordBatch)
            batches.append(item)
            notes = _noted(on_chunk, item, notes)
            count += item.num_rows
            if on_progress is not None:
                on_progress(count)
        elif kind == "T":
            info = item
            assert isinstance(info, dict)
            table = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
            on_topic(info["topic"], table,
                     {int(p): int(r) for p, r in info["reached"].items()},
                     list(info["problems"]))
            if notes is not None and notes_by_topic is not None:
                notes_by_topic[info["topic"]] = notes
            batches = []
            notes = [] if on_chunk is not None else None
            done.add(info["topic"])
        elif kind == "D":
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30.0)  # a first run writes its class archive
            return
        elif kind == "E":
            assert isinstance(item, BaseException)
            raise item
        elif not item:
            raise EOFError("the reader ended without finishing")
        else:  # not a frame: the JVM itself talking (it cannot start, say)
            assert isinstance(item, bytes)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)  # let it finish its sentence
            proc.kill()
            said = (item + proc.stdout.read(4000)).decode(errors="replace")
            raise EOFError(" | ".join(said.strip().splitlines()[:3]))


def _noted(on_chunk: ChunkNote | None, batch: pa.RecordBatch, notes: list[object] | None
           ) -> list[object] | None:
    """``notes`` with ``on_chunk``'s note of ``batch``'s values. A note is work done early
    for the caller, never part of the read: one that fails drops the topic's notes, and
    the caller does that work again later (where the same error speaks for itself)."""
    if on_chunk is None or notes is None:
        return None
    try:
        notes.append(on_chunk(batch.column(4)))
    except Exception:  # noqa: BLE001 - the read goes on; the caller redoes the work
        return None
    return notes


def read_tasks_jvm(conf: Mapping[str, object], tasks: Sequence[Task], timeout_s: float,
                   idle_timeout_s: float, on_topic: Taker,
                   on_progress: Callable[[int], None] | None = None,
                   on_chunk: ChunkNote | None = None) -> dict[str, list[object]]:
    """Read ``tasks`` (at most one range per partition) in one Java reader; hand every
    topic's records, how far each partition got and the problems to ``on_topic``, as
    :func:`pgval.kafka.reader._read_tasks` does. A reader that fails leaves its topics
    short, with its last words as the problem; it never outlives this call or pgval.
    What keeps it from starting at all (no JDK, no jar) is a :class:`PgvalError`.

    ``on_chunk`` is called with each chunk's values as it arrives; returns each topic's
    notes, one per chunk of its values in order (a topic whose notes failed has none)."""
    java, jar, classpath = prepare()
    lines = [f"conf\t{k}\t{v}" for k, v in java_settings(conf).items()]
    lines.append(f"limits\t{int(timeout_s * 1000)}\t{int(idle_timeout_s * 1000)}")
    lines += [f"task\t{t}\t{p}\t{s}\t{e}" for t, p, s, e in tasks]
    lines.append("go")
    topics = list(dict.fromkeys(t for t, *_ in tasks))
    starts = {(t, p): s for t, p, s, _ in tasks}
    done: set[str] = set()
    notes: dict[str, list[object]] = {}
    problem: str | None = None
    archive, sharing = _class_archive(java, jar)
    with tempfile.TemporaryFile() as err:
        proc: subprocess.Popen[bytes] | None = None
        watchdog = None
        try:
            # Its own session: a Ctrl-C reaches pgval, which stops the reader in finally.
            proc = subprocess.Popen(
                [java, f"-Xmx{HEAP}", "-XX:+UseSerialGC", "-Xss1m", *sharing,
                 "-XX:+DisplayVMOutputToStderr", "-Xlog:disable", "-Xlog:all=warning:stderr",
                 "-cp", f"{jar}{os.pathsep}{classpath}", MAIN_CLASS],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                preexec_fn=_death_signal(), start_new_session=True)
            # The reader stops itself at each topic's time-out; this covers a hung JVM.
            watchdog = threading.Timer(len(topics) * timeout_s + 60.0, proc.kill)
            watchdog.daemon = True
            watchdog.start()
            _exchange(proc, "\n".join(lines) + "\n", on_topic, on_progress, done, on_chunk,
                      notes)
        except (EOFError, OSError, ValueError, MemoryError) as exc:
            err.seek(0)
            problem = f"{JVM_FAILED}: {exc}" + _last_words(err.read())
        finally:
            if watchdog is not None:
                watchdog.cancel()
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            if archive is not None:
                with contextlib.suppress(OSError):
                    if (proc is not None and proc.returncode == 0 and archive.is_file()
                            and cds.maps_cleanly(java, archive)):
                        archive.replace(_archive_path(java, jar))
                    archive.unlink(missing_ok=True)
    for topic in topics:
        if topic not in done:  # short: it got nowhere past its starts
            on_topic(topic, RECORD_SCHEMA.empty_table(),
                     {p: s for (t, p), s in starts.items() if t == topic},
                     [problem or "the Java reader ended without this topic"])
    return notes
