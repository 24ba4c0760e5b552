"""T0 of a run: its guard, the checks that refuse it before anything starts, then the
deployment up, the run's topics, pgval's own events, the driver and the fault — returned as
frozen :class:`RunHandles` that the timeline and the finalize step act on.

What has been started so far is written into :class:`Started` as each part starts, so the
teardown (:mod:`pgval.run.teardown`) stops exactly that, however far the setup got.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.cluster.guard import RunGuard
from pgval.config import input_model
from pgval.core.errors import UserMistake
from pgval.core.schema import (
    BROKER_TARGETS,
    GET_TOPIC,
    POST_TOPIC,
    CrashPoint,
    Deploy,
    Fault,
    FaultSpec,
    Topics,
    sink_kind,
    transactional_id,
)
from pgval.core.spec import RunSpec
from pgval.datasets import ProducerGroup
from pgval.datasets.models import InputModel, PreparedModel
from pgval.deploy import Deployment, FaultContext
from pgval.deploy.driver_process import DriverProcess, DriverSpec
from pgval.deploy.shared_driver import SharedDrivers, SharedQuery, own_driver_reason
from pgval.evidence.bundle import keep_job_source
from pgval.faults import TimeoutProfile, default_target
from pgval.faults.descriptor import descriptor
from pgval.faults.hooks import crash_trigger, ensure_hooks_jar, sink_trigger
from pgval.faults.network import log_sizes
from pgval.host import cds, undo
from pgval.host.jars import ensure_delta_jars
from pgval.run.monitor import OutputMonitor
from pgval.run.own_events import ControlEvents
from pgval.run.schedule import FaultSchedule, NoFault
from pgval.run.sink_readback import FileSinkWatch, UserSinkWatch
from pgval.topologies.job import load_or_check, source_file

Driver = DriverProcess | SharedQuery
Watch = OutputMonitor | FileSinkWatch | UserSinkWatch


@dataclass
class Started:
    """What a run has started so far (filled as each part starts, read by the teardown):
    everything here is stopped, and nothing else, however the run ends."""

    deployment: Deployment
    #: The run started the deployment itself (it stops it too).
    owns_deployment: bool
    run_dir: Path
    guard: RunGuard | None = None
    topics: Topics | None = None
    driver: Driver | None = None
    schedule: FaultSchedule = field(default_factory=lambda: FaultSchedule(NoFault()))
    generators: ProducerGroup | None = None
    monitor: OutputMonitor | None = None


class OutputCount:
    """Outputs the sink holds now, for a fault's crash point; -1 until the watch exists."""

    def __init__(self) -> None:
        self.watch: Watch | None = None

    def __call__(self) -> int:
        return self.watch.count() if self.watch is not None else -1


@dataclass(frozen=True)
class JobInputs:
    """How a user's job reads its inputs: Kafka itself (``build(spark, kafka)``, IDs from
    the records' coordinates) or the parsed web log, and from which input model."""

    reads_kafka: bool
    model: InputModel | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The inputs by name, in slot order: the model's, or the web log's two."""
        return self.model.names if self.model is not None else (GET_TOPIC, POST_TOPIC)

    def topics(self, topics: Topics) -> dict[str, str]:
        """Each input's topic in this run: the first is the run's get topic, the second
        its post topic."""
        return dict(zip(self.names, topics.inputs, strict=False))

    def describe(self, topics: Topics) -> dict[str, Any]:
        """What run.json's ``job`` says of the inputs (the evidence reads it back)."""
        if not self.reads_kafka:
            return {}
        return {"ids": "kafka", "inputs": self.topics(topics),
                **({"model": self.model.to_record()} if self.model is not None else {})}


def checked_job(cfg: RunSpec) -> RunSpec:
    """The config with its ``--job`` (and a user's ``--sink``) imported and checked (a
    missing file or function, a syntax error, a bad ``build.key``, a sink without a reader:
    one sentence, exit 2, before anything starts) and a file's path made absolute (the
    driver and the batch oracle run elsewhere)."""
    if cfg.job is None:
        return cfg
    from pgval.config import resolve, trigger_problem
    from pgval.core.schema import BUILTIN_SINKS
    from pgval.topologies.user_sink import load_sink

    job = load_or_check(cfg.job)
    ref = job.ref
    job_inputs(cfg)  # an input model for a job that reads the web log: one sentence
    if cfg.checker in ("spark", "both") and job.reads_kafka:
        raise UserMistake(f"--job {ref}: --checker {cfg.checker} judges a job over the web "
                          "log's sources; a job that reads Kafka itself (its IDs are its "
                          "records' coordinates) is judged by --checker numpy")
    if job.trigger and cfg.trigger is None and (why := trigger_problem(
            cfg.replace(trigger=job.trigger))):
        raise UserMistake(f"--job {ref}: build.trigger {job.trigger!r}: {why}")
    sink = load_sink(cfg.sink).ref if cfg.sink not in BUILTIN_SINKS else None
    changes = {}
    for name, given in (("job", ref), ("sink", sink)):
        if given is not None and given.is_file:
            changes[name] = f"{Path(given.target).resolve()}:{given.function}"
    return resolve(cfg, **changes) if changes else cfg


