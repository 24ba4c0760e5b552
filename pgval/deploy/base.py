"""What a run needs from where it runs: the :class:`Deployment` interface.

The experiment asks its deployment for Kafka clients' settings, the run's topics, where and
how the Spark driver runs, and the fault targets it offers; it never asks which kind of
deployment it has. Three implement it: the embedded cluster pgval starts (or one already
running from `pgval cluster up`), the Docker Compose stack, and a user's own Kafka + Spark.

A deployment may outlive a run (a warm cluster across matrix cells): :meth:`start` and
:meth:`stop` bound what *it* owns, :meth:`open_run` / :meth:`close_run` what one run
creates on it (its topics).
"""

from __future__ import annotations

import dataclasses
import secrets
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import Fault, Topics, sink_kind
from pgval.faults import FaultHooks, default_target
from pgval.faults.broker_crash import LEADER, BrokerCrash, KillableBrokers
from pgval.faults.composite import CompositeFault
from pgval.faults.descriptor import DRIVER_PROCESS, FaultDescriptor, descriptors
from pgval.faults.executor import ExecutorKill
from pgval.faults.network import NetworkPath
from pgval.faults.process import DriverCrash, SinkWriteCrash
from pgval.faults.timeouts import TimeoutProfile, profile_for
from pgval.host.cds import ClassArchive
from pgval.kafka.admin import create_topics, delete_topics

if TYPE_CHECKING:
    from pgval.core.spec import RunSpec
    from pgval.deploy.driver_process import DriverProcess

#: Makes one fault on a deployment: (the run's configuration, the target worker, the
#: time-out profile, what else the fault may need) → the fault's inject/remove hooks.
FaultMaker = Callable[["RunSpec", int, "TimeoutProfile", "FaultContext"], "FaultHooks"]


@dataclass
class DriverPlacement:
    """Where the streaming driver runs and how it reaches Kafka and Spark."""

    bootstrap: str  # as the driver and the executors see Kafka
    master: str
    driver_host: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: Prefix that runs the driver elsewhere (``docker exec pgval-runner``), its Python,
    #: how host paths look there, and how to signal it there.
    launcher: list[str] = field(default_factory=list)
    python: str = sys.executable
    path_map: Callable[[Path], str] | None = None
    signal_argv: Callable[[str], list[str]] | None = None
    #: The user's Kafka client settings (external clusters). The user's Spark settings
    #: (``--spark-conf``) are not the placement's: they reach the driver on every deployment.
    kafka_options: dict[str, str] = field(default_factory=dict)
    #: The executors' class-sharing flags (pgval.host.cds): only on a cluster whose
    #: executors run on this host with pgval's cache.
    executor_java_flags: str = ""


@dataclass
class FaultContext:
    """What a fault may need besides its target: the run's directory, its phase length (a
    delay's hard cap), the driver (driver crash, executor kill)."""

    run_dir: Path
    phase_seconds: float
    driver: DriverProcess
    seed: int = 0
    #: Records in the run's output topic now (-1 if unknown): did a batch write? (crash
    #: points compare it at a batch's start and end; no clocks).
    output_count: Callable[[], int] | None = None
    #: The query's checkpoint directory (which batch is planned, which committed).
    checkpoint: Path | None = None
    #: The file that arms the driver's commit hook (crash point after-sink-write), or None.
    crash_trigger: Path | None = None
    #: The file that arms the sink's producer hook (crash point during-sink-write), or None.
    sink_trigger: Path | None = None
    #: The run's topics (a broker crash reads their leaders; the output's picks its target).
    topics: Topics | None = None
    #: The e1 sink's transactional.id (``broker-crash --target coordinator``), or None.
    transactional_id: str | None = None
    #: The run's window (``--window-ms``) in seconds: a windowed job writes once a window.
    window_seconds: float = 0.0

    @property
    def reach_timeout_s(self) -> float:
        """How long a crash point may take after T2 (else the run is unknown): half the
        failure phase, or two windows where that is longer (a windowed job writes only
        when a window closes: with 10 s windows and 20 s phases, half the phase twice found
        no batch with outputs), within 0.8 of the phase so the failure
        phase keeps its crash, and at most a minute."""
        wanted = max(0.5 * self.phase_seconds, 2.0 * self.window_seconds)
        return max(2.0, min(60.0, wanted, 0.8 * self.phase_seconds))


