"""One descriptor per fault: everything pgval must know of a fault, said once, in the
fault's own module (as Jepsen keeps a nemesis, its generator and what it means together).

A :class:`FaultDescriptor` says where the fault applies (deployments, sinks, crash
points), its default restart policy, what ``--target`` names and what that target must be
to act, its time-out profile, the rule classes that judge its log, and how each kind of
deployment makes it. Each fault module defines ``DESCRIPTORS`` (a tuple); :func:`descriptor`
finds them by importing the modules of this package, so a new fault is its module and its
name in :class:`pgval.core.schema.Fault`, and nothing else. A name without a descriptor, or two
descriptors for one name, is refused when the registry loads.

A deployment names the mechanisms it has (``Deployment.mechanisms``: a worker's processes,
its network namespace, Spark's executor kill, containers, the user's nemesis ...); the
descriptor's ``makers`` list, in order of preference, which mechanism makes the fault and
how. :mod:`pgval.core.schema`'s ``Fault`` properties (``is_network``, ``restarts`` ...) read the
descriptors through :func:`pgval.core.schema.describe_faults`, which this module sets up.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pgval.core.schema import CrashPoint, Deploy, Fault, Restart

if TYPE_CHECKING:
    from pgval.faults import FaultHooks
    from pgval.faults.timeouts import TimeoutProfile

#: What ``--target`` names for a fault.
WORKER, BROKER, DRIVER, NOTHING = "worker", "broker", "driver", "nothing"

#: The mechanisms a deployment may have (``Deployment.mechanisms``), by which a
#: descriptor's makers are picked.
DRIVER_PROCESS = "driver process"  # the streaming driver, on this machine
WORKER_PROCESSES = "worker processes"  # the workers' process groups are pgval's
WORKER_NETNS = "worker namespaces"  # each worker in a network namespace pgval made
EXECUTOR_KILL = "executor kill"  # Spark's API, through the driver
BROKER_PROCESSES = "broker processes"  # Kafka's brokers, signalled by pid
CONTAINERS = "containers"  # the compose stack's containers, through pumba
NEMESIS = "nemesis"  # the user's own inject/remove commands

#: Makes the fault on a deployment: (deployment, the run's config, target, time-out
#: profile, the fault context) → its hooks. Typed loosely: deployments are above faults.
Maker = Callable[[Any, Any, Any, "TimeoutProfile", Any], "FaultHooks"]


@dataclass(frozen=True)
class FaultDescriptor:
    """One fault, whole. Everything but ``kind`` and ``summary`` has the default of a fault
    that is a plain timed act on a worker, anywhere, judged by no rule."""

    kind: Fault
    summary: str
    #: Where it applies; ``where`` is the sentence for anywhere else.
    deployments: frozenset[Deploy] = frozenset(Deploy)
    where: str = ""
    #: It needs a cluster pgval starts itself (``--deploy local`` without ``--cluster``).
    owned_only: bool = False
    #: The ``--sink`` kinds it applies to (None: every one).
    sinks: frozenset[str] | None = None
    #: The crash points it can be placed at.
    points: frozenset[CrashPoint] = frozenset({CrashPoint.TIMED})
    #: The restart policy of a run that names none (None: nothing restarts), and when that
    #: default does not hold after all (``crash`` on a cluster whose manager replaces the
    #: executor itself): ``cfg -> True`` drops it.
    restart: Restart | None = None
    restart_unless: Callable[[Any], bool] | None = None
    #: What ``--target`` names (:data:`WORKER` ...), and the words it takes besides an index.
    targets: str = WORKER
    target_words: tuple[str, ...] = ()
    #: Acts on a worker's packets: needs root and the workers in their own namespaces.
    network: bool = False
    delay: bool = False
    pause: bool = False
    #: Meant to outlast Spark's time-outs (True), stay below them (False), or neither.
    above_timeouts: bool | None = None
    #: Costs an executor whatever the time-outs (a ``-lt-`` part beside it cannot be judged
    #: by "no executor lost").
    loses_executors: bool = False
    #: A schedule may place it; ``--fault random`` draws it.
    schedulable: bool = True
    drawn: bool = False
    #: Takes its target's executors away until they come back (a crash): a later fault on
    #: the same target that needs them waits ``recovery_s`` after this one ends.
    takes_executors: bool = False
    recovery_s: float = 0.0
    #: What its target must be to act, in words, and as a predicate over the fault's
    #: hooks (None: it can act; else why not now). The schedule asks it before injecting.
    needs: str = ""
    needs_executors: bool = False
    ready: Callable[[Any], str | None] | None = None
    #: Spark's time-outs and the packet delay for this fault: (phase seconds, --delay-ms)
    #: → profile (None: Spark's defaults, no delay; :func:`pgval.faults.profile_for`).
    profile: Callable[[float, int | None], TimeoutProfile] | None = None
    #: The classes whose ``reasons`` judge its log (the first also judges a log whose inject
    #: entry names no mechanism).
    rules: tuple[type, ...] = ()
    #: (mechanism, maker), in order of preference: the first the deployment has is used.
    makers: tuple[tuple[str, Maker], ...] = ()
    #: Its own configuration checks: ``cfg -> why not`` (one sentence) or None.
    check: Callable[[Any], str | None] | None = None

    @property
    def restarts(self) -> bool:
        """Takes a process away that must come back (a worker, the driver, a broker)."""
        return self.restart is not None

    def default_restart(self, cfg: Any) -> Restart | None:
        if self.restart is None or (self.restart_unless and self.restart_unless(cfg)):
            return None
        return self.restart

    def maker_for(self, mechanisms: frozenset[str]) -> Maker | None:
        """The first maker whose mechanism a deployment has (None: it cannot make it)."""
        return next((make for name, make in self.makers if name in mechanisms), None)

    def where_problem(self, deploy: Deploy, attached: bool) -> str | None:
        """Why it cannot run on ``deploy`` (``attached``: a running ``--cluster``), or None."""
        if deploy not in self.deployments or (self.owned_only and attached):
            return self.where or f"--fault {self.kind} does not run on --deploy {deploy}"
        return None


#: A run without a fault.
NONE = FaultDescriptor(Fault.NONE, "no fault", targets=NOTHING, schedulable=False)

#: Modules that describe no fault and are not imported to look: this one, the packet
#: holder (a program of its own), and the evidence registry (built from the descriptors).
SKIPPED: Final = ("descriptor", "took_effect", "holder")

_lock = threading.RLock()
_loading: list[bool] = []
_registry: dict[Fault, FaultDescriptor] = {}


def _load() -> dict[Fault, FaultDescriptor]:
    """Every ``DESCRIPTORS`` of this package's modules, checked: one per fault name."""
    package = __name__.rpartition(".")[0]
    found: dict[Fault, FaultDescriptor] = {Fault.NONE: NONE}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]),
                       key=lambda m: m.name):
        if info.ispkg or info.name.startswith("_") or info.name in SKIPPED:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for d in getattr(module, "DESCRIPTORS", ()):
            if d.kind in found:
                raise AssertionError(f"two descriptors for fault {d.kind}: {info.name} and "
                                   "another module")
            for rule in d.rules:
                if d.kind not in getattr(rule, "kinds", ()):
                    raise AssertionError(f"{rule.__name__} judges {d.kind} but does not say so")
            found[d.kind] = d
    missing = [str(f) for f in Fault if f not in found]
    if missing:
        raise AssertionError(f"faults without a descriptor: {', '.join(missing)}")
    return {f: found[f] for f in Fault}


def descriptors() -> Mapping[Fault, FaultDescriptor]:
    """Every fault's descriptor, in the order of the names (loaded on first use)."""
    if not _registry:
        with _lock:
            if _loading:
                raise AssertionError("a fault module asked for the descriptors while they load: "
                                   "read them in a function, not at import")
            if not _registry:
                _loading.append(True)
                try:
                    _registry.update(_load())
                finally:
                    _loading.clear()
    return _registry


def descriptor(kind: Fault | str) -> FaultDescriptor:
    """The descriptor of fault ``kind`` (a plain error for a name pgval does not know)."""
    return descriptors()[Fault.parse(kind)]


class _Descriptors(Mapping[Fault, FaultDescriptor]):
    """:data:`DESCRIPTORS`: the registry as a mapping that loads on first use."""

    def __getitem__(self, kind: Fault) -> FaultDescriptor:
        return descriptors()[kind]

    def __iter__(self) -> Any:
        return iter(descriptors())

    def __len__(self) -> int:
        return len(descriptors())


#: Fault → its descriptor.
DESCRIPTORS: Final[Mapping[Fault, FaultDescriptor]] = _Descriptors()

