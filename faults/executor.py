"""``crash`` on a cluster pgval does not own: the driver kills one executor through Spark.

On standalone, YARN or Kubernetes clusters that are not pgval's, there is no worker
process to SIGKILL. The driver (client mode, on pgval's machine) can still ask Spark's
scheduler to kill an executor through the cluster manager, with
``SparkContext.killAndReplaceExecutor``: the executor's tasks fail over, and the cluster
manager starts a new executor because the application's target is not lowered (see
docs/faults.md, "Executor kill on any cluster manager").

The fault needs only the driver's control channel (``request``) and its executor events
(``executor_events``), e.g. :class:`pgval.deploy.driver_process.DriverControl`; never the whole
experiment. At T2 it asks for the kill and waits (bounded) until the executor has left
the driver's list; at T3 it waits (bounded) for a replacement: an executor id that was
not registered before the kill. Its evidence (:meth:`ExecutorKill.reasons`) is the driver's
own executor list, not a log line (on Kubernetes Spark logs such a kill at INFO as "killed
by driver", which the WARN-level driver log omits). The kill took effect (``effective_ms``)
when the driver's list lost the executor (when the driver never reported it, the schedule's
clock stands in). The removal is the schedule's T3: the replacement is Spark's own recovery,
often registered within a second of the kill (before the driver's list even showed the
loss), so it is recorded (``replaced_after_s``) and measured by the recovery metrics, not
made the end of the failure phase, which would leave that phase empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from pgval.checker.result import Reason
from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import Fault
from pgval.faults.log import Entries, finding, first

#: What a kill is, as recorded in the driver's answer and the fault log (the driver's end,
#: pgval.topologies.control_channel, names it from here).
MECHANISM = "executor kill via SparkContext.killAndReplaceExecutor"


class ControlChannel(Protocol):
    def request(self, action: dict[str, Any], timeout_s: float) -> dict[str, Any]: ...

    def executor_events(self) -> list[dict[str, Any]]: ...


class ExecutorKill:
    """Kill one executor at T2 through the driver; at T3 record its replacement."""

    name = "crash"
    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.CRASH})
    mechanisms: ClassVar[tuple[str, ...]] = (MECHANISM,)

    def __init__(self, control: ControlChannel, executor: str | None = None, seed: int = 0,
                 index: int | None = None,
                 request_timeout_s: float = 30.0, gone_timeout_s: float = 20.0,
                 replace_timeout_s: float = 60.0, poll_s: float = 0.25,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """``executor``: the id to kill; None lets the driver choose among the executors
        registered at T2 (sorted numerically): the ``index``-th, else one drawn by ``seed``."""
        self.control = control
        self.executor = executor
        self.seed = seed
        self.index = index
        self.request_timeout_s = request_timeout_s
        self.gone_timeout_s = gone_timeout_s
        self.replace_timeout_s = replace_timeout_s
        self.poll_s = poll_s
        self._sleep = sleep
        self._kill: dict[str, Any] | None = None

    def inject(self) -> dict[str, Any]:
        """Ask the driver to kill."""
        answer = self.control.request({"action": "kill-executor", "executor": self.executor,
                                       "seed": self.seed, "index": self.index},
                                      self.request_timeout_s)
        if not answer.get("ok"):
            raise EnvironmentFailure("the Spark driver did not kill an executor: "
                                    f"{answer.get('error') or 'no reason given'}")
        self._kill = answer
        removed = self._wait_for(self._removed_after_s, self.gone_timeout_s)
        detail = {"mechanism": MECHANISM, "target": f"executor {answer['executor']}",
                  "executor": answer["executor"], "host": answer.get("host"),
                  "executors_before": answer.get("executors_before", []),
                  "kill_ts": answer.get("kill_ts"), "removed_after_s": removed}
        kill_ts = answer.get("kill_ts")
        if isinstance(kill_ts, int) and removed is not None:  # the driver saw it gone
            detail["effective_ms"] = kill_ts + round(removed * 1000)
        return detail

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """At T3 wait for the replacement; at teardown (``restore=False``) only look."""
        if self._kill is None:
            return {}
        kill, self._kill = self._kill, None
        target = f"executor {kill['executor']}"
        wait_s = self.replace_timeout_s if restore else 0.0
        t0 = time.monotonic()
        found = (self._wait_for(lambda: self._replacement(kill), wait_s)
                 or self._replacement(kill, killed_gone=False))
        detail: dict[str, Any] = {"target": target, "removed_after_s": self._removed_after_s(kill)}
        if found is not None:
            event, new_id, after = found
            detail.update(replacement=new_id, replacement_host=(event.get("hosts") or {})
                          .get(new_id), replaced_after_s=_seconds(event, kill),
                          executors_after=after)
        else:
            detail["replacement"] = None
            if restore:
                detail["error"] = (f"no replacement for executor {kill['executor']} registered "
                                   f"within {time.monotonic() - t0:.0f} s of T3")
        return detail

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """An executor was killed, left the driver's list (by T2 or by T3) and, unless the
        run ended first, a replacement registered."""
        inject, remove = first(entries, "inject"), first(entries, "remove")
        executor = inject.get("executor")
        if not executor:
            return [finding("no executor was killed")]
        found = []
        if inject.get("removed_after_s") is None and remove.get("removed_after_s") is None:
            found.append(finding(f"executor {executor} never left the driver's executor list"))
        if (remove and not remove.get("teardown") and not remove.get("error")
                and not remove.get("replacement")):
            found.append(finding(f"no replacement for executor {executor} was seen"))
        return found

    # ---- reading the driver's executor events ----------------------------------------------

    def _events_after(self, kill: dict[str, Any]) -> list[dict[str, Any]]:
        ts = kill.get("kill_ts") or 0
        return [e for e in self.control.executor_events()
                if isinstance(e.get("ts"), int) and e["ts"] >= ts
                and isinstance(e.get("ids"), list)]

    def _removed_after_s(self, kill: dict[str, Any] | None = None) -> float | None:
        """Seconds from the kill to the first executor list without the killed one."""
        kill = kill if kill is not None else self._kill
        if kill is None:
            return None
        for event in self._events_after(kill):
            if kill["executor"] not in event["ids"]:
                return _seconds(event, kill)
        return None

    def _replacement(self, kill: dict[str, Any], killed_gone: bool = True
                     ) -> tuple[dict[str, Any], str, list[str]] | None:
        """(the event the replacement first appears in, its id, the executor list after).

        Spark may register the replacement before it drops the killed executor from its
        list (killAndReplaceExecutor asks for the new one at once; measured under load: the
        new one 1.3 s before the old one left), so "after" is the first list holding the
        new id without the killed one; with ``killed_gone=False`` (a last look), the list
        the new id first appeared in."""
        before = set(kill.get("executors_before") or [])
        before.add(kill["executor"])
        events = self._events_after(kill)
        for k, event in enumerate(events):
            new = [i for i in event["ids"] if i not in before]
            if not new:
                continue
            after = next((e["ids"] for e in events[k:]
                          if new[0] in e["ids"] and kill["executor"] not in e["ids"]), None)
            if after is None and killed_gone:
                return None
            return event, new[0], after if after is not None else event["ids"]
        return None

    def _wait_for(self, probe: Callable[[], Any], timeout_s: float) -> Any:
        """``probe()`` until it is not None or ``timeout_s`` passed (one look at least)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = probe()
            if found is not None or time.monotonic() >= deadline:
                return found
            self._sleep(self.poll_s)


def _seconds(event: dict[str, Any], kill: dict[str, Any]) -> float | None:
    if not isinstance(kill.get("kill_ts"), int):
        return None
    return round((event["ts"] - kill["kill_ts"]) / 1000, 3)
