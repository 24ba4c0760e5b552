"""Faults injected at T2 and removed at T3: worker crash (or, on a cluster pgval does not own,
an executor kill through the driver), driver crash, packet delay, a user's nemesis.

Each fault class gets a narrow target (a worker handle, the driver, a network path, a
container name, the driver's control channel); which class a deployment uses for which
fault is the deployment's choice (:meth:`pgval.deploy.base.Deployment.make_fault`).
"""

from __future__ import annotations

import random

from pgval.faults.executor import ExecutorKill
from pgval.faults.network import NetworkPath, WorkerDelay, timeouts_fired
from pgval.faults.process import DriverCrash, WorkerCrash
from pgval.faults.timeouts import TimeoutProfile, profile_for
from pgval.schema import FAULTS


def default_target(seed: int, workers: int) -> int:
    """The worker a fault hits when the user does not say: chosen by the run's seed."""
    return random.Random(seed).randrange(workers)


__all__ = ["FAULTS", "DriverCrash", "ExecutorKill", "NetworkPath", "TimeoutProfile",
           "WorkerCrash", "WorkerDelay", "default_target", "profile_for", "timeouts_fired"]
