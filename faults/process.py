"""Process faults: SIGKILL a Spark worker (and its executors), or the streaming driver.

``crash`` kills the target worker's whole process group at T2 — the worker JVM
and the executor JVMs it forked — and starts the worker again at T3 with the
same namespace and address. ``driver-crash`` kills the driver at T2 and
restarts the same query from its checkpoint at T3 (paper 002's driver failure,
which PGVal did not measure). Each gets only its target: a worker handle, the driver.
Each also judges its own log (``reasons``, see :mod:`pgval.faults.took_effect`).

When (T2 or T3 from the experiment's schedule) is not when the fault acts: every step logs
``effective_ms``, the moment it took effect or ended — a kill once no process of the group
is left, an ``after-sink-write`` halt at the hook's own clock, a restart once the worker
re-registered or the driver's query runs again. The run's phases start there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol
from urllib.parse import urlparse

from pgval.checker.result import Reason
from pgval.core.clock import now_ms
from pgval.core.files import write_private
from pgval.core.schema import CrashPoint, Fault, Restart, sink_kind
from pgval.faults.container import ContainerKill
from pgval.faults.descriptor import (
    CONTAINERS,
    DRIVER,
    DRIVER_PROCESS,
    EXECUTOR_KILL,
    WORKER_PROCESSES,
    FaultDescriptor,
    Maker,
)
from pgval.faults.executor import ExecutorKill
from pgval.faults.log import Entries, finding, first

#: The ``mechanism`` of a timed crash (a worker's or the driver's process group killed).
SIGKILL_GROUP = "SIGKILL process group"
#: The ``mechanism`` of a driver crash at ``after-sink-write`` (:mod:`pgval.faults.hooks`).
JVM_HALT = "JVM halt before the batch's commit (pgval.hooks.CrashBeforeCommit)"
#: The ``mechanism`` of ``crash@during-sink-write`` on a user's foreachBatch sink.
SIGKILL_SINK_WRITER = "SIGKILL of the driver while its foreachBatch sink writes"


class CrashableWorker(Protocol):
    """What :class:`WorkerCrash` needs of a worker (``pgval.spark.daemons.WorkerHandle``)."""

    name: str
    pid: int | None

    def executor_pids(self) -> list[int]: ...

    def group_pids(self) -> list[int]: ...

    def kill(self) -> None: ...

    def restart(self) -> None: ...


class RestartableDriver(Protocol):
    """What :class:`DriverCrash` needs of the driver
    (``pgval.deploy.driver_process.DriverProcess``)."""

    def pid(self) -> int | None: ...

    def alive(self) -> bool: ...

    def kill(self) -> None: ...

    def start(self) -> float: ...


class WorkerCrash:
    """SIGKILL a worker and its executors at T2 (``timed``), or, with ``sink_trigger``
    (crash point ``during-sink-write``), the worker of the first executor that halts in the
    Kafka sink's producer hook after T2: one of its sink task's records is in Kafka and the
    task has not finished (:mod:`pgval.faults.hooks`). ``workers`` are the candidates (the
    target is whichever worker's executor writes first; ``worker`` is the fallback). A timed
    crash notes which batch, if any, was in flight just before the kill."""

    name = "crash"
    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.CRASH})
    mechanisms: ClassVar[tuple[str, ...]] = (SIGKILL_GROUP,)

    def __init__(self, worker: CrashableWorker, checkpoint: Path | None = None,
                 sink_trigger: Path | None = None,
                 workers: Sequence[CrashableWorker] = (),
                 reach_timeout_s: float = 60.0, poll_s: float = 0.01) -> None:
        self.worker = worker
        self.checkpoint = checkpoint
        self.sink_trigger = sink_trigger
        self.workers = list(workers) or [worker]
        self.reach_timeout_s = reach_timeout_s
        self.poll_s = poll_s
        self._killed = False

    def inject(self) -> dict[str, Any]:
        point: dict[str, Any] = {"crash_point": CrashPoint.TIMED}
        if self.sink_trigger is not None:
            point = self._wait_for_sink_write(self.sink_trigger)
        worker = self.worker
        executors = worker.executor_pids()
        if self.sink_trigger is None and self.checkpoint is not None:
            point.update(in_flight(self.checkpoint))  # the driver goes on: just before the kill
        worker.kill()  # returns once no live member of the group is left (or after 5 s)
        self._killed = True
        killed_ms = now_ms()
        if "hit_ms" in point:
            point["worker_killed_ms"] = killed_ms
        return {"mechanism": SIGKILL_GROUP, "target": worker.name,
                "worker_pid": worker.pid, "executor_pids": executors,
                "left_alive": worker.group_pids(), "effective_ms": killed_ms, **point}

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """A worker process was killed, nothing of its group survived, and (when the logs
        were scanned) the driver noticed: it logged an executor lost."""
        inject = first(entries, "inject")
        found = []
        if not inject.get("worker_pid"):
            found.append(finding("no worker process was killed"))
        if inject.get("left_alive"):
            found.append(finding(f"processes survived the kill: {inject['left_alive']}"))
        fired = first(entries, "timeouts").get("fired")
        if fired is not None and not (isinstance(fired, Mapping)
                                      and fired.get("executor lost (driver)")):
            found.append(finding("the driver never reported an executor lost"))
        return found

    def _wait_for_sink_write(self, trigger: Path) -> dict[str, Any]:
        """Arm the sink hook and wait until an executor halts in it (or the time-out); the
        target becomes that executor's worker. The hook names the batch it was writing."""
        claim, hit_file = (trigger.with_name(f"{trigger.name}.{k}") for k in ("claim", "hit"))
        for f in (claim, hit_file):
            f.unlink(missing_ok=True)
        armed_ms = now_ms()
        hit: dict[str, Any] | None = None
        try:
            write_private(trigger, f"{armed_ms}\n")
            deadline = time.monotonic() + self.reach_timeout_s
            while hit is None and time.monotonic() < deadline:
                time.sleep(self.poll_s)
                hit = _read_json(hit_file)
        finally:
            trigger.unlink(missing_ok=True)  # the workers' next executors must not halt
        # An executor that claimed just before the unlink is halting now: wait for its record.
        # The claim stays until the next arm, so no other executor can halt meanwhile.
        stop = time.monotonic() + 5.0
        while hit is None and claim.exists() and time.monotonic() < stop:
            time.sleep(self.poll_s)
            hit = _read_json(hit_file)
        point: dict[str, Any] = {"crash_point": CrashPoint.DURING_SINK_WRITE, "armed_ms": armed_ms}
        if hit is None:
            point["error"] = (f"the crash point during-sink-write was not reached: no sink "
                              f"record was written within {self.reach_timeout_s:.0f} s (the "
                              f"worker was killed then)")
            return point
        batch = hit.get("batch")
        point.update(hit_ms=hit.get("ts_ms"), record=_record_of(hit), batch=batch,
                     task=hit.get("task"), executor_id=hit.get("executor"),
                     halted_pid=hit.get("pid"))
        errors = []
        victim = next((w for w in self.workers if w.pid == hit.get("parent_pid")), None)
        if victim is None:
            errors.append(f"the executor that halted (pid {hit.get('pid')}, parent "
                          f"{hit.get('parent_pid')}) belongs to no worker pgval knows; "
                          f"killed {self.worker.name} instead")
        else:
            self.worker = victim
        if not isinstance(batch, int):
            errors.append("the sink hook could not name the micro-batch it was writing")
        elif self.checkpoint is not None:
            # Not a test of the hit (the halted task was unfinished, so its batch could not
            # be committed then): Spark may have re-run the task and committed since.
            point["commit_logged"] = _committed(self.checkpoint, batch)
        if errors:
            point["error"] = "; ".join(errors)
        return point

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """Restart the worker at T3; at teardown (``restore=False``) there is nothing to undo."""
        if not self._killed:
            return {}
        self._killed = False
        if not restore:
            return {"target": self.worker.name, "restarted": False}
        t0 = time.monotonic()
        self.worker.restart()  # returns once the master lists the new worker
        return {"target": self.worker.name, "restarted_pid": self.worker.pid,
                "reregistered_s": round(time.monotonic() - t0, 3), "effective_ms": now_ms()}


class DriverCrash:
    """SIGKILL the driver at T2 (``timed``), or, with ``trigger`` (crash point
    ``after-sink-write``), halt it in the window that matters: the first batch after T2
    whose outputs are in Kafka while its commit is not yet in the checkpoint. Once armed,
    the driver's hook (:mod:`pgval.faults.hooks`) stops before writing each batch's
    offsets ("planned": pgval notes the output topic's size) and before its commit
    ("commit": "halt" if the output topic grew since, else "go"). Restart from the
    checkpoint at T3."""

    name = "driver-crash"
    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.DRIVER_CRASH})
    mechanisms: ClassVar[tuple[str, ...]] = (SIGKILL_GROUP, JVM_HALT)

    def __init__(self, driver: RestartableDriver, trigger: Path | None = None,
                 output_count: Callable[[], int] | None = None,
                 checkpoint: Path | None = None,
                 reach_timeout_s: float = 60.0, poll_s: float = 0.01,
                 halt_stage: str = "commit") -> None:
        self.driver = driver
        self.checkpoint = checkpoint
        self.trigger = trigger
        #: Where the halt comes: before the query's commit (``commit``), or, for the file
        #: sink, before the sink's own log entry (``sink-log``: its data files are written,
        #: the batch is in no log at all).
        self.halt_stage = halt_stage
        self.output_count = output_count
        self.reach_timeout_s = reach_timeout_s
        self.poll_s = poll_s
        self._killed = False

    def inject(self) -> dict[str, Any]:
        pid = self.driver.pid()
        if self.trigger is not None:
            return self._crash_before_commit(pid, self.trigger)
        self.driver.kill()  # returns once the driver's process group is gone
        self._killed = True
        entry = {"mechanism": SIGKILL_GROUP, "target": "driver", "driver_pid": pid,
                 "crash_point": CrashPoint.TIMED, "effective_ms": now_ms()}
        # The checkpoint's only writer is dead, so the read is exact (the deployment passes
        # the checkpoint only when its driver's JVM dies with the kill).
        if self.checkpoint is not None:
            entry.update(in_flight(self.checkpoint))
        return entry

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """A driver process was killed (timed or halted at the crash point: whether the
        point was reached is the inject entry's ``error``)."""
        if not first(entries, "inject").get("driver_pid"):
            return [finding("no driver process was killed")]
        return []

    def _crash_before_commit(self, pid: int | None, trigger: Path) -> dict[str, Any]:
        files = {k: trigger.with_name(f"{trigger.name}.{k}") for k in ("at", "answer", "hit")}
        for f in files.values():
            f.unlink(missing_ok=True)
        count = self.output_count or (lambda: -1)
        armed_ms = now_ms()
        baseline: dict[int, int] = {}
        answered: set[tuple[str, int]] = set()
        passed: list[dict[str, Any]] = []  # committed batches: nothing of theirs in Kafka
        halted: dict[str, Any] | None = None
        self._killed = True  # from here on, remove() must restart whatever happens
        try:
            write_private(trigger, f"{armed_ms}\n")
            deadline = time.monotonic() + self.reach_timeout_s
            while halted is None and self.driver.alive() and time.monotonic() < deadline:
                at = _read_json(files["at"])
                key = (str(at.get("stage")), int(at.get("batch", -1))) if at else None
                if key is None or key in answered:
                    time.sleep(self.poll_s)
                    continue
                answered.add(key)
                stage, batch = key
                now = count()
                verdict = "go"
                if stage == "planned":
                    baseline[batch] = now
                elif stage == self.halt_stage and 0 <= baseline.get(batch, -1) < now:
                    verdict = "halt"
                    # commits/N is in the query's checkpoint; the file sink's log is not.
                    root = (_local_path(at["file"]).parent.parent if stage == "commit"
                            else _query_checkpoint(self.checkpoint) if self.checkpoint
                            else None)
                    halted = {"batch": batch, "outputs_written": now - baseline[batch],
                              "checkpoint": str(root) if root else None}
                elif stage == "commit":
                    passed.append({"batch": batch,
                                   "outputs": now - baseline[batch] if batch in baseline
                                   and min(now, baseline[batch]) >= 0 else None})
                write_private(files["answer"], f"{stage} {batch} {verdict}\n")
            if halted is not None:
                stop = time.monotonic() + 10.0
                while self.driver.alive() and not files["hit"].exists() and \
                        time.monotonic() < stop:
                    time.sleep(self.poll_s)
        finally:
            trigger.unlink(missing_ok=True)  # the restarted driver must not stop again
            self.driver.kill()  # the halted JVM's Python parent, or a driver never hit
            killed_ms = now_ms()
            hit = _read_json(files["hit"])
            for f in files.values():
                f.unlink(missing_ok=True)
        # The halt is the crash: the hook's clock when it confirmed one, else the kill.
        halted_ms = hit.get("ts_ms") if hit is not None else None
        entry: dict[str, Any] = {
            "mechanism": JVM_HALT,
            "target": "driver", "driver_pid": pid, "crash_point": CrashPoint.AFTER_SINK_WRITE,
            "armed_ms": armed_ms, "batches_passed": passed,
            "effective_ms": halted_ms if isinstance(halted_ms, int) else killed_ms}
        if halted is None:
            entry["error"] = (f"the crash point after-sink-write was not reached: no batch "
                              f"with outputs came to its commit within "
                              f"{self.reach_timeout_s:.0f} s (the driver was killed then)")
            return entry
        batch = halted["batch"]
        root = halted.pop("checkpoint")
        checkpoint = Path(root) if root else None
        entry.update(halted, halt_stage=self.halt_stage,
                     offsets_logged=bool(checkpoint and (checkpoint / "offsets" / str(batch))
                                         .exists()),
                     commit_logged=bool(checkpoint and (checkpoint / "commits" / str(batch))
                                        .exists()))
        if hit is None or int(hit.get("batch", -1)) != batch:
            entry["error"] = (f"the driver did not confirm halting before batch {batch}'s "
                              f"commit (hook record: {hit})")
        elif entry["commit_logged"]:
            entry["error"] = f"batch {batch} was committed although the crash came before it"
        return entry

    def remove(self, restore: bool = True) -> dict[str, Any]:
        killed, self._killed = self._killed, False
        return restart_driver(self.driver, restore) if killed else {}


