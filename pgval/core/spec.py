"""What defines a run: :class:`RunSpec`, frozen, stored with every result, and the parts it
holds (:class:`ClusterSpec`, :class:`ScheduledFault`).

Foundation layer: the store, the matrix keys, the run shapes, the re-check and the report
read a run's spec typed (:meth:`RunSpec.from_record`), never a field by a string path; the
one mapping to and from the stored JSON is :meth:`RunSpec.to_record` / ``from_record``.
What needs the faults or a file — reading a schedule, drawing a random one, every
cross-field rule — is :func:`pgval.config.resolve`'s, done once at the command line's edge.

Each field carries its command-line help in ``metadata["help"]`` (and, where it has one, a
fixed list of ``choices`` from :mod:`pgval.core.schema`, bounds, a metavar), so the options of
`validate`, `matrix` and `oir` are generated from this one place (:mod:`pgval.cli.options`)
and cannot disagree on defaults.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pgval.core.errors import UserMistake
from pgval.core.redact import redact_record, redact_url, scrub
from pgval.core.schema import (
    BROKER_TARGETS,
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
)
from pgval.core.shape import RunShape

#: ``--fault random``: a schedule drawn from ``--seed`` (:func:`pgval.config.resolve`).
RANDOM = "random"
#: Fields a spec holds that follow from the others (set by :func:`pgval.config.resolve`):
#: not options, not part of a run's shape.
DERIVED = ("restart_policy", "resolved")

#: ``--checker``: who reads a run back and judges it (:mod:`pgval.run.spark_judge`).
CHECKERS: tuple[str, ...] = ("auto", "numpy", "spark", "both")
#: ``--checker auto`` judges on Spark above this many inputs in Kafka (``--spark-above``).
SPARK_ABOVE = 10_000_000
#: What an input costs this process on the numpy path: the record read back, its columns,
#: the oracle's and the checker's arrays (docs/performance.md, "Past one machine").
NUMPY_BYTES_PER_INPUT = 400

#: Named sets of settings (``--profile NAME``): each replaces the defaults of the fields it
#: names; a setting given by its own option (or keyword) still wins.
#:
#: ``ci``: a verdict in a CI budget. Short phases (10 s: two windows of 5 s, a job's own
#: windows should be that short), a slower rate (500 ev/s: the batches stay short on a
#: small CI machine), one broker (give ``--brokers 3`` for a broker crash), 2,000 priming
#: events, a drain of at most 120 s. The warm-up still lasts until the pipeline is steady
#: (at least four windows closed); only its cap is lower (60 s), after which the run says
#: it never settled. What is judged is the guarantee, not the latency at a production rate.
PROFILES: Mapping[str, Mapping[str, Any]] = {
    "ci": {"phase_seconds": 10.0, "rate": 500.0, "brokers": 1, "prime_events": 2_000,
           "warmup_max_seconds": 60.0, "drain_timeout_s": 120.0},
}


def profile_settings(profile: str | None) -> Mapping[str, Any]:
    """The settings of ``profile`` (none for None); an unknown name is a user's mistake."""
    if profile is None:
        return {}
    if profile not in PROFILES:
        raise UserMistake(f"unknown profile {profile!r}: the profiles are "
                          f"{', '.join(sorted(PROFILES))}")
    return PROFILES[profile]


