"""The PySpark driver of one experiment: ``python -m pgval.topologies.driver --spec FILE``.

It runs as its own process (the runner spawns it, and a driver-crash fault SIGKILLs its
process group), builds the SparkSession, starts one streaming query and then only waits.
FILE is its document (pgval.core.driver_spec.DriverDocument, written by pgval), the one input
besides the user's settings in its environment (:class:`Settings`).
Its record of what happened is the progress file (JSON lines, appended and flushed):

* ``{"event": "started", ...}`` once the query runs (the runner's "driver is up" signal;
  with ``checkpoint``, the directory this start used: m1 gets a new one per start),
* ``{"event": "progress", ...}`` one line per StreamingQueryProgress (offsets, watermark,
  state rows, rows dropped by the watermark) — the evidence that explains losses,
* ``{"event": "abandoned", ...}`` at an m1 restart, before ``started``: the batch the last
  start logged offsets for and never committed (:func:`abandoned_batch`), which no progress
  line can show — its inputs were read and died with that driver,
* ``{"event": "sink_batch", ...}`` per batch the e1 sink committed or skipped,
* ``{"event": "sabotage", ...}`` once, only with ``sabotage`` (a SELF-TEST of pgval:
  the e1 sink drops or duplicates one batch on purpose; see pgval.topologies.guarantee_sinks),
* ``{"event": "terminated", ...}`` when the query ends (with ``error`` when it failed),
* with ``control_dir`` only: ``{"event": "control", ...}`` answers to pgval's requests and
  ``{"event": "executors", ...}`` whenever the registered executors change (see
  pgval.topologies.control_channel; without it no control thread runs).

With ``serve_dir`` the driver outlives its query: it starts further ones on pgval's
requests, each with its own document and progress file (pgval.topologies.serve).

Exit status: 0 after SIGTERM/SIGINT (query stopped gracefully), 1 when the query failed
(first line of the exception on stderr), 2 when its document was refused or the query could
not be started, 4 when the user's job or sink cannot be judged (``JOB_REFUSED``). Re-running
the same command (the same ``checkpoint``) resumes where the checkpoint left off.
For a graceful stop signal the driver's own pid; signalling the whole group also reaches
the gateway JVM, whose shutdown hook then races the graceful stop (still exit 0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.core.clock import now_ms
from pgval.core.driver_spec import DriverDocument
from pgval.core.errors import PgvalError, UserMistake
from pgval.core.files import append_private

_T0 = time.monotonic()

#: JVM options for driver and executors: 2 shared cores, so no parallel GC threads.
JAVA_OPTS = "-XX:+UseSerialGC"


class ProgressLog:
    """Appends one JSON object per line; shared by the main and the listener thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "wall_ms": now_ms(), **fields},
                          default=str)
        with self._lock, append_private(self.path) as fh:  # never through a planted link
            fh.write((line + "\n").encode())
            fh.flush()


def progress_record(progress_json: str) -> dict[str, Any]:
    """The fields of a StreamingQueryProgress the runner and the report use."""
    p = json.loads(progress_json)
    sink = p.get("sink") or {}
    return {
        "runId": p.get("runId"),  # which query (a served driver runs one after another)
        "batchId": p.get("batchId"),
        "timestamp": p.get("timestamp"),
        "numInputRows": p.get("numInputRows"),
        "inputRowsPerSecond": p.get("inputRowsPerSecond"),
        "processedRowsPerSecond": p.get("processedRowsPerSecond"),
        "batchDuration": p.get("batchDuration"),
        "durationMs": p.get("durationMs"),
        "eventTime": p.get("eventTime"),
        "sources": [
            {
                "description": s.get("description"),
                "startOffset": s.get("startOffset"),
                "endOffset": s.get("endOffset"),
                "latestOffset": s.get("latestOffset"),
                "numInputRows": s.get("numInputRows"),
            }
            for s in p.get("sources") or []
        ],
        "stateOperators": [
            {
                "operatorName": op.get("operatorName"),
                "numRowsTotal": op.get("numRowsTotal"),
                "numRowsUpdated": op.get("numRowsUpdated"),
                "numRowsDroppedByWatermark": op.get("numRowsDroppedByWatermark"),
                "memoryUsedBytes": op.get("memoryUsedBytes"),
                # Where a batch's time goes per stateful operator (docs/performance.md,
                # "Where MST's time goes"); customMetrics hold the state store's own.
                "allUpdatesTimeMs": op.get("allUpdatesTimeMs"),
                "allRemovalsTimeMs": op.get("allRemovalsTimeMs"),
                "commitTimeMs": op.get("commitTimeMs"),
                "numShufflePartitions": op.get("numShufflePartitions"),
                "customMetrics": op.get("customMetrics"),
            }
            for op in p.get("stateOperators") or []
        ],
        "sink": {"description": sink.get("description"),
                 "numOutputRows": sink.get("numOutputRows")},
    }


