"""Names shared by every stage: topics, record fields, topologies, guarantees.

One place for them so the generator, the Spark topologies, the oracle and the
validator cannot drift apart (docs/semantics.md is the prose version).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, TypeVar

from pgval.core.errors import UserMistake

_N = TypeVar("_N", bound="Name")

@dataclass(frozen=True)
class SinkKind:
    """What pgval must know of a sink (``--sink``), in one place: how its outputs are read
    back, who writes them, where the crash point after-sink-write halts, their clock."""

    name: str
    #: Read back through the sink's own log *and* raw (every data file in its folder).
    raw_read: bool
    #: Its writes run in the driver (a ``foreachBatch`` function): the process that dies
    #: with a write unfinished (``crash@during-sink-write``) is the driver.
    writer_is_driver: bool
    #: Where ``driver-crash@after-sink-write`` halts: before the query's commit
    #: (``commit``) or before the file sink's own log entry (``sink-log``).
    halt_stage: str
    #: What the outputs' times are (latency is measured from them).
    clock: str


#: The sinks: pgval's own (``kafka`` is the ``--pg``'s sink: a1, e1, m1) and ``user``, a
#: user's foreachBatch function (``--sink PATH.py:FUNCTION``).
SINKS: Final = {s.name: s for s in (
    SinkKind("kafka", False, False, "commit", "Kafka LogAppendTime"),
    SinkKind("files", True, False, "sink-log",
             "the file sink's commit (its _spark_metadata log file's time); raw: the data "
             "file's time"),
    SinkKind("delta", True, True, "commit",
             "the Delta commit's timestamp; raw: the data file's time"),
    SinkKind("user", False, True, "commit", "your sink's written_ms"))}
#: The ``--sink`` values that name one of pgval's sinks; any other is a user's function.
BUILTIN_SINKS: Final = ("kafka", "files", "delta")


def sink_kind(value: str) -> SinkKind:
    """The kind of a ``--sink`` value (a user's ``PATH.py:FUNCTION``: ``user``)."""
    return SINKS[value] if value in BUILTIN_SINKS else SINKS["user"]

#: Input topics, one per request type; record key = resource name (UTF-8).
GET_TOPIC: Final = "get"
POST_TOPIC: Final = "post"
#: Output topic of the topology under test; record key = resource name.
OUTPUT_TOPIC: Final = "output"
#: Compacted topic where the exactly-once sink records its committed batches.
MARKER_TOPIC: Final = "pgval-commits"
#: The largest record pgval's topics, its producers (Spark's Kafka sink, the e1 sink) and its
#: readers carry: an output row holds the IDs of all its inputs (about 8 bytes each), so
#: Kafka's default 1 MiB stopped SST at 180,000 ev/s with 10 s windows and 16 resources.
#: 16 MiB is about 2 million IDs a row; it stays below the Java producer's 32 MiB
#: ``buffer.memory``, which a single record must fit in too.
MAX_RECORD_BYTES: Final = 16 * 1024 * 1024



@dataclass(frozen=True)
class Topics:
    """The topics of one run. A run on a shared cluster (external, or a warm cluster
    kept across matrix cells) gets its own prefix, so no run ever reads another's records."""

    get: str = GET_TOPIC
    post: str = POST_TOPIC
    output: str = OUTPUT_TOPIC
    marker: str = MARKER_TOPIC
    prefix: str = ""

    @classmethod
    def with_prefix(cls, prefix: str) -> Topics:
        """``<prefix>get``, ``<prefix>post``, …; the empty prefix gives the plain names. A
        prefix ends in ``-``, so a topic's role can be read back from its name."""
        if prefix and not prefix.endswith("-"):
            raise ValueError(f"a topic prefix ends in '-', not {prefix!r}")
        return cls(f"{prefix}{GET_TOPIC}", f"{prefix}{POST_TOPIC}", f"{prefix}{OUTPUT_TOPIC}",
                   f"{prefix}{MARKER_TOPIC}", prefix)

    @property
    def inputs(self) -> tuple[str, str]:
        return (self.get, self.post)

    def all(self) -> tuple[str, ...]:
        return (self.get, self.post, self.output, self.marker)


#: ``--target`` words of ``broker-crash`` (else a broker id): the leader of the most output
#: partitions, or the transaction coordinator of the e1 sink (pgval.faults.broker_crash).
BROKER_TARGETS: Final = ("leader", "coordinator")
#: ``--target`` word of a pause that stops the streaming driver (pgval.faults.pause).
PAUSE_DRIVER: Final = "driver"

def transactional_id(query_name: str) -> str:
    """The e1 sink's ``transactional.id`` for a query: stable across driver restarts (that
    is what fences a zombie), distinct per query (``--target coordinator`` finds its
    transaction coordinator by it)."""
    return query_name if query_name.startswith("pgval") else f"pgval-{query_name}"


GET: Final = "GET"
POST: Final = "POST"

class Name(str, Enum):
    """One of a closed set of names. A member *is* its string (``Fault.CRASH == "crash"``),
    so it is stored, compared, hashed and printed as the plain name; :meth:`parse` is the
    one place a name from outside (an option, run.json, a database row) is checked."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def parse(cls: type[_N], value: object) -> _N:
        """The member named ``value``; a plain one-sentence error for anything else."""
        try:
            return cls(value)
        except ValueError:
            raise UserMistake(f"unknown {cls.what()} {value!r}; use one of "
                                    f"{', '.join(cls.names())}") from None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)

    @classmethod
    def what(cls) -> str:
        return cls.__name__.lower()


class Topology(Name):
    """The built-in jobs (SST, MST) and ``job``: a user's own (``--job PATH.py:FUNCTION``),
    judged against its ``build`` run as a batch (:mod:`pgval.topologies.job`)."""

    SST = "sst"
    MST = "mst"
    JOB = "job"


class Guarantee(Name):
    """a1 = Spark's Kafka sink (at-least-once), e1 = transactional foreachBatch sink, m1 =
    the Kafka sink with Spark's default ``startingOffsets=latest`` and a checkpoint a
    restart does not find (at-most-once; docs/semantics.md, "m1")."""

    A1 = "a1"
    E1 = "e1"
    M1 = "m1"

    @classmethod
    def what(cls) -> str:
        return "processing guarantee"


class Fault(Name):
    """Faults injected at T2 and removed at T3 (``none``: a run without a fault). Only the
    names: what each fault is and does is its descriptor's
    (:func:`pgval.faults.descriptor.descriptor`)."""

    NONE = "none"
    CRASH = "crash"
    DRIVER_CRASH = "driver-crash"
    DELAY_LT_TIMEOUT = "delay-lt-timeout"
    DELAY_GT_TIMEOUT = "delay-gt-timeout"
    BROKER_CRASH = "broker-crash"
    PAUSE_LT_TIMEOUT = "pause-lt-timeout"
    PAUSE_GT_TIMEOUT = "pause-gt-timeout"
    PARTITION = "partition"
    PACKET_LOSS = "packet-loss"
    #: Several faults on one timeline (``--fault A+B``, ``--schedule``, ``--fault random``).
    SCHEDULE = "schedule"


class Deploy(Name):
    """Where a run's Kafka and Spark come from: pgval's embedded cluster, the compose
    stack, or a cluster the user runs (``--deploy external``)."""

    LOCAL = "local"
    COMPOSE = "compose"
    EXTERNAL = "external"

    @classmethod
    def what(cls) -> str:
        return "deployment"


class CrashPoint(Name):
    """Where a crash lands: ``timed`` (at T2); ``after-sink-write`` (driver-crash: the first
    batch after T2 whose outputs are in Kafka, before its commit is checkpointed);
    ``during-sink-write`` (crash: the worker of the first executor whose sink task has a
    record in Kafka and has not finished)."""

    TIMED = "timed"
    AFTER_SINK_WRITE = "after-sink-write"
    DURING_SINK_WRITE = "during-sink-write"

    @classmethod
    def what(cls) -> str:
        return "crash point"


class Partition(Name):
    """Which link of a worker ``partition`` cuts (``--partition``): to the brokers, to the
    driver, all of it, or only what it sends (pgval.faults.partition)."""

    WORKER_KAFKA = "worker-kafka"
    WORKER_DRIVER = "worker-driver"
    WORKER_ALL = "worker-all"
    ONE_WAY = "one-way"

    @classmethod
    def what(cls) -> str:
        return "partition"


class Restart(Name):
    """When a crashed process comes back: ``immediate`` (a supervisor restarts it as soon as
    it is gone, after ``--restart-delay-s``: T3 is when it is back) or ``at-remove`` (at T3,
    the paper's process crash: killed at T2, back at T3). docs/faults.md, "Restart policy"."""

    IMMEDIATE = "immediate"
    AT_REMOVE = "at-remove"

    @classmethod
    def what(cls) -> str:
        return "restart policy"


#: What applies where: each crash point other than ``timed``, the one fault it is for and
#: the deployments that can place it (it needs the driver on this machine, and
#: during-sink-write the workers' processes). ``timed`` applies to every fault everywhere.
CRASH_POINT_RULES: Final[dict[CrashPoint, tuple[Fault, frozenset[Deploy]]]] = {
    CrashPoint.DURING_SINK_WRITE: (Fault.CRASH, frozenset({Deploy.LOCAL})),
    CrashPoint.AFTER_SINK_WRITE: (Fault.DRIVER_CRASH, frozenset({Deploy.LOCAL, Deploy.EXTERNAL})),
}


@dataclass(frozen=True)
class FaultSpec:
    """A fault and where it lands: ``crash``, ``driver-crash@after-sink-write``. The grid's
    name (``matrix --faults``), the run's ``--fault``/``--crash-point`` and the report's
    label are all this one value."""

    kind: Fault = Fault.NONE
    point: CrashPoint = CrashPoint.TIMED

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Fault.parse(self.kind))
        object.__setattr__(self, "point", CrashPoint.parse(self.point))

    @classmethod
    def parse(cls, name: str) -> FaultSpec:
        """``crash`` or ``crash@during-sink-write``."""
        kind, _, point = str(name).partition("@")
        return cls(Fault.parse(kind), CrashPoint.parse(point or CrashPoint.TIMED))

    def __str__(self) -> str:
        return str(self.kind) if self.point is CrashPoint.TIMED else f"{self.kind}@{self.point}"

    def problem(self, deploy: Deploy | str) -> str | None:
        """Why this fault cannot be placed on ``deploy`` (one sentence), or None."""
        rule = CRASH_POINT_RULES.get(self.point)
        if rule is None:
            return None
        fault, deploys = rule
        local_only = deploys == {Deploy.LOCAL}
        if self.kind is not fault or (local_only and Deploy.parse(deploy) not in deploys):
            where = " on the embedded cluster (--deploy local)" if local_only else ""
            return f"--crash-point {self.point} applies to --fault {fault}{where}"
        if Deploy.parse(deploy) not in deploys:
            return ("crash points other than timed need the driver on this machine "
                    f"(--deploy {' or '.join(d.value for d in Deploy if d in deploys)})")
        return None


TOPOLOGIES: Final = Topology.names()
#: The topologies pgval ships (``--topology``, a matrix's ``--topologies``); a user's own
#: job is named by ``--job`` instead.
BUILTIN_TOPOLOGIES: Final = (Topology.SST.value, Topology.MST.value)
PROCESSING_GUARANTEES: Final = Guarantee.names()
FAULTS: Final = Fault.names()
#: The faults one option names alone (``--fault``, a matrix's ``--faults``): every one but
#: ``schedule``, which ``--fault A+B``, ``--schedule`` and ``--fault random`` make.
SINGLE_FAULTS: Final = tuple(f for f in FAULTS if f != Fault.SCHEDULE)
DEPLOYMENTS: Final = Deploy.names()
CRASH_POINTS: Final = CrashPoint.names()
RESTARTS: Final = Restart.names()
PARTITIONS: Final = Partition.names()
#: The grid's names for a fault at a crash point other than ``timed`` (``matrix --faults``).
FAULTS_AT_POINTS: Final = tuple(str(FaultSpec(fault, point))
                                for point, (fault, _) in CRASH_POINT_RULES.items())

#: Fields of an input event as written to Kafka (value, JSON).
INPUT_FIELDS: Final = ("id", "type", "resource", "event_ts")
#: Fields of an output record as written by the topologies (value, JSON).
SST_OUTPUT_FIELDS: Final = ("window_start", "window_end", "resource", "count", "ids")
MST_OUTPUT_FIELDS: Final = ("window_start", "window_end", "resource", "gets", "posts", "ids")
#: Fields an output must have to be validated at all; without them it is malformed.
REQUIRED_OUTPUT_FIELDS: Final = ("window_start", "resource", "ids")

PHASES: Final = ("control", "failure", "recovery")



def resource_name(index: int) -> str:
    """Resource names are fixed-width so they sort like their index."""
    return f"r{index:04d}"


def window_start(event_ts: int, window_ms: int) -> int:
    """Tumbling event-time window that holds ``event_ts`` (floor division, also for negatives)."""
    return (event_ts // window_ms) * window_ms


#: The triggers a job may run with (``--trigger``, ``build.trigger``): Spark's processing
#: time and, from Spark 4.1, Real-time Mode, each with its interval (``5 seconds``, …).
TRIGGER_KINDS: Final = ("processing-time", "real-time")


def parse_trigger(text: str) -> tuple[str, str]:
    """``KIND:INTERVAL`` as (kind, Spark interval); a bad one is a ValueError sentence.
    ``available-now`` is refused: such a query ends once it has read what is there, and a
    run needs one that reads through its phases."""
    kind, sep, interval = str(text).strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("available-now", "availablenow", "once"):
        raise ValueError(f"trigger {text!r}: an {kind} query ends once it has read what is "
                         "there; a run needs a query that keeps reading through its phases "
                         "(use processing-time:INTERVAL or real-time:INTERVAL)")
    interval = interval.strip()
    if kind not in TRIGGER_KINDS or not sep or not interval or not interval[0].isdigit():
        raise ValueError(f"trigger {text!r}: expected processing-time:INTERVAL or "
                         "real-time:INTERVAL, e.g. real-time:5 seconds")
    return kind, interval