class FrozenDict(dict):  # type: ignore[type-arg]
    """A settings mapping that cannot change once in a spec (a plain dict otherwise: stored,
    compared and printed as one)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a run spec's settings cannot change; make a new spec "
                        "(dataclasses.replace)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


@dataclass(frozen=True)
class ScheduledFault:
    """One part of a schedule: ``fault`` on ``target`` from T2 + ``at_s`` for ``for_s``
    seconds (None: until T3)."""

    fault: Fault
    at_s: float = 0.0
    for_s: float | None = None
    target: int | str | None = None

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], where: str = "the schedule") -> ScheduledFault:
        """``{fault, at, for, target}`` (``at_s``/``for_s`` accepted too)."""
        if not isinstance(rec, Mapping) or "fault" not in rec:
            raise UserMistake(f"{where}: every entry needs a 'fault' ({rec!r})")
        unknown = set(rec) - {"fault", "at", "for", "target", "at_s", "for_s"}
        if unknown:
            raise UserMistake(f"{where}: unknown key {sorted(unknown)[0]!r} in {dict(rec)!r}"
                              " (use fault, at, for, target)")
        at, dur = rec.get("at", rec.get("at_s", 0.0)), rec.get("for", rec.get("for_s"))
        for name, value in (("at", at), ("for", dur)):
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float)) or value < 0):
                raise UserMistake(f"{where}: '{name}' must be seconds >= 0 ({rec!r})")
        target = rec.get("target")
        if target is not None and not isinstance(target, (int, str)):
            raise UserMistake(f"{where}: 'target' is a worker index or a word ({rec!r})")
        return cls(Fault.parse(rec["fault"]), float(at), None if dur is None else float(dur),
                   target)

    def as_record(self) -> dict[str, Any]:
        return {"fault": str(self.fault), "at": self.at_s, "for": self.for_s,
                "target": self.target}

    def end_s(self, phase_s: float) -> float:
        return phase_s if self.for_s is None else self.at_s + self.for_s

    def label(self) -> str:
        where = "" if self.target is None else f" on {self.target}"
        until = "T3" if self.for_s is None else f"{self.at_s + self.for_s:g} s"
        return f"{self.fault}{where} ({self.at_s:g} s to {until})"


@dataclass(frozen=True)
class ClusterSpec:
    """Sizes that fit a 2-core, 24 GiB machine by default; scale up with flags.

    ``metadata`` is the command-line help, as in :class:`RunSpec`
    (:mod:`pgval.cli.options` turns each field into an option)."""

    brokers: int = field(default=3, metadata={"help": "Kafka brokers (KRaft).", "min": 1})
    partitions: int = field(default=3, metadata={
        "help": "Partitions of each input and output topic.", "min": 1})
    workers: int = field(default=2, metadata={"help": "Spark standalone workers.", "min": 1})
    cores_per_worker: int = field(default=1, metadata={
        "help": "Cores each Spark worker offers to executors.", "min": 1})
    worker_memory: str = field(default="1g", metadata={
        "help": "Memory each Spark worker offers to executors (e.g. 1g)."})
    broker_heap: str = field(default="384m", metadata={
        "help": "JVM heap (-Xmx) of each Kafka broker (e.g. 384m)."})
    #: Spark settings for master and workers (``-D``), e.g. spark.worker.timeout; set by
    #: the faults (lowered time-outs), not an option.
    spark_daemon_conf: dict[str, str] = field(default_factory=dict)
    isolate: bool | None = field(default=None, metadata={
        "help": "Workers in their own network namespaces (default: when root and "
                "supported)."})

    def __post_init__(self) -> None:
        object.__setattr__(self, "spark_daemon_conf", FrozenDict(self.spark_daemon_conf or {}))

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> ClusterSpec:
        """A stored cluster (``params.cluster``); fields this pgval does not know dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (record or {}).items() if k in names})


