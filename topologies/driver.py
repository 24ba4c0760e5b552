"""The PySpark driver of one experiment: ``python -m pgval.topologies.driver ...``.

It runs as its own process (the runner spawns it, and a driver-crash fault SIGKILLs its
process group), builds the SparkSession, starts one streaming query and then only waits.
Its record of what happened is the progress file (JSON lines, appended and flushed):

* ``{"event": "started", ...}`` once the query runs (the runner's "driver is up" signal;
  with ``checkpoint``, the directory this start used: m1 gets a new one per start),
* ``{"event": "progress", ...}`` one line per StreamingQueryProgress (offsets, watermark,
  state rows, rows dropped by the watermark) — the evidence that explains losses,
* ``{"event": "abandoned", ...}`` at an m1 restart, before ``started``: the batch the last
  start logged offsets for and never committed (:func:`abandoned_batch`), which no progress
  line can show — its inputs were read and died with that driver,
* ``{"event": "sink_batch", ...}`` per batch the e1 sink committed or skipped,
* ``{"event": "sabotage", ...}`` once, only with ``--sabotage`` (a SELF-TEST of pgval:
  the e1 sink drops or duplicates one batch on purpose; see pgval.topologies.sinks),
* ``{"event": "terminated", ...}`` when the query ends (with ``error`` when it failed),
* with ``--control-dir`` only: ``{"event": "control", ...}`` answers to pgval's requests and
  ``{"event": "executors", ...}`` whenever the registered executors change (see
  pgval.topologies.control; without the flag no control thread runs).

With ``--serve DIR`` the driver outlives its query: it starts further ones on pgval's
requests, each with its own progress file (pgval.topologies.serve).

Exit status: 0 after SIGTERM/SIGINT (query stopped gracefully), 1 when the query failed
(first line of the exception on stderr), 2 when it could not be started, 4 when the user's
job or sink cannot be judged (``JOB_REFUSED``). Re-running the
same command with the same ``--checkpoint`` resumes where the checkpoint left off.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        line = json.dumps({"event": event, "wall_ms": int(time.time() * 1000), **fields},
                          default=str)
        with self._lock, open(self.path, "a") as fh:
            fh.write(line + "\n")
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from pgval import schema

    ap = argparse.ArgumentParser(prog="python -m pgval.topologies.driver",
                                 description="Run one pgval streaming topology.")
    ap.add_argument("--topology", required=True, choices=schema.TOPOLOGIES)
    ap.add_argument("--job", default=None, metavar="PATH.py:FUNCTION",
                    help="with --topology job: the user's job (pgval.topologies.job)")
    ap.add_argument("--sink", default="kafka", metavar="kafka|files|PATH.py:FUNCTION",
                    help="with --job: where its rows go (kafka: the --pg's sink)")
    ap.add_argument("--sink-dir", default=None, metavar="DIR",
                    help="the file sink's output directory, or the user's sink's folder")
    ap.add_argument("--pg", required=True, choices=schema.PROCESSING_GUARANTEES,
                    help="a1 = Spark Kafka sink, e1 = transactional foreachBatch sink")
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    ap.add_argument("--master", required=True, help="local[N] or spark://host:port")
    ap.add_argument("--checkpoint", required=True, help="checkpoint directory (resume point)")
    ap.add_argument("--window-ms", type=int, required=True)
    ap.add_argument("--watermark-ms", type=int, required=True)
    ap.add_argument("--trigger-ms", type=int, required=True,
                    help="processing-time trigger; 0 = next batch as soon as possible")
    ap.add_argument("--shuffle-partitions", type=int, default=3)
    ap.add_argument("--progress-file", required=True)
    ap.add_argument("--driver-host", default=None,
                    help="IP the driver advertises and binds (executors must reach it)")
    ap.add_argument("--driver-memory", default="512m")
    ap.add_argument("--executor-memory", default="512m")
    ap.add_argument("--executor-cores", type=int, default=1)
    ap.add_argument("--cores-max", type=int, default=None, help="spark.cores.max (standalone)")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None)
    ap.add_argument("--query-name", default=None,
                    help="default pgval-<topology>-<pg>; e1's transactional.id derives from it")
    ap.add_argument("--topic-prefix", default="",
                    help="the run's topics are PREFIXget, PREFIXpost, PREFIXoutput (a run on "
                         "a shared cluster gets its own)")
    ap.add_argument("--output-topic", default=None, help="default: PREFIXoutput")

    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark conf (repeatable)")
    ap.add_argument("--log-level", default="WARN", help="Spark log level")
    ap.add_argument("--control-dir", default=None, metavar="DIR",
                    help="answer pgval's requests written to DIR (req-<n>.json) and record "
                         "executor changes, both in the progress file")
    ap.add_argument("--crash-trigger", default=None, metavar="FILE",
                    help="crash point after-sink-write: once FILE exists, halt the driver's "
                         "JVM before it writes the next batch's commit (FILE.hit records "
                         "which; see pgval.faults.hooks)")
    ap.add_argument("--sink-trigger", default=None, metavar="FILE",
                    help="crash point during-sink-write (a1, m1): once FILE exists, the first "
                         "executor whose sink record Kafka acknowledges halts (FILE.hit "
                         "records which; see pgval.faults.hooks)")
    ap.add_argument("--class-sharing", action="store_true",
                    help="share the driver JVM's classes through an archive made once "
                         "(pgval.host.cds); without it the JVM loads them as usual")
    ap.add_argument("--executor-java-flags", default="", metavar="FLAGS",
                    help="JVM flags added to the executors' (their class archive)")
    ap.add_argument("--serve", default=None, metavar="DIR",
                    help="outlive the query: after it, start and stop further ones on "
                         "pgval's requests in DIR/control, answered in DIR/session.jsonl "
                         "(pgval.topologies.serve)")
    ap.add_argument("--sabotage", default=None, metavar="SPEC",
                    help="SELF-TEST of pgval only (e1): drop-batch:N / dup-batch:N drops / "
                         "writes twice the real output rows of the N-th committed batch "
                         "that has any (see pgval.topologies.sinks)")
    args = ap.parse_args(argv)
    if (args.topology == schema.Topology.JOB) != (args.job is not None):
        ap.error("--job goes with --topology job, and only with it")
    if args.sink != "kafka" and (args.job is None or args.sink_dir is None
                                 or args.pg != schema.Guarantee.A1):
        ap.error("--sink other than kafka needs --job, --sink-dir and --pg a1")
    if args.query_name is None:
        args.query_name = f"pgval-{args.topology}-{args.pg}"
    if args.sabotage is not None:
        if args.pg != schema.Guarantee.E1:
            ap.error("--sabotage only applies to --pg e1")
        from pgval.topologies.sinks import parse_sabotage  # pyspark import: only when asked

        try:
            args.sabotage = parse_sabotage(args.sabotage)
        except ValueError as exc:
            ap.error(str(exc))
    for item in args.conf:
        if "=" not in item:
            ap.error(f"--conf needs KEY=VALUE, got {item!r}")
    args.topics = schema.Topics.with_prefix(args.topic_prefix)
    if args.output_topic is None:
        args.output_topic = args.topics.output
    try:
        args.kafka_options, user_conf = _settings_from_env()
    except ValueError as exc:
        ap.error(str(exc))
    args.conf = [*(f"{k}={v}" for k, v in user_conf.items()), *args.conf]
    args.user_conf_keys = list(user_conf)  # the user's: logged by key only
    return args


def _settings_from_env() -> tuple[dict[str, str], dict[str, str]]:
    """The user's Kafka client settings (for the source, the sinks and the marker reader)
    and Spark settings, each a JSON object of strings in the environment: settings that may
    hold secrets (SASL passwords, keystore passwords) reach the driver there, which only its
    owner can read, never on its command line (``ps``)."""
    from pgval.spark.driver import KAFKA_OPTIONS_ENV, SPARK_CONF_ENV

    out = []
    for var in (KAFKA_OPTIONS_ENV, SPARK_CONF_ENV):
        text = os.environ.get(var, "")
        value = json.loads(text) if text else {}
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ValueError(f"{var} must be a JSON object of strings")
        out.append(value)
    return out[0], out[1]


def _add_hooks(conf: dict[str, str], crash_trigger: str | None) -> None:
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


def sink_hook_options(kafka_options: dict[str, str], sink_trigger: str | None
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


def driver_class_archive(args: argparse.Namespace) -> Any:
    """The driver JVM's class archive (``--class-sharing``; pgval.host.cds): the Java and
    the Spark jars spark-submit will run, as PySpark finds them."""
    if not args.class_sharing:
        return None
    from pyspark.find_spark_home import _find_spark_home

    from pgval.host import cds
    from pgval.host.jars import java_executable

    java = java_executable()
    return cds.archive("spark-driver", java, [Path(_find_spark_home()) / "jars"]) if java else None


def spark_conf(args: argparse.Namespace, jars_csv: str) -> dict[str, str]:
    """Every Spark setting the driver sets (reported by the runner as the run's config)."""
    conf = {
        "spark.master": args.master,
        "spark.app.name": args.query_name,
        "spark.jars": jars_csv,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": args.driver_memory,
        "spark.executor.memory": args.executor_memory,
        "spark.executor.cores": str(args.executor_cores),
        "spark.driver.extraJavaOptions": _joined(JAVA_OPTS, getattr(args, "driver_java_flags", "")),
        "spark.executor.extraJavaOptions": _joined(JAVA_OPTS, args.executor_java_flags),
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        # Windows must close without new data once the watermark moved (the default, pinned).
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.sql.streaming.multipleWatermarkPolicy": "min",
    }
    if args.cores_max:
        conf["spark.cores.max"] = str(args.cores_max)
    host = args.driver_host
    if host is None and args.master.startswith("local"):
        host = "127.0.0.1"  # local mode: keep the driver off eth0 (where faults are injected)
    if host:
        conf["spark.driver.host"] = host
        conf["spark.driver.bindAddress"] = host
    for item in args.conf:
        key, value = item.split("=", 1)
        conf[key] = value
    trigger = getattr(args, "crash_trigger", None)
    if trigger or getattr(args, "sink_trigger", None):
        _add_hooks(conf, trigger)
    secret_path = conf.pop("spark.authenticate.secret.file", None)
    if secret_path and args.master.startswith("spark://"):
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
        raise RuntimeError("a Spark JVM already runs in this process; start_jvm must "
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
    from pgval.topologies.sinks import _checkpoint_query_id

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
    args = parse_args(argv)
    log = ProgressLog(Path(args.progress_file))
    stop_requested = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    # Executors use this venv's Python for a user's job's Python UDFs (SST and MST have none).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if args.driver_host or args.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", args.driver_host or "127.0.0.1")

    from pgval.spark.driver import JOB_REFUSED
    from pgval.topologies.job import JobError

    router = None
    if args.serve:
        from pgval.topologies.serve import SESSION_LOG, QueryRouter

        router = QueryRouter(ProgressLog(Path(args.serve) / SESSION_LOG))
    try:
        query, session, sink = _start(args, log, router)
    except JobError as exc:  # the user's job or sink: bad input, said as such
        log.write("terminated", error=_first_line(exc), phase="job")
        print(f"pgval-driver: {_first_line(exc)}", file=sys.stderr)
        return JOB_REFUSED
    except Exception as exc:
        log.write("terminated", error=_first_line(exc), phase="start")
        print(f"pgval-driver: could not start the query: {_first_line(exc)}", file=sys.stderr)
        return 2
    if router is not None:
        return _serve(args, session, router, query, sink, log, stop_requested)
    spark = session.spark
    control = _start_control(args, spark, log)
    try:
        return _wait(query, spark, log, stop_requested, sink, control)
    finally:
        if control is not None:
            control.stop()


def _serve(args: argparse.Namespace, session: Session, router: Any, query: Any, sink: Any,
           log: ProgressLog, stop_requested: threading.Event) -> int:
    """``--serve``: answer ``start_query``/``stop_query`` until SIGTERM (a failed query is
    its own progress file's ``terminated`` line, not the driver's end); exit 1 only when
    the SparkContext itself is gone."""
    from pgval.topologies.control import ControlLoop, SparkExecutors
    from pgval.topologies.serve import CONTROL_DIR, Served, Server

    spark = session.spark

    def parse(argv: list[str]) -> argparse.Namespace:
        parsed = parse_args(argv)
        parsed.serve = args.serve
        return parsed

    server = Server(spark, args, router, parse,
                    lambda a, lg: start_query(a, session, lg, time.monotonic(), router.register),
                    ProgressLog, current=Served(args, query, sink, log))
    executors = None if spark.sparkContext._jsc.sc().isLocal() else SparkExecutors(
        spark.sparkContext)
    control = ControlLoop(Path(args.serve) / CONTROL_DIR, router.session_log, executors,
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


def _start_control(args: argparse.Namespace, spark: Any, log: ProgressLog) -> Any:
    """The control thread (``--control-dir``), or None. A failure to start it is recorded
    and the query runs on: pgval's request then times out with a plain message."""
    if not args.control_dir:
        return None
    from pgval.topologies.control import ControlLoop, SparkExecutors

    try:
        executors = None if spark.sparkContext._jsc.sc().isLocal() else SparkExecutors(
            spark.sparkContext)
        return ControlLoop(Path(args.control_dir), log, executors).start()
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


def _start(args: argparse.Namespace, log: ProgressLog,
           router: Any = None) -> tuple[Any, Session, Any]:
    """The session and its first query; with ``router`` (``--serve``) every query's events
    go to its own progress file, else to ``log``."""
    session = _session(args)
    if router is None:
        session.spark.streams.addListener(_make_listener(log))
    else:
        from pgval.topologies.serve import make_router_listener

        session.spark.streams.addListener(make_router_listener(router, progress_record))
    query, sink = start_query(args, session, log, _T0,
                              None if router is None else router.register)
    return query, session, sink


def _session(args: argparse.Namespace) -> Session:
    from pyspark.sql import SparkSession

    from pgval.host.jars import ensure_jars

    jars = ensure_jars(spark=True).spark_jars_csv
    if args.sink == "delta":  # Delta Lake's jars and session settings, before the user's
        from pgval.host.jars import ensure_delta_jars
        from pgval.topologies.sinks import DELTA_CONF

        jars = ",".join([jars, *map(str, ensure_delta_jars())])
        args.conf = [*(f"{k}={v}" for k, v in DELTA_CONF.items()), *args.conf]
    archive = driver_class_archive(args)
    args.driver_java_flags = archive.flags_text() if archive is not None else ""
    conf = spark_conf(args, jars)
    if args.serve:
        from pgval.topologies.serve import SERVE_CONF

        conf = {**SERVE_CONF, **conf}  # the user's settings win
    if archive is not None and archive.flags_text() not in conf["spark.driver.extraJavaOptions"]:
        archive = None  # the user's extraJavaOptions replaced pgval's: nothing to dump
    start_jvm(conf)
    spark = SparkSession.builder.getOrCreate()  # the JVM's conf: every setting given above
    spark.sparkContext.setLogLevel(args.log_level)
    return Session(spark, conf, archive, time.monotonic() - _T0)


def start_query(args: argparse.Namespace, session: Session, log: ProgressLog, t0: float,
                on_started: Callable[[str, ProgressLog, Any], None] | None = None
                ) -> tuple[Any, Any]:
    """Build and start one query of ``args`` in ``session``; its ``started`` line goes to
    ``log`` (startup timed from ``t0``). Returns the query and the e1 sink (or None)."""
    from pgval.kafka.client import java_client_options
    from pgval.redact import conf_summary
    from pgval.schema import Guarantee
    from pgval.topologies.job import JobRef
    from pgval.topologies.job_query import build_job_topology, load_job_for_spark
    from pgval.topologies.query import TopologyConfig, build_topology
    from pgval.topologies.sinks import (
        TransactionalSink,
        delta_write,
        file_sink,
        kafka_sink,
        transactional_sink,
        user_sink,
    )
    from pgval.topologies.user_sink import SinkWriter, UserSink, load_sink

    spark, conf, archive = session.spark, session.conf, session.archive
    # Per query (a served driver's next query too): each query runs on a clone of the
    # session's SQL conf taken at its start (shared-driver.md, section 3).
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    # Spark's source and sink are Java clients: a SASL user and password become JAAS there;
    # the e1 sink (librdkafka) takes the settings as they are.
    java_options = java_client_options(args.kafka_options)
    source_options = {f"kafka.{k}": v for k, v in java_options.items()}
    checkpoint = str(Path(args.checkpoint).resolve())
    if args.pg == Guarantee.M1:
        abandoned = abandoned_batch(Path(checkpoint))
        if abandoned is not None:
            log.write("abandoned", **abandoned)
        checkpoint, source_options["startingOffsets"] = m1_start(checkpoint)
    cfg = TopologyConfig(topology=args.topology, bootstrap=args.bootstrap,
                         window_ms=args.window_ms, watermark_ms=args.watermark_ms,
                         max_offsets_per_trigger=args.max_offsets_per_trigger,
                         topics=args.topics, source_options=source_options)
    job = load_job_for_spark(args.job) if args.job is not None else None
    sink = None
    if args.sink != "kafka":  # a job's rows into files or the user's sink (pg a1)
        rows = build_job_topology(spark, cfg, job, rows=True)
        sink_dir = Path(args.sink_dir).resolve()
        if args.sink == "files":
            writer = file_sink(rows, str(sink_dir), checkpoint, args.query_name,
                               args.trigger_ms)
        elif args.sink == "delta":
            delta = UserSink(JobRef("pgval.topologies.sinks", "delta_write"),
                             delta_write(str(sink_dir), args.query_name), lambda _: [])
            writer = user_sink(rows, SinkWriter(delta, sink_dir, log.write), checkpoint,
                               args.query_name, args.trigger_ms)
        else:
            writer = user_sink(rows, SinkWriter(load_sink(args.sink), sink_dir, log.write),
                               checkpoint, args.query_name, args.trigger_ms)
    else:
        out = (build_job_topology(spark, cfg, job) if job is not None
               else build_topology(spark, cfg))
        if args.pg in ("a1", "m1"):
            producer = sink_hook_options(java_options, getattr(args, "sink_trigger", None))
            if args.serve:  # Spark caches producers by their settings (pgval.topologies.serve)
                from pgval.topologies.serve import cell_client_id

                producer["client.id"] = cell_client_id(args.query_name,
                                                       producer.get("client.id"))
            writer = kafka_sink(out, args.bootstrap, checkpoint, args.query_name,
                                args.trigger_ms, topic=args.output_topic,
                                kafka_options=producer)
        else:
            sink = TransactionalSink(args.bootstrap, args.query_name, checkpoint,
                                     topic=args.output_topic, marker_topic=args.topics.marker,
                                     producer_conf=dict(args.kafka_options),
                                     on_batch=sink_event_writer(log),
                                     sabotage=args.sabotage)
            writer = transactional_sink(out, sink, checkpoint, args.query_name,
                                        args.trigger_ms)
    query = writer.start()
    started_s = time.monotonic() - t0
    if on_started is not None:  # a served driver routes the query's events by its run id
        on_started(str(query.runId), log, sink)
    log.write("started", id=str(query.id), runId=str(query.runId), name=args.query_name,
              topology=args.topology, pg=args.pg, pid=os.getpid(), checkpoint=checkpoint,
              **({"job": args.job} if args.job else {}),
              **({"sink": args.sink} if args.sink != "kafka" else {}),
              starting_offsets=source_options.get("startingOffsets", "earliest"),
              session_s=round(session.session_s, 3), startup_s=round(started_s, 3),
              **({"served": True} if args.serve else {}),
              spark_version=spark.version,
              # What pgval needs to dump this JVM's class archive at the run's end.
              **({"class_archive": {
                  "path": str(archive.path), "java": archive.java,
                  "recording": archive.recording,
                  "jvm_pid": spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}}
                 if archive is not None and t0 == _T0 else {}),
              # Logged without secrets: every KEY=VALUE given (--spark-conf among them) and
              # every secret-named setting shows its key only (pgval.redact).
              conf=conf_summary({k: v for k, v in conf.items() if k != "spark.jars"},
                                args.user_conf_keys),
              **({"sabotage": str(args.sabotage)} if args.sabotage is not None else {}))
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