def job_inputs(cfg: RunSpec) -> JobInputs | None:
    """The run's :class:`JobInputs` (None without ``--job``); an input model for a job that
    reads the web log is one sentence."""
    if cfg.job is None:
        return None
    job = load_or_check(cfg.job)
    model = input_model(cfg)
    if model is not None and not job.reads_kafka:
        raise UserMistake(f"--job {cfg.job}: with an input model the job reads its inputs "
                          "itself: name build's second parameter kafka and read each input "
                          "with kafka.reader(NAME) (docs/your-job.md)")
    return JobInputs(job.reads_kafka, model)


@dataclass(frozen=True)
class RunHandles:
    """A deployed run: what the timeline and the finalize step act on."""

    deployment: Deployment
    topics: Topics
    control: ControlEvents
    driver: Driver
    spec: DriverSpec
    schedule: FaultSchedule
    #: The fault as the run names it (kind and crash point), its time-out profile, its target.
    fault: FaultSpec
    profile: TimeoutProfile
    target: int | str | None
    #: The query's output topic watched for the live count and the warm-up.
    monitor: OutputMonitor
    #: What the sink holds, watched: the monitor (Kafka), or a file or user sink's watch.
    watch: Watch
    #: Log sizes at the start, so the time-out scan reads only this run's part.
    log_offsets: Mapping[str, int]
    #: The job's file and its SHA-256 as the run started (None: no job, or no single file).
    job_source: Path | None
    job_sha: str | None
    #: What the setup adds to run.json's config (topic prefix, a shared driver, a restore).
    notes: Mapping[str, Any]
    timings: Mapping[str, float]
    #: How a user's job reads its inputs (None: no job).
    inputs: JobInputs | None = None

    @property
    def driver_log_dirs(self) -> list[Path]:
        """Log folders of a driver outside the run's directory (a shared driver's)."""
        return [self.driver.shared.log_dir] if isinstance(self.driver, SharedQuery) else []

    @property
    def sink_dir(self) -> Path | None:
        return self.spec.sink_dir


def start_guard(started: Started, deploy_kind: str) -> None:
    """A reaper for the run's directory unless the cluster the run starts there has one
    already (an embedded cluster of its own). Matrix cells and OIR trials on a warm cluster,
    ``--cluster``, external and compose runs get their own: their drivers, generators,
    holders and nemesis undo live in the run's directory, not the cluster's."""
    if started.owns_deployment and started.deployment.owns_cluster:
        return
    started.guard = RunGuard(started.run_dir,
                             started.deployment.kind or deploy_kind).start()


def reaper_problem(started: Started) -> str | None:
    """Why the run is no longer covered against SIGKILL (a reaper died), or None."""
    own = started.guard.problem() if started.guard is not None else None
    return own or started.deployment.reaper_problem()


def preflight(cfg: RunSpec, fault: FaultSpec, deployment: Deployment,
              run_dir: Path) -> None:
    """Refuse, before anything is deployed, a run that could only fail at T2."""
    if fault.point is CrashPoint.DURING_SINK_WRITE and not deployment.owns_cluster:
        raise UserMistake("--crash-point during-sink-write needs a cluster pgval starts "
                          "itself (drop --cluster): here a crash is an executor kill through "
                          "the driver")
    if cfg.sink == "delta":
        ensure_delta_jars()  # resolved once; a failure is one sentence, now
    if fault.point is not CrashPoint.TIMED:
        ensure_hooks_jar()  # built once (javac); a missing JDK is one sentence, now
        crash_trigger(run_dir).parent.mkdir(parents=True, exist_ok=True)
    network = any(descriptor(k).network
                  for k in (fault.kind, *(p.fault for p in cfg.schedule_parts)))
    if network and cfg.deploy == Deploy.LOCAL:
        if os.geteuid() != 0:
            raise UserMistake(f"--fault {cfg.fault} needs root (it puts the worker in a "
                              "network namespace and changes its packet path)")
        if cfg.cluster.isolate is False:
            raise UserMistake(f"--fault {cfg.fault} needs the workers in their own network "
                              "namespaces; drop --no-isolate")