def opt(help: str, **extra: Any) -> dict[str, Any]:  # noqa: A002 - click's own word
    """Field metadata: the option's help text and anything else the CLI needs: ``choices``,
    ``metavar``, ``min``/``max`` (inclusive bounds), ``required`` (the command line must name
    it), ``name`` (the option's name when not the field's, e.g. ``--cluster``)."""
    return {"help": help, **extra}


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines a run, frozen; stored with its results (:meth:`to_record`).

    Made by :func:`pgval.config.resolve` at the command line's edge, which reads the
    schedule file, draws a random schedule and checks every cross-field rule once; a
    spec made directly is only parsed (its names), not checked."""

    topology: Topology = field(default=Topology.SST, metadata=opt(
        "SST (windowed GET count) or MST (GET ⋈ POST, then count); or --job for your own.",
        choices=BUILTIN_TOPOLOGIES, required_unless="job"))
    #: A user's own job (``PATH.py:FUNCTION``, a file's path made absolute, or
    #: ``package.module:FUNCTION``); the topology is then ``job``.
    job: str | None = field(default=None, metadata=opt(
        "Your own PySpark job instead of --topology: build(spark, kafka) reading its inputs "
        "with kafka.reader(NAME) (or build(spark, sources) over the web log), returning a "
        "streaming DataFrame, with an ids column where it can (docs/your-job.md). Its build "
        "run as a batch over the run's inputs is the oracle.",
        metavar="PATH.py:FUNCTION|MODULE:FUNCTION"))
    #: The user's input model (:mod:`pgval.datasets.models`); all unset: the web log.
    replay: dict[str, str] = field(default_factory=dict, metadata=opt(
        "An input of your job made from a sample of real records (JSON lines), replayed in "
        "a loop at --rate; repeatable, at most two inputs (docs/your-job.md).",
        metavar="NAME=SAMPLE.jsonl"))
    input_makers: dict[str, str] = field(default_factory=dict, metadata=opt(
        "An input of your job made by your function make(i, rng, event_ms) -> dict; "
        "repeatable.", metavar="NAME=FILE.py:FUNCTION", name="--input"))
    event_time_field: str | None = field(default=None, metadata=opt(
        "The event-time field of the --replay samples (epoch ms or ISO text), re-stamped "
        "to the time of sending in the record's own format.", metavar="FIELD"))
    avro_schema: dict[str, str] = field(default_factory=dict, metadata=opt(
        "Send input NAME's records as Avro with this schema file (plain Avro binary, what "
        "Spark's from_avro reads), not JSON; a .avro sample carries its own schema; "
        "repeatable.", metavar="NAME=FILE.avsc"))
    skew: dict[str, str] = field(default_factory=dict, metadata=opt(
        "Key skew on a field of your records: its values drawn Zipf-distributed, the "
        "record's Kafka key; repeatable.", metavar="FIELD=zipf:S"))
    disorder: str | None = field(default=None, metadata=opt(
        "Event-time disorder: that share of records carries an event time up to MAX_MS in "
        "the past.", metavar="SHARE:MAX_MS"))
    late: str | None = field(default=None, metadata=opt(
        "Late records: that share of records carries an event time MS in the past.",
        metavar="SHARE:MS"))
    inputs_spec: str | None = field(default=None, metadata=opt(
        "A TOML file holding the whole input model (inputs, event-time fields, skew, "
        "disorder, late), instead of the options above.", metavar="FILE.toml"))
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
        "Length of each of control, failure and recovery (the paper: 90 s); recovery is "
        "longer when the fault's removal took effect late: a whole phase after it.", min=1))
    warmup_seconds: float = field(default=5.0, metadata=opt(
        "ε, at least: generated but not judged; control starts once the pipeline is steady "
        "(outputs flowing, their latency neither falling nor rising) and this has passed.",
        min=0))
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
    trigger: str | None = field(default=None, metadata=opt(
        "The query's trigger instead of --trigger-ms: processing-time:INTERVAL, or "
        "real-time:INTERVAL (Spark 4.1+'s Real-time Mode, stateless jobs, Spark's Kafka "
        "sink: --pg a1). A job's build.trigger says the same; this wins.",
        metavar="KIND:INTERVAL"))
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
    schedule: tuple[ScheduledFault, ...] | None = None
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
    checker: str = field(default="auto", metadata=opt(
        "Who reads the run back and judges it: numpy (in this process: every ID held "
        "here, latency and throughput too); spark (Spark jobs on the run's own cluster: "
        "Kafka read to the end offsets, oracle and checker, anomaly sets as Parquet; "
        "counts, phase rows and verdict, with throughput, for runs this process should "
        "not hold); both (numpy's verdict, held to Spark's: any difference makes the run "
        "unknown); auto (spark when the inputs in Kafka exceed --spark-above, else numpy). "
        "SST, MST and a job over the web log writing to Kafka, whose batch oracle then "
        "runs on the cluster too (docs/performance.md, 'Past one machine').",
        choices=CHECKERS))
    spark_above: int | None = field(default=None, metadata=opt(
        f"With --checker auto: judge on Spark above this many inputs in Kafka (default "
        f"{SPARK_ABOVE:,}: about {SPARK_ABOVE * NUMPY_BYTES_PER_INPUT / 2**30:.0f} GiB "
        "in this process on the numpy path).", min=1, metavar="INPUTS"))
    spark_master: str | None = field(default=None, metadata=opt(
        "Where the Spark checker runs, local[N] (default: the run's own embedded Spark "
        "cluster once the run's driver has stopped; local[2] with --deploy external or "
        "compose or a shared driver: it writes the run's evidence on this machine's disk).",
        metavar="local[N]"))
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
    cluster: ClusterSpec = field(default_factory=lambda: ClusterSpec())

    #: When a crashed process comes back in this run, as :func:`pgval.config.resolve`
    #: decided it (``--restart``, else the fault's default); None where nothing restarts.
    restart_policy: Restart | None = field(default=None, compare=False)
    #: Made by :func:`pgval.config.resolve` (read, drawn and checked), not only parsed.
    resolved: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        """The names parsed (a name that is none of pgval's is one sentence here), the
        settings frozen; nothing read, drawn or checked across fields (that is
        :func:`pgval.config.resolve`'s)."""
        put = object.__setattr__
        put(self, "topology", Topology.parse(self.topology))
        put(self, "pg", Guarantee.parse(self.pg))
        put(self, "fault", Fault.parse(self.fault))
        put(self, "crash_point", CrashPoint.parse(self.crash_point))
        put(self, "deploy", Deploy.parse(self.deploy))
        if self.restart is not None:
            put(self, "restart", Restart.parse(self.restart))
        if self.restart_policy is not None:
            put(self, "restart_policy", Restart.parse(self.restart_policy))
        if self.partition is not None:
            put(self, "partition", Partition.parse(self.partition))
        if isinstance(self.target, str) and self.target.isdigit():
            put(self, "target", int(self.target))  # as stored before broker-crash's words
        if self.schedule is not None:
            put(self, "schedule", tuple(p if isinstance(p, ScheduledFault)
                                        else ScheduledFault.from_record(p)
                                        for p in self.schedule))
        put(self, "kafka_config", FrozenDict(self.kafka_config or {}))
        put(self, "spark_conf", FrozenDict(self.spark_conf or {}))
        for name in ("replay", "input_makers", "skew", "avro_schema"):
            put(self, name, FrozenDict(getattr(self, name) or {}))
        if not isinstance(self.cluster, ClusterSpec):
            put(self, "cluster", ClusterSpec.from_record(self.cluster))

    def replace(self, **changes: Any) -> RunSpec:
        """A new spec with ``changes``, not resolved (its derived fields cleared): what
        follows from the fields is :func:`pgval.config.resolve`'s to decide again."""
        return dataclasses.replace(self, **changes, restart_policy=None, resolved=False)

    # ------------------------------------------------------------------ derived, pure
    @property
    def schedule_parts(self) -> tuple[ScheduledFault, ...]:
        """The schedule's parts (empty for a run with one fault or none)."""
        return self.schedule or ()

    @property
    def fault_spec(self) -> FaultSpec:
        """The fault at its crash point: ``crash@during-sink-write``."""
        return FaultSpec(self.fault, self.crash_point)

    @property
    def faults(self) -> tuple[Fault, ...]:
        """Every fault the run injects: its own, and each part of its schedule."""
        return (self.fault, *(p.fault for p in self.schedule_parts))

    @property
    def spark_replaces_executor(self) -> bool:
        """A ``crash`` here is an executor kill through the driver, on a cluster pgval does
        not own, whose cluster manager starts the replacement (:mod:`pgval.faults.executor`)."""
        return self.deploy is Deploy.EXTERNAL or bool(
            self.deploy is Deploy.LOCAL and self.running_cluster)

    def case_name(self) -> str:
        """The run's name in the CI gate and its JUnit file, the same from build to build
        and machine to machine: what ran (a job's file name and function, or the
        topology), its sink, guarantee, fault and crash point, and a trigger of its own —
        ``orders.py:build kafka a1 driver-crash@after-sink-write``."""
        what = _short_ref(self.job) if self.job else str(self.topology)
        parts = [what, _short_ref(self.sink), str(self.pg), str(self.fault_spec)]
        if self.trigger:
            parts.append(f"trigger={self.trigger}")
        return " ".join(parts)

    def shape(self) -> RunShape:
        """What this run is comparable by (the matrix key, the OIR shape, the report)."""
        return RunShape.of(self.settings())

    # ------------------------------------------------------------------ stored form
    def settings(self) -> dict[str, Any]:
        """The spec as plain data, every option as given (the derived fields left out): what
        a run's shape is made of."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in DERIVED:
                continue
            value = getattr(self, f.name)
            if f.name == "schedule":
                value = None if value is None else [p.as_record() for p in value]
            elif f.name == "cluster":
                value = {**dataclasses.asdict(value),
                         "spark_daemon_conf": dict(value.spark_daemon_conf)}
            elif isinstance(value, FrozenDict):
                value = dict(value)
            out[f.name] = value
        return out

    def to_record(self) -> dict[str, Any]:
        """The spec as stored (run.json, ``runs.params``): secrets redacted, keys kept
        (:func:`pgval.core.redact.redact_record`). The restart policy is stored as the run applied
        it, so a report groups by it."""
        return redact_record({**self.settings(), "restart": self.restart_policy})

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RunSpec:
        """A stored spec (run.json's ``config``, ``runs.params``), typed: the one way back
        from the stored JSON. Keys this pgval does not know (the run's directory, a matrix
        key, notes) are left out; a restart stored as applied is the run's policy."""
        names = {f.name for f in dataclasses.fields(cls)} - set(DERIVED)
        given = {k: v for k, v in record.items() if k in names}
        return cls(**given, restart_policy=record.get("restart"), resolved=True)

    # ------------------------------------------------------------------ for people
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
        carries (:data:`pgval.core.schema.MAX_RECORD_BYTES`): such a run would end unknown."""
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
        values: list[str] = [*self.kafka_config.values(), *self.spark_conf.values()]
        for command in filter(None, (self.nemesis_inject, self.nemesis_remove)):
            try:
                values += shlex.split(command)[1:]
            except ValueError:  # unbalanced quotes: refused elsewhere; hide every word
                values += command.split()[1:]
        return scrub(redact_url(text), values)


def parts_of(records: Iterable[Mapping[str, Any]] | None) -> tuple[ScheduledFault, ...]:
    """A schedule's records as parts."""
    return tuple(ScheduledFault.from_record(r) for r in records or ())


def _short_ref(ref: str) -> str:
    """``PATH.py:FUNCTION`` as its file's name and function (a path differs between
    machines); a module reference or a built-in name as it is."""
    target, sep, function = str(ref).rpartition(":")
    if sep and target.endswith(".py"):
        return f"{target.replace(chr(92), '/').rsplit('/', 1)[-1]}:{function}"
    return str(ref)