class SinkWriteCrash:
    """``crash@during-sink-write`` for a user's ``foreachBatch`` sink. Its writes run in the
    driver (:class:`pgval.topologies.user_sink.SinkWriter`), so the process that dies with a
    write unfinished is the driver: once armed, pgval takes the first write of a batch with
    rows that is running then or starts after (its ``sink_write_start`` progress line without
    its end: a sink slower than its input may write for longer than the reach time-out, so that
    no write would begin in it), waits until half the median time the last writes took has
    passed since it began, and SIGKILLs the driver's process group; a write that ended before
    then (its start seen late on a busy machine) is passed over for the next one
    (``passed_over``). Whether the write was still running is read from the progress file after
    the kill: the batch's ``sink_write`` end line is not there (a write that had ended is an
    ``error``: the crash came after it). The writer logs that line as its ``write`` returns, so
    a kill in the instant between the two would pass for a hit: a window of microseconds
    against writes of tens of milliseconds and more. Restart from the checkpoint as the restart
    policy says; the batch runs again."""

    name = "crash"
    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.CRASH})
    mechanisms: ClassVar[tuple[str, ...]] = (SIGKILL_SINK_WRITER,)

    def __init__(self, driver: Any, reach_timeout_s: float = 60.0,
                 poll_s: float = 0.005) -> None:
        self.driver = driver
        self.reach_timeout_s = reach_timeout_s
        self.poll_s = poll_s
        self._killed = False

    def _writes(self, current: bool = False) -> list[dict[str, Any]]:
        """The sink's write lines, read once; ``current``: only the running driver process's
        (after its last ``started`` line: a start an earlier process logged and never
        ended is no write under way)."""
        lines = self.driver.progress()
        if current:
            last = max((i for i, p in enumerate(lines) if p.get("event") == "started"),
                       default=-1)
            lines = lines[last + 1:]
        return [p for p in lines if p.get("event") in ("sink_write_start", "sink_write")]

    @staticmethod
    def _ended(start: dict[str, Any], writes: list[dict[str, Any]]) -> bool:
        """Whether the write that ``start`` began has logged its end among ``writes``."""
        return any(p["event"] == "sink_write" and p.get("batchId") == start.get("batchId")
                   and int(p.get("wall_ms") or 0) >= int(start.get("wall_ms") or 0)
                   for p in writes)

    @classmethod
    def _candidate(cls, writes: list[dict[str, Any]], armed_ms: int,
                   passed: list[Any]) -> dict[str, Any] | None:
        """The write with rows to aim at: the last one begun before ``armed_ms`` if it is
        still running (a query writes one batch at a time, so no earlier one can be),
        else the first begun since; never one passed over."""
        starts = [p for p in writes if p["event"] == "sink_write_start" and p.get("rows")
                  and p.get("batchId") not in passed]
        before = [p for p in starts if int(p.get("wall_ms") or 0) < armed_ms]
        if before and not cls._ended(before[-1], writes):
            return before[-1]
        return next((p for p in starts if int(p.get("wall_ms") or 0) >= armed_ms), None)

    def _aim(self, armed_ms: int, wait_ms: float) -> tuple[dict[str, Any] | None, list[Any]]:
        """The write to kill in: the first with rows, running at ``armed_ms`` or begun
        since, that is still running ``wait_ms`` after it began (one running at arming
        since longer is killed at once). A write that ended before then (a busy machine
        saw its start late) is passed over for the next one, never killed after. The
        progress is read once a poll, however long the run has been."""
        deadline = time.monotonic() + self.reach_timeout_s
        passed: list[Any] = []
        while time.monotonic() < deadline and self.driver.alive():
            start = self._candidate(self._writes(current=True), armed_ms, passed)
            if start is None:
                time.sleep(self.poll_s)
                continue
            late_ms = now_ms() - int(start.get("wall_ms") or 0)
            time.sleep(max(0.0, wait_ms - late_ms) / 1000)
            if not self._ended(start, self._writes()):
                return start, passed
            passed.append(start.get("batchId"))
        return None, passed

    def inject(self) -> dict[str, Any]:
        pid = self.driver.pid()
        armed_ms = now_ms()
        ended = [p for p in self._writes() if p["event"] == "sink_write" and p.get("rows")]
        took = sorted(float(p.get("ms") or 0) for p in ended[-10:])
        wait_s = (took[len(took) // 2] / 2000) if took else 0.02
        start, passed = self._aim(armed_ms, wait_s * 1000)
        self.driver.kill()
        self._killed = True
        killed_ms = now_ms()
        entry: dict[str, Any] = {
            "mechanism": SIGKILL_SINK_WRITER, "target": "driver (the sink's writer)",
            "driver_pid": pid, "crash_point": CrashPoint.DURING_SINK_WRITE,
            "armed_ms": armed_ms, "effective_ms": killed_ms,
            "wait_ms": round(wait_s * 1000, 1), "median_write_ms": took[len(took) // 2]
            if took else None, "passed_over": passed}
        if start is None:
            entry["error"] = (f"the crash point during-sink-write was not reached: no write "
                              f"of a batch with rows began and was still running "
                              f"{entry['wait_ms']} ms later within {self.reach_timeout_s:.0f} s "
                              "(the driver was killed then)")
            return entry
        batch = start.get("batchId")
        finished = self._ended(start, self._writes())
        entry.update(batch=batch, rows=start.get("rows"), write_started_ms=start.get("wall_ms"),
                     write_finished=finished)
        if finished:
            entry["error"] = (f"the write of batch {batch} had ended when the kill landed "
                              f"({entry['wait_ms']} ms after it began): not during it")
        return entry

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """The driver was killed, with a sink write begun and not ended (whether it was is
        the inject entry's ``error``)."""
        if not first(entries, "inject").get("driver_pid"):
            return [finding("no driver process was killed")]
        return []

    def remove(self, restore: bool = True) -> dict[str, Any]:
        killed, self._killed = self._killed, False
        return restart_driver(self.driver, restore) if killed else {}


def restart_driver(driver: RestartableDriver, restore: bool) -> dict[str, Any]:
    """A killed driver's removal: started again from its checkpoint (returns once the
    query runs), or, without ``restore`` (teardown), left down."""
    if not restore:
        return {"target": "driver", "restarted": False}
    start_s = driver.start()
    return {"target": "driver", "restarted_pid": driver.pid(),
            "query_restarted_s": round(start_s, 3), "effective_ms": now_ms()}


def _query_checkpoint(checkpoint: Path) -> Path | None:
    """The checkpoint the query writes now (m1 keeps one per driver start: the newest)."""
    if (checkpoint / "offsets").is_dir():
        return checkpoint
    starts = sorted((d for d in checkpoint.glob("*/") if (d / "offsets").is_dir()),
                    key=lambda d: d.stat().st_mtime)
    return starts[-1] if starts else None


def open_batch(checkpoint: Path) -> tuple[Path, int] | None:
    """The newest batch that is planned (``offsets/N``) but not committed (``commits/N``),
    with its checkpoint (m1 keeps one per driver start: the newest)."""
    root = _query_checkpoint(checkpoint)
    if root is None:
        return None
    planned = [int(p.name) for p in (root / "offsets").iterdir() if p.name.isdigit()]
    if not planned or (root / "commits" / str(max(planned))).exists():
        return None
    return root, max(planned)


def _committed(checkpoint: Path, batch: int) -> bool:
    """Is ``commits/<batch>`` in the query's checkpoint (m1: its newest)?"""
    root = _query_checkpoint(checkpoint)
    return root is not None and (root / "commits" / str(batch)).exists()


def in_flight(checkpoint: Path) -> dict[str, Any]:
    """Which batch a timed crash caught between its offsets and its commit (None: between
    batches; nothing when the checkpoint is not on this machine). Whether that batch had
    written outputs shows in the verdict (a1 duplicates)."""
    if not checkpoint.is_dir():
        return {}
    found = open_batch(checkpoint)
    return {"in_flight_batch": None if found is None else found[1]}


def _record_of(hit: dict[str, Any]) -> str:
    """``topic-partition@offset`` of the record the halted executor had written."""
    return f"{hit.get('topic')}-{hit.get('partition')}@{hit.get('offset')}"



def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _local_path(hadoop_path: object) -> Path:
    """A Hadoop path on the local disk (``file:/x``) as a path."""
    raw = str(hadoop_path)
    return Path(urlparse(raw).path if raw.startswith("file:") else raw)


def _crash_with(method: str) -> Maker:
    """A crash through the deployment's ``method``; at ``during-sink-write`` with a sink
    whose writes run in the driver (a user's foreachBatch), the driver is the writer that
    dies (:class:`SinkWriteCrash`), wherever the workers are."""
    def make(dep: Any, cfg: Any, target: Any, profile: Any, ctx: Any) -> Any:
        if (cfg.crash_point is CrashPoint.DURING_SINK_WRITE
                and sink_kind(cfg.sink).writer_is_driver):
            return dep.sink_writer_crash(cfg, target, profile, ctx)
        return getattr(dep, method)(cfg, target, profile, ctx)
    return make


def _worker_running(hooks: Any) -> str | None:
    """A worker crash needs its worker running (not still down from an earlier crash)."""
    worker = getattr(hooks, "worker", None)
    if worker is None or worker.group_pids():
        return None
    return f"{worker.name} is not running"


DESCRIPTORS = (
    FaultDescriptor(
        Fault.CRASH, "SIGKILL of one worker's process group (the worker and its executors)",
        points=frozenset({CrashPoint.TIMED, CrashPoint.DURING_SINK_WRITE}),
        restart=Restart.AT_REMOVE,
        # On a cluster pgval does not own the crash is an executor kill: its cluster
        # manager starts the replacement, nothing of pgval's restarts.
        restart_unless=lambda cfg: bool(cfg.spark_replaces_executor),
        loses_executors=True, drawn=True, takes_executors=True,
        # The worker re-registers at removal; its new executor takes a JVM start more.
        recovery_s=10.0, needs="a running worker", ready=_worker_running,
        rules=(WorkerCrash, SinkWriteCrash, ExecutorKill, ContainerKill),
        makers=((WORKER_PROCESSES, _crash_with("worker_crash")),
                (CONTAINERS, _crash_with("container_kill")),
                (EXECUTOR_KILL, _crash_with("executor_kill")))),
    FaultDescriptor(
        Fault.DRIVER_CRASH, "SIGKILL of the streaming driver, restarted from its checkpoint",
        points=frozenset({CrashPoint.TIMED, CrashPoint.AFTER_SINK_WRITE}),
        restart=Restart.IMMEDIATE, targets=DRIVER,
        # The driver's restart is the run's timeline, not a part's.
        schedulable=False, rules=(DriverCrash,),
        makers=((DRIVER_PROCESS,
                 lambda dep, cfg, t, p, ctx: dep.driver_crash(cfg, t, p, ctx)),)),
)
