"""The streaming driver's document: everything ``python -m pgval.topologies.driver --spec
FILE`` runs, one frozen dataclass that pgval writes and the driver reads.

Why one document: the driver's settings used to exist three times (pgval's dataclass, the
command line it became, the driver's argument parser), each with its own checks. Made
here, they are checked once (:meth:`DriverDocument.check`, run by the constructor) on
whichever side makes them: pgval before a run, the driver when it reads its file, a served
driver when a query's document arrives over its control channel (pgval.topologies.serve).

What is not in it, on purpose: the user's Kafka client and Spark settings (they may hold
passwords, so they reach the driver in its environment and its JVM in memory, never a
file or a command line: pgval.deploy.driver_process.KAFKA_OPTIONS_ENV, SPARK_CONF_ENV), and how
pgval launches the driver (a container's prefix, its Python and paths, how to signal it:
pgval.deploy.driver_process.DriverSpec). Paths are written as strings; pgval maps host paths for a
launcher that sees them elsewhere (:meth:`DriverDocument.mapped`) before it writes them.

Foundation layer (the stdlib, pgval.core.schema and pgval.core.errors): pgval and the driver program
both import it.
"""

from __future__ import annotations

import functools
import json
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path, PurePath
from typing import Any

from pgval.core.errors import UserMistake
from pgval.core.schema import Guarantee, Topics, Topology

#: The driver's environment variables holding the user's Kafka client settings and Spark
#: settings as JSON (read by pgval.topologies.driver); a launcher into a container must
#: pass them on by name (``docker exec -e NAME``), never by value on a command line.
KAFKA_OPTIONS_ENV = "PGVAL_KAFKA_OPTIONS"
SPARK_CONF_ENV = "PGVAL_SPARK_CONF"
SETTINGS_ENV = (KAFKA_OPTIONS_ENV, SPARK_CONF_ENV)
#: The driver's exit status for a job or sink it refuses (``pgval.topologies.driver``).
JOB_REFUSED = 4

#: What every query of a served driver shares with its first: settings its Spark session
#: fixed when it started. A query that differs in one needs another driver.
SESSION_FIELDS = ("master", "driver_host", "driver_memory", "executor_memory",
                  "executor_cores", "cores_max", "conf", "log_level", "class_sharing",
                  "executor_java_flags",
                  # A user's job may change its session (a conf, a temporary view): only
                  # queries of the same job (or of none) share one.
                  "job")
#: The sink that is the guarantee's own (Kafka); every other sink writes to ``sink_dir``.
KAFKA_SINK = "kafka"


