"""Faults injected at T2 and removed at T3: worker crash (or, on a cluster pgval does not own,
an executor kill through the driver), driver crash, packet delay."""

from __future__ import annotations

import random

from pgval.faults.executor import ExecutorKill
from pgval.faults.network import WorkerDelay, timeouts_fired
from pgval.faults.process import DriverCrash, WorkerCrash
from pgval.faults.timeouts import TimeoutProfile, profile_for
from pgval.schema import FAULTS


def default_target(seed: int, workers: int) -> int:
    """The worker a fault hits when the user does not say: chosen by the run's seed."""
    return random.Random(seed).randrange(workers)


def make_fault(name: str, target: int, profile: TimeoutProfile):  # noqa: ANN201 - FaultHooks
    """The fault object for ``name`` (``None`` for ``none``)."""
    if name == "none":
        return None
    if name == "crash":
        return WorkerCrash(target)
    if name == "driver-crash":
        return DriverCrash()
    if name in ("delay-lt-timeout", "delay-gt-timeout"):
        return WorkerDelay(name, target, profile)
    raise ValueError(f"unknown fault {name!r}; choose from {', '.join(FAULTS)}")


def make_compose_fault(name: str, target: int, profile: TimeoutProfile,  # noqa: ANN201
                       phase_seconds: float):
    """The fault for the Docker deployment: pumba on the target worker's container.

    The delay's ``--duration`` is the failure phase plus a margin, so pumba removes the
    delay by itself even if pgval dies; ``remove`` at T3 stops it earlier and verifies.
    """
    if name in ("none", "driver-crash"):
        return make_fault(name, target, profile)
    from pgval.faults.pumba import PumbaFault, worker_container

    container = worker_container(target)
    if name == "crash":
        return PumbaFault(name, "kill", container)
    if name in ("delay-lt-timeout", "delay-gt-timeout"):
        return PumbaFault(name, "delay", container, delay_ms=profile.delay_ms or 500,
                          duration_s=phase_seconds + 30)
    raise ValueError(f"unknown fault {name!r}; choose from {', '.join(FAULTS)}")


__all__ = ["FAULTS", "DriverCrash", "ExecutorKill", "TimeoutProfile", "WorkerCrash", "WorkerDelay",
           "default_target", "make_compose_fault", "make_fault", "profile_for",
           "timeouts_fired"]
