"""Faults injected at T2 and removed at T3: worker crash, driver crash, packet delay."""

from __future__ import annotations

import random

from pgval.faults.network import WorkerDelay, timeouts_fired
from pgval.faults.process import DriverCrash, WorkerCrash
from pgval.faults.timeouts import TimeoutProfile, profile_for

FAULTS = ("none", "crash", "driver-crash", "delay-lt-timeout", "delay-gt-timeout")


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


__all__ = ["FAULTS", "DriverCrash", "TimeoutProfile", "WorkerCrash", "WorkerDelay",
           "default_target", "make_fault", "profile_for", "timeouts_fired"]
