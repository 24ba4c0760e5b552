"""The streaming driver as a separate process, so a fault can kill it and restart it.

It writes the driver's document (pgval.core.driver_spec) as a private file, runs
``python -m pgval.topologies.driver --spec FILE`` (see topologies/driver.py) and
learns about the query through the progress file the driver writes: one JSON
line per event, ``{"event": "started", ...}`` once the query runs, then one
line per micro-batch progress. With a control directory (``DriverSpec.control_dir``)
pgval can also ask the running driver to act (:class:`DriverControl`; the driver's end
is pgval.topologies.control_channel).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.core.clock import now_ms
from pgval.core.driver_spec import (
    JOB_REFUSED,
    KAFKA_OPTIONS_ENV,
    SPARK_CONF_ENV,
    DriverDocument,
)
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.core.files import write_private_json
from pgval.host.cds import ClassArchive
from pgval.host.procs import Managed, spawn
from pgval.spark.daemons import UI_KILL_OFF

#: The driver's document in the directory above its logs (a run's, a shared driver's).
SPEC_FILE = "driver-spec.json"
#: How long a launcher's signal command (``docker exec ... kill``) may take.
SIGNAL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DriverSpec(DriverDocument):
    """The driver's document (:class:`~pgval.core.driver_spec.DriverDocument`: what it runs,
    checked when made) plus how pgval starts it, which never enters the document: the
    user's settings (the driver's environment), the placement's environment, and a
    launcher's prefix, Python, path map and signals."""

    #: The placement's environment variables for the driver (a cluster's secret file...).
    extra_env: dict[str, str] = field(default_factory=dict)
    #: Kafka client settings (a cluster's login, ``--kafka-config``) and the user's Spark
    #: settings (``--spark-conf``, every deployment): passed in the driver's environment,
    #: never in its document or on its command line, as they may hold passwords; the
    #: driver hands the Spark ones to its JVM in memory.
    kafka_options: dict[str, str] = field(default_factory=dict)
    user_conf: dict[str, str] = field(default_factory=dict)
    #: Prefix that runs the driver elsewhere (``docker exec pgval-runner``), its Python,
    #: how host paths look there, and how to signal it there (killing `docker exec` is not
    #: enough to stop a process inside a container).
    launcher: list[str] = field(default_factory=list)
    python: str = sys.executable
    path_map: Callable[[Path], str] | None = None
    signal_argv: Callable[[str], list[str]] | None = None

    def __post_init__(self) -> None:
        """The document's ``conf`` wins over the user's settings in the driver: a web UI
        the user turns on (``--spark-conf spark.ui.enabled=true``) has no kill endpoints."""
        super().__post_init__()
        object.__setattr__(self, "conf", {**self.conf, **UI_KILL_OFF})

    def _path(self, path: Path) -> str:
        return self.path_map(path) if self.path_map else str(path)

    def for_driver(self) -> DriverDocument:
        """The document as the driver sees it (host paths mapped for a launcher)."""
        doc = self.document()
        return doc.mapped(self.path_map) if self.path_map else doc

    def write(self, path: Path) -> Path:
        """Write :meth:`for_driver` to ``path``: a private file (0600, no planted link
        followed) holding no secret: the user's settings stay in :meth:`env`."""
        return write_private_json(path, self.for_driver().to_json(), indent=1)

    def argv(self, spec_file: Path) -> list[str]:
        """The driver's command line, given the document written to ``spec_file``."""
        return [*self.launcher, self.python, "-m", "pgval.topologies.driver",
                "--spec", self._path(spec_file)]

    def session_key(self) -> str:
        """What a served driver's session is made of: a run whose key differs cannot run
        in it (its Spark settings, placement, environment and the cluster it reaches)."""
        return json.dumps({
            **self.session(), "user_conf": self.user_conf,
            "kafka_options": self.kafka_options, "extra_env": self.extra_env,
            "launcher": self.launcher, "python": self.python}, sort_keys=True)

    def env(self) -> dict[str, str]:
        """The driver's extra environment: placement's variables plus the user's settings."""
        env = dict(self.extra_env)
        if self.kafka_options:
            env[KAFKA_OPTIONS_ENV] = json.dumps(self.kafka_options)
        if self.user_conf:
            env[SPARK_CONF_ENV] = json.dumps(self.user_conf)
        return env


