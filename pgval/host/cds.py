"""Class-data sharing (AppCDS) for the JVMs pgval starts: Spark's driver, executors, master
and worker, the Kafka brokers, and the local batch sessions (a job's batch oracle, ``pgval
check --job``, ``pgval lint``).

On 2 cores a JVM start is mostly class loading (parsing and verifying Spark's ~15,000
classes); an archive of the classes a run loaded maps them in ready-made. A PySpark session
and its first query took 8.6-8.9 s without and 5.4-5.6 s with the driver's archive.

How an archive comes to be: a JVM whose archive is missing starts with
``-XX:+RecordDynamicDumpInfo``; at the end of that run (after the read-back, during the
teardown) pgval asks it through ``jcmd PID VM.cds dynamic_dump`` to write the classes it
has loaded, into a ``.part`` file renamed into place once the dump succeeded. Every later
JVM of that kind starts with ``-XX:SharedArchiveFile``. So the first run on a machine pays
the dumps (a few seconds each, once) and no run depends on one: a JVM that finds the
archive stale (another Java, other jars) ignores it and loads its classes as before
(``-Xshare:auto``, the default), and the key below changes with the Java and the jars, so
a fresh archive is recorded. What a JVM does is never changed, only where its classes
come from. An archive is kept only once a JVM has mapped it checking its checksums
(:func:`maps_cleanly`): a damaged one would not be ignored but crash (or mislead) every
JVM given it. ``PGVAL_CLASS_SHARING=0``
turns it off (docs/performance.md measures both).

Archives live in ``$PGVAL_CACHE/cds`` (default ``~/.cache/pgval/cds``), 50-150 MB each.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pgval.host.jars import default_cache_dir
from pgval.host.procs import file_lock

#: Environment variable that turns class sharing off ("0").
ENV = "PGVAL_CLASS_SHARING"
#: The kinds of JVM pgval keeps an archive for (each loads its own set of classes).
KINDS = ("spark-driver", "spark-executor", "spark-master", "spark-worker", "kafka-broker",
         "batch-session")


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """``$PGVAL_CACHE/cds``, beside the jar cache."""
    return default_cache_dir().parent / "cds"


def empty_dir(name: str) -> Path | None:
    """An empty folder that stays where it is (a classpath entry every JVM of a kind
    shares), private to this user; None when class sharing is off or someone put files
    there."""
    if not enabled():
        return None
    folder = cache_dir().parent / name
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if any(folder.iterdir()) or not _private(folder):
            return None
    except OSError:
        return None
    return folder


def _stamp(path: Path) -> str:
    with contextlib.suppress(OSError):
        st = path.stat()
        return f"{path}:{st.st_size}:{st.st_mtime_ns}"
    return f"{path}:missing"


def _classpath_stamps(classpath: Iterable[Path]) -> list[str]:
    """Each entry's name, size and time; a directory (Spark's ``jars/``) by its name and
    its jars (the JVM refuses an archive made with another classpath)."""
    stamps: list[str] = []
    for entry in classpath:
        if entry.is_dir():
            stamps.append(str(entry))
            stamps.extend(_stamp(j) for j in sorted(entry.glob("*.jar")))
        else:
            stamps.append(_stamp(entry))
    return stamps


def _real_java(java: str) -> Path:
    return Path(os.path.realpath(shutil.which(java) or java))


def java_stamps(java: str) -> list[str]:
    """The real JVM (an archive is refused by any other build of it)."""
    real = _real_java(java)
    return [str(real), *(_stamp(lib) for lib in real.parent.parent.glob("lib/server/libjvm.so"))]


@dataclass(frozen=True)
class ClassArchive:
    """The archive of one kind of JVM for one Java and one classpath; ``recording`` says
    how the JVM that :meth:`flags` was asked for starts (no archive yet: it records)."""

    kind: str
    path: Path
    java: str
    recording: bool

    def flags(self) -> list[str]:
        if self.recording:
            return ["-XX:+RecordDynamicDumpInfo"]
        return [f"-XX:SharedArchiveFile={self.path}"]

    def flags_text(self) -> str:
        return " ".join(self.flags())

    def dump(self, pid: int, timeout_s: float = 60.0) -> str:
        """Write the classes JVM ``pid`` (started with :meth:`flags` while ``recording``)
        loaded into the archive. Returns what happened, in words; never raises: a run
        never depends on it."""
        if not self.recording:
            return "not recording"
        jcmd = _real_java(self.java).with_name("jcmd")
        if not jcmd.is_file():
            return f"no jcmd beside {self.java}"
        part = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:8]}.part")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with file_lock(self.path.parent / f".{self.kind}.lock"):
                if self.path.is_file():
                    return "already made by another run"
                _remove_stale_parts(self.path.parent)
                out = subprocess.run([str(jcmd), str(pid), "VM.cds", "dynamic_dump",
                                      str(part)], capture_output=True, text=True,
                                     timeout=timeout_s, check=False)
                said = (out.stdout + out.stderr).strip().splitlines()
                if out.returncode != 0 or not part.is_file() or part.stat().st_size == 0:
                    return f"the dump failed: {said[-1] if said else out.returncode}"
                if not maps_cleanly(self.java, part):
                    return "the dump failed: a JVM could not map the archive it wrote"
                part.replace(self.path)
                _prune(self.path.parent, self.kind)
                return f"dumped ({self.path.stat().st_size >> 20} MiB)"
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the dump failed: {exc}"
        finally:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
            # jcmd's socket into the JVM: it would outlive a JVM that is SIGKILLed.
            with contextlib.suppress(OSError):
                Path(f"/tmp/.java_pid{pid}").unlink(missing_ok=True)


def _remove_stale_parts(folder: Path, older_than_s: float = 3600.0) -> None:
    """A ``.part`` a timed-out ``jcmd``'s JVM finished writing after pgval gave up, and
    the ``.part.temp`` a JVM killed while dumping left (the JVM writes ``NAME.temp``,
    then renames it to ``NAME``)."""
    for old in [*folder.glob("*.part"), *folder.glob("*.part.temp")]:
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > older_than_s:
                old.unlink()


#: Archives kept per kind (other Javas, other Spark lines); older ones are removed.
KEEP_PER_KIND = 3


def _prune(folder: Path, kind: str) -> None:
    """Keep the newest archives of ``kind``: each is 30-130 MB, and jars change with every
    upgrade. A JVM that maps a removed one keeps its mapping (Linux unlinks lazily)."""
    with contextlib.suppress(OSError):
        found = sorted(folder.glob(f"{kind}-*.jsa"), key=lambda p: p.stat().st_mtime,
                       reverse=True)
        for old in found[KEEP_PER_KIND:]:
            old.unlink(missing_ok=True)


def maps_cleanly(java: str, path: Path) -> bool:
    """Is ``path`` whole? A damaged archive does not make a JVM fall back: one cut short
    kills it with SIGBUS while mapping, and a changed byte is mapped as it is (a JVM checks
    checksums only when asked). So no archive is kept before a JVM mapped it checking
    every region's checksum (~0.3 s; this JVM's classpath is not the recording one's, so
    it stops using the archive after that check, which is all this needs)."""
    with tempfile.TemporaryDirectory(prefix="pgval-cds-") as tmp:
        try:
            out = subprocess.run([java, f"-XX:SharedArchiveFile={path}", "-Xshare:auto",
                                  "-XX:+VerifySharedSpaces", "-Xlog:cds=info",
                                  f"-XX:ErrorFile={tmp}/hs_err.log", "-version"],
                                 capture_output=True, text=True, timeout=60, cwd=tmp,
                                 check=False)
        except (OSError, subprocess.SubprocessError):
            return False
    return out.returncode == 0 and "Checksum verification failed" not in out.stdout + out.stderr


def _private(path: Path) -> bool:
    """Ours alone: an archive is code the JVM runs (as root, perhaps), so one that another
    user could have written or swapped is not used."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _carried(path: Path) -> bool:
    """Can ``path`` travel in a JVM option string? Spark splits those at whitespace and
    reads quotes, and Java reads ``:`` in SharedArchiveFile as two archives."""
    return not any(c.isspace() or c in "\"'\\" + os.pathsep for c in str(path))