def setup_run(cfg: RunSpec, started: Started, profile: TimeoutProfile,
              drivers: SharedDrivers | None) -> RunHandles:
    """The deployment up (or checked, when warm), the run's topics, pgval's own events, the
    driver (started), the fault made, the sink watched."""
    dep, run_dir = started.deployment, started.run_dir
    timings: dict[str, float] = {}
    notes: dict[str, Any] = {}
    t0 = time.monotonic()
    dep.start()
    if started.owns_deployment:
        timings.update(dep.timings)
    else:
        restored = dep.restore()
        if restored:
            notes["restored_before_run"] = restored
        timings["cluster_start_s"] = time.monotonic() - t0
    log_offsets = log_sizes(dep.log_dirs())
    topics = started.topics = dep.topics_for(run_dir)
    notes["topic_prefix"] = topics.prefix
    dep.open_run(topics)
    inputs = job_inputs(cfg)
    control = ControlEvents(dep.client_config(), topics, cfg.resources,
                            own_key=inputs is not None and inputs.reads_kafka,
                            model=(PreparedModel(inputs.model, cfg.seed)
                                   if inputs is not None and inputs.model is not None
                                   else None))
    fault = cfg.fault_spec
    spec = driver_spec(cfg, dep, topics, run_dir, profile, fault, inputs)
    driver, driver_note = choose_driver(cfg, spec, run_dir, drivers, log_offsets)
    started.driver = driver
    if driver_note:
        notes["driver"] = driver_note
    if spec.signal_argv is not None:
        # A driver in a container outlives the `docker exec` the pid file names.
        undo.record(run_dir, "driver", {"argv": spec.signal_argv("KILL"),
                                        "what": "kill the driver in its container"})
    target = fault_target(cfg, dep)
    count = OutputCount()
    made = dep.make_fault(cfg, target, profile,  # type: ignore[arg-type]
                          FaultContext(run_dir, cfg.phase_seconds, driver, cfg.seed, count,
                                       spec.checkpoint, spec.crash_trigger, spec.sink_trigger,
                                       topics=topics,
                                       transactional_id=transactional_id(spec.query_name),
                                       window_seconds=cfg.window_ms / 1000))
    started.schedule = FaultSchedule(made or NoFault())
    job_source = source_file(cfg.job) if cfg.job is not None else None
    # What runs, kept before the driver imports it.
    job_sha = keep_job_source(run_dir, job_source) if cfg.job is not None else None
    timings["driver_start_s"] = driver.start()
    if isinstance(driver, SharedQuery) and driver.setup_s is not None:
        # Of it: waiting for the executors a previous cell's fault took to come back.
        timings["driver_setup_s"] = driver.setup_s
    monitor = started.monitor = OutputMonitor(dep.client_config(), topics)
    count.watch = watch = sink_watch(cfg, monitor, driver, spec.sink_dir)
    return RunHandles(dep, topics, control, driver, spec, started.schedule, fault, profile,
                      target, monitor, watch, dict(log_offsets), job_source, job_sha, notes,
                      timings, inputs)


