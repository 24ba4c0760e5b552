"""Child processes that can always be stopped: own process group, log file, pid file.

Every long-lived process pgval starts (Kafka brokers, Spark master/workers,
drivers, generators, packet holders) goes through :func:`spawn`, so that

* it runs in its own session/process group and :meth:`Managed.stop` kills the
  whole tree (a JVM and the executors it forked),
* its output lands in a log file under the run directory, and
* a pid file under ``<run_dir>/pids`` lets ``pgval cleanup`` find and stop it
  after a pgval that was itself killed with SIGKILL. The file holds the pid *and* the
  process's start time (clock ticks since boot, as :class:`~pgval.host.identity.Owner`):
  a pid reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.core.errors import EnvironmentFailure
from pgval.core.files import append_private, write_private_json
from pgval.host.identity import boot_id, start_ticks


@dataclass
class Managed:
    """A spawned process group with its log and pid file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    pid_file: Path | None = None
    argv: list[str] = field(default_factory=list)
    #: Where this process's output begins in ``log_path`` (an earlier process of the same
    #: name, in a directory used again, wrote what comes before).
    log_start: int = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_s: float = 5.0, sig: int = signal.SIGTERM) -> None:
        """Signal the whole process group, escalate to SIGKILL after ``grace_s``; idempotent."""
        kill_group(self.popen.pid, grace_s=grace_s, sig=sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=max(grace_s, 1.0))
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL the group at once (a crash fault, not a shutdown)."""
        self.stop(grace_s=0.0, sig=signal.SIGKILL)

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines this process wrote (never an earlier one's)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self.log_start)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, grace_s: float = 5.0, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to a process group, wait up to ``grace_s``, then SIGKILL what is left."""
    if not _group_alive(pgid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return
        # Reap our own children so zombies do not keep the group "alive".
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-pgid, os.WNOHANG)
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    # Give the kernel a moment to reap, so callers can rely on "gone" afterwards.
    for _ in range(100):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-pgid, os.WNOHANG)
        if not _group_alive(pgid):
            return
        time.sleep(0.02)


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    pid_dir: Path | None = None,
) -> Managed:
    """Start ``argv`` in a new session (its own process group), output appended to ``log_path``."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    log = append_private(log_path)  # handed to the child, closed below
    log_start = os.fstat(log.fileno()).st_size
    try:
        popen = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise EnvironmentFailure(f"cannot start {name}: {argv[0]} was not found") from exc
    finally:
        log.close()
    pid_file = None
    if pid_dir is not None:
        pid_file = pid_dir / f"{name}.json"
        write_pid_file(pid_file, name, popen.pid)
    return Managed(name=name, popen=popen, log_path=log_path, pid_file=pid_file, argv=list(argv),
                   log_start=log_start)


def write_pid_file(path: Path, name: str, pid: int, **extra: Any) -> None:
    """Record ``pid`` (the leader of its own group) with its start ticks and boot id.

    Why the start ticks: a pid file outlives the process it names when pgval is killed;
    by the time cleanup reads it the pid may belong to anything. Only a leader whose
    start ticks still match (or a group whose leader is gone: the kernel does not hand
    out a pid still in use as a group id) is ours. No argv: it may hold secrets.
    """
    record = {"name": name, "pgid": pid, "start": start_ticks(pid), "boot": boot_id(), **extra}
    write_private_json(path, record)


def recorded_group_is_ours(record: Mapping[str, Any]) -> bool:
    """True if the process group a pid file names is still the one pgval started.

    The leader alive: its start ticks and boot must match the record. The leader gone
    but members left: the group is ours (Linux never reuses a pid while a group has that
    id). A record without start ticks (written by an older pgval) is not trusted.
    """
    try:
        pgid, start = int(record["pgid"]), int(record["start"])
    except (KeyError, TypeError, ValueError):
        return False
    if record.get("boot") and record.get("boot") != boot_id():
        return False
    ticks = start_ticks(pgid)
    if ticks is not None:
        return ticks == start
    return _group_alive(pgid)


def kill_recorded(pid_dir: Path) -> list[str]:
    """Stop every process group recorded under ``pid_dir`` (used by ``pgval cleanup``)."""
    stopped: list[str] = []
    if not pid_dir.is_dir():
        return stopped
    for pid_file in sorted(pid_dir.glob("*.json")):
        try:
            info = json.loads(pid_file.read_text())
            pgid = int(info["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            pid_file.unlink(missing_ok=True)
            continue
        if _group_alive(pgid) and recorded_group_is_ours(info):
            kill_group(pgid, grace_s=3.0)
            stopped.append(str(info.get("name", pgid)))
        pid_file.unlink(missing_ok=True)
    return stopped


#: Where the kernel takes the local ports of outgoing connections from.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port :func:`free_port` hands out (clear of the registered services below it).
_LISTEN_PORT_FLOOR = 10_000


def listen_port_range() -> tuple[int, int] | None:
    """The ports below the kernel's ephemeral range (10000-32767 by default), or None.

    A port the OS picks with ``bind(0)`` comes from the ephemeral range, and so does the local
    port of every outgoing connection on the machine. Between choosing a port and the daemon
    binding it (seconds: a JVM starts), any client could connect out from that very port and
    the daemon would exit with "Address already in use" (CI saw a Kafka broker do so). Below
    the range only a process that binds that exact port on purpose can take it."""
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if low - 1 - _LISTEN_PORT_FLOOR < 1000:
        return None
    return _LISTEN_PORT_FLOOR, low - 1


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


#: Ports :func:`free_port` handed out in this process: never handed out twice, so the
#: several ports one cluster asks for (two per broker, Spark's master and web UIs) differ.
_HANDED_OUT: set[int] = set()
#: Not the module ``random``: a seeded global generator (Hypothesis seeds it per example)
#: would have two processes draw the same ports.
_DRAW = random.SystemRandom()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now, for a daemon to listen on.

    Chosen at random below the ephemeral range (see :func:`listen_port_range`), so no
    outgoing connection can take it before the daemon binds it; the OS's pick only where
    the range leaves no room below it. Never one this process handed out before."""
    span = listen_port_range()
    draws = (_DRAW.randint(*span) for _ in range(200)) if span is not None else ()
    for port in draws:
        if port not in _HANDED_OUT and _bindable(host, port):
            _HANDED_OUT.add(port)
            return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def log_cause(log_path: Path, limit: int = 240, start: int = 0) -> str:
    """The line of a daemon's log that best says why it failed ("" when none does), for an
    error message that stands on its own even after the log is gone: the last line naming a
    known cause (a taken port, memory), else the last exception, else the last error.
    ``start``: where this process's part of the log begins (a daemon restarted in the same
    folder appends to its predecessor's log, whose causes are not this one's)."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(start, fh.seek(0, os.SEEK_END) - 256_000))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for cause in _CAUSES:
        for line in reversed(lines):
            if cause.search(line):
                line = line.strip()
                return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


#: What a failed daemon's log says, most telling first.
_CAUSES = (re.compile(r"Address already in use|OutOfMemoryError|No space left"),
           re.compile(r"Exception|Error:"), re.compile(r"\b(ERROR|FATAL)\b"))



def wait_for_port(host: str, port: int, timeout_s: float, proc: Managed | None = None) -> None:
    """Block until ``host:port`` accepts TCP connections, or raise a plain error."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            cause = log_cause(proc.log_path, start=proc.log_start)
            raise EnvironmentFailure(
                f"{proc.name} exited before listening on {host}:{port}"
                + (f" ({cause})" if cause else "") + f"; see {proc.log_path}"
            )
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    where = f"; see {proc.log_path}" if proc is not None else ""
    raise EnvironmentFailure(f"nothing listened on {host}:{port} within {timeout_s:.0f} s{where}")


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path``: serialises work between concurrent pgval processes."""
    with append_private(path) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
