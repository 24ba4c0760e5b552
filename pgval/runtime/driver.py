"""The streaming driver as a separate process, so a fault can kill it and restart it.

It runs ``python -m pgval.topologies.driver`` (see topologies/driver.py) and
learns about the query through the progress file the driver writes: one JSON
line per event, ``{"event": "started", ...}`` once the query runs, then one
line per micro-batch progress.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.runtime.procs import Managed, RuntimeErrorPlain, spawn


@dataclass
class DriverSpec:
    topology: str
    pg: str
    bootstrap: str
    master: str
    checkpoint: Path
    progress_file: Path
    window_ms: int
    watermark_ms: int
    trigger_ms: int
    shuffle_partitions: int
    driver_host: str | None = None
    executor_memory: str = "512m"
    max_offsets_per_trigger: int | None = None
    query_name: str = "pgval"
    extra_env: dict[str, str] = field(default_factory=dict)
    conf: dict[str, str] = field(default_factory=dict)  # extra Spark conf (time-outs)
    #: The run's topic prefix (``Topics.with_prefix``); "" for the plain names.
    topic_prefix: str = ""
    #: The user's Kafka client settings and Spark settings (external clusters): passed in
    #: the driver's environment, never on its command line, as they may hold passwords.
    kafka_options: dict[str, str] = field(default_factory=dict)
    user_conf: dict[str, str] = field(default_factory=dict)
    #: SELF-TEST of pgval only (e1): ``drop-batch:N`` / ``dup-batch:N`` makes the sink break
    #: one batch on purpose (``--sabotage``; see pgval.topologies.sinks). Never a guarantee.
    sabotage: str | None = None
    #: Prefix that runs the driver elsewhere (``docker exec pgval-runner``), its Python,
    #: how host paths look there, and how to signal it there (killing `docker exec` is not
    #: enough to stop a process inside a container).
    launcher: list[str] = field(default_factory=list)
    python: str = sys.executable
    path_map: Callable[[Path], str] | None = None
    signal_argv: Callable[[str], list[str]] | None = None

    def __post_init__(self) -> None:
        if self.sabotage and self.pg != "e1":
            raise ValueError("sabotage only applies to pg e1 (the transactional sink)")

    def _path(self, path: Path) -> str:
        return self.path_map(path) if self.path_map else str(path)

    def argv(self) -> list[str]:
        argv = [*self.launcher, self.python, "-m", "pgval.topologies.driver",
                "--topology", self.topology, "--pg", self.pg, "--bootstrap", self.bootstrap,
                "--master", self.master, "--checkpoint", self._path(self.checkpoint),
                "--window-ms", str(self.window_ms), "--watermark-ms", str(self.watermark_ms),
                "--trigger-ms", str(self.trigger_ms),
                "--shuffle-partitions", str(self.shuffle_partitions),
                "--progress-file", self._path(self.progress_file),
                "--executor-memory", self.executor_memory, "--query-name", self.query_name]
        if self.topic_prefix:
            argv += ["--topic-prefix", self.topic_prefix]
        if self.driver_host:
            argv += ["--driver-host", self.driver_host]
        for key, value in self.conf.items():
            argv += ["--conf", f"{key}={value}"]
        if self.max_offsets_per_trigger:
            argv += ["--max-offsets-per-trigger", str(self.max_offsets_per_trigger)]
        if self.sabotage:
            argv += ["--sabotage", self.sabotage]
        return argv

    def env(self) -> dict[str, str]:
        """The driver's extra environment: placement's variables plus the user's settings."""
        env = dict(self.extra_env)
        if self.kafka_options:
            env["PGVAL_KAFKA_OPTIONS"] = json.dumps(self.kafka_options)
        if self.user_conf:
            env["PGVAL_SPARK_CONF"] = json.dumps(self.user_conf)
        return env


class DriverProcess:
    """Start, wait for, stop, kill and restart the streaming driver."""

    def __init__(self, spec: DriverSpec, log_dir: Path, pid_dir: Path) -> None:
        self.spec = spec
        self.log_dir = log_dir
        self.pid_dir = pid_dir
        self.proc: Managed | None = None
        self.starts = 0
        self.started_at: list[float] = []

    def start(self, timeout_s: float = 180.0) -> float:
        """Start the driver and wait until its query runs; returns the seconds it took."""
        t0 = time.monotonic()
        seen = self._count_started()
        self.starts += 1
        self.proc = spawn(f"driver-{self.starts}", self.spec.argv(),
                          self.log_dir / f"driver-{self.starts}.log", env=self.spec.env(),
                          pid_dir=self.pid_dir)
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self._count_started() > seen:
                self.started_at.append(time.time())
                return time.monotonic() - t0
            if not self.proc.alive():
                raise RuntimeErrorPlain(
                    "the Spark driver exited before its query started: "
                    f"{self._last_error()} (log: {self.proc.log_path})")
            time.sleep(0.2)
        raise RuntimeErrorPlain(f"the Spark driver did not start its query within "
                                f"{timeout_s:.0f} s (log: {self.proc.log_path})")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def check(self) -> None:
        """Raise a plain error if the driver died on its own (the query failed)."""
        if self.proc is not None and not self.proc.alive():
            raise RuntimeErrorPlain(f"the streaming query failed: {self._last_error()} "
                                    f"(log: {self.proc.log_path})")

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the driver alone first (a signal to the whole group also hits the PySpark
        JVM, whose shutdown hook races the graceful query stop), then clean up the group."""
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
            subprocess.run(self.spec.signal_argv(name), capture_output=True, timeout=30,
                           check=False)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def progress(self) -> list[dict[str, Any]]:
        """All progress lines written so far (every start appends to the same file)."""
        rows: list[dict[str, Any]] = []
        with contextlib.suppress(FileNotFoundError), open(self.spec.progress_file, "rb") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    rows.append(json.loads(line))
        return rows

    def sabotage_events(self) -> list[dict[str, Any]]:
        """The ``sabotage`` lines of the progress file (SELF-TEST runs only), oldest first."""
        return sabotage_events(self.spec.progress_file)

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


def sabotage_events(progress_file: Path) -> list[dict[str, Any]]:
    """SELF-TEST runs (``DriverSpec.sabotage``): every ``{"event": "sabotage", ...}`` line of
    a driver's progress file, oldest first, each with ``kind`` (drop|dup), ``batch_id``,
    ``nth``, ``rows``, ``ids`` (the real IDs dropped or written twice), ``negative_ids``.
    One per driver process that reached its N-th real batch; none if it never did."""
    rows: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError), open(progress_file, "rb") as fh:
        for line in fh:
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                if isinstance(row, dict) and row.get("event") == "sabotage":
                    rows.append(row)
    return rows
