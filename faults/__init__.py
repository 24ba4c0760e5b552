"""Faults injected at T2 and removed at T3, each whole in one place: its mechanism, its
target, the fault log entries it writes and the rule that reads them back.

* ``process`` — ``crash`` as a SIGKILL of a worker's process group (:class:`WorkerCrash`)
  and ``driver-crash`` (:class:`DriverCrash`), timed or at a crash point;
* ``executor`` — ``crash`` on a cluster pgval does not own: the driver kills an executor
  through Spark (:class:`ExecutorKill`; the driver process imports this module's
  ``MECHANISM``, so the package imports nothing at its top but the time-out profiles);
* ``network`` — the packet delay on a worker (:class:`WorkerDelay`) and its probe; its
  mechanism ``delay`` (netem, or NFQUEUE and the packet ``holder``) and ``timeouts``,
  the time-outs a delay is measured against;
* ``nemesis`` — a delay through the user's own commands on an external cluster;
* ``container`` — the evidence of a fault on a compose container (pumba's kill and delay;
  the Docker work is the compose deployment's, :mod:`pgval.deploy.compose.pumba`);
* ``hooks`` + ``jvm_hooks/`` — the JVM hooks that place a crash inside Spark's JVMs;
* ``loss`` — a share of one worker's packets dropped (the packet holder, ``--drop``);
* ``log`` and ``evidence`` — the fault log as the rules read it, and
  :func:`pgval.faults.took_effect.fault_reasons`, which finds each fault's rule by its kind
  and mechanism;
* ``descriptor`` — one :class:`~pgval.faults.descriptor.FaultDescriptor` per fault, defined
  in the fault's own module (``DESCRIPTORS``): where it applies, its targets and what they
  must be to act, its time-outs, its rules, and how each deployment makes it.

Every fault class is a :class:`FaultHooks` (inject, remove); which class a deployment
uses for which fault is its descriptor's choice among the mechanisms the deployment has
(:meth:`pgval.deploy.base.Deployment.fault_makers`).
"""

from __future__ import annotations

import random
from typing import Any, Protocol

# The descriptors' registry (light: it loads the fault modules on first use) also tells
# pgval.core.schema's Fault where its properties are read from.
from pgval.faults.descriptor import descriptor
from pgval.faults.timeouts import TimeoutProfile, profile_for


class FaultHooks(Protocol):
    """A fault: injected at T2, removed at T3; ``remove`` must be safe to call twice, and
    after an interrupted ``inject``. ``restore=False`` (teardown) undoes what would
    outlive the run (a delay) without restoring what teardown stops anyway (no restart
    of a crashed worker just to stop it). Optional: ``problem() -> str | None``, why the
    fault stopped acting before T3."""

    name: str

    def inject(self) -> dict[str, Any]: ...

    def remove(self, restore: bool = True) -> dict[str, Any]: ...


def default_target(seed: int, workers: int) -> int:
    """The worker a fault hits when the user does not say: chosen by the run's seed."""
    return random.Random(seed).randrange(workers)


__all__ = ["FaultHooks", "TimeoutProfile", "default_target", "descriptor", "profile_for"]
