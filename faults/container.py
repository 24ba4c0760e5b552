"""Faults on a container (the compose deployment's Spark workers): what their log entries
say and whether they took effect.

The unit of failure under Docker is a container: ``crash`` kills the worker's container,
a delay puts netem on its egress; pumba does both. The Docker and pumba work — the engine,
pumba's processes, tc in the target's namespace, pumba's bugs — lives next to the compose
stack (:class:`pgval.deploy.compose.pumba.PumbaFault`), which ``pgval.faults`` may not
import (deployments are a higher layer), while a re-check (:mod:`pgval.evidence.recheck`, also
below the deployments) must judge a stored compose run from its log. So this module owns
the fault's evidence: PumbaFault writes its entries with :meth:`ContainerKill.entry`,
:meth:`ContainerDelay.entry` and :func:`entry`, and the ``reasons`` here read them. The
evidence is Docker's own state, since there is no host pid to record: the container seen
``exited``/``dead`` after a kill, a netem qdisc seen on it during a delay. Whether a delay
was above or below the time-outs is the driver's log, as for pgval's own delay (the driver
runs in the compose stack with its log in the run's ``logs/``, which the time-out scan
reads): :func:`pgval.faults.log.timeout_reasons`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.core.schema import Fault
from pgval.faults.log import Entries, finding, first, timeout_reasons

#: The fault log's ``mechanism`` of every container fault: the tool that acts.
MECHANISM = "pumba"
#: Docker's states of a container whose main process is gone.
STOPPED = ("exited", "dead")


def entry(target: str, argv: Sequence[str], **detail: Any) -> dict[str, Any]:
    """A container fault's log entry: the mechanism, the container and the exact command."""
    return {"mechanism": MECHANISM, "target": target, "argv": list(argv), **detail}


class ContainerKill:
    """``crash``: the worker's container killed at T2, started again at T3."""

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.CRASH})
    mechanisms: ClassVar[tuple[str, ...]] = (MECHANISM,)

    @staticmethod
    def entry(target: str, argv: Sequence[str], *, status: str, **detail: Any) -> dict[str, Any]:
        """The inject entry: ``status`` is Docker's state of the container after the kill."""
        return entry(target, argv, status=status, **detail)

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        inject = first(entries, "inject")
        if inject.get("status") not in STOPPED:
            return [finding(f"container {inject.get('target')} was not seen stopped "
                            f"(status {inject.get('status')!r})")]
        return []


class ContainerDelay:
    """A delay fault: netem on the worker container's egress from T2 to T3."""

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.DELAY_LT_TIMEOUT,
                                                     Fault.DELAY_GT_TIMEOUT})
    mechanisms: ClassVar[tuple[str, ...]] = (MECHANISM,)

    @staticmethod
    def entry(target: str, argv: Sequence[str], *, qdisc: str, **detail: Any) -> dict[str, Any]:
        """The inject entry: ``qdisc`` is the netem line ``tc qdisc show`` printed in the
        container once the delay acted."""
        return entry(target, argv, qdisc=qdisc, **detail)

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        inject = first(entries, "inject")
        found = []
        if not inject.get("qdisc"):
            found.append(finding(f"no netem qdisc was seen on container {inject.get('target')}"))
        if first(entries, "remove").get("ended_before_remove"):
            # pumba's duration is the failure phase plus a margin: ending first means it
            # died, and with it (its own teardown) the delay, before T3.
            found.append(finding(f"pumba ended before the delay on {inject.get('target')} was "
                                 "removed: the delay may have stopped early"))
        return found + timeout_reasons(entries)
