"""``pause-lt-timeout`` / ``pause-gt-timeout``: SIGSTOP at T2, SIGCONT at T3.

A stopped JVM is what a long garbage-collection pause or a frozen VM looks like from
outside: the process exists, holds its connections and its work, and answers nothing. It
is the classic way a process writes after it was declared dead (a *zombie write*): Spark
gives up on it after its time-outs and runs its tasks elsewhere, and when it resumes it
may go on with what it was doing.

The target is the executor JVMs of one worker (``--target N``, by default chosen by the
seed) or, with ``--target driver``, the streaming driver's process group. Below the
time-outs (``pause-lt-timeout``: Spark's defaults, 120 s, the pause the failure phase) the
executor stays registered and its batch waits; above them (``pause-gt-timeout``: the
time-outs lowered as for ``delay-gt-timeout``) the driver declares it lost, and its worker
may kill it while it is stopped (SIGKILL reaches a stopped process; SIGTERM waits for the
SIGCONT).

The log keeps each paused pid with its state read from ``/proc`` after the stop (``T``:
stopped) and after the resume (running, or gone: killed while stopped), and the time-out
scan (the ``timeouts`` entry) says whether an executor was declared lost; the rule reads
them (:meth:`ProcessPause.reasons`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.core.clock import now_ms
from pgval.core.schema import PAUSE_DRIVER, Deploy, Fault
from pgval.faults.descriptor import WORKER_PROCESSES, FaultDescriptor
from pgval.faults.log import Entries, finding, first, timeout_reasons
from pgval.faults.timeouts import SPARK_EXECUTOR_TIMEOUT_S, pause_below, short_timeouts

#: The ``mechanism`` of a pause.
SIGSTOP = "SIGSTOP, SIGCONT at removal"
#: ``--target`` word of a pause that stops the driver instead of a worker's executors.
DRIVER = PAUSE_DRIVER


def process_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from ``/proc/PID/stat`` (``T``: stopped, ``Z``:
    zombie), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def group_members(pgid: int) -> list[int]:
    """The pids whose process group is ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid:
                out.append(int(entry))
    return sorted(out)


class ProcessPause:
    """SIGSTOP the processes ``find()`` returns at T2; SIGCONT them in ``remove``."""

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.PAUSE_LT_TIMEOUT,
                                                     Fault.PAUSE_GT_TIMEOUT})
    mechanisms: ClassVar[tuple[str, ...]] = (SIGSTOP,)

    def __init__(self, fault: Fault, target: str, find: Callable[[], Sequence[int]],
                 settle_s: float = 2.0, poll_s: float = 0.02) -> None:
        self.fault = fault
        self.name = str(fault)
        self.target = target
        self.find = find
        self.settle_s = settle_s
        self.poll_s = poll_s
        self.paused: list[int] = []

    def inject(self) -> dict[str, Any]:
        pids = sorted(set(self.find()))
        entry: dict[str, Any] = {"mechanism": SIGSTOP, "fault": self.name,
                                 "target": self.target, "pids": pids}
        if not pids:
            entry["error"] = f"{self.target} had no process to pause at T2"
            entry["effective_ms"] = now_ms()
            return entry
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
                self.paused.append(pid)
            except ProcessLookupError:
                pass
        # A stop is asynchronous: it has acted once every process reports state T.
        deadline = time.monotonic() + self.settle_s
        while time.monotonic() < deadline and any(
                process_state(p) not in ("T", "t", None) for p in self.paused):
            time.sleep(self.poll_s)
        states = {str(p): process_state(p) for p in pids}
        entry.update(effective_ms=now_ms(), states=states,
                     stopped=[p for p in pids if states[str(p)] in ("T", "t")])
        return entry

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """SIGCONT every paused process (teardown too: a stopped process would block the
        SIGTERM that stops the cluster)."""
        if not self.paused:
            return {"skipped": "nothing was paused"}
        resumed, gone = [], []
        for pid in self.paused:
            try:
                os.kill(pid, signal.SIGCONT)
                resumed.append(pid)
            except ProcessLookupError:
                gone.append(pid)
        cont_ms = now_ms()
        time.sleep(0.2)
        states = {str(p): process_state(p) for p in self.paused}
        self.paused = []
        # What became of each paused process, for the zombie question: gone at SIGCONT =
        # killed while stopped (a SIGKILL acts on a stopped process; Spark's worker sends
        # one 10 s after its SIGTERM, ExecutorRunner.killProcess); gone right after = ended
        # on resume (a SIGTERM waits for the SIGCONT; ended also when its parent has not
        # reaped it yet, state Z); running = it can write again, after the driver may have
        # declared it lost (a possible zombie, in Spark's sense).
        after = {int(p): st for p, st in states.items()}
        return {"effective_ms": cont_ms, "resumed": resumed, "gone": gone, "states": states,
                "killed_while_stopped": gone,
                "ended_on_resume": [p for p in resumed if after.get(p) in (None, "Z", "X")],
                "running_after_resume": [p for p in resumed
                                         if after.get(p) not in (None, "T", "t", "Z")],
                "still_stopped": [p for p, st in after.items() if st in ("T", "t")]}

    def problem(self) -> str | None:
        """Why the pause ended before T3: every paused process is gone or running."""
        if self.paused and not any(process_state(p) in ("T", "t") for p in self.paused):
            return f"no paused process of {self.target} is still stopped"
        return None

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """Every process found was stopped (state T); SIGCONT left none stopped; the
        time-outs fired as the label says (as for a delay)."""
        inject, remove = first(entries, "inject"), first(entries, "remove")
        found = []
        pids, stopped = inject.get("pids") or [], inject.get("stopped") or []
        if not stopped:
            found.append(finding("no process was seen stopped"))
        elif len(stopped) < len(pids):
            missed = sorted(set(pids) - set(stopped))
            found.append(finding(f"not every process was stopped: {missed}"))
        if remove.get("still_stopped"):
            found.append(finding(f"processes still stopped after SIGCONT: "
                                 f"{remove['still_stopped']}"))
        return found + timeout_reasons(entries, what="pause")