def archive(kind: str, java: str, classpath: Sequence[Path]) -> ClassArchive | None:
    """The archive for a JVM of ``kind`` run by ``java`` on ``classpath``; None when class
    sharing is off or the cache is not this user's alone."""
    if not enabled():
        return None
    if kind not in KINDS:
        raise ValueError(f"unknown JVM kind {kind!r}")
    key = hashlib.sha256("\0".join([kind, *java_stamps(java),
                                    *_classpath_stamps(classpath)]).encode()).hexdigest()[:16]
    folder = cache_dir()
    path = folder / f"{kind}-{key}.jsa"
    if not (_carried(path) and _private(folder) and _private(path)):
        return None
    return ClassArchive(kind, path, java, recording=not path.is_file())


def flags_text(found: ClassArchive | None) -> str:
    return found.flags_text() if found is not None else ""


def dump_all(wanted: Iterable[tuple[ClassArchive, int]], budget_s: float = 90.0,
             stop: Callable[[], bool] = lambda: False) -> dict[str, str]:
    """Dump each recording JVM's archive (one per kind), one after the other: each dump
    is CPU-bound and these 2 cores are shared. Past ``budget_s`` or once ``stop()`` (a
    signal waiting for the teardown), the rest waits for a later run (the order of
    ``wanted`` says which first). Returns what happened per kind."""
    done: dict[str, str] = {}
    t0 = time.monotonic()
    for found, pid in wanted:
        if not found.recording or found.kind in done:
            continue
        if stop() or time.monotonic() - t0 > budget_s:
            done[found.kind] = "left for a later run"
            continue
        # A dump begun may finish (a small budget stops the next ones, never this one).
        done[found.kind] = found.dump(pid, timeout_s=max(60.0, budget_s))
    return done