class Deployment(ABC):
    """Kafka + Spark for runs; see the module docstring."""

    kind: str = ""
    #: The mechanisms this deployment has to make faults with (the names of
    #: :mod:`pgval.faults.descriptor`); each fault's descriptor picks among them. The
    #: driver runs on this machine everywhere.
    mechanisms: frozenset[str] = frozenset({DRIVER_PROCESS})
    #: True when :meth:`stop` stops the cluster itself (pgval started it).
    owns_cluster: bool = False
    #: Seconds spent starting what the deployment owns (0 when it was already up).
    timings: dict[str, float]

    def __init__(self) -> None:
        self.timings = {}

    # -- lifetime of what the deployment owns
    @abstractmethod
    def start(self) -> Deployment:
        """Bring up (or check) the cluster; idempotent for a cluster already up."""

    @abstractmethod
    def stop(self) -> None:
        """Stop what this deployment started; never a cluster it does not own."""

    def restore(self) -> list[str]:
        """Between runs on a warm cluster: bring back what a fault took away (a crashed
        worker). Returns what was restored."""
        return []

    # -- one run on it
    def topics_for(self, run_dir: Path) -> Topics:
        """The run's topics: a fresh prefix, so no run sees another's records."""
        return Topics.with_prefix(f"pgval-{secrets.token_hex(4)}-")

    @property
    @abstractmethod
    def partitions(self) -> int:
        """Partitions of each of a run's topics."""

    def open_run(self, topics: Topics) -> None:
        """Create the run's topics (LogAppendTime, P partitions, aligned leaders)."""
        create_topics(self.client_config(), topics.all(), self.partitions,
                      compacted=[topics.marker])

    def close_run(self, topics: Topics, keep: bool) -> list[str]:
        """After the run is stored: delete its topics unless ``keep``; returns what went."""
        return [] if keep else delete_topics(self.client_config(), topics.all())

    # -- what runs need
    @abstractmethod
    def client_config(self) -> dict[str, Any]:
        """Settings for pgval's own Kafka clients on this machine (bootstrap + the user's)."""

    @property
    def bootstrap(self) -> str:
        return str(self.client_config()["bootstrap.servers"])

    @abstractmethod
    def driver_placement(self) -> DriverPlacement: ...

    @property
    @abstractmethod
    def workers(self) -> int:
        """How many fault targets (workers) a `crash` or delay may pick from."""

    def make_fault(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                   ctx: FaultContext) -> FaultHooks | None:
        """The fault ``cfg.fault`` on worker ``target`` here (None for ``none``); raises a
        plain error when this deployment cannot inject it."""
        kind = Fault.parse(cfg.fault)
        if kind is Fault.NONE:
            return None
        if kind is Fault.SCHEDULE:
            return self.schedule_fault(cfg, ctx)
        return self.fault_makers()[kind](cfg, target, profile, ctx)

    def schedule_fault(self, cfg: RunSpec, ctx: FaultContext) -> CompositeFault:
        """Each part of the schedule as this deployment makes that fault alone: on its own
        target, or by default the seed's worker for the first part and the next worker for
        each next part (the parts of ``A+B`` land on different workers where there are
        enough), a broker crash on the output's leader."""
        parts = []
        workers = max(1, self.workers)
        first = default_target(cfg.seed, workers)
        for i, part in enumerate(cfg.schedule_parts):
            target = (part.target if part.target is not None
                      else LEADER if part.fault is Fault.BROKER_CRASH
                      else (first + i) % workers)
            alone = cfg.replace(fault=part.fault, target=target, schedule=None,
                                schedule_file=None, schedule_origin=None)
            profile = profile_for(part.fault, cfg.phase_seconds, cfg.delay_ms)
            hooks = self.make_fault(alone, target, profile, ctx)  # type: ignore[arg-type]
            parts.append((dataclasses.replace(part, target=target), hooks))
        return CompositeFault(parts, cfg.phase_seconds)

    def fault_makers(self) -> dict[Fault, FaultMaker]:
        """How this deployment makes each fault (every one but ``none`` and ``schedule``,
        whose parts are each made here: :meth:`schedule_fault`): the maker its descriptor
        picks among this deployment's :attr:`mechanisms`, or, where it has none of them,
        one that says in one sentence where the fault runs."""
        return {kind: self._maker(d) for kind, d in descriptors().items()
                if kind not in (Fault.NONE, Fault.SCHEDULE)}

    def _maker(self, d: FaultDescriptor) -> FaultMaker:
        make = d.maker_for(self.mechanisms)

        def made(cfg: RunSpec, target: Any, profile: TimeoutProfile,
                 ctx: FaultContext) -> FaultHooks:
            if make is None:
                raise EnvironmentFailure(d.where or f"--fault {d.kind} cannot be injected "
                                        f"on --deploy {self.kind}")
            return make(self, cfg, target, profile, ctx)
        return made

    def worker_path(self, target: int) -> NetworkPath:
        """Worker ``target``'s network namespace and an address to probe it at: only where
        pgval put the workers in namespaces (:data:`~pgval.faults.descriptor.WORKER_NETNS`)."""
        raise EnvironmentFailure(f"--deploy {self.kind} has no worker namespaces of pgval's")

    @staticmethod
    def crash_a_broker(brokers: KillableBrokers, cfg: RunSpec, ctx: FaultContext,
                       undo: bool = True) -> BrokerCrash:
        """``broker-crash`` through ``brokers`` on the run's topics; ``undo``: the cluster
        outlives the run, so the broker's restart is recorded for its reaper."""
        ids = brokers.node_ids
        if len(ids) < 2:
            raise EnvironmentFailure(f"--fault broker-crash needs a cluster of 2 brokers or "
                                    f"more (3 to keep writing with min.insync.replicas 2 "
                                    f"while one is down); this one has {len(ids)}")
        if isinstance(cfg.target, int) and cfg.target not in ids:
            raise EnvironmentFailure(f"--target {cfg.target}: the cluster's brokers are "
                                    f"{', '.join(map(str, ids))}")
        topics = ctx.topics or Topics()
        return BrokerCrash(brokers, topics.all(), topics.output,
                           target=cfg.target if cfg.target is not None else LEADER,
                           transactional_id=ctx.transactional_id,
                           run_dir=ctx.run_dir if undo else None)

    def driver_crash(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                     ctx: FaultContext) -> DriverCrash:
        # A driver signalled in a container (compose) leaves its JVM to exit on its own,
        # still able to log a commit: no exact in-flight batch to read after the kill.
        exact = self.driver_placement().signal_argv is None
        return DriverCrash(ctx.driver, trigger=ctx.crash_trigger, output_count=ctx.output_count,
                           checkpoint=ctx.checkpoint if exact else None,
                           reach_timeout_s=ctx.reach_timeout_s,
                           halt_stage=sink_kind(cfg.sink).halt_stage)

    def sink_writer_crash(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                          ctx: FaultContext) -> SinkWriteCrash:
        """``crash@during-sink-write`` with a user's ``foreachBatch`` sink: its writes run in
        the driver, so the driver is the process that dies with a write unfinished."""
        return SinkWriteCrash(ctx.driver, reach_timeout_s=ctx.reach_timeout_s)

    def executor_kill(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                      ctx: FaultContext) -> ExecutorKill:
        """``crash`` on a cluster pgval does not own: the driver kills one executor through
        Spark's API (any cluster manager replaces it); ``--target`` picks it among the
        sorted executor ids, else ``--seed`` does (the worker index ``target`` means
        nothing there)."""
        return ExecutorKill(ctx.driver.control(), seed=ctx.seed, index=cfg.target)

    def daemon_conf(self) -> dict[str, str]:
        """Spark settings the cluster's daemons run with (time-out profile of delay-gt)."""
        return {}

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...

    def log_dirs(self) -> list[Path]:
        """Where the cluster's logs are (read for which time-out fired)."""
        return []

    def class_dumps(self) -> list[tuple[ClassArchive, int]]:
        """The cluster's JVMs that record their classes for an archive (pgval.host.cds):
        only a cluster pgval started here has any."""
        return []

    def reaper_problem(self) -> str | None:
        """A sentence if the reaper of a cluster pgval started here died (else None)."""
        return None
