"""A run's spec resolved once, at the command line's edge: :func:`resolve` reads the schedule
file, draws a random schedule, decides the restart policy and checks every cross-field rule,
and returns the frozen :class:`pgval.core.spec.RunSpec` that everything after it reads.

The rules are here, above the faults (each fault's own rules are its descriptor's,
:mod:`pgval.faults.descriptor`); the spec itself is foundation, so what only reads a run's
spec (the store, the report, a re-check) needs none of this.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pgval.core.errors import UserMistake
from pgval.core.schema import (
    BROKER_TARGETS,
    BUILTIN_SINKS,
    CrashPoint,
    Deploy,
    Fault,
    FaultSpec,
    Guarantee,
    Restart,
    Topology,
    parse_trigger,
    sink_kind,
)
from pgval.core.spec import DERIVED, RANDOM, ClusterSpec, RunSpec, ScheduledFault
from pgval.datasets.models import InputModel, model_from_options
from pgval.faults.composite import draw_random, load_schedule, parse_plus, schedule_problem
from pgval.faults.descriptor import BROKER, descriptor, descriptors
from pgval.faults.nemesis import nemesis_argv

#: With ``--job``: the longest window a job may have (pgval's closing events run an hour
#: ahead, and the drain waits for a watermark past every window of ``--window-ms``).
JOB_MAX_WINDOW_MS = 30 * 60_000


def resolve(given: RunSpec | Mapping[str, Any], fault_axis: bool = False,
            **changes: Any) -> RunSpec:
    """The spec of a run, read, drawn and checked once: ``given`` (a spec, or its fields as
    a mapping with ``cluster`` a mapping or a :class:`ClusterSpec`) with ``changes`` on top.
    ``--fault A+B``, ``--schedule FILE`` and ``--fault random`` become the ``schedule``'s
    parts (kept: a stored spec is never re-read or re-drawn); the restart policy is decided;
    a spec that cannot run is one sentence (:class:`UserMistake`). ``fault_axis``: the fault
    is a grid's axis, checked per cell."""
    fields = dict(given.settings() if isinstance(given, RunSpec) else given)
    fields.update(changes)
    for name in DERIVED:
        fields.pop(name, None)
    fields.update(_schedule_fields(fields))
    fields.update(_model_paths(fields))
    cluster = fields.get("cluster")
    if not isinstance(cluster, ClusterSpec):
        fields["cluster"] = ClusterSpec(**(cluster or {}))
    spec = RunSpec(**fields)
    spec = dataclasses.replace(spec, restart_policy=_restart_policy(spec))
    check(spec, fault_axis=fault_axis)
    return dataclasses.replace(spec, resolved=True)


def _schedule_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``--fault A+B``, ``--schedule FILE`` and ``--fault random`` as the schedule's parts,
    where it came from, and the fault ``schedule``; nothing for a single fault or a spec
    whose schedule is already made."""
    text = str(fields.get("fault", Fault.NONE))
    schedule_file = fields.get("schedule_file")
    if schedule_file is not None and text not in (Fault.NONE, Fault.SCHEDULE):
        raise UserMistake(f"--schedule replaces --fault; drop --fault {text}")
    if fields.get("schedule") is not None:
        return {"fault": Fault.SCHEDULE}
    if schedule_file is not None:
        parts = load_schedule(schedule_file)
        origin = f"file: {Path(schedule_file).name}"
    elif text == RANDOM:
        cluster = fields.get("cluster") or {}
        workers = (cluster.workers if isinstance(cluster, ClusterSpec)
                   else cluster.get("workers", ClusterSpec().workers))
        brokers = (cluster.brokers if isinstance(cluster, ClusterSpec)
                   else cluster.get("brokers", ClusterSpec().brokers))
        count = int(fields.get("fault_count", 2))
        seed = int(fields.get("seed", 0))
        parts = draw_random(count, seed, float(fields.get("phase_seconds", 90.0)), workers,
                            brokers)
        origin = f"random: {count} faults, seed {seed}"
    elif "+" in text:
        parts, origin = parse_plus(text), text
    elif text == Fault.SCHEDULE:
        raise UserMistake("--fault schedule needs --schedule FILE")
    else:
        return {}
    return {"schedule": tuple(parts), "schedule_origin": origin, "fault": Fault.SCHEDULE}


def _model_paths(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The input model's files as absolute paths: the producers run elsewhere."""
    out: dict[str, Any] = {}
    replay = fields.get("replay") or {}
    makers = fields.get("input_makers") or {}
    if replay:
        out["replay"] = {n: str(Path(p).resolve()) for n, p in replay.items()}
    if makers:
        out["input_makers"] = {n: _absolute_ref(r) for n, r in makers.items()}
    if fields.get("avro_schema"):
        out["avro_schema"] = {n: str(Path(p).resolve())
                              for n, p in fields["avro_schema"].items()}
    if fields.get("inputs_spec"):
        out["inputs_spec"] = str(Path(fields["inputs_spec"]).resolve())
    return out


