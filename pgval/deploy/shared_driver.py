"""A driver shared by a campaign's cells (``pgval matrix --driver shared``, ``pgval oir``).

Why: a fresh driver costs a warm cell most of its overhead on 2 cores — its JVM, its
application's new executor JVMs and their cold code (docs/performance.md, "A warm
cluster"). Shared, one driver process (its document's ``serve_dir``: pgval.topologies.serve)
runs one query per cell, each with its own checkpoint, topics, query name and progress
file; a cell's document (pgval.core.driver_spec) reaches it over the control channel.

What it changes in what a run measures, said in every run it touches
(``config.driver``): from the driver's second cell on, the driver's and the executors' JVMs
are warm (JIT, generated code, Kafka connections), so priming and the warm-up are shorter;
the phases start after the warm-up either way. Cells are compared within one mode only: a
shared-driver matrix has its own matrix key.

A cell gets a fresh driver when a shared one cannot give it what it measures
(:func:`fresh_driver_reason`): its fault kills or pauses the driver, or hooks a crash point
into a JVM at its start; it writes into a user's sink other than Kafka (imported per
driver); its driver runs elsewhere (a container). A user's job shares a driver with the
queries of the same job only; each cell's query loads it from its own document. A shared
driver that could not stop a query, or find its executors again, in time is *poisoned* and
replaced before the next cell. The driver process lives in its own directory under the
campaign's, guarded by a reaper like a run's, so a killed pgval leaves nothing running.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.cluster.guard import RunGuard
from pgval.core.errors import EnvironmentFailure, PgvalError, UserMistake
from pgval.core.redact import private_dir
from pgval.core.schema import PAUSE_DRIVER, CrashPoint, Fault, FaultSpec
from pgval.deploy.driver_process import (
    DriverControl,
    DriverProcess,
    DriverSpec,
    progress_lines,
    sabotage_events,
)
from pgval.faults.descriptor import descriptor

if TYPE_CHECKING:
    from pgval.core.spec import RunSpec

#: Names inside ``serve_dir`` (pgval.topologies.serve; not imported: that module is the
#: driver's, and importing it here would load the driver's side into pgval).
SESSION_LOG = "session.jsonl"
CONTROL_DIR = "control"
#: Seconds a served driver may take to start a cell's query (executors back included) and
#: to stop one (its stop time-out, the terminated event and the tasks' end included).
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 150.0
#: A stopped query's checkpoint is deleted this long after (Spark's state-store maintenance
#: runs every 60 s by default and may write into it once more).
RETIRE_AFTER_S = 90.0


def fresh_driver_reason(faults: list[tuple[FaultSpec, int | str | None]], sink: str,
                        launcher: list[str]) -> str | None:
    """Why a run needs a driver of its own (one phrase), or None when it can share one.
    ``faults``: each fault the run injects (a schedule's parts too) with its target."""
    for fault, target in faults:
        if fault.kind is Fault.DRIVER_CRASH:
            return "its fault kills the driver"
        if descriptor(fault.kind).pause and target == PAUSE_DRIVER:
            return "its fault pauses the driver"
        if fault.point in (CrashPoint.AFTER_SINK_WRITE, CrashPoint.DURING_SINK_WRITE):
            return "its crash point's hooks are set when a driver starts"
    if sink != "kafka":
        return "a user's sink is imported per driver"
    if launcher:
        return "its driver runs in a container"
    return None


def own_driver_reason(cfg: RunSpec, launcher: list[str]) -> str | None:
    """:func:`fresh_driver_reason` of a run of ``cfg`` (its fault, a schedule's parts too)
    whose driver the deployment starts with ``launcher``."""
    faults = [(cfg.fault_spec, cfg.target),
              *((FaultSpec(p.fault), p.target) for p in cfg.schedule_parts)]
    return fresh_driver_reason(faults, cfg.sink, launcher)


def needs_own_driver(cfg: RunSpec) -> bool:
    """Whether a run of ``cfg`` needs a driver of its own wherever it runs (a container's
    driver is the deployment's to tell)."""
    return own_driver_reason(cfg, []) is not None


class SharedDriver:
    """One serving driver process and the cells it ran (``cells``), in ``root``."""

    def __init__(self, root: Path, first: DriverSpec) -> None:
        self.root = Path(root).resolve()
        private_dir(self.root)
        self.guard = RunGuard(self.root, "shared-driver").start()
        spec = dataclasses.replace(first, serve_dir=self.root)
        self.process = DriverProcess(spec, self.root / "logs", self.root / "pids")
        self.control = DriverControl(self.root / CONTROL_DIR, self.root / SESSION_LOG,
                                     alive=self.process.alive)
        self.key = first.session_key()
        self.cells = 0
        self.poisoned: str | None = None

    @property
    def log_dir(self) -> Path:
        return self.process.log_dir

    def usable_for(self, spec: DriverSpec) -> bool:
        return (self.poisoned is None and spec.session_key() == self.key
                and (self.cells == 0 or self.process.alive()))

    def query(self, spec: DriverSpec, drivers: SharedDrivers) -> SharedQuery:
        self.cells += 1
        return SharedQuery(self, spec, self.cells, drivers)

    def close(self) -> None:
        """Stop the driver (gracefully: SIGTERM, its running query stopped) and its guard."""
        try:
            self.process.stop()
        finally:
            self.guard.stop()


class SharedQuery:
    """One run's query in a :class:`SharedDriver`: what a run uses of a
    :class:`~pgval.deploy.driver_process.DriverProcess` (start, check, progress, stop...)."""

    def __init__(self, shared: SharedDriver, spec: DriverSpec, cell: int,
                 drivers: SharedDrivers) -> None:
        self.shared = shared
        self.spec = spec
        self.cell = cell
        self.drivers = drivers
        self.started_at: list[float] = []
        #: The driver's answers (start and stop: the seconds each step took).
        self.answers: dict[str, Any] = {}
        self._stopped = False

    @property
    def setup_s(self) -> float | None:
        """Seconds this run's start waited for the executors (None: it started the driver,
        or the driver it asked was poisoned and replaced)."""
        start = self.answers.get("start") or {}
        value = start.get("setup_s") if start.get("ok") and self.cell > 1 else None
        return float(value) if isinstance(value, (int, float)) else None

    def describe(self) -> dict[str, Any]:
        """What the run keeps of its driver (``config.driver``)."""
        return {"mode": "shared", "cell": self.cell, "dir": str(self.shared.root),
                **{k: {f: v for f, v in a.items() if f.endswith("_s") or f in ("ok", "error")}
                   for k, a in self.answers.items()}}

    def start(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Start the run's query; returns the seconds it took. The first cell starts the
        driver process itself with the cell's document, as a fresh driver would; the next
        ones send theirs over the control channel."""
        t0 = time.monotonic()
        if self.cell > 1:
            answer = self.shared.control.request(
                {"action": "start_query", "spec": self.spec.for_driver().to_json()}, timeout_s)
            self.answers["start"] = answer
            if answer.get("refused"):  # the user's job: bad input, as from a fresh driver
                raise UserMistake(str(answer.get("error")))
            if not answer.get("ok") and not answer.get("poisoned"):
                raise EnvironmentFailure("the shared Spark driver did not start the run's "
                                        f"query: {answer.get('error')}")
            if answer.get("poisoned"):  # not this run's fault: it starts a new driver
                self.shared.poisoned = str(answer.get("error"))
                self.shared, self.cell = self.drivers.replace(self.spec, self.shared.poisoned)
        if self.cell == 1:
            self.shared.process.start(max(1.0, timeout_s - (time.monotonic() - t0)))
        self.started_at.append(time.time())
        return time.monotonic() - t0

    def alive(self) -> bool:
        return self.shared.process.alive() and not self._terminated()

    def pid(self) -> int | None:
        return self.shared.process.pid()

    def _terminated(self) -> list[dict[str, Any]]:
        return [r for r in self.progress() if r.get("event") == "terminated"]

    def check(self) -> None:
        """Raise a plain error if the query ended (failed, or stopped by anyone but pgval)
        or the driver process died: a fresh driver exits then, and its run stops."""
        if not self.shared.process.alive():
            self.shared.process.check()
        for line in self._terminated():
            if line.get("stopped_by") == "pgval":
                continue
            why = line.get("error") or "it stopped on its own"
            raise EnvironmentFailure(f"the streaming query failed: {why} (log: "
                                    f"{self.shared.log_dir})")

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the run's query; the driver stays up for the next cell unless the stop did
        not finish in time (then it is poisoned, and the next cell gets a fresh one)."""
        if self._stopped or not self.shared.process.alive():
            return
        self._stopped = True
        try:
            answer = self.shared.control.request({"action": "stop_query"}, STOP_TIMEOUT_S)
        except PgvalError as exc:
            self.shared.poisoned = str(exc)
            return
        self.answers["stop"] = answer
        if not answer.get("ok"):
            self.shared.poisoned = str(answer.get("error"))

    def kill(self) -> None:
        raise EnvironmentFailure("a shared driver is not a fault's target: a run whose fault "
                                "kills the driver gets a driver of its own")

    def progress(self) -> list[dict[str, Any]]:
        return progress_lines(self.spec.progress_file)

    def sabotage_events(self) -> list[dict[str, Any]]:
        return sabotage_events(self.spec.progress_file)

    def control(self) -> DriverControl:
        return self.shared.control

    def class_dump(self) -> None:
        """A shared driver leaves the class archive to a fresh one (pgval.host.cds)."""
        return None


class SharedDrivers:
    """Hands a campaign's runs a query in the shared driver; replaces it when a run needs
    another session (other Spark settings, another cluster) or it was poisoned."""

    def __init__(self, root: Path, label: str) -> None:
        self.root = Path(root)
        self.label = label
        self.current: SharedDriver | None = None
        self.started = 0
        #: Why each driver before the current one was replaced.
        self.replaced: list[str] = []
        #: Checkpoints of stopped queries, deleted once no state store can touch them.
        self._retired: list[tuple[Path, float]] = []

    def query(self, spec: DriverSpec) -> SharedQuery:
        self.sweep()
        current = self.current
        if current is not None and not current.usable_for(spec):
            self.close(why=current.poisoned or (
                "another session was needed" if current.key != spec.session_key()
                else "its process ended"))
        if self.current is None:
            self.started += 1
            self.current = SharedDriver(self.root / f"{self.label}-driver-{self.started}", spec)
        return self.current.query(spec, self)

    def replace(self, spec: DriverSpec, why: str) -> tuple[SharedDriver, int]:
        """A new driver for a run whose query the current one could not start (``why``);
        the run becomes its first cell."""
        self.close(why=why)
        self.query(spec)
        assert self.current is not None
        return self.current, self.current.cells

    def retire(self, checkpoint: Path) -> None:
        """A stopped query's checkpoint, to delete later: its state stores stay loaded on
        the executors until their maintenance (``stateStore.maintenanceInterval``, 60 s),
        which may still write a snapshot into it (shared-driver.md, section 1)."""
        self._retired.append((Path(checkpoint), time.monotonic()))

    def sweep(self, everything: bool = False) -> None:
        """Delete the retired checkpoints no state store can touch any more."""
        keep = []
        for path, since in self._retired:
            if everything or time.monotonic() - since > RETIRE_AFTER_S:
                shutil.rmtree(path, ignore_errors=True)
            else:
                keep.append((path, since))
        self._retired = keep

    def close(self, why: str | None = None) -> None:
        """Stop the current driver (``why``: kept in :attr:`replaced`); safe to call twice.
        With no driver left, no state store is loaded: every retired checkpoint goes."""
        driver, self.current = self.current, None
        if driver is not None:
            if why is not None:
                self.replaced.append(why)
            driver.close()
        self.sweep(everything=True)