class DriverProcess:
    """Start, wait for, stop, kill and restart the streaming driver."""

    def __init__(self, spec: DriverSpec, log_dir: Path, pid_dir: Path,
                 spec_file: Path | None = None) -> None:
        self.spec = spec
        self.log_dir = log_dir
        self.pid_dir = pid_dir
        #: Where its document is written (default: ``SPEC_FILE`` beside ``log_dir``).
        self.spec_file = spec_file if spec_file is not None else log_dir.parent / SPEC_FILE
        self.proc: Managed | None = None
        self.starts = 0
        self.started_at: list[float] = []
        #: A graceful stop begun in the background (:meth:`stop_soon`), joined by stop().
        self._stopping: threading.Thread | None = None
        self.stop_s: float | None = None

    def start(self, timeout_s: float = 180.0) -> float:
        """Start the driver and wait until its query runs; returns the seconds it took."""
        t0 = time.monotonic()
        seen = self._count_started()
        self.starts += 1
        self.spec.write(self.spec_file)
        self.proc = spawn(f"driver-{self.starts}", self.spec.argv(self.spec_file),
                          self.log_dir / f"driver-{self.starts}.log", env=self.spec.env(),
                          pid_dir=self.pid_dir)
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self._count_started() > seen:
                self.started_at.append(time.time())
                return time.monotonic() - t0
            if not self.proc.alive():
                if self.proc.popen.poll() == JOB_REFUSED:  # the user's job: bad input
                    said = [p.get("error") for p in self.progress()
                            if p.get("event") == "terminated" and p.get("phase") == "job"]
                    raise UserMistake(str(said[-1]) if said else self._last_error())
                raise EnvironmentFailure(
                    "the Spark driver exited before its query started: "
                    f"{self._last_error()} (log: {self.proc.log_path})")
            time.sleep(0.2)
        raise EnvironmentFailure(f"the Spark driver did not start its query within "
                                f"{timeout_s:.0f} s (log: {self.proc.log_path})")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def check(self) -> None:
        """Raise a plain error if the driver died on its own (the query failed)."""
        if self.proc is not None and not self.proc.alive():
            raise EnvironmentFailure(f"the streaming query failed: {self._last_error()} "
                                    f"(log: {self.proc.log_path})")

    def stop_soon(self) -> None:
        """Begin the graceful stop in a thread, so that it overlaps the read-back once
        nothing more is asked of the driver; :meth:`stop` waits for it."""
        if self._stopping is None and self.proc is not None:
            stopping = threading.Thread(target=self._stop_timed, name="driver-stop",
                                        daemon=True)
            stopping.start()
            self._stopping = stopping  # only a started thread is ever joined

    def _stop_timed(self) -> None:
        t0 = time.monotonic()
        try:
            self._stop()
        except Exception:
            return  # the teardown's stop() tries again, and is timed there
        if self.proc is None or not self.proc.alive():
            self.stop_s = time.monotonic() - t0

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the driver alone first (a signal to the whole group also hits the PySpark
        JVM, whose shutdown hook races the graceful query stop), then clean up the group;
        after a :meth:`stop_soon`, waits for that stop to end (at most as long as one can
        take: a launcher's signal command, the grace, the group's clean-up)."""
        stopping, self._stopping = self._stopping, None
        if stopping is not None:
            signal_s = 2 * SIGNAL_TIMEOUT_S if self.spec.signal_argv is not None else 0.0
            stopping.join(timeout=signal_s + grace_s + 10.0)
        self._stop(grace_s)

    def _stop(self, grace_s: float = 15.0) -> None:
        if self.proc is None:
            return
        if self.proc.alive():
            self._signal("TERM", signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.popen.wait(timeout=grace_s)
        self.proc.stop(grace_s=3.0)

    def kill(self) -> None:
        """SIGKILL the driver's process group: the driver-crash fault."""
        if self.proc is not None:
            self._signal("KILL", signal.SIGKILL)
            self.proc.kill()

    def _signal(self, name: str, sig: int) -> None:
        assert self.proc is not None
        if self.spec.signal_argv is not None:
            subprocess.run(self.spec.signal_argv(name), capture_output=True,
                           timeout=SIGNAL_TIMEOUT_S, check=False)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def progress(self) -> list[dict[str, Any]]:
        """All progress lines written so far (every start appends to the same file)."""
        return progress_lines(self.spec.progress_file)

    def sabotage_events(self) -> list[dict[str, Any]]:
        """The ``sabotage`` lines of the progress file (SELF-TEST runs only), oldest first."""
        return sabotage_events(self.spec.progress_file)

    def control(self) -> DriverControl:
        """A client of this driver's control channel (needs ``spec.control_dir``); it fails
        fast when the driver process is gone. Every restart keeps the same channel."""
        if self.spec.control_dir is None:
            raise EnvironmentFailure("this driver was started without a control directory")
        return DriverControl(self.spec.control_dir, self.spec.progress_file, alive=self.alive)

    def class_dump(self) -> tuple[ClassArchive, int] | None:
        """The driver's JVM, when it records its classes for an archive (pgval.host.cds):
        the newest start's, from its ``started`` line."""
        if not self.alive():
            return None
        started = [r for r in self.progress() if r.get("event") == "started"]
        info = started[-1].get("class_archive") if started else None
        if not isinstance(info, dict) or not info.get("recording") or not info.get("jvm_pid"):
            return None
        return (ClassArchive("spark-driver", Path(info["path"]), str(info["java"]),
                             recording=True), int(info["jvm_pid"]))

    def _count_started(self) -> int:
        return sum(1 for r in self.progress() if r.get("event") == "started")

    def _last_error(self) -> str:
        if self.proc is None:
            return "not started"
        lines = [ln for ln in self.proc.log_tail(80).splitlines() if ln.strip()]
        for line in reversed(lines):
            if "Error" in line or "Exception" in line or "error:" in line:
                return line.strip()[:300]
        return lines[-1].strip()[:300] if lines else "no output"


