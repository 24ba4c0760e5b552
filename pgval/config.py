"""What defines a run: :class:`ExperimentConfig`, stored with every result.

Each field carries its command-line help in ``metadata["help"]`` (and, where it has one, a
fixed list of ``choices`` from :mod:`pgval.schema`, bounds, a metavar), so the options of
`validate`, `matrix` and `oir` are generated from this one place (:mod:`pgval.cli.options`)
and cannot disagree on defaults.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pgval.cluster.local import ClusterConfig
from pgval.errors import UserMistake
from pgval.faults.composite import (
    RANDOM,
    ScheduledFault,
    draw_random,
    load_schedule,
    parse_plus,
    schedule_problem,
)
from pgval.faults.descriptor import BROKER, descriptor, descriptors
from pgval.redact import redact_record, redact_url, scrub
from pgval.schema import (
    BROKER_TARGETS,
    BUILTIN_SINKS,
    BUILTIN_TOPOLOGIES,
    CRASH_POINTS,
    DEPLOYMENTS,
    MAX_RECORD_BYTES,
    PARTITIONS,
    PAUSE_DRIVER,
    PROCESSING_GUARANTEES,
    RESTARTS,
    SINGLE_FAULTS,
    CrashPoint,
    Deploy,
    Fault,
    FaultSpec,
    Guarantee,
    Partition,
    Restart,
    Topology,
    sink_kind,
)
from pgval.shape import RunShape

#: With ``--job``: the longest window a job may have (pgval's closing events run an hour
#: ahead, and the drain waits for a watermark past every window of ``--window-ms``).
JOB_MAX_WINDOW_MS = 30 * 60_000


def opt(help: str, **extra: Any) -> dict[str, Any]:  # noqa: A002 - click's own word
    """Field metadata: the option's help text and anything else the CLI needs: ``choices``,
    ``metavar``, ``min``/``max`` (inclusive bounds), ``required`` (the command line must name
    it), ``name`` (the option's name when not the field's, e.g. ``--cluster``)."""
    return {"help": help, **extra}


@dataclass
class ExperimentConfig:
    """Everything that defines a run; stored with its results."""

    topology: Topology = field(default=Topology.SST, metadata=opt(
        "SST (windowed GET count) or MST (GET ⋈ POST, then count); or --job for your own.",
        choices=BUILTIN_TOPOLOGIES, required_unless="job"))
    #: A user's own job (``PATH.py:FUNCTION``, a file's path made absolute, or
    #: ``package.module:FUNCTION``); the topology is then ``job``.
    job: str | None = field(default=None, metadata=opt(
        "Your own PySpark job instead of --topology: build(spark, sources) returning a "
        "streaming DataFrame with an ids column (docs/your-job.md). Its build run as a batch "
        "over the run's inputs is the oracle.", metavar="PATH.py:FUNCTION|MODULE:FUNCTION"))
    pg: Guarantee = field(default=Guarantee.A1, metadata=opt(
        "a1: Spark's Kafka sink (at-least-once); e1: transactional sink; m1: the Kafka "
        "sink reading from the latest offsets with a checkpoint a restart does not find "
        "(at-most-once).",
        choices=PROCESSING_GUARANTEES))
    #: Where the outputs go: ``kafka`` (the pg's sink), ``files`` or a user's sink
    #: (``PATH.py:FUNCTION``, a file's path made absolute).
    sink: str = field(default="kafka", metadata=opt(
        "Where the outputs go: kafka (the --pg's sink: a1, e1, m1); files (Spark's file "
        "sink, Parquet, judged as read through its _spark_metadata log and as read raw); "
        "delta (a Delta Lake table, foreachBatch with Delta's idempotent writes, "
        "txnAppId/txnVersion; through its log and raw); or your foreachBatch sink, "
        "PATH.py:FUNCTION, whose module's read(sink_dir) gives back what it wrote. Other "
        "than kafka: with --job and --pg a1 (docs/your-job.md).",
        metavar="kafka|files|delta|PATH.py:FUNCTION"))
    fault: Fault = field(default=Fault.NONE, metadata=opt(
        "Injected at T2 into one Spark worker (or the driver, or a Kafka broker), removed at "
        "T3. A+B: several at once (T2 to T3); random: --fault-count faults of random kinds, "
        "targets and times inside the failure phase, drawn from --seed (docs/faults.md, "
        "'Several faults in one run').",
        choices=(*SINGLE_FAULTS, RANDOM), composable=True,
        metavar="FAULT|A+B|random"))
    crash_point: CrashPoint = field(default=CrashPoint.TIMED, metadata=opt(
        "Where a crash lands: timed (at T2); for driver-crash after-sink-write (the first "
        "batch after T2 whose outputs are in Kafka, before its commit is in the checkpoint); "
        "for crash during-sink-write (the worker of the first executor whose sink task has "
        "a record in Kafka and has not finished).",
        choices=CRASH_POINTS))
    #: As given; None: the fault's default (:attr:`restart_policy` resolves it).
    restart: Restart | None = field(default=None, metadata=opt(
        "When a crashed process comes back: immediate (as a supervisor restarts it: as soon "
        "as it is gone, after --restart-delay-s; T3 is when it is back) or at-remove (at T3, "
        "the paper's process crash). Default: immediate for driver-crash, at-remove for "
        "crash; not for other faults, nor for crash on a cluster pgval does not own (Spark "
        "replaces the executor itself).", choices=RESTARTS))
    restart_delay_s: float = field(default=0.0, metadata=opt(
        "With --restart immediate: seconds between the crash taking effect and the restart "
        "(a supervisor's back-off).", min=0))
    rate: float = field(default=2_000.0, metadata=opt(
        "Generator rate, events/s over all producers, or 'oir' for the optimum ingestion "
        "rate stored for this topology, pg and run shape (see `pgval oir`)."))
    producers: int = field(default=1, metadata=opt("Generator processes sharing the rate.",
                                                             min=1))
    resources: int = field(default=16, metadata=opt("Distinct resources (keys) in the log.",
                                                               min=1))
    get_share: float = field(default=0.995, metadata=opt("Share of GET requests.", min=0.0,
                                                                   max=1.0))
    phase_seconds: float = field(default=90.0, metadata=opt(
        "Length of each of control, failure and recovery (the paper: 90 s).", min=1))
    warmup_seconds: float = field(default=5.0, metadata=opt(
        "ε, at least: generated but not judged; control starts once the pipeline is steady "
        "(outputs flowing, their latency no longer falling) and this has passed.", min=0))
    warmup_max_seconds: float = field(default=180.0, metadata=opt(
        "At most this long a warm-up: then control starts anyway and the run says why the "
        "pipeline never settled.", min=0))
    window_ms: int = field(default=10_000, metadata=opt(
        "Tumbling event-time window (ms). With --job: the longest window of your job (the "
        "drain waits until its watermark has closed every window that long).",
        min=1, max=10**12))
    watermark_ms: int = field(default=2_000, metadata=opt(
        "Allowed lateness (ms); with --job your job sets its own watermark.", min=0))
    trigger_ms: int = field(default=1_000, metadata=opt("Micro-batch trigger interval (ms).",
                                                                 min=0))
    shuffle_partitions: int | None = field(default=None, metadata=opt(
        "spark.sql.shuffle.partitions (default: the number of Kafka partitions).", min=1))
    max_offsets_per_trigger: int | None = field(default=None, metadata=opt(
        "Cap on records read per micro-batch (default: no cap).", min=1))
    executor_memory: str = field(default="512m", metadata=opt("Spark executor memory."))
    seed: int = field(default=0, metadata=opt("Seeds the generator and the fault's target."))
    deploy: Deploy = field(default=Deploy.LOCAL, metadata=opt(
        "local: the embedded cluster pgval starts; compose: the running stack of "
        "compose/docker-compose.yml, faults through pumba; external: your own Kafka and "
        "Spark (--bootstrap, --master).", choices=DEPLOYMENTS))
    target: int | str | None = field(default=None, metadata=opt(
        "Index of the worker the fault hits (default: chosen by --seed; not with "
        "crash@during-sink-write, which hits the writer's worker); on a cluster "
        "pgval does not own, of the executor a crash kills, among the sorted executor ids "
        "registered at T2. broker-crash: a broker id, 'leader' (default: the leader of the "
        "most output partitions) or 'coordinator' (the e1 sink's transaction coordinator). "
        "The pauses: a worker index (its executors), or 'driver'.",
        min=0, words=(*BROKER_TARGETS, PAUSE_DRIVER), metavar="N|leader|coordinator|driver"))
    delay_ms: int | None = field(default=None, metadata=opt(
        "Packet delay for delay faults (default: 500 ms below the time-outs; 1.5 x the "
        "lowered time-out above them).", min=1))
    schedule_file: str | None = field(default=None, metadata=opt(
        "A fault schedule, JSON (or YAML with PyYAML): a list of {fault, at, for, target}, "
        "seconds from the start of the failure phase (for omitted: until T3). Replaces "
        "--fault.", metavar="FILE", name="--schedule"))
    fault_count: int = field(default=2, metadata=opt(
        "With --fault random: how many faults the schedule draws.", min=1, max=20))
    #: The schedule the run follows (from --fault A+B, --schedule or --fault random), as
    #: records: what the run stores, so a re-check needs no file and no re-draw.
    schedule: list[dict[str, Any]] | None = None
    #: Where the schedule came from, for people: ``crash+partition``, ``random: 3 faults,
    #: seed 7``, ``file: chaos.json``.
    schedule_origin: str | None = None
    partition: Partition | None = field(default=None, metadata=opt(
        "With --fault partition, the link of worker --target it cuts: worker-kafka (the "
        "default: to and from the brokers), worker-driver, worker-all (everything) or "
        "one-way (everything the worker sends).", choices=PARTITIONS))
    loss_share: float | None = field(default=None, metadata=opt(
        "With --fault packet-loss, the share of worker --target's packets dropped, both "
        "ways, at random (default 0.3).", min=0.0, max=1.0))
    drain_timeout_s: float = field(default=300.0, metadata=opt(
        "After T4, how long the query may take to process everything (else: unknown).",
        min=1))
    prime_events: int = field(default=20_000, metadata=opt(
        "Control events that warm the query up before T1.", min=0))
    keep_data: bool = field(default=False, metadata=opt(
        "Keep broker data and checkpoints after the run is stored (evidence and logs are "
        "always kept)."))
    #: SELF-TEST only: the e1 sink drops or re-writes one batch (``drop-batch:N``).
    sabotage: str | None = field(default=None, metadata=opt(
        "SELF-TEST of pgval, not a guarantee: the e1 sink drops or re-writes its N-th batch "
        "with real outputs, so the validator must flag those IDs.",
        metavar="drop-batch:N|dup-batch:N"))
    #: SELF-TEST only: plant this many events behind the watermark during control.
    late_events: int = field(default=0, metadata=opt(
        "SELF-TEST: plant this many events behind the watermark mid-control; Spark drops "
        "them, and pgval must attribute them as late.", min=0))
    # -- external deployment (--deploy external) and a running `pgval cluster up` cluster
    bootstrap: str | None = field(default=None, metadata=opt(
        "external: Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]."))
    master: str | None = field(default=None, metadata=opt(
        "external: Spark master URL (spark://, k8s://, yarn, local[N]); the driver runs "
        "here in client mode."))
    kafka_config: dict[str, str] = field(default_factory=dict, metadata=opt(
        "external: a Kafka client setting KEY=VALUE (SASL, SSL, …), given to pgval's own "
        "clients and to Spark's Kafka source and sink; repeatable. @FILE reads KEY=VALUE "
        "lines from FILE (a password then stays off the command line).",
        metavar="KEY=VALUE"))
    spark_conf: dict[str, str] = field(default_factory=dict, metadata=opt(
        "A Spark setting KEY=VALUE for the driver (and through it the executors), on every "
        "deployment; repeatable. @FILE reads KEY=VALUE lines from FILE. Values reach the "
        "driver's JVM in memory, on no command line (docs/safety.md).", metavar="KEY=VALUE"))
    nemesis_inject: str | None = field(default=None, metadata=opt(
        "external: your command that starts the fault at T2 (split like a shell would, "
        "never run by one): a packet delay ({worker} and {delay_ms} are filled in) or a "
        "broker crash ({broker}).", metavar="ARGV"))
    nemesis_remove: str | None = field(default=None, metadata=opt(
        "external: your command that removes the fault at T3 (the delay, or starts the "
        "broker again); also run if pgval dies first.", metavar="ARGV"))
    keep_topics: bool = field(default=False, metadata=opt(
        "external: keep the run's topics afterwards (default: deleted once stored)."))
    running_cluster: str | None = field(default=None, metadata=opt(
        "Use the running `pgval cluster up` cluster in this directory instead of starting "
        "one.", metavar="DIR", name="--cluster"))
    cluster: ClusterConfig = field(default_factory=ClusterConfig)

    def __post_init__(self) -> None:
        """The names, parsed once: a name that is none of pgval's is one sentence here,
        and everything after compares members, never text."""
        self.topology = Topology.parse(self.topology)
        self.pg = Guarantee.parse(self.pg)
        self._read_schedule()
        self.fault = Fault.parse(self.fault)
        self.crash_point = CrashPoint.parse(self.crash_point)
        self.deploy = Deploy.parse(self.deploy)
        if self.restart is not None:
            self.restart = Restart.parse(self.restart)
        if self.partition is not None:
            self.partition = Partition.parse(self.partition)
        if isinstance(self.target, str) and self.target.isdigit():
            self.target = int(self.target)  # as stored before broker-crash's words

    def _read_schedule(self) -> None:
        """``--fault A+B``, ``--schedule FILE`` and ``--fault random`` become one thing: the
        fault ``schedule`` and its parts as records (kept; a stored config is not re-read
        or re-drawn)."""
        text = str(self.fault)
        if self.schedule_file is not None and text not in (Fault.NONE, Fault.SCHEDULE):
            raise UserMistake(f"--schedule replaces --fault; drop --fault {text}")
        if self.schedule is None:
            parts = None
            if self.schedule_file is not None:
                parts = load_schedule(self.schedule_file)
                self.schedule_origin = f"file: {Path(self.schedule_file).name}"
            elif text == RANDOM:
                parts = draw_random(self.fault_count, self.seed, self.phase_seconds,
                                    self.cluster.workers, self.cluster.brokers)
                self.schedule_origin = (f"random: {self.fault_count} faults, "
                                        f"seed {self.seed}")
            elif "+" in text:
                parts = parse_plus(text)
                self.schedule_origin = text
            elif text == Fault.SCHEDULE:
                raise UserMistake("--fault schedule needs --schedule FILE")
            if parts is not None:
                self.schedule = [p.as_record() for p in parts]
        if self.schedule is not None:
            self.fault = Fault.SCHEDULE

    @property
    def schedule_parts(self) -> list[ScheduledFault]:
        """The schedule's parts (empty for a run with one fault or none)."""
        return [ScheduledFault.from_record(r) for r in self.schedule or []]

    @property
    def fault_spec(self) -> FaultSpec:
        """The fault at its crash point: ``crash@during-sink-write``."""
        return FaultSpec(self.fault, self.crash_point)

    def shape(self) -> RunShape:
        """What this run is comparable by (the matrix key, the OIR shape, the report)."""
        return RunShape.of(asdict(self))

    @property
    def spark_replaces_executor(self) -> bool:
        """A ``crash`` here is an executor kill through the driver, on a cluster pgval does
        not own, whose cluster manager starts the replacement (:mod:`pgval.faults.executor`)."""
        return self.deploy is Deploy.EXTERNAL or bool(
            self.deploy is Deploy.LOCAL and self.running_cluster)

    @property
    def restart_policy(self) -> Restart | None:
        """When a crashed process comes back in this run: ``--restart``, else the fault's
        default (:func:`default_restart`); None where nothing restarts."""
        return (self.restart or default_restart(self)) if default_restart(self) else None

    def restart_for(self, fault: Fault) -> dict[str, Any]:
        """The restart settings a cell of ``fault`` takes from this config (a matrix's, whose
        fault is an axis): the policy where a process restarts, the delay where it restarts
        at once; a fault-free or delay cell gets neither."""
        policy = dataclasses.replace(self, fault=fault).restart_policy
        return {"restart": self.restart if policy else None,
                "restart_delay_s": self.restart_delay_s if policy is Restart.IMMEDIATE else 0.0}

    def validate(self, fault_axis: bool = False) -> None:
        """Refuse a configuration that cannot run, in one sentence. ``fault_axis``: the fault
        is a grid's axis (a matrix's base), so what depends on it is each cell's to check."""
        if self.rate <= 0:
            raise UserMistake("the rate must be a positive number of events per second")
        if self.phase_seconds <= 0 or self.warmup_seconds < 0:
            raise UserMistake("phase and warm-up lengths must be positive")
        if self.warmup_max_seconds < self.warmup_seconds:
            raise UserMistake("--warmup-max-seconds must not be below --warmup-seconds")
        if self.window_ms <= 0 or self.watermark_ms < 0 or self.trigger_ms < 0:
            raise UserMistake("window, watermark and trigger must be non-negative (ms)")
        if (self.topology is Topology.JOB) != (self.job is not None):
            raise UserMistake("--job names your own job, whose topology is 'job'; "
                                    "give --job or --topology sst|mst, not both")
        if reason := sink_problem(self):
            raise UserMistake(reason)
        if self.job is not None:
            from pgval.topologies.job import JobRef

            JobRef.parse(self.job)  # the form only; loading it is the command's
            if self.deploy is Deploy.COMPOSE:
                raise UserMistake("--job runs on the embedded cluster or --deploy "
                                        "external: the compose stack's driver container does "
                                        "not see your job's file")
            if self.window_ms > JOB_MAX_WINDOW_MS:
                raise UserMistake(
                    f"--window-ms {self.window_ms}: with --job at most {JOB_MAX_WINDOW_MS} "
                    "(the closing events run an hour ahead of the last real event)")
        if self.fault is Fault.SCHEDULE:
            if reason := self._schedule_problem():
                raise UserMistake(reason)
        elif not fault_axis and (reason := self._target_problem()):  # a grid: per cell
            raise UserMistake(reason)
        if reason := self.fault_spec.problem(self.deploy):
            raise UserMistake(reason)
        if self.crash_point is CrashPoint.DURING_SINK_WRITE and self.target is not None:
            raise UserMistake("--target does not apply to --crash-point "
                                    "during-sink-write: the worker whose executor writes is "
                                    "the one that dies")
        if reason := not_applicable(self):
            raise UserMistake(reason)
        if not fault_axis and (reason := restart_problem(self)):
            raise UserMistake(reason)
        if self.partition is not None and self.fault is not Fault.PARTITION and not fault_axis:
            raise UserMistake("--partition says which link --fault partition cuts; "
                                    f"it does not apply to --fault {self.fault}")
        if (self.loss_share is not None and not fault_axis and Fault.PACKET_LOSS not in
                (self.fault, *(p.fault for p in self.schedule_parts))):
            raise UserMistake("--loss-share says how much --fault packet-loss drops; "
                              f"it does not apply to --fault {self.fault}")
        if self.sabotage is not None and self.pg is not Guarantee.E1:
            raise UserMistake("--sabotage is a self-test of the e1 sink; use --pg e1")
        if self.late_events < 0:
            raise UserMistake("--late-events must not be negative")
        self._validate_deployment()

    def _schedule_problem(self) -> str | None:
        """Why the schedule cannot run here (one sentence), or None: its own shape
        (:func:`pgval.faults.composite.schedule_problem`), then each part as a run of that
        fault alone would be checked (where it can run, its target)."""
        parts = self.schedule_parts
        if reason := schedule_problem(parts, self.phase_seconds, self.cluster.workers):
            return reason
        if self.deploy is not Deploy.LOCAL or self.running_cluster:
            return ("a schedule of several faults runs on the embedded cluster pgval starts "
                    "(--deploy local, no --cluster)")
        if self.target is not None:
            return "--target does not apply to a schedule: each fault names its own target"
        if self.restart is not None or self.crash_point is not CrashPoint.TIMED:
            return ("a schedule's crashes are timed and restart at their end: --restart and "
                    "--crash-point do not apply")
        for part in parts:
            alone = dataclasses.replace(self, fault=part.fault, target=part.target,
                                        schedule=None, schedule_file=None,
                                        schedule_origin=None)
            if part.for_s is not None:  # the part's failure phase is its own length
                alone = dataclasses.replace(alone, phase_seconds=max(1.0, part.for_s))
            if reason := alone._target_problem() or not_applicable(alone):
                return f"in the schedule, {part.label()}: {reason}"
        return None

    def _target_problem(self) -> str | None:
        """Why ``--target`` names nothing this fault can hit, or the fault's own checks
        refuse the run (its descriptor's ``check``): one sentence, or None."""
        d, target = descriptor(self.fault), self.target
        if isinstance(target, str) and target not in d.target_words:
            return target_words_problem(target)
        if reason := d.where_problem(self.deploy, bool(self.running_cluster)):
            return reason
        if d.check is not None and (reason := d.check(self)):
            return reason
        if (d.targets != BROKER and isinstance(target, int) and self.deploy is Deploy.LOCAL
                and not 0 <= target < self.cluster.workers):
            return f"--target must be a worker index from 0 to {self.cluster.workers - 1}"
        return None

    def _validate_deployment(self) -> None:
        external = self.deploy is Deploy.EXTERNAL
        if external and not (self.bootstrap and self.master):
            raise UserMistake("--deploy external needs --bootstrap HOST:PORT and "
                                    "--master URL (see docs/deploy.md)")
        if not external:
            given = [name for name, value in (
                ("--bootstrap", self.bootstrap), ("--master", self.master),
                ("--kafka-config", self.kafka_config), ("--nemesis-inject", self.nemesis_inject),
                ("--nemesis-remove", self.nemesis_remove)) if value]
            if given:
                raise UserMistake(f"{', '.join(given)} only apply to --deploy external")
        if self.running_cluster and self.deploy is not Deploy.LOCAL:
            raise UserMistake("--cluster uses a running embedded cluster; it does not "
                                    f"go with --deploy {self.deploy}")
        if bool(self.nemesis_inject) != bool(self.nemesis_remove):
            raise UserMistake("--nemesis-inject and --nemesis-remove go together: pgval "
                                    "must be able to undo what it started")
        d = descriptor(self.fault)
        if reason := d.where_problem(self.deploy, bool(self.running_cluster)):
            raise UserMistake(reason)
        if d.network and self.deploy is Deploy.EXTERNAL and d.check and (
                reason := d.check(self)):
            raise UserMistake(reason)  # a delay there needs the user's nemesis
        if (d.network and self.deploy is Deploy.LOCAL
                and self.cluster.isolate is False):
            raise UserMistake(f"--fault {self.fault} needs workers in their own network "
                                    "namespaces; drop --no-isolate")

    def to_dict(self) -> dict[str, Any]:
        """The config as stored (run.json, ``runs.params``): secrets redacted, keys kept
        (:func:`pgval.redact.redact_record`). What needs the real values reads the fields.
        The restart policy is stored as the run applied it, so a report groups by it."""
        return redact_record({**asdict(self), "restart": self.restart_policy})

    def output_row_estimate(self) -> tuple[int, int]:
        """(IDs, bytes) of the largest output row the built-in topologies make: one row per
        resource and window, carrying the IDs of all its inputs (the generator spreads
        events evenly over the resources), each ID as many digits as the run's last one."""
        seconds = self.warmup_max_seconds + 3 * self.phase_seconds + 30  # + drain
        ids = math.ceil(self.rate * self.window_ms / 1000 / max(1, self.resources))
        digits = len(str(max(1, int(self.rate * seconds))))
        return ids, ids * (digits + 1) + 200

    def output_row_warning(self) -> str | None:
        """A sentence when the largest output row would come near what a Kafka record
        carries (:data:`pgval.schema.MAX_RECORD_BYTES`): such a run would end unknown."""
        if self.job or self.sink != "kafka":
            return None  # files and tables take any row; a user's job's rows are theirs
        ids, size = self.output_row_estimate()
        if size < 0.8 * MAX_RECORD_BYTES:
            return None
        return (f"an output row would carry about {ids:,} IDs ({size / 2**20:.1f} MiB; "
                f"--rate × --window-ms ÷ --resources), near or above the "
                f"{MAX_RECORD_BYTES / 2**20:.0f} MiB a Kafka record carries here: the run "
                "may end unknown. More --resources or a shorter --window-ms keep rows "
                "smaller")

    def scrubbed(self, text: str) -> str:
        """``text`` (an error message to store) without any of this run's secret values:
        the user's Kafka and Spark settings and the nemesis arguments, and URL passwords."""
        values = [*self.kafka_config.values(), *self.spark_conf.values()]
        for command in filter(None, (self.nemesis_inject, self.nemesis_remove)):
            try:
                values += shlex.split(command)[1:]
            except ValueError:  # unbalanced quotes: refused elsewhere; hide every word
                values += command.split()[1:]
        return scrub(redact_url(text), values)


def default_restart(cfg: ExperimentConfig) -> Restart | None:
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


def restart_problem(cfg: ExperimentConfig) -> str | None:
    """Why the restart settings mean nothing for this run (one sentence), or None."""
    if cfg.restart is not None and default_restart(cfg) is None:
        if descriptor(cfg.fault).restarts:
            return ("--restart does not apply to crash on a cluster pgval does not own: Spark's "
                    "cluster manager replaces the killed executor itself")
        named = [str(k) for k, d in descriptors().items()
                 if d.restarts and k is not Fault.SCHEDULE]
        return (f"--restart applies to --fault {', '.join(named[:-1])} and {named[-1]} "
                f"(nothing restarts under --fault {cfg.fault})")
    if cfg.restart_delay_s > 0 and cfg.restart_policy is not Restart.IMMEDIATE:
        return "--restart-delay-s applies to --restart immediate"
    if cfg.restart_delay_s >= cfg.phase_seconds:
        return ("--restart-delay-s must be shorter than a phase (the restart belongs in the "
                "failure phase; use --restart at-remove to restart at T3)")
    return None


def sink_problem(cfg: ExperimentConfig) -> str | None:
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


def not_applicable(cfg: ExperimentConfig) -> str | None:
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