def sink_event_writer(log: ProgressLog) -> Callable[[dict[str, Any]], None]:
    """The e1 sink's ``on_batch``: each record becomes one progress line, its ``event``
    (``sink_open``, ``sink_error``, ``sabotage``...; ``sink_batch`` when absent) the kind."""
    def sink_event(info: dict[str, Any]) -> None:
        fields = dict(info)
        log.write(str(fields.pop("event", "sink_batch")), **fields)

    return sink_event


def _make_listener(log: ProgressLog) -> Any:
    """A StreamingQueryListener writing progress lines (class built lazily: pyspark import)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):  # type: ignore[misc]
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - pyspark's API
            return None

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            try:
                log.write("progress", **progress_record(event.progress.json))
            except Exception as exc:  # never let bookkeeping break the query
                log.write("listener_error", error=repr(exc))

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            # Spark >= 3.5 reports "no new data" here, no longer as a progress event.
            log.write("idle", timestamp=getattr(event, "timestamp", None))

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            return None

    return _Listener()


def load(argv: Sequence[str] | None = None) -> tuple[DriverDocument, Settings]:
    """The driver's document (``--spec FILE``, written by pgval: pgval.core.driver_spec) and the
    user's settings from its environment; a bad one raises :class:`UserMistake`."""
    ap = argparse.ArgumentParser(
        prog="python -m pgval.topologies.driver",
        description="Run one pgval streaming query, as its driver document says.")
    ap.add_argument("--spec", required=True, metavar="FILE",
                    help="the driver document, a JSON file pgval writes (pgval.core.driver_spec)")
    args = ap.parse_args(argv)
    return DriverDocument.read(args.spec), Settings.from_env()