def progress_lines(progress_file: Path) -> list[dict[str, Any]]:
    """Every JSON line of a driver's progress file so far (none before it exists)."""
    rows: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError), open(progress_file, "rb") as fh:
        for line in fh:
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows


def sabotage_events(progress_file: Path) -> list[dict[str, Any]]:
    """SELF-TEST runs (``DriverSpec.sabotage``): every ``{"event": "sabotage", ...}`` line of
    a driver's progress file, oldest first, each with ``kind`` (drop|dup), ``batch_id``,
    ``nth``, ``rows``, ``ids`` (the real IDs dropped or written twice), ``negative_ids``.
    One per driver process that reached its N-th real batch; none if it never did."""
    return [row for row in progress_lines(progress_file)
            if isinstance(row, dict) and row.get("event") == "sabotage"]


class _ProgressTail:
    """Reads the progress lines appended since the last call (a run's file grows to
    thousands of lines; the control client polls it several times a second)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its newline
        rows = []
        for line in lines:
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if isinstance(row, dict):
                    rows.append(row)
        return rows


class DriverControl:
    """pgval's end of the driver's control channel (protocol: pgval.topologies.control_channel).

    ``request`` writes ``req-<n>.json`` atomically and waits for the driver's
    ``{"event": "control", "request": n, "nonce": ...}`` line in the progress file; the
    nonce tells two askers that picked the same ``n`` apart. A request not answered in
    time is withdrawn (deleted) and carries a deadline, so a driver that reads it late
    answers "expired" instead of acting. ``executor_events`` are the driver's
    ``{"event": "executors", ...}`` lines, oldest first.
    """

    def __init__(self, control_dir: Path, progress_file: Path,
                 alive: Callable[[], bool] | None = None, poll_s: float = 0.1) -> None:
        self.control_dir = Path(control_dir)
        self.progress_file = Path(progress_file)
        self.alive = alive
        self.poll_s = poll_s
        self._tail = _ProgressTail(self.progress_file)
        self._answers: list[dict[str, Any]] = []
        self._executors: list[dict[str, Any]] = []
        self._last_n = 0
        # One asker object may be shared by threads (a fault and a watcher): the tail's
        # offset and the number choice must not interleave, or answer lines are skipped.
        self._lock = threading.RLock()

    def _refresh(self) -> None:
        with self._lock:
            for row in self._tail.read_new():
                event = row.get("event")
                if event == "control":
                    self._answers.append(row)
                    if isinstance(row.get("request"), int):
                        self._last_n = max(self._last_n, row["request"])
                elif event == "executors":
                    self._executors.append(row)

    def executor_events(self) -> list[dict[str, Any]]:
        with self._lock:  # reentrant: the refresh and the copy see the same rows
            self._refresh()
            return list(self._executors)

    def answers(self) -> list[dict[str, Any]]:
        """Every ``control`` line so far (any asker's), oldest first."""
        with self._lock:
            self._refresh()
            return list(self._answers)

    def request(self, action: dict[str, Any], timeout_s: float = 30.0) -> dict[str, Any]:
        """Ask the driver to do ``action`` (``{"action": ..., ...}``); its answer line.

        Raises :class:`PgvalError` when the driver does not answer in time or exits
        first. An answer with ``ok: false`` is returned, not raised: the caller decides.
        """
        if not isinstance(action.get("action"), str):
            raise ValueError("a control request needs an \"action\" string")
        self.control_dir.mkdir(parents=True, exist_ok=True)
        nonce = secrets.token_hex(8)
        deadline = time.monotonic() + timeout_s
        n, path = self._write(dict(action), nonce, timeout_s)
        while True:
            for row in self.answers():
                if row.get("request") == n and row.get("nonce") == nonce:
                    return row
            if time.monotonic() > deadline or (self.alive is not None and not self.alive()):
                with contextlib.suppress(OSError):
                    path.unlink()
                why = ("exited before answering" if self.alive is not None and not self.alive()
                       else f"did not answer within {timeout_s:g} s")
                raise EnvironmentFailure(
                    f"the Spark driver {why} control request {n} ({action['action']}); "
                    f"requests are read from {self.control_dir}")
            time.sleep(self.poll_s)

    def _write(self, action: dict[str, Any], nonce: str,
               timeout_s: float) -> tuple[int, Path]:
        """Write the request under the next free number; the rename makes it appear whole,
        ``os.link`` refuses a number another asker took meanwhile."""
        with self._lock:
            return self._write_next(action, nonce, timeout_s)

    def _write_next(self, action: dict[str, Any], nonce: str,
                    timeout_s: float) -> tuple[int, Path]:
        self._refresh()
        pending = [int(p.name[4:-5]) for p in self.control_dir.glob("req-*.json")
                   if p.name[4:-5].isdigit()]
        n = max([self._last_n, *pending]) + 1
        tmp = self.control_dir / f".req-{os.getpid()}-{nonce}.tmp"
        while True:
            body = {**action, "request": n, "nonce": nonce,
                    "deadline_ms": now_ms() + int(timeout_s * 1000)}
            write_private_json(tmp, body)
            path = self.control_dir / f"req-{n}.json"
            try:
                os.link(tmp, path)
            except FileExistsError:
                n += 1
                continue
            finally:
                tmp.unlink(missing_ok=True)
            self._last_n = n
            return n, path