def _absolute_ref(ref: str) -> str:
    target, sep, function = str(ref).rpartition(":")
    return f"{Path(target).resolve()}:{function}" if sep and target.endswith(".py") else ref


def trigger_problem(cfg: RunSpec) -> str | None:
    """Why ``--trigger`` cannot be used as asked (one sentence), or None."""
    if cfg.trigger is None:
        return None
    try:
        kind, _ = parse_trigger(cfg.trigger)
    except ValueError as exc:
        return f"--{exc}"
    if kind == "real-time" and (cfg.pg is not Guarantee.A1 or cfg.sink != "kafka"):
        return ("--trigger real-time: Spark's Real-time Mode writes through Spark's own "
                "Kafka sink or foreach, not a foreachBatch sink: use --pg a1 with --sink "
                "kafka")
    if kind == "real-time" and cfg.deploy is Deploy.LOCAL:
        return real_time_slots_problem(cfg)
    return None


def real_time_slots_problem(cfg: RunSpec) -> str | None:
    """Real-time Mode runs one task a Kafka partition for the whole of each batch; a task
    that waits for a free core past the batch's end time reads nothing (Spark's
    ``LowLatencyReaderWrap``: ``curTime >= lowLatencyEndTime`` ends its read at once), so
    with fewer cores than partitions some partitions are never read, without an error.
    Seen in a probe run (not kept): 3 partitions on 2 cores, a third of the inputs never
    read, the drain timed out. The embedded cluster's cores are known: refused before it
    starts (a job's own ``minPartitions`` raises the task count unseen)."""
    model = input_model(cfg)
    # Every input the run has, read or not: the web log's two topics, a model's inputs
    # (a job that reads fewer is refused more often than need be, never starved).
    topics = len(model.inputs) if model is not None else 2
    size = cfg.cluster
    needed = size.partitions * topics
    cores = size.workers * size.cores_per_worker
    if cores >= needed:
        return None
    return (f"--trigger real-time: Spark's Real-time Mode holds a core for each of the "
            f"{needed} Kafka partitions it reads for the whole of every batch, and a "
            f"partition whose task finds no free core is never read: the cluster has "
            f"{cores} (--workers {size.workers} x --cores-per-worker "
            f"{size.cores_per_worker}); give at least {needed} cores or fewer --partitions")


def input_model(cfg: RunSpec) -> InputModel | None:
    """The run's input model (None: the web log), its files read and checked."""
    return model_from_options(cfg.replay, cfg.input_makers, cfg.event_time_field, cfg.skew,
                              cfg.disorder, cfg.late, cfg.inputs_spec, cfg.avro_schema)


def _restart_policy(cfg: RunSpec) -> Restart | None:
    """When a crashed process comes back in this run: ``--restart``, else the fault's
    default (:func:`default_restart`); None where nothing restarts."""
    default = default_restart(cfg)
    return (cfg.restart or default) if default else None


def schedule_parts(cfg: RunSpec) -> tuple[ScheduledFault, ...]:
    """The schedule's parts (empty for a run with one fault or none)."""
    return cfg.schedule_parts


def restart_for(cfg: RunSpec, fault: Fault) -> dict[str, Any]:
    """The restart settings a cell of ``fault`` takes from ``cfg`` (a matrix's, whose fault
    is an axis): the policy where a process restarts, the delay where it restarts at once;
    a fault-free or delay cell gets neither."""
    policy = _restart_policy(cfg.replace(fault=fault))
    return {"restart": cfg.restart if policy else None,
            "restart_delay_s": cfg.restart_delay_s if policy is Restart.IMMEDIATE else 0.0}