#: Where the pauses can run (the config's check and the deployments say it alike).
PAUSE_WHERE = (
    "--fault pause-lt-timeout and pause-gt-timeout need the embedded cluster pgval starts "
    "(--deploy local, no --cluster): pgval stops and resumes its processes by signal")


def _something_to_pause(hooks: Any) -> str | None:
    """A pause needs a live process on its target: the worker's executors (gone while the
    worker is down, and for a while after it is back), or the driver."""
    find = getattr(hooks, "find", None)
    if find is None or find():
        return None
    return f"{getattr(hooks, 'target', 'the target')} has no process to pause"


def _pause_below_check(cfg: Any) -> str | None:
    if cfg.phase_seconds >= 0.8 * SPARK_EXECUTOR_TIMEOUT_S:
        return (f"--fault pause-lt-timeout pauses for the failure phase, which must "
                f"stay below Spark's {SPARK_EXECUTOR_TIMEOUT_S:.0f} s time-out: "
                f"--phase-seconds below {0.8 * SPARK_EXECUTOR_TIMEOUT_S:.0f}")
    return None


_PAUSE: dict[str, Any] = dict(
    deployments=frozenset({Deploy.LOCAL}), owned_only=True, where=PAUSE_WHERE, pause=True,
    target_words=(DRIVER,), needs="a live executor on the worker (or the driver)",
    needs_executors=True, ready=_something_to_pause, rules=(ProcessPause,),
    makers=((WORKER_PROCESSES, lambda dep, cfg, t, p, ctx: dep.process_pause(cfg, t, p, ctx)),))

DESCRIPTORS = (
    FaultDescriptor(Fault.PAUSE_LT_TIMEOUT, "SIGSTOP of a worker's executors (or the driver) "
                    "for the failure phase, below Spark's time-outs", above_timeouts=False,
                    drawn=True, profile=pause_below, check=_pause_below_check, **_PAUSE),
    FaultDescriptor(Fault.PAUSE_GT_TIMEOUT, "SIGSTOP of a worker's executors (or the driver) "
                    "beyond Spark's time-outs (lowered to fit the failure phase)",
                    above_timeouts=True, loses_executors=True, profile=short_timeouts,
                    **_PAUSE),
)
#: The pauses (below and above the time-outs).
PAUSE_FAULTS: frozenset[Fault] = frozenset(d.kind for d in DESCRIPTORS)