def driver_spec(cfg: RunSpec, dep: Deployment, topics: Topics, run_dir: Path,
                profile: TimeoutProfile, fault: FaultSpec, inputs: JobInputs | None = None
                ) -> DriverSpec:
    """The streaming driver's spec for this run on this deployment."""
    where = dep.driver_placement()
    return DriverSpec(
        topology=cfg.topology, pg=cfg.pg, checkpoint=run_dir / "checkpoint",
        progress_file=run_dir / "progress.jsonl", window_ms=cfg.window_ms,
        watermark_ms=cfg.watermark_ms, trigger_ms=cfg.trigger_ms,
        shuffle_partitions=cfg.shuffle_partitions or cfg.cluster.partitions,
        executor_memory=cfg.executor_memory,
        max_offsets_per_trigger=cfg.max_offsets_per_trigger,
        query_name=f"{topics.prefix}{cfg.topology}-{cfg.pg}", sabotage=cfg.sabotage,
        conf=dict(profile.driver_conf), bootstrap=where.bootstrap,
        master=where.master, driver_host=where.driver_host, extra_env=where.extra_env,
        launcher=where.launcher, python=where.python, path_map=where.path_map,
        signal_argv=where.signal_argv, topic_prefix=topics.prefix, job=cfg.job,
        input_names=",".join(inputs.names) if inputs is not None else "get,post",
        trigger=cfg.trigger or "",
        sink=cfg.sink, sink_dir=None if cfg.sink == "kafka" else run_dir / "sink",
        # The control channel (a thread polling the JVM twice a second) only where a
        # fault needs it: the executor kill on a cluster pgval does not own.
        control_dir=(run_dir / "control"
                     if fault.kind is Fault.CRASH and not dep.owns_cluster else None),
        # --spark-conf on every deployment: the driver's environment, then a properties
        # file in memory (topologies/driver.start_jvm), never a command line.
        kafka_options=where.kafka_options, user_conf=dict(cfg.spark_conf),
        crash_trigger=(crash_trigger(run_dir)
                       if fault.point is CrashPoint.AFTER_SINK_WRITE else None),
        sink_trigger=(sink_trigger(run_dir)
                      if fault.point is CrashPoint.DURING_SINK_WRITE else None),
        # Class-data sharing for a driver on this host (pgval.host.cds); the executors'
        # where the deployment has it (the embedded cluster).
        class_sharing=not where.launcher and cds.enabled(),
        executor_java_flags=where.executor_java_flags)


def choose_driver(cfg: RunSpec, spec: DriverSpec, run_dir: Path,
                  drivers: SharedDrivers | None, log_offsets: dict[str, int]
                  ) -> tuple[Driver, dict[str, Any] | None]:
    """The run's own driver, or its query in the campaign's shared driver when it can share
    one (:mod:`pgval.deploy.shared_driver`); with which, and why, for run.json."""
    if drivers is None:
        return DriverProcess(spec, run_dir / "logs", run_dir / "pids"), None
    why = own_driver_reason(cfg, spec.launcher)
    if why is not None:
        # The shared driver's application holds the executors' cores: an application
        # started beside it would get none. The next run that can share starts a new one.
        drivers.close(why=f"a run needed its own driver ({why})")
        return (DriverProcess(spec, run_dir / "logs", run_dir / "pids"),
                {"mode": "fresh", "why": why})
    query = drivers.query(spec)
    # Its log holds earlier cells too: the time-out scan reads this run's part only.
    log_offsets.update(log_sizes([query.shared.log_dir]))
    return query, query.describe()


def fault_target(cfg: RunSpec, dep: Deployment) -> int | str:
    """A worker's index (chosen by the seed unless given); a broker crash's target is its
    own (a broker id, or the role it plays: :mod:`pgval.faults.broker_crash`)."""
    if cfg.target is not None:
        return cfg.target
    if cfg.fault is Fault.BROKER_CRASH:
        return BROKER_TARGETS[0]
    return default_target(cfg.seed, max(1, dep.workers))


def sink_watch(cfg: RunSpec, monitor: OutputMonitor, driver: Driver,
               sink_dir: Path | None) -> Watch:
    """How the outputs are watched while the run goes: the output topic, a file sink's
    folder, or the rows a user's sink was given."""
    kind = sink_kind(cfg.sink)
    if kind.name == "kafka":
        return monitor
    if kind.raw_read:
        assert sink_dir is not None
        return FileSinkWatch(sink_dir)
    return UserSinkWatch(driver)  # type: ignore[arg-type]


def driver_is_target(cfg: RunSpec, fault: FaultSpec) -> bool:
    """Is the driver what the fault kills (a driver crash; a crash during a user's
    foreachBatch sink's write, which runs in the driver)? It is down until removed."""
    return fault.kind is Fault.DRIVER_CRASH or (
        fault == FaultSpec(Fault.CRASH, CrashPoint.DURING_SINK_WRITE)
        and sink_kind(cfg.sink).writer_is_driver)


def job_changed(handles: RunHandles, sha256: Callable[[Path], str]) -> str | None:
    """A sentence when the job's file changed during the run (a restarted driver imports it
    again: it may have run another job), else None."""
    source, sha = handles.job_source, handles.job_sha
    if sha is None or source is None:
        return None
    now = sha256(source) if source.is_file() else None
    if now == sha:
        return None
    return (f"the job's file {source} changed during the run: the evidence keeps the one it "
            "started with")