def check(cfg: RunSpec, fault_axis: bool = False) -> None:
    """Refuse a spec that cannot run, in one sentence. ``fault_axis``: the fault is a grid's
    axis (a matrix's base), so what depends on it is each cell's to check."""
    if cfg.rate <= 0:
        raise UserMistake("the rate must be a positive number of events per second")
    if cfg.phase_seconds <= 0 or cfg.warmup_seconds < 0:
        raise UserMistake("phase and warm-up lengths must be positive")
    if cfg.warmup_max_seconds < cfg.warmup_seconds:
        raise UserMistake("--warmup-max-seconds must not be below --warmup-seconds")
    if cfg.window_ms <= 0 or cfg.watermark_ms < 0 or cfg.trigger_ms < 0:
        raise UserMistake("window, watermark and trigger must be non-negative (ms)")
    if (cfg.topology is Topology.JOB) != (cfg.job is not None):
        raise UserMistake("--job names your own job, whose topology is 'job'; "
                                "give --job or --topology sst|mst, not both")
    if reason := sink_problem(cfg):
        raise UserMistake(reason)
    if reason := trigger_problem(cfg):
        raise UserMistake(reason)
    if input_model(cfg) is not None and cfg.job is None:
        raise UserMistake("an input model (--replay, --input, --inputs-spec) feeds your own "
                          "job: give --job (SST and MST read the web log)")
    if cfg.job is not None:
        from pgval.topologies.job import JobRef

        JobRef.parse(cfg.job)  # the form only; loading it is the command's
        if cfg.deploy is Deploy.COMPOSE:
            raise UserMistake("--job runs on the embedded cluster or --deploy "
                                    "external: the compose stack's driver container does "
                                    "not see your job's file")
        if cfg.window_ms > JOB_MAX_WINDOW_MS:
            raise UserMistake(
                f"--window-ms {cfg.window_ms}: with --job at most {JOB_MAX_WINDOW_MS} "
                "(the closing events run an hour ahead of the last real event)")
    if cfg.fault is Fault.SCHEDULE:
        if reason := _schedule_problem(cfg):
            raise UserMistake(reason)
    elif not fault_axis and (reason := _target_problem(cfg)):  # a grid: per cell
        raise UserMistake(reason)
    if reason := cfg.fault_spec.problem(cfg.deploy):
        raise UserMistake(reason)
    if cfg.crash_point is CrashPoint.DURING_SINK_WRITE and cfg.target is not None:
        raise UserMistake("--target does not apply to --crash-point "
                                "during-sink-write: the worker whose executor writes is "
                                "the one that dies")
    if reason := not_applicable(cfg):
        raise UserMistake(reason)
    if not fault_axis and (reason := restart_problem(cfg)):
        raise UserMistake(reason)
    if cfg.partition is not None and cfg.fault is not Fault.PARTITION and not fault_axis:
        raise UserMistake("--partition says which link --fault partition cuts; "
                                f"it does not apply to --fault {cfg.fault}")
    if (cfg.loss_share is not None and not fault_axis and Fault.PACKET_LOSS not in
            (cfg.fault, *(p.fault for p in cfg.schedule_parts))):
        raise UserMistake("--loss-share says how much --fault packet-loss drops; "
                          f"it does not apply to --fault {cfg.fault}")
    if cfg.sabotage is not None and cfg.pg is not Guarantee.E1:
        raise UserMistake("--sabotage is a self-test of the e1 sink; use --pg e1")
    if cfg.late_events < 0:
        raise UserMistake("--late-events must not be negative")
    if reason := checker_problem(cfg):
        raise UserMistake(reason)
    _deployment_problem(cfg)


def checker_problem(cfg: RunSpec) -> str | None:
    """``--checker`` and its options, in one sentence where they do not fit the run."""
    if cfg.spark_above is not None and cfg.checker != "auto":
        return (f"--spark-above says when --checker auto judges on Spark; with --checker "
                f"{cfg.checker} it does not apply")
    if cfg.spark_master is not None and cfg.checker == "numpy":
        return "--spark-master says where the Spark checker runs; --checker numpy runs none"
    if cfg.spark_master is not None and not re.fullmatch(r"local(\[(\d+|\*)\])?",
                                                         cfg.spark_master):
        return (f"--spark-master {cfg.spark_master}: the Spark checker writes its tables into "
                "the run's evidence on this machine's disk, which a remote cluster's "
                "executors do not write to; give local[N] (without --spark-master it runs "
                "on the run's own embedded cluster)")
    if cfg.checker in ("spark", "both") and cfg.job is not None and cfg.sink != "kafka":
        return (f"--checker {cfg.checker} reads a job's outputs from Kafka; a job writing to "
                f"--sink {cfg.sink} is judged by --checker numpy")
    if cfg.checker == "spark" and cfg.late_events:
        return ("--late-events is told apart from losses by the numpy checker alone: use "
                "--checker numpy or both")
    return None