@dataclass(frozen=True)
class Settings:
    """The user's Kafka client settings (for the source, the sinks and the marker reader)
    and Spark settings, each a JSON object of strings in the environment: settings that may
    hold secrets (SASL passwords, keystore passwords) reach the driver there, which only its
    owner can read, never in its document or on its command line (``ps``)."""

    kafka: dict[str, str] = field(default_factory=dict)
    spark: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> Settings:
        from pgval.core.driver_spec import KAFKA_OPTIONS_ENV, SPARK_CONF_ENV

        out = []
        for var in (KAFKA_OPTIONS_ENV, SPARK_CONF_ENV):
            text = os.environ.get(var, "")
            try:
                value = json.loads(text) if text else {}
            except ValueError:
                value = None
            if not isinstance(value, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                raise UserMistake(f"{var} must be a JSON object of strings")
            out.append(value)
        return cls(out[0], out[1])


def _add_hooks(conf: dict[str, str], crash_trigger: Path | None) -> None:
    """pgval's JVM hooks jar for the crash points and, for after-sink-write, the commit
    hook; set after the user's settings (they cannot undo them). The sink-write hook is a
    producer setting of the sink (:func:`sink_hook_options`). See pgval.faults.hooks."""
    from pgval.faults.hooks import CRASH_BEFORE_COMMIT, TRIGGER_KEY, ensure_hooks_jar

    manager = "spark.sql.streaming.checkpointFileManagerClass"
    if crash_trigger and conf.get(manager, CRASH_BEFORE_COMMIT) != CRASH_BEFORE_COMMIT:
        raise ValueError(f"the crash point after-sink-write replaces {manager}; drop "
                         f"{manager}={conf[manager]} from the Spark settings")
    conf["spark.jars"] = ",".join(filter(None, (conf.get("spark.jars"),
                                                str(ensure_hooks_jar()))))
    if crash_trigger:
        conf[manager] = CRASH_BEFORE_COMMIT
        conf[f"spark.hadoop.{TRIGGER_KEY}"] = str(Path(crash_trigger).resolve())


def sink_hook_options(kafka_options: Mapping[str, str], sink_trigger: Path | str | None
                      ) -> dict[str, str]:
    """The Kafka sink's producer settings: the user's, plus (crash point during-sink-write)
    the interceptor that halts an executor once one of its records is written."""
    if not sink_trigger:
        return dict(kafka_options)
    from pgval.faults.hooks import HALT_ON_SINK_WRITE, SINK_TRIGGER_KEY

    if kafka_options.get("interceptor.classes"):
        raise ValueError("the crash point during-sink-write sets the sink's "
                         "interceptor.classes; drop it from the Kafka settings")
    return {**kafka_options, "interceptor.classes": HALT_ON_SINK_WRITE,
            SINK_TRIGGER_KEY: str(Path(sink_trigger).resolve())}


def _joined(*flags: str) -> str:
    return " ".join(f for f in flags if f)


def driver_class_archive(spec: DriverDocument) -> Any:
    """The driver JVM's class archive (``class_sharing``; pgval.host.cds): the Java and
    the Spark jars spark-submit will run, as PySpark finds them."""
    if not spec.class_sharing:
        return None
    from pyspark.find_spark_home import _find_spark_home

    from pgval.host import cds
    from pgval.host.jars import java_executable

    java = java_executable()
    return cds.archive("spark-driver", java, [Path(_find_spark_home()) / "jars"]) if java else None


def spark_conf(spec: DriverDocument, jars_csv: str, user_conf: Mapping[str, str] | None = None,
               *, before: Mapping[str, str] | None = None,
               driver_java_flags: str = "") -> dict[str, str]:
    """Every Spark setting the driver sets (reported by the runner as the run's config).
    Later ones win: pgval's base, ``before`` (a sink's session settings), the user's
    ``user_conf``, the document's ``conf`` (pgval's time-outs), a crash point's hooks."""
    conf = {
        "spark.master": spec.master,
        "spark.app.name": spec.query_name,
        "spark.jars": jars_csv,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": spec.driver_memory,
        "spark.executor.memory": spec.executor_memory,
        "spark.executor.cores": str(spec.executor_cores),
        "spark.driver.extraJavaOptions": _joined(JAVA_OPTS, driver_java_flags),
        "spark.executor.extraJavaOptions": _joined(JAVA_OPTS, spec.executor_java_flags),
        "spark.sql.shuffle.partitions": str(spec.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        # Windows must close without new data once the watermark moved (the default, pinned).
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
    }
    if spec.cores_max:
        conf["spark.cores.max"] = str(spec.cores_max)
    host = spec.driver_host
    if host is None and spec.master.startswith("local"):
        host = "127.0.0.1"  # local mode: keep the driver off eth0 (where faults are injected)
    if host:
        conf["spark.driver.host"] = host
        conf["spark.driver.bindAddress"] = host
    conf.update(before or {})
    conf.update(user_conf or {})
    conf.update(spec.conf)
    if spec.crash_trigger is not None or spec.sink_trigger is not None:
        _add_hooks(conf, spec.crash_trigger)
    secret_path = conf.pop("spark.authenticate.secret.file", None)
    if secret_path and spec.master.startswith("spark://"):
        # Standalone reads no secret file (only Kubernetes does); hand-off from
        # `pgval cluster status --json` to --deploy external: read it here, off the argv.
        with open(secret_path) as fh:
            conf["spark.authenticate"] = "true"
            conf["spark.authenticate.secret"] = fh.read().strip()
    elif secret_path:
        conf["spark.authenticate.secret.file"] = secret_path
    secret_file = os.environ.get("PGVAL_SPARK_SECRET_FILE")
    if secret_file:  # the embedded cluster's per-run secret (never on a command line)
        with open(secret_file) as fh:
            conf["spark.authenticate"] = "true"
            conf["spark.authenticate.secret"] = fh.read().strip()
    return conf


#: Characters java.util.Properties reads specially, as their escapes.
_PROPERTIES_ESCAPES = {"\\": "\\\\", "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!",
                       "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def _properties_escape(text: str, key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch in _PROPERTIES_ESCAPES:
            out.append(_PROPERTIES_ESCAPES[ch])
        elif ch == " " and (key or i == 0):  # a key's spaces end it; a value's lead is cut
            out.append("\\ ")
        elif " " <= ch <= "~":
            out.append(ch)
        else:  # \uXXXX per UTF-16 unit: the file is ASCII whatever reads it
            data = ch.encode("utf-16-be")
            out.extend(f"\\u{int.from_bytes(data[j:j + 2], 'big'):04x}"
                       for j in range(0, len(data), 2))
    return "".join(out)


def properties_text(conf: dict[str, str]) -> str:
    """``conf`` in java.util.Properties syntax, which ``Properties.load`` reads back as the
    same strings (Spark then trims each value, as it does not for ``--conf``)."""
    return "".join(f"{_properties_escape(k, True)}={_properties_escape(v, False)}\n"
                   for k, v in conf.items())


def start_jvm(conf: dict[str, str]) -> None:
    """Start the Spark JVM (PySpark's gateway) with ``conf`` in a properties file that
    lives only in memory: PySpark would put each setting on spark-submit's command line,
    which every local user can read in ``/proc/<pid>/cmdline``, and the conf holds the
    cluster's secret and the user's ``--spark-conf`` values (passwords, perhaps).

    The file is a memfd handed to spark-submit as ``/proc/self/fd/N`` (its launcher and
    the JVM it execs each open it afresh); this process closes its copy once the JVM is
    up, and the memory goes with the last holder: nothing is ever on disk, whatever
    happens to either process. The command line holds only
    what must be JVM flags (``-Xmx`` from spark.driver.memory, extraJavaOptions)."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        # PySpark would keep the JVM it has and ignore the new one (which would outlive
        # us): the conf given here would silently not be the one the session runs with.
        raise AssertionError("a Spark JVM already runs in this process; start_jvm must "
                           "start the first one")
    fd = os.memfd_create("pgval-spark-conf", os.MFD_CLOEXEC)
    before = os.environ.get("PYSPARK_SUBMIT_ARGS")
    try:
        os.write(fd, properties_text(conf).encode("ascii"))
        os.environ["PYSPARK_SUBMIT_ARGS"] = f"--properties-file /proc/self/fd/{fd} pyspark-shell"
        gateway = launch_gateway(popen_kwargs={"pass_fds": (fd,)})
    finally:
        os.close(fd)
        if before is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = before
    SparkContext._ensure_initialized(gateway=gateway)


def m1_start(checkpoint: str) -> tuple[str, str]:
    """m1's checkpoint and starting offsets: a fresh checkpoint directory per driver start
    (as when the checkpoint lives on a driver's local disk that a restart does not get
    back) and Spark's own default for streaming queries, ``latest``. So every start is a
    new query: no offsets, window state or commits carried over, nothing re-read, and what
    arrived while no driver ran is skipped — at-most-once (docs/semantics.md, "m1")."""
    return str(Path(checkpoint) / f"m1-start-{time.time_ns()}"), "latest"


def _logged_offsets(text: str, header_lines: int) -> dict[str, dict[str, int]]:
    """Kafka offsets of a checkpoint log file, all sources merged (``{topic: {part: off}}``).

    ``offsets/N`` is ``v1``, the batch metadata, then one line per source (``-`` for a
    source without offsets); a Kafka source's initial offsets (``sources/I/0``) are a zero
    byte, ``v1``, then the JSON (Spark's ``OffsetSeqLog`` and
    ``KafkaSourceInitialOffsetWriter``).
    """
    merged: dict[str, dict[str, int]] = {}
    for line in text.lstrip("\x00").splitlines()[header_lines:]:
        if line.strip() in ("", "-"):
            continue
        for topic, parts in json.loads(line).items():
            merged.setdefault(topic, {}).update({p: int(o) for p, o in parts.items()})
    return merged


def abandoned_batch(checkpoint_root: Path) -> dict[str, Any] | None:
    """The batch the newest m1 start under ``checkpoint_root`` planned and never committed.

    Spark writes ``offsets/N`` before it runs batch N and ``commits/N`` after (the offset
    log is the write-ahead log, ``MicroBatchExecution``); a driver killed in between leaves
    batch N planned and read, and a new m1 query starts from the latest offsets
    (``KafkaMicroBatchStream.getOrCreateInitialPartitionOffsets``), never to read it again.
    Its ``sources`` have a progress line's shape: the range starts where batch N − 1 ended
    (or at the query's initial offsets) and ends at batch N's logged offsets. Read before
    the new query starts, while the dead query's files are final.
    """
    from pgval.faults.process import open_batch
    from pgval.topologies.guarantee_sinks import _checkpoint_query_id

    found = open_batch(checkpoint_root)
    if found is None:
        return None
    root, batch = found
    try:
        end = _logged_offsets((root / "offsets" / str(batch)).read_text(), 2)
        if batch > 0:
            start = _logged_offsets((root / "offsets" / str(batch - 1)).read_text(), 2)
        else:
            start = {}
            for initial in sorted(root.glob("sources/*/0")):
                start.update(_logged_offsets(initial.read_text(), 1))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return {"id": _checkpoint_query_id(str(root)), "batchId": batch,
                "checkpoint": str(root), "error": _first_line(exc)}
    return {"id": _checkpoint_query_id(str(root)), "batchId": batch, "checkpoint": str(root),
            "sources": [{"startOffset": start, "endOffset": end}]}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        spec, settings = load(argv)
    except PgvalError as exc:
        print(f"pgval-driver: error: {exc}", file=sys.stderr)
        return 2
    log = ProgressLog(spec.progress_file)
    stop_requested = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    # Executors use this venv's Python for a user's job's Python UDFs (SST and MST have none).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if spec.driver_host or spec.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", spec.driver_host or "127.0.0.1")

    from pgval.core.driver_spec import JOB_REFUSED

    router = None
    if spec.serve_dir is not None:
        from pgval.topologies.serve import SESSION_LOG, QueryRouter

        router = QueryRouter(ProgressLog(spec.serve_dir / SESSION_LOG))
    try:
        query, session, sink = _start(spec, settings, log, router)
    except UserMistake as exc:  # the user's job or sink (JobError): bad input, said as such
        log.write("terminated", error=_first_line(exc), phase="job")
        print(f"pgval-driver: {_first_line(exc)}", file=sys.stderr)
        return JOB_REFUSED
    except Exception as exc:
        log.write("terminated", error=_first_line(exc), phase="start")
        print(f"pgval-driver: could not start the query: {_first_line(exc)}", file=sys.stderr)
        return 2
    if router is not None:
        return _serve(spec, session, router, query, sink, log, stop_requested)
    spark = session.spark
    control = _start_control(spec, spark, log)
    try:
        return _wait(query, spark, log, stop_requested, sink, control)
    finally:
        if control is not None:
            control.stop()


def _serve(spec: DriverDocument, session: Session, router: Any, query: Any, sink: Any,
           log: ProgressLog, stop_requested: threading.Event) -> int:
    """``serve_dir``: answer ``start_query``/``stop_query`` until SIGTERM (a failed query is
    its own progress file's ``terminated`` line, not the driver's end); exit 1 only when
    the SparkContext itself is gone."""
    from pgval.topologies.control_channel import ControlLoop, SparkExecutors
    from pgval.topologies.serve import CONTROL_DIR, Served, Server

    spark = session.spark
    server = Server(spark, spec, router,
                    lambda q, lg: start_query(q, session, lg, time.monotonic(), router.register),
                    ProgressLog, current=Served(spec, query, sink, log))
    executors = None if spark.sparkContext._jsc.sc().isLocal() else SparkExecutors(
        spark.sparkContext)
    assert spec.serve_dir is not None
    control = ControlLoop(spec.serve_dir / CONTROL_DIR, router.session_log, executors,
                          actions=server.actions()).start()
    try:
        while not stop_requested.wait(1.0):
            if spark.sparkContext._jsc.sc().isStopped():
                router.session_log.write("terminated", error="the SparkContext stopped")
                print("pgval-driver: the SparkContext stopped", file=sys.stderr)
                return 1
    except Exception as exc:  # Py4J errors once the JVM is gone
        router.session_log.write("terminated", error=_first_line(exc))
        print(f"pgval-driver: lost the Spark JVM: {_first_line(exc)}", file=sys.stderr)
        return 1
    finally:
        control.stop()
    server.stop_all()
    with contextlib.suppress(Exception):
        spark.stop()
    router.session_log.write("terminated", stopped_by="signal")
    return 0


def _start_control(spec: DriverDocument, spark: Any, log: ProgressLog) -> Any:
    """The control thread (``control_dir``), or None. A failure to start it is recorded
    and the query runs on: pgval's request then times out with a plain message."""
    if spec.control_dir is None:
        return None
    from pgval.topologies.control_channel import ControlLoop, SparkExecutors

    try:
        executors = None if spark.sparkContext._jsc.sc().isLocal() else SparkExecutors(
            spark.sparkContext)
        return ControlLoop(spec.control_dir, log, executors).start()
    except Exception as exc:
        log.write("control_error", where="start", error=_first_line(exc))
        return None


@dataclass
class Session:
    """The driver's SparkSession and what every query's ``started`` line reports of it."""

    spark: Any
    conf: dict[str, str]
    archive: Any
    session_s: float
    #: The user's settings, from the driver's environment: every query of a served driver
    #: runs with them.
    settings: Settings


def _start(spec: DriverDocument, settings: Settings, log: ProgressLog,
           router: Any = None) -> tuple[Any, Session, Any]:
    """The session and its first query; with ``router`` (``serve_dir``) every query's events
    go to its own progress file, else to ``log``."""
    session = _session(spec, settings)
    if router is None:
        session.spark.streams.addListener(_make_listener(log))
    else:
        from pgval.topologies.serve import make_router_listener

        session.spark.streams.addListener(make_router_listener(router, progress_record))
    query, sink = start_query(spec, session, log, _T0,
                              None if router is None else router.register)
    return query, session, sink


def _session(spec: DriverDocument, settings: Settings) -> Session:
    from pyspark.sql import SparkSession

    from pgval.host.jars import ensure_jars

    jars = ensure_jars(spark=True).spark_jars_csv
    before: dict[str, str] = {}
    if spec.sink == "delta":  # Delta Lake's jars and session settings, before the user's
        from pgval.host.jars import ensure_delta_jars
        from pgval.topologies.guarantee_sinks import DELTA_CONF

        jars = ",".join([jars, *map(str, ensure_delta_jars())])
        before = dict(DELTA_CONF)
    archive = driver_class_archive(spec)
    conf = spark_conf(spec, jars, settings.spark, before=before,
                      driver_java_flags=archive.flags_text() if archive is not None else "")
    if spec.serve_dir is not None:
        from pgval.topologies.serve import SERVE_CONF

        conf = {**SERVE_CONF, **conf}  # the user's settings win
    if archive is not None and archive.flags_text() not in conf["spark.driver.extraJavaOptions"]:
        archive = None  # the user's extraJavaOptions replaced pgval's: nothing to dump
    start_jvm(conf)
    spark = SparkSession.builder.getOrCreate()  # the JVM's conf: every setting given above
    spark.sparkContext.setLogLevel(spec.log_level)
    return Session(spark, conf, archive, time.monotonic() - _T0, settings)


@dataclass
class _Source:
    """How a query reads its input: the topology settings (with the Kafka source options),
    the Java client settings its Kafka sink shares, and the checkpoint it runs from."""

    cfg: Any
    java_options: dict[str, str]
    checkpoint: str
    starting_offsets: str


def _source(spec: DriverDocument, session: Session, log: ProgressLog) -> _Source:
    """The query's input side, set per query: its shuffle partitions, its source options,
    and for pg m1 the fresh checkpoint and offsets it resumes from."""
    from pgval.core.schema import Guarantee
    from pgval.kafka.client import java_client_options
    from pgval.topologies.query import TopologyConfig

    # Per query (a served driver's next query too): each query runs on a clone of the
    # session's SQL conf taken at its start (shared-driver.md, section 3).
    session.spark.conf.set("spark.sql.shuffle.partitions", str(spec.shuffle_partitions))
    # Spark's source and sink are Java clients: a SASL user and password become JAAS there;
    # the e1 sink (librdkafka) takes the settings as they are.
    java_options = java_client_options(session.settings.kafka)
    source_options = {f"kafka.{k}": v for k, v in java_options.items()}
    checkpoint = str(spec.checkpoint.resolve())
    if spec.pg == Guarantee.M1:
        abandoned = abandoned_batch(Path(checkpoint))
        if abandoned is not None:
            log.write("abandoned", **abandoned)
        checkpoint, source_options["startingOffsets"] = m1_start(checkpoint)
    cfg = TopologyConfig(topology=spec.topology, bootstrap=spec.bootstrap,
                         window_ms=spec.window_ms, watermark_ms=spec.watermark_ms,
                         max_offsets_per_trigger=spec.max_offsets_per_trigger,
                         topics=spec.topics, source_options=source_options,
                         input_names=tuple(spec.input_names.split(",")))
    return _Source(cfg, java_options, checkpoint,
                   source_options.get("startingOffsets", "earliest"))


def _trigger(spec: DriverDocument, job: Any) -> int | str:
    """The query's trigger: ``--trigger``, else the job's ``build.trigger``, else the
    processing-time interval ``trigger_ms``."""
    return spec.trigger or (getattr(job, "trigger", None) or spec.trigger_ms)


def _row_writer(spec: DriverDocument, spark: Any, source: _Source, job: Any,
                log: ProgressLog) -> Any:
    """The writer of a job's rows into files, Delta Lake or the user's sink (pg a1): a
    sink other than Kafka, each with its folder."""
    from pgval.topologies.guarantee_sinks import delta_write, file_sink, user_sink
    from pgval.topologies.job import JobRef
    from pgval.topologies.job_query import build_job_topology
    from pgval.topologies.user_sink import SinkWriter, UserSink, load_sink

    rows = build_job_topology(spark, source.cfg, job, rows=True)
    assert spec.sink_dir is not None  # the document's rule: another sink has its folder
    sink_dir = spec.sink_dir.resolve()
    checkpoint = source.checkpoint
    if spec.sink == "files":
        return file_sink(rows, str(sink_dir), checkpoint, spec.query_name, _trigger(spec, job))
    if spec.sink == "delta":
        delta = UserSink(JobRef("pgval.topologies.guarantee_sinks", "delta_write"),
                         delta_write(str(sink_dir), spec.query_name), lambda _: [])
        return user_sink(rows, SinkWriter(delta, sink_dir, log.write), checkpoint,
                         spec.query_name, _trigger(spec, job))
    return user_sink(rows, SinkWriter(load_sink(spec.sink), sink_dir, log.write),
                     checkpoint, spec.query_name, _trigger(spec, job))


def _kafka_writer(spec: DriverDocument, session: Session, source: _Source, job: Any,
                  sabotage: Any, log: ProgressLog) -> tuple[Any, Any]:
    """The writer into the output topic and the e1 sink (None for pg a1/m1): Spark's own
    Kafka sink at least once, pgval's transactional sink for e1."""
    from pgval.topologies.guarantee_sinks import TransactionalSink, kafka_sink, transactional_sink
    from pgval.topologies.job_query import build_job_topology
    from pgval.topologies.query import build_topology

    spark, checkpoint = session.spark, source.checkpoint
    out = (build_job_topology(spark, source.cfg, job) if job is not None
           else build_topology(spark, source.cfg))
    if spec.pg in ("a1", "m1"):
        producer = sink_hook_options(source.java_options, spec.sink_trigger)
        if spec.serve_dir is not None:  # Spark caches producers by their settings (serve)
            from pgval.topologies.serve import cell_client_id

            producer["client.id"] = cell_client_id(spec.query_name, producer.get("client.id"))
        return kafka_sink(out, spec.bootstrap, checkpoint, spec.query_name, _trigger(spec, job),
                          topic=spec.output, kafka_options=producer), None
    sink = TransactionalSink(spec.bootstrap, spec.query_name, checkpoint,
                             topic=spec.output, marker_topic=spec.topics.marker,
                             producer_conf=dict(session.settings.kafka),
                             on_batch=sink_event_writer(log),
                             sabotage=sabotage)
    return transactional_sink(out, sink, checkpoint, spec.query_name, _trigger(spec, job)), sink


def _log_started(spec: DriverDocument, session: Session, log: ProgressLog, query: Any,
                 source: _Source, started_s: float, first: bool, sabotage: Any) -> None:
    """The query's ``started`` line: its ids, how long the session and query took to start,
    the settings it runs with (secrets redacted) and, for the session's first query, where
    its JVM's class archive goes."""
    from pgval.core.redact import conf_summary

    spark, conf, archive = session.spark, session.conf, session.archive
    log.write("started", id=str(query.id), runId=str(query.runId), name=spec.query_name,
              topology=spec.topology, pg=spec.pg, pid=os.getpid(),
              checkpoint=source.checkpoint,
              **({"job": spec.job} if spec.job else {}),
              **({"sink": spec.sink} if spec.sink != "kafka" else {}),
              starting_offsets=source.starting_offsets,
              session_s=round(session.session_s, 3), startup_s=round(started_s, 3),
              **({"served": True} if spec.serve_dir is not None else {}),
              spark_version=spark.version,
              # What pgval needs to dump this JVM's class archive at the run's end.
              **({"class_archive": {
                  "path": str(archive.path), "java": archive.java,
                  "recording": archive.recording,
                  "jvm_pid": spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}}
                 if archive is not None and first else {}),
              # Logged without secrets: every KEY=VALUE given (--spark-conf among them) and
              # every secret-named setting shows its key only (pgval.core.redact).
              conf=conf_summary({k: v for k, v in conf.items() if k != "spark.jars"},
                                list(session.settings.spark)),
              **({"sabotage": str(sabotage)} if sabotage is not None else {}))


def start_query(spec: DriverDocument, session: Session, log: ProgressLog, t0: float,
                on_started: Callable[[str, ProgressLog, Any], None] | None = None
                ) -> tuple[Any, Any]:
    """Build and start the query of ``spec`` in ``session``; its ``started`` line goes to
    ``log`` (startup timed from ``t0``). Returns the query and the e1 sink (or None)."""
    from pgval.topologies.guarantee_sinks import parse_sabotage
    from pgval.topologies.job_query import load_job_for_spark

    sabotage = parse_sabotage(spec.sabotage) if spec.sabotage is not None else None
    source = _source(spec, session, log)
    job = load_job_for_spark(spec.job) if spec.job is not None else None
    if spec.sink != "kafka":
        writer, sink = _row_writer(spec, session.spark, source, job, log), None
    else:
        writer, sink = _kafka_writer(spec, session, source, job, sabotage, log)
    query = writer.start()
    started_s = time.monotonic() - t0
    if on_started is not None:  # a served driver routes the query's events by its run id
        on_started(str(query.runId), log, sink)
    _log_started(spec, session, log, query, source, started_s, t0 == _T0, sabotage)
    print(json.dumps({"event": "started", "startup_s": round(started_s, 3)}), flush=True)
    return query, sink


def _wait(query: Any, spark: Any, log: ProgressLog, stop_requested: threading.Event,
          sink: Any = None, control: Any = None) -> int:
    from pyspark.errors import StreamingQueryException

    try:
        while not stop_requested.is_set():
            if query.awaitTermination(0.5):
                break
    except StreamingQueryException as exc:
        if stop_requested.is_set():  # the JVM got the signal too and tore the query down
            log.write("terminated", stopped_by="signal", error=_first_line(exc))
            return 0
        reason = _first_line(exc)
        sink_error = getattr(sink, "last_error", None)
        if sink_error:  # Spark's first line only says "error in the user function"
            reason = f"e1 sink failed: {sink_error}"
        log.write("terminated", error=reason)
        print(f"pgval-driver: query failed: {reason}", file=sys.stderr)
        return 1
    except Exception as exc:  # Py4J errors once the JVM is gone
        if stop_requested.is_set():
            log.write("terminated", stopped_by="signal", error=_first_line(exc))
            return 0
        log.write("terminated", error=_first_line(exc))
        print(f"pgval-driver: lost the Spark JVM: {_first_line(exc)}", file=sys.stderr)
        return 1
    if stop_requested.is_set():
        if control is not None:  # no more calls into the JVM while it stops
            control.stop()
        try:
            query.stop()
            if sink is not None:
                sink.close()
            spark.stop()
        except Exception as exc:
            log.write("terminated", stopped_by="signal", error=_first_line(exc))
            return 0
        log.write("terminated", stopped_by="signal")
        return 0
    # The query ended on its own without an exception (someone stopped it from outside).
    log.write("terminated", stopped_by="query")
    return 0


if __name__ == "__main__":
    sys.exit(main())
