"""The fault schedule: inject at T2, remove at T3 (and always on the way out), every step
in the fault log — the evidence :func:`pgval.faults.took_effect.fault_reasons` reads.

Each step keeps four clocks: ``intended_ms`` (the schedule's T2 or T3), ``actual_ms`` (the
step began), ``done_ms`` (it returned) and ``effective_ms``: when the fault took effect or
ended, as the mechanism saw it (a kill once the process group is gone, a halt at the hook's
hit, a restart once the process is back; :mod:`pgval.faults.process`), else ``done_ms``
(a delay's inject ends after its probe saw the delay). The run judges its phases by
``effective_ms``: outputs before the fault acted belong to control."""

from __future__ import annotations

from typing import Any

from pgval.core.clock import now_ms
from pgval.core.schema import Fault, Restart
from pgval.faults import FaultHooks


class NoFault:
    name = Fault.NONE

    def inject(self) -> dict[str, Any]:
        return {}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        return {}



class FaultSchedule:
    """Runs a fault's steps and keeps their log."""

    def __init__(self, fault: FaultHooks) -> None:
        self.fault = fault
        self.log: list[dict[str, Any]] = []
        bind = getattr(fault, "bind_log", None)
        if callable(bind):  # a schedule's parts log their own steps (pgval.faults.composite)
            bind(self.log.append)

    @property
    def name(self) -> str:
        return self.fault.name

    @property
    def active(self) -> bool:
        """Whether there is a fault to inject (not :class:`NoFault`)."""
        return self.fault.name != Fault.NONE

    def step(self, step: str, intended_ms: int, restore: bool = True) -> None:
        """Inject or remove, logged as one step: the entry exists before the fault acts,
        so an interrupt at any point of ``inject`` still leads teardown to remove it."""
        if not self.active:
            return
        entry: dict[str, Any] = {"step": step, "fault": self.fault.name,
                                 "intended_ms": intended_ms, "actual_ms": now_ms()}
        if not restore:
            entry["teardown"] = True
        self.log.append(entry)
        intend = getattr(self.fault, "intend", None)
        if callable(intend):  # a schedule times its parts from T2 as intended, not as begun
            intend(step, intended_ms)
        try:
            detail = (self.fault.inject() if step == "inject"
                      else self.fault.remove(restore=restore))
            entry.update(detail or {})
            entry["done_ms"] = now_ms()
            if not isinstance(entry.get("effective_ms"), int):
                entry["effective_ms"] = entry["done_ms"]
        except BaseException as exc:
            entry["error"] = str(exc) or type(exc).__name__
            raise

    def effective(self, step: str) -> int | None:
        """When the first ``step`` (inject, remove) of the timeline took effect (None: not
        done, or it failed); a teardown's removal is not the timeline's."""
        return next((e["effective_ms"] for e in self.log if e["step"] == step
                     and not e.get("teardown") and "effective_ms" in e), None)

    def removal_due(self, restart: Restart | None, delay_s: float, t3_ms: int) -> int:
        """When the removal step is due: under the restart policy ``immediate`` ``delay_s``
        after the inject took effect (a supervisor restarts what it saw die), else at T3."""
        if restart is Restart.IMMEDIATE:
            crashed = self.effective("inject")
            return (crashed if crashed is not None else now_ms()) + round(delay_s * 1000)
        return t3_ms

    def check(self) -> None:
        """Record (once) a fault that stopped acting before T3, e.g. a dead packet holder:
        the run then cannot claim the failure phase was delayed (a validity reason)."""
        problem = getattr(self.fault, "problem", None)
        why = problem() if callable(problem) else None
        if why and not any(e.get("step") == "holder-died" for e in self.log):
            self.log.append({"step": "holder-died", "fault": self.fault.name,
                             "actual_ms": now_ms(), "error": why})

    def needs_removal(self) -> bool:
        """Injection began and no removal succeeded."""
        removed_ok = any(e["step"] == "remove" and not e.get("error") for e in self.log)
        return any(e["step"] == "inject" for e in self.log) and not removed_ok
