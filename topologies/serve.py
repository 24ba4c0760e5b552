"""A driver that outlives its queries (a driver document with ``serve_dir``: DIR).

Why: on 2 cores a fresh driver costs a warm matrix cell most of its overhead (its JVM, its
application's executor JVMs, their cold code). Served, one SparkSession runs one query per
cell: the first from the driver's own document, as a fresh driver would, the next ones on
pgval's request, each with its own checkpoint, topics, query name, progress file and (a1)
Kafka producer. What carries over and what cannot is written down, from Spark's source, in
experiments/overhead-26/shared-driver.md; in short:

* state stores are keyed by checkpoint path and run id, and every cell's checkpoint is new;
* Spark's Kafka consumers are keyed by a group id unique per query start; its producers by
  their settings, so each cell's a1 sink gets its own ``client.id`` (:func:`cell_client_id`);
* a stopped query's tasks can still run on the executors: :meth:`Server.stop_query` waits
  until no task runs anywhere (only one query runs per driver), and :meth:`Server.start_query`
  until as many executors are registered as when the first query stopped (a fault may have
  taken one away);
* a step that does not finish in time *poisons* the driver: the answer says so and pgval
  gives the next cell a fresh one.

Requests arrive over the control channel (:mod:`pgval.topologies.control_channel`; the answers and
the executors' changes go to ``DIR/session.jsonl``): ``start_query`` with ``spec``, the
document a fresh driver of that cell would get (pgval.core.driver_spec, as JSON), and
``stop_query``. A query whose session settings differ from the driver's first is refused
(:meth:`~pgval.core.driver_spec.DriverDocument.session_mismatch`). Each query's own events
(``started``, ``progress``, ``sink_batch``, ``terminated``...) go to its own progress file,
routed by the query's run id (:class:`QueryRouter`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.core.driver_spec import DriverDocument
from pgval.core.errors import PgvalError, UserMistake

#: What a served driver's session log and control directory are called inside ``serve_dir``.
SESSION_LOG = "session.jsonl"
CONTROL_DIR = "control"
#: Spark settings a served driver adds to its session (shared-driver.md, sections 2-4): an
#: idle cell's cached producer is closed within a cell, a stop that hangs is a time-out and
#: not a hang, and the status store keeps few finished executions in a small driver heap.
SERVE_CONF = {
    "spark.kafka.producer.cache.timeout": "30s",
    "spark.sql.streaming.stopTimeout": "60s",
    "spark.sql.ui.retainedExecutions": "100",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "2000",
}
#: Seconds a stopped query's terminated event, its tasks and the executors may take.
TERMINATED_WAIT_S = 15.0
TASKS_WAIT_S = 30.0
EXECUTORS_WAIT_S = 60.0


def cell_client_id(query_name: str, users: str | None = None) -> str:
    """The a1 sink's Kafka ``client.id``: Spark caches producers by their settings, and
    the topic is not one of them, so without one per cell every cell would write through
    the first cell's producer (its buffer, its idempotent producer id). A user's own
    ``client.id`` gets the cell's query name added, for the same reason."""
    return f"{users}-{query_name}" if users else f"pgval-{query_name}"


class QueryRouter:
    """Sends each listener event to the progress file of the query whose run id it carries.

    The listener runs on Spark's bus thread; a query's first events may arrive before
    :meth:`register` (the bus is asynchronous), so they wait in ``pending`` until then.
    """

    def __init__(self, session_log: Any) -> None:
        self.session_log = session_log
        self._lock = threading.Lock()
        self._logs: dict[str, Any] = {}
        self._pending: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self._stopping: set[str] = set()
        self._terminated: dict[str, threading.Event] = {}
        self._sinks: dict[str, Any] = {}

    def register(self, run_id: str, log: Any, sink: Any = None) -> None:
        """``sink``: the query's e1 sink, whose last error explains a failed query."""
        with self._lock:  # the waiting events first: none written meanwhile overtakes them
            self._logs[run_id] = log
            if sink is not None:
                self._sinks[run_id] = sink
            self._terminated.setdefault(run_id, threading.Event())
            for event, fields in self._pending.pop(run_id, []):
                log.write(event, **fields)

    def stopping(self, run_id: str) -> None:
        """pgval asked for this stop: its terminated line says so."""
        with self._lock:
            self._stopping.add(run_id)

    def write(self, run_id: str, event: str, **fields: Any) -> None:
        with self._lock:
            log = self._logs.get(run_id)
            if log is None:
                self._pending.setdefault(run_id, []).append((event, fields))
                return
        log.write(event, **fields)

    def terminated(self, run_id: str, error: str | None) -> None:
        with self._lock:
            by = "pgval" if run_id in self._stopping else "query"
            done = self._terminated.setdefault(run_id, threading.Event())
            sink_error = getattr(self._sinks.pop(run_id, None), "last_error", None)
        if error and sink_error:  # Spark's first line only says "error in the user function"
            error = f"e1 sink failed: {sink_error}"
        self.write(run_id, "terminated", **({"error": error} if error else {"stopped_by": by}))
        done.set()

    def wait_terminated(self, run_id: str, timeout_s: float) -> bool:
        with self._lock:
            done = self._terminated.setdefault(run_id, threading.Event())
        return done.wait(timeout_s)