def _schedule_problem(cfg: RunSpec) -> str | None:
    """Why the schedule cannot run here (one sentence), or None: its own shape
    (:func:`pgval.faults.composite.schedule_problem`), then each part as a run of that
    fault alone would be checked (where it can run, its target)."""
    parts = cfg.schedule_parts
    if reason := schedule_problem(parts, cfg.phase_seconds, cfg.cluster.workers):
        return reason
    if cfg.deploy is not Deploy.LOCAL or cfg.running_cluster:
        return ("a schedule of several faults runs on the embedded cluster pgval starts "
                "(--deploy local, no --cluster)")
    if cfg.target is not None:
        return "--target does not apply to a schedule: each fault names its own target"
    if cfg.restart is not None or cfg.crash_point is not CrashPoint.TIMED:
        return ("a schedule's crashes are timed and restart at their end: --restart and "
                "--crash-point do not apply")
    for part in parts:
        alone = cfg.replace(fault=part.fault, target=part.target, schedule=None,
                            schedule_file=None, schedule_origin=None)
        if part.for_s is not None:  # the part's failure phase is its own length
            alone = alone.replace(phase_seconds=max(1.0, part.for_s))
        if reason := _target_problem(alone) or not_applicable(alone):
            return f"in the schedule, {part.label()}: {reason}"
    return None


def _target_problem(cfg: RunSpec) -> str | None:
    """Why ``--target`` names nothing this fault can hit, or the fault's own checks
    refuse the run (its descriptor's ``check``): one sentence, or None."""
    d, target = descriptor(cfg.fault), cfg.target
    if isinstance(target, str) and target not in d.target_words:
        return target_words_problem(target)
    if reason := d.where_problem(cfg.deploy, bool(cfg.running_cluster)):
        return reason
    if d.check is not None and (reason := d.check(cfg)):
        return reason
    if (d.targets != BROKER and isinstance(target, int) and cfg.deploy is Deploy.LOCAL
            and not 0 <= target < cfg.cluster.workers):
        return f"--target must be a worker index from 0 to {cfg.cluster.workers - 1}"
    return None


def _deployment_problem(cfg: RunSpec) -> None:
    """Refuse settings that do not go with the deployment (one sentence)."""
    external = cfg.deploy is Deploy.EXTERNAL
    if external and not (cfg.bootstrap and cfg.master):
        raise UserMistake("--deploy external needs --bootstrap HOST:PORT and "
                                "--master URL (see docs/deploy.md)")
    if not external:
        given = [name for name, value in (
            ("--bootstrap", cfg.bootstrap), ("--master", cfg.master),
            ("--kafka-config", cfg.kafka_config), ("--nemesis-inject", cfg.nemesis_inject),
            ("--nemesis-remove", cfg.nemesis_remove)) if value]
        if given:
            raise UserMistake(f"{', '.join(given)} only apply to --deploy external")
    if cfg.running_cluster and cfg.deploy is not Deploy.LOCAL:
        raise UserMistake("--cluster uses a running embedded cluster; it does not "
                                f"go with --deploy {cfg.deploy}")
    if bool(cfg.nemesis_inject) != bool(cfg.nemesis_remove):
        raise UserMistake("--nemesis-inject and --nemesis-remove go together: pgval "
                                "must be able to undo what it started")
    for template in filter(None, (cfg.nemesis_inject, cfg.nemesis_remove)):
        # Filled with stand-ins now, so a placeholder pgval cannot fill is said before
        # anything starts (each is filled for real at T2 and T3).
        nemesis_argv(template, worker=0, delay_ms=0, broker=0)
    d = descriptor(cfg.fault)
    if reason := d.where_problem(cfg.deploy, bool(cfg.running_cluster)):
        raise UserMistake(reason)
    if d.network and cfg.deploy is Deploy.EXTERNAL and d.check and (
            reason := d.check(cfg)):
        raise UserMistake(reason)  # a delay there needs the user's nemesis
    if (d.network and cfg.deploy is Deploy.LOCAL
            and cfg.cluster.isolate is False):
        raise UserMistake(f"--fault {cfg.fault} needs workers in their own network "
                                "namespaces; drop --no-isolate")