@dataclass(frozen=True)
class DriverDocument:
    """One query and the Spark session it runs in, as the driver program runs them."""

    #: ``sst``, ``mst``, or ``job`` (a user's, named by :attr:`job`), and the guarantee's sink.
    topology: str
    pg: str
    #: Kafka as the driver reaches it, and ``local[N]`` or ``spark://host:port``.
    bootstrap: str
    master: str
    #: The query's resume point, and the JSON-lines record of what happened.
    checkpoint: Path
    progress_file: Path
    window_ms: int
    watermark_ms: int
    #: Processing-time trigger; 0: the next batch as soon as possible.
    trigger_ms: int
    shuffle_partitions: int
    #: The IP the driver advertises and binds (executors must reach it); None: Spark's.
    driver_host: str | None = None
    driver_memory: str = "512m"
    executor_memory: str = "512m"
    executor_cores: int = 1
    #: ``spark.cores.max`` (standalone); None: every core the cluster offers.
    cores_max: int | None = None
    max_offsets_per_trigger: int | None = None
    #: The query's name; e1's ``transactional.id`` derives from it.
    query_name: str = "pgval"
    #: The run's topics are ``<prefix>get``, ``<prefix>post``, ``<prefix>output`` (a run on a
    #: shared cluster gets its own prefix); ``output_topic`` overrides the last.
    topic_prefix: str = ""
    output_topic: str | None = None
    #: pgval's own extra Spark settings (a fault's time-outs); they override the user's.
    conf: dict[str, str] = field(default_factory=dict)
    log_level: str = "WARN"
    #: With topology ``job``: the user's job (``/abs/path.py:FUNCTION`` or
    #: ``package.module:FUNCTION``).
    job: str | None = None
    #: The names a job reading Kafka itself gives its inputs (``kafka.reader(NAME)``),
    #: comma-separated, in slot order: the first reads the get topic, the second the post.
    input_names: str = "get,post"
    #: The query's own trigger (``KIND:INTERVAL``, :func:`pgval.core.schema.parse_trigger`)
    #: instead of ``trigger_ms``; "": ``trigger_ms``, or the job's ``build.trigger``.
    trigger: str = ""
    #: Where a job's rows go (``kafka``: the pg's sink; ``files``; ``delta``; a user's sink)
    #: and, for the others, the folder they write to.
    sink: str = KAFKA_SINK
    sink_dir: Path | None = None
    #: SELF-TEST of pgval only (e1): ``drop-batch:N`` / ``dup-batch:N`` makes the sink break
    #: one batch on purpose (pgval.topologies.guarantee_sinks). Never a guarantee.
    sabotage: str | None = None
    #: Where pgval writes requests to the running driver (pgval.topologies.control_channel); None:
    #: the driver runs no control thread.
    control_dir: Path | None = None
    #: Crash point after-sink-write: the file that arms the driver's commit hook; crash
    #: point during-sink-write: the file that arms the sink's producer hook
    #: (pgval.faults.hooks). None: no hook.
    crash_trigger: Path | None = None
    sink_trigger: Path | None = None
    #: Class-data sharing for the driver's JVM (pgval.host.cds), and the executors' JVM
    #: flags from the deployment ("" for none).
    class_sharing: bool = False
    executor_java_flags: str = ""
    #: A driver that outlives its query (pgval.topologies.serve): its session log and
    #: control directory. None: the driver ends with its query.
    serve_dir: Path | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse a document the driver cannot run, in one sentence; give paths as
        :class:`Path`, names as pgval.core.schema's members and the settings a copy of their own."""
        hints = _hints()
        for f in fields(DriverDocument):
            value = getattr(self, f.name)
            if not _fits(value, hints[f.name]):
                raise UserMistake(f"the driver's {f.name} must be {_describe(hints[f.name])}, "
                                  f"not {value!r}")
            if value is not None and _is_path(hints[f.name]):
                object.__setattr__(self, f.name, Path(value))
        object.__setattr__(self, "topology", Topology.parse(self.topology))
        object.__setattr__(self, "pg", Guarantee.parse(self.pg))
        object.__setattr__(self, "conf", dict(self.conf))
        if (self.topology == Topology.JOB) != (self.job is not None):
            raise UserMistake("the driver runs a user's job with topology job, and only then")
        if self.sink != KAFKA_SINK and (self.job is None or self.sink_dir is None
                                        or self.pg != Guarantee.A1):
            raise UserMistake(f"the driver's sink {self.sink!r} needs a user's job, a sink "
                              "folder and pg a1")
        if self.sabotage is not None and self.pg != Guarantee.E1:
            raise UserMistake("sabotage is a self-test of the e1 sink and needs pg e1, "
                              f"not {self.pg}")
        if self.topic_prefix and not self.topic_prefix.endswith("-"):
            raise UserMistake(f"the driver's topic prefix must end in '-', not "
                              f"{self.topic_prefix!r}")

    # ---- what the driver derives ----------------------------------------------------------

    @property
    def topics(self) -> Topics:
        return Topics.with_prefix(self.topic_prefix)

    @property
    def output(self) -> str:
        """The topic the query writes to."""
        return self.output_topic or self.topics.output

    def session(self) -> dict[str, Any]:
        """What a served driver's session is made of (:data:`SESSION_FIELDS`)."""
        return {name: getattr(self, name) for name in SESSION_FIELDS}

    def session_mismatch(self, query: DriverDocument) -> str | None:
        """Why ``query`` cannot run in the session this document started (one phrase), or
        None."""
        if query.sink != KAFKA_SINK:
            return "a user's sink runs in a fresh driver"
        if query.crash_trigger is not None or query.sink_trigger is not None:
            return "a crash point's hooks are set when a driver starts"
        for name in SESSION_FIELDS:
            if getattr(self, name) != getattr(query, name):
                return f"its {name.replace('_', '-')} differs from the session's"
        return None

    # ---- as JSON ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The document as one JSON mapping (paths and names as strings). Only the
        document's own fields: a subclass's (pgval's launch settings) never enter it."""
        out: dict[str, Any] = {}
        for f in fields(DriverDocument):
            value = getattr(self, f.name)
            out[f.name] = (str(value) if isinstance(value, (PurePath, str))
                           else dict(value) if isinstance(value, dict) else value)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DriverDocument:
        """The document of :meth:`to_json`'s mapping; anything else is refused in one
        sentence (a key it lacks or does not know, a value of the wrong kind)."""
        if not isinstance(data, Mapping):
            raise UserMistake("a driver document is a JSON object")
        known = {f.name for f in fields(DriverDocument)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserMistake(f"a driver document has no field {', '.join(map(str, unknown))}")
        missing = [f.name for f in fields(DriverDocument)
                   if f.name not in data and f.default is MISSING
                   and f.default_factory is MISSING]
        if missing:
            raise UserMistake(f"the driver document lacks {', '.join(missing)}")
        return DriverDocument(**dict(data))

    @classmethod
    def read(cls, path: Path | str) -> DriverDocument:
        """The document in the JSON file ``path`` (what the driver program is given)."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise UserMistake(f"cannot read the driver document {path}: "
                              f"{exc.strerror or exc}") from None
        try:
            data = json.loads(raw)
        except ValueError:  # UnicodeDecodeError too
            raise UserMistake(f"the driver document {path} is not JSON") from None
        return cls.from_json(data)

    def mapped(self, path_map: Callable[[Path], str]) -> DriverDocument:
        """The document with every path as ``path_map`` gives it (a driver in a container
        sees the run's folder elsewhere)."""
        hints = _hints()
        moved = {f.name: Path(path_map(getattr(self, f.name))) for f in fields(DriverDocument)
                 if _is_path(hints[f.name]) and getattr(self, f.name) is not None}
        return DriverDocument(**{**self._own(), **moved})

    def document(self) -> DriverDocument:
        """The document alone (a subclass's launch settings left behind)."""
        return DriverDocument(**self._own())

    def _own(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(DriverDocument)}


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(DriverDocument)


def _is_path(hint: Any) -> bool:
    return hint is Path or Path in typing.get_args(hint)


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the field type ``hint`` (a path may be given as a string)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) is dict:
        key, val = typing.get_args(hint)
        return isinstance(value, dict) and all(
            _fits(k, key) and _fits(v, val) for k, v in value.items())
    if hint is Path:
        return isinstance(value, (str, os.PathLike))
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) is dict:
        return "an object of strings"
    return {str: "a string", int: "an integer", bool: "true or false",
            Path: "a path"}.get(hint, getattr(hint, "__name__", str(hint)))