def make_router_listener(router: QueryRouter, progress_record: Callable[[str], dict[str, Any]]
                         ) -> Any:
    """A StreamingQueryListener writing through ``router`` (pyspark imported lazily)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):  # type: ignore[misc]
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - pyspark's API
            return None

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            try:
                run_id = str(event.progress.runId)
                router.write(run_id, "progress", **progress_record(event.progress.json))
            except Exception as exc:  # never let bookkeeping break the query
                router.session_log.write("listener_error", error=repr(exc))

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            try:
                router.write(str(event.runId), "idle",
                             timestamp=getattr(event, "timestamp", None))
            except Exception as exc:
                router.session_log.write("listener_error", error=repr(exc))

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            try:
                error = getattr(event, "exception", None)
                router.terminated(str(event.runId),
                                  str(error).strip().splitlines()[0] if error else None)
            except Exception as exc:
                router.session_log.write("listener_error", error=repr(exc))

    return _Listener()


@dataclass
class Served:
    """The query a served driver runs now, and what its stop must close."""

    spec: DriverDocument
    query: Any
    sink: Any
    log: Any


@dataclass
class Server:
    """The ``start_query``/``stop_query`` actions of a served driver's control loop.

    ``first``: the document the driver started with (its session); ``start``: builds and
    starts one query (``pgval.topologies.driver.start_query``) from its document and a
    progress log; returns the query and the e1 sink (or None).
    """

    spark: Any
    first: DriverDocument
    router: QueryRouter
    start: Callable[[DriverDocument, Any], tuple[Any, Any]]
    make_log: Callable[[Path], Any]
    current: Served | None = None
    #: The executors registered when the first query stopped: what a next cell must find
    #: (fixed then: a look that caught a replacement before the executor it replaces left
    #: must not raise it). None until then.
    executors_wanted: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def actions(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {"start_query": self.start_query, "stop_query": self.stop_query}

    # ---- the Spark side -------------------------------------------------------------------

    def _sc(self) -> Any:
        return self.spark.sparkContext._jsc.sc()

    def executor_count(self) -> int:
        conv = self.spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters
        return len(list(conv.asJava(self._sc().getExecutorIds())))

    def running_tasks(self) -> int:
        """Tasks running on any executor, from the scheduler (exact: an entry leaves when the
        executor reports the task ended; shared-driver.md, section 4)."""
        jvm = self.spark.sparkContext._jvm
        by_executor = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
            self._sc().taskScheduler().runningTasksByExecutors())
        return sum(int(v) for v in by_executor.values())

    def _note_executors(self) -> None:
        if self.executors_wanted is None:
            with contextlib.suppress(Exception):
                self.executors_wanted = self.executor_count()

    # ---- actions --------------------------------------------------------------------------

    def start_query(self, req: dict[str, Any]) -> dict[str, Any]:
        t0 = time.monotonic()
        with self._lock:
            if self.current is not None:
                return {"ok": False, "error": f"query {self.current.spec.query_name} still "
                        "runs: stop it first"}
            raw = req.get("spec")
            if not isinstance(raw, dict):
                return {"ok": False, "error": "start_query needs \"spec\", the query's driver "
                        "document as a JSON object"}
            try:  # the query runs in this driver's session: its serve_dir is the driver's
                spec = DriverDocument.from_json({**raw, "serve_dir": self.first.serve_dir})
            except PgvalError as exc:
                return {"ok": False, "error": f"the query's document was refused: {exc}"}
            why = self.first.session_mismatch(spec)
            if why:
                return {"ok": False, "error": f"this driver cannot run the query: {why}"}
            ready = self._wait_ready(float(req.get("ready_timeout_s", EXECUTORS_WAIT_S)))
            if ready is not None:
                return {"ok": False, "poisoned": True, "error": ready}
            setup_s = time.monotonic() - t0
            self.spark.streams.resetTerminated()  # awaitAnyTermination is sticky
            log = self.make_log(spec.progress_file)
            try:
                query, sink = self.start(spec, log)
            except Exception as exc:  # nothing of it may run on into the next cell
                for active in list(self.spark.streams.active):
                    with contextlib.suppress(Exception):
                        active.stop()
                if isinstance(exc, UserMistake):  # the user's job (JobError): bad input
                    log.write("terminated", error=_first_line(exc), phase="job")
                    return {"ok": False, "refused": True, "error": _first_line(exc)}
                # A user's job may fail on what an earlier query of it left in the session
                # (a temporary view made with createTempView): a fresh driver runs it.
                return {"ok": False, "poisoned": spec.job is not None,
                        "error": f"the query did not start: {_first_line(exc)}"}
            self.current = Served(spec, query, sink, log)
            return {"ok": True, "query": spec.query_name, "runId": str(query.runId),
                    "setup_s": round(setup_s, 3),
                    "startup_s": round(time.monotonic() - t0 - setup_s, 3)}

    def _wait_ready(self, timeout_s: float) -> str | None:
        """Wait until as many executors are registered as this driver ever had and no task
        runs; why not (one sentence) when the time-out passes first."""
        deadline = time.monotonic() + timeout_s
        wanted = self.executors_wanted or 0
        while True:
            count, tasks = self.executor_count(), self.running_tasks()
            if count >= wanted and tasks == 0:
                return None
            if time.monotonic() > deadline:
                return (f"after {timeout_s:g} s {count} of {wanted} executors were "
                        f"registered and {tasks} task(s) still ran")
            time.sleep(0.2)

    def stop_query(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            served, self.current = self.current, None
            if served is None:
                return {"ok": True, "note": "no query was running"}
            self._note_executors()
            return self._stop(served)

    def _stop(self, served: Served) -> dict[str, Any]:
        """Stop, wait for the terminated event and for the executors to run nothing, close
        the e1 sink, collect the garbage (the context cleaner then frees old shuffles)."""
        run_id = str(served.query.runId)
        self.router.stopping(run_id)
        out: dict[str, Any] = {"query": served.spec.query_name, "runId": run_id}
        t = time.monotonic()
        try:
            served.query.stop()  # spark.sql.streaming.stopTimeout: a hang is an error
        except Exception as exc:
            return {**out, "ok": False, "poisoned": True,
                    "error": f"the query did not stop: {_first_line(exc)}"}
        out["stop_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        if not self.router.wait_terminated(run_id, TERMINATED_WAIT_S):
            return {**out, "ok": False, "poisoned": True, "error": "no terminated event "
                    f"within {TERMINATED_WAIT_S:g} s of the stop"}
        out["terminated_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        while (tasks := self.running_tasks()) > 0:
            if time.monotonic() - t > TASKS_WAIT_S:
                return {**out, "ok": False, "poisoned": True, "error": f"{tasks} task(s) of "
                        f"the stopped query still ran after {TASKS_WAIT_S:g} s"}
            time.sleep(0.2)
        out["tasks_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        if served.sink is not None:
            served.sink.close()
        self.spark.sparkContext._jvm.java.lang.System.gc()
        out["close_s"] = round(time.monotonic() - t, 3)
        return {**out, "ok": True}

    def stop_all(self) -> None:
        """At the driver's own stop: the running query, if any, and its sink."""
        with self._lock:
            served, self.current = self.current, None
        if served is not None:
            self.router.stopping(str(served.query.runId))
            with contextlib.suppress(Exception):
                served.query.stop()
            if served.sink is not None:
                with contextlib.suppress(Exception):
                    served.sink.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