def default_restart(cfg: RunSpec) -> Restart | None:
    """The restart policy of a run that names none: its fault's descriptor says (the driver
    comes back at once, as under a supervisor: ``spark-submit --supervise``, YARN's
    application attempts, a Kubernetes restart policy; a worker or a broker at T3, as the
    paper's process crash). None where nothing restarts: no crash, or a crash whose
    executor the cluster manager replaces itself."""
    return descriptor(cfg.fault).default_restart(cfg)


def target_words_problem(target: str) -> str:
    """``--target WORD`` where the fault takes no such word: what it may be instead."""
    words = "; ".join(
        f"with --fault {d.kind} a broker id, {' or '.join(d.target_words)}"
        if d.targets == BROKER else f"with --fault {d.kind}, {' or '.join(d.target_words)}"
        for d in descriptors().values() if d.target_words)
    return f"--target {target}: a worker index; {words}"


def restart_problem(cfg: RunSpec) -> str | None:
    """Why the restart settings mean nothing for this run (one sentence), or None."""
    if cfg.restart is not None and default_restart(cfg) is None:
        if descriptor(cfg.fault).restarts:
            return ("--restart does not apply to crash on a cluster pgval does not own: Spark's "
                    "cluster manager replaces the killed executor itself")
        named = [str(k) for k, d in descriptors().items()
                 if d.restarts and k is not Fault.SCHEDULE]
        return (f"--restart applies to --fault {', '.join(named[:-1])} and {named[-1]} "
                f"(nothing restarts under --fault {cfg.fault})")
    if cfg.restart_delay_s > 0 and _restart_policy(cfg) is not Restart.IMMEDIATE:
        return "--restart-delay-s applies to --restart immediate"
    if cfg.restart_delay_s >= cfg.phase_seconds:
        return ("--restart-delay-s must be shorter than a phase (the restart belongs in the "
                "failure phase; use --restart at-remove to restart at T3)")
    return None


def sink_problem(cfg: RunSpec) -> str | None:
    """Why ``--sink`` cannot be used as asked (one sentence), or None."""
    sink = cfg.sink
    if sink == "kafka":
        return None
    if sink not in BUILTIN_SINKS:
        from pgval.topologies.job import JobRef

        JobRef.parse(sink, option="--sink")
    if cfg.job is None:
        return (f"--sink {sink} writes a job's rows: give --job (SST and MST as jobs: --job "
                "pgval.topologies.builtin:sst)")
    if cfg.pg is not Guarantee.A1:
        return (f"--sink {sink} goes with --pg a1 (the query's own checkpoint; e1 and m1 are "
                "Kafka sinks)")
    if cfg.deploy is not Deploy.LOCAL:
        return (f"--sink {sink} writes to this machine's disk, which pgval reads back: it "
                "needs the embedded cluster (--deploy local, or --cluster)")
    if cfg.crash_point is CrashPoint.DURING_SINK_WRITE and not sink_kind(sink).writer_is_driver:
        return ("crash@during-sink-write aims at a writer of Kafka records or a foreachBatch "
                "sink; for --sink files use driver-crash@after-sink-write (the data files "
                "written, the sink's log not)")
    return None


def not_applicable(cfg: RunSpec) -> str | None:
    """Why a well-formed fault cannot be injected as asked for this pg, or None. A matrix
    leaves such cells out and says why; a single run is refused."""
    if (cfg.fault_spec == FaultSpec(Fault.CRASH, CrashPoint.DURING_SINK_WRITE)
            and cfg.deploy is Deploy.LOCAL and cfg.pg is Guarantee.E1):
        return ("crash@during-sink-write cannot be hit for e1: its sink collects each batch "
                "to the driver and writes it there in one Kafka transaction, so no worker is "
                "ever writing (measured: both tries found the batch committed at the kill); "
                "use crash (timed) or driver-crash@after-sink-write")
    if (cfg.fault is Fault.BROKER_CRASH and cfg.target == BROKER_TARGETS[1]
            and (cfg.pg is not Guarantee.E1 or cfg.sink != "kafka")):
        return ("--target coordinator is the transaction coordinator of the e1 sink: use "
                "--pg e1 with the Kafka sink")
    return None

