"""A driver shared by a campaign's cells: which runs may share one, what a session is made
of, how events find their query's file, and the served driver's answers.

Spark's side (one SparkSession running cells one after another, isolated) is in
tests/test_deploy_cluster.py (``test_a_shared_driver_...``); here the rules, with PySpark's
own listener events, and a stand-in where only a live Spark could answer (executors,
running tasks, a query object).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from pgval.campaigns.matrix import matrix_key
from pgval.core.schema import CrashPoint, Fault, FaultSpec
from pgval.core.spec import RunSpec
from pgval.deploy.driver_process import DriverSpec, progress_lines
from pgval.deploy.shared_driver import SharedDrivers, fresh_driver_reason
from pgval.topologies.driver import ProgressLog
from pgval.topologies.serve import QueryRouter, Served, Server, cell_client_id


def spec(**kw: Any) -> DriverSpec:
    base = dict(topology="sst", pg="a1", bootstrap="h:1", master="spark://h:7077",
                checkpoint=Path("/tmp/run1/checkpoint"),
                progress_file=Path("/tmp/run1/progress.jsonl"), window_ms=2000,
                watermark_ms=1000, trigger_ms=500, shuffle_partitions=3)
    return DriverSpec(**{**base, **kw})


# ---- who shares ------------------------------------------------------------------------------

@pytest.mark.parametrize(("fault", "target", "why"), [
    (FaultSpec(Fault.NONE), None, None),
    (FaultSpec(Fault.CRASH), 0, None),  # a worker's executors: replaced, waited for
    (FaultSpec(Fault.DELAY_GT_TIMEOUT), 1, None),
    (FaultSpec(Fault.PAUSE_LT_TIMEOUT), 0, None),
    (FaultSpec(Fault.DRIVER_CRASH), None, "its fault kills the driver"),
    (FaultSpec(Fault.PAUSE_GT_TIMEOUT), "driver", "its fault pauses the driver"),
    (FaultSpec(Fault.CRASH, CrashPoint.DURING_SINK_WRITE), None,
     "its crash point's hooks are set when a driver starts"),
    (FaultSpec(Fault.DRIVER_CRASH, CrashPoint.AFTER_SINK_WRITE), None,
     "its fault kills the driver"),
])
def test_which_faults_share_a_driver(fault: FaultSpec, target: Any, why: str | None) -> None:
    assert fresh_driver_reason([(fault, target)], "kafka", []) == why


def test_a_schedule_part_a_sink_or_a_container_needs_a_fresh_driver() -> None:
    from pgval.deploy.shared_driver import own_driver_reason

    none = (FaultSpec(Fault.NONE), None)
    assert fresh_driver_reason([none, (FaultSpec(Fault.DRIVER_CRASH), None)],
                               "kafka", []) == "its fault kills the driver"
    assert fresh_driver_reason([none], "files", []) is not None
    assert fresh_driver_reason([none], "kafka", ["docker", "exec"]) is not None
    # A user's job shares a driver, unless its fault or sink says otherwise.
    job = {"topology": "job", "job": "/j.py:build"}
    assert own_driver_reason(RunSpec(**job, fault="none"), []) is None  # type: ignore[arg-type]
    assert own_driver_reason(RunSpec(**job, fault="driver-crash"),  # type: ignore[arg-type]
                             []) == "its fault kills the driver"
    assert own_driver_reason(RunSpec(**job, fault="none", sink="files"),  # type: ignore[arg-type]
                             []) == "a user's sink is imported per driver"


# ---- what a session is -----------------------------------------------------------------------

def test_session_key_is_the_session_not_the_query() -> None:
    first = spec()
    other_cell = spec(topology="mst", pg="e1", checkpoint=Path("/tmp/run2/checkpoint"),
                      progress_file=Path("/tmp/run2/progress.jsonl"), query_name="p2-mst-e1",
                      topic_prefix="p2-", window_ms=10_000, shuffle_partitions=6)
    assert first.session_key() == other_cell.session_key()
    for changed in (spec(conf={"spark.network.timeout": "10s"}),
                    spec(user_conf={"spark.x": "1"}), spec(master="spark://other:7077"),
                    spec(kafka_options={"security.protocol": "SASL_PLAINTEXT"}),
                    spec(executor_memory="1g"), spec(class_sharing=True)):
        assert changed.session_key() != first.session_key()


def test_a_query_needing_another_session_is_refused_with_the_reason() -> None:
    first = spec(serve_dir=Path("/tmp/campaign/driver-1")).document()
    assert first.to_json()["serve_dir"] == "/tmp/campaign/driver-1"
    assert first.session_mismatch(spec(topology="mst").document()) is None
    other = spec(conf={"spark.network.timeout": "10s"}).document()
    assert first.session_mismatch(other) == "its conf differs from the session's"
    hooked = spec(crash_trigger=Path("/tmp/t")).document()
    assert "crash point" in str(first.session_mismatch(hooked))


def test_each_cell_gets_its_own_producer_client_id() -> None:
    assert cell_client_id("p1-sst-a1") != cell_client_id("p2-sst-a1")


def test_a_shared_driver_matrix_is_a_matrix_of_its_own() -> None:
    base = RunSpec()
    assert matrix_key(base, shared_driver=False) == matrix_key(base)  # stored keys unchanged
    assert matrix_key(base, shared_driver=True) != matrix_key(base)
    assert matrix_key(base, 0.5, True) != matrix_key(base, 0.5)


# ---- routing events --------------------------------------------------------------------------

def test_events_before_registration_wait_and_keep_their_order(tmp_path: Path) -> None:
    router = QueryRouter(ProgressLog(tmp_path / "session.jsonl"))
    router.write("run-a", "progress", batchId=0)
    router.write("run-b", "progress", batchId=0)
    router.write("run-a", "progress", batchId=1)
    router.register("run-a", ProgressLog(tmp_path / "a.jsonl"))
    router.write("run-a", "progress", batchId=2)
    assert [r["batchId"] for r in progress_lines(tmp_path / "a.jsonl")] == [0, 1, 2]
    router.register("run-b", ProgressLog(tmp_path / "b.jsonl"))
    assert [r["batchId"] for r in progress_lines(tmp_path / "b.jsonl")] == [0]


def test_pysparks_own_events_reach_their_querys_file(tmp_path: Path) -> None:
    """The listener with PySpark's event classes, as Spark's bus hands them over."""
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryTerminatedEvent,
    )

    from pgval.topologies.driver import progress_record
    from pgval.topologies.serve import make_router_listener

    ids = {"a": "00000000-0000-0000-0000-00000000000a",
           "b": "00000000-0000-0000-0000-00000000000b"}
    router = QueryRouter(ProgressLog(tmp_path / "session.jsonl"))
    for name, run_id in ids.items():
        router.register(run_id, ProgressLog(tmp_path / f"{name}.jsonl"))
    listener = make_router_listener(router, progress_record)

    def progress(run_id: str, batch: int) -> QueryProgressEvent:
        return QueryProgressEvent.fromJson({"progress": {
            "id": run_id, "runId": run_id, "name": "q", "timestamp": "t", "batchId": batch,
            "batchDuration": 5, "stateOperators": [], "sources": [],
            "sink": {"description": "kafka", "numOutputRows": 1}}})

    listener.onQueryProgress(progress(ids["a"], 0))
    listener.onQueryProgress(progress(ids["b"], 7))
    listener.onQueryIdle(QueryIdleEvent.fromJson({"id": ids["a"], "runId": ids["a"],
                                                  "timestamp": "t"}))
    router.stopping(ids["a"])
    listener.onQueryTerminated(QueryTerminatedEvent.fromJson({
        "id": ids["a"], "runId": ids["a"], "exception": None,
        "errorClassOnException": None}))
    listener.onQueryTerminated(QueryTerminatedEvent.fromJson({
        "id": ids["b"], "runId": ids["b"], "exception": "java.lang.X: boom\n\tat y",
        "errorClassOnException": None}))
    a, b = (progress_lines(tmp_path / f"{n}.jsonl") for n in ("a", "b"))
    assert [(r["event"], r.get("batchId")) for r in a] == [
        ("progress", 0), ("idle", None), ("terminated", None)]
    assert a[0]["runId"] == ids["a"] and a[-1]["stopped_by"] == "pgval"
    assert [(r["event"], r.get("batchId")) for r in b] == [
        ("progress", 7), ("terminated", None)]
    assert b[-1]["error"] == "java.lang.X: boom"  # first line only
    assert not (tmp_path / "session.jsonl").exists()  # no listener_error


def test_an_e1_sinks_error_explains_its_failed_query(tmp_path: Path) -> None:
    router = QueryRouter(ProgressLog(tmp_path / "session.jsonl"))
    sink = type("Sink", (), {"last_error": "KafkaError: transaction fenced"})()
    router.register("r", ProgressLog(tmp_path / "r.jsonl"), sink)
    router.terminated("r", "An exception was raised by the Python Proxy")
    assert progress_lines(tmp_path / "r.jsonl")[-1]["error"] == (
        "e1 sink failed: KafkaError: transaction fenced")


def test_terminated_says_who_stopped_the_query(tmp_path: Path) -> None:
    router = QueryRouter(ProgressLog(tmp_path / "session.jsonl"))
    for run in ("asked", "own", "failed"):
        router.register(run, ProgressLog(tmp_path / f"{run}.jsonl"))
    router.stopping("asked")
    assert not router.wait_terminated("asked", 0.01)
    router.terminated("asked", None)
    router.terminated("own", None)
    router.terminated("failed", "StreamingQueryException: boom")
    assert router.wait_terminated("asked", 0.01)
    last = {run: progress_lines(tmp_path / f"{run}.jsonl")[-1]
            for run in ("asked", "own", "failed")}
    assert last["asked"]["stopped_by"] == "pgval" and last["own"]["stopped_by"] == "query"
    assert last["failed"]["error"] == "StreamingQueryException: boom"


# ---- the served driver's answers, Spark stood in for -----------------------------------------

class StandInQuery:
    def __init__(self, name: str, router: QueryRouter) -> None:
        self.runId = f"run-{name}"
        self.router = router
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self.router.terminated(self.runId, None)  # Spark's bus, after the stop


class StandInServer(Server):
    """Executors and running tasks set by the test instead of asked from Spark."""

    executors = 2
    tasks = 0

    def executor_count(self) -> int:
        return self.executors

    def running_tasks(self) -> int:
        return self.tasks


class StandInStreams:
    active: list[Any] = []  # no query left running after a failed start

    def resetTerminated(self) -> None:  # noqa: N802 - pyspark's name
        return None


class StandInContext:
    class _jvm:  # noqa: N801 - Py4J's name
        class java:  # noqa: N801
            class lang:  # noqa: N801
                class System:  # noqa: N801
                    @staticmethod
                    def gc() -> None:
                        return None


class StandInSpark:
    streams = StandInStreams()
    sparkContext = StandInContext()


def server(tmp_path: Path) -> tuple[StandInServer, QueryRouter, list[str]]:
    router = QueryRouter(ProgressLog(tmp_path / "session.jsonl"))
    started: list[str] = []
    first = spec(serve_dir=tmp_path / "driver-1").document()

    def start(query_spec: Any, log: ProgressLog) -> tuple[Any, Any]:
        query = StandInQuery(query_spec.query_name, router)
        router.register(query.runId, log)
        started.append(query_spec.query_name)
        return query, None

    srv = StandInServer(StandInSpark(), first, router, start, ProgressLog,
                        current=Served(first, StandInQuery("first", router), None,
                                       ProgressLog(tmp_path / "first.jsonl")))
    router.register("run-first", ProgressLog(tmp_path / "first.jsonl"))
    return srv, router, started


def test_start_refused_while_a_query_runs_then_done_after_its_stop(tmp_path: Path) -> None:
    srv, _router, started = server(tmp_path)
    cell2 = spec(query_name="p2-sst-a1",
                 progress_file=tmp_path / "p2.jsonl").for_driver().to_json()
    refused = srv.start_query({"action": "start_query", "spec": cell2})
    assert not refused["ok"] and "still runs" in refused["error"]
    stopped = srv.stop_query({"action": "stop_query"})
    assert stopped["ok"], stopped
    assert {"stop_s", "terminated_s", "tasks_s", "close_s"} <= set(stopped)
    assert progress_lines(tmp_path / "first.jsonl")[-1]["stopped_by"] == "pgval"
    answer = srv.start_query({"action": "start_query", "spec": cell2})
    assert answer["ok"] and answer["query"] == "p2-sst-a1" and started == ["p2-sst-a1"]
    assert srv.current is not None  # the query runs in the serving driver's session
    assert srv.current.spec.serve_dir == tmp_path / "driver-1"
    assert srv.current.spec.progress_file == tmp_path / "p2.jsonl"


def test_a_jobs_query_refused_is_the_users_mistake_and_one_that_fails_gets_a_fresh_driver(
        tmp_path: Path) -> None:
    """A served driver of a user's job: the job refused when the next cell's query is built
    (JobError) is the user's mistake, as from a fresh driver; a query of the job that fails
    to start (say on a temporary view an earlier cell's query made) gets a fresh driver
    (``poisoned``); a built-in query that fails is an error as before. Another job, or no
    job, is another session."""
    from pgval.topologies.job import JobError

    router = QueryRouter(ProgressLog(tmp_path / "session.jsonl"))
    job = dict(topology="job", job="/jobs/j.py:build")
    first = spec(serve_dir=tmp_path / "driver-1", **job).document()
    failure: list[Exception] = []

    def start(query_spec: Any, log: ProgressLog) -> tuple[Any, Any]:
        raise failure[0]

    srv = StandInServer(StandInSpark(), first, router, start, ProgressLog)
    cell2 = spec(query_name="p2", progress_file=tmp_path / "p2.jsonl", **job)
    failure.append(JobError("--job /jobs/j.py:build: build has no key"))
    answer = srv.start_query({"spec": cell2.for_driver().to_json()})
    assert answer == {"ok": False, "refused": True,
                      "error": "--job /jobs/j.py:build: build has no key"}
    assert progress_lines(tmp_path / "p2.jsonl")[-1]["phase"] == "job"
    failure[0] = RuntimeError("Temporary view 'orders' already exists")
    answer = srv.start_query({"spec": cell2.for_driver().to_json()})
    assert answer["poisoned"] is True and "already exists" in answer["error"]
    for other in (spec(**{**job, "job": "/jobs/other.py:build"}), spec()):
        assert "its job differs" in str(srv.start_query(
            {"spec": other.for_driver().to_json()})["error"])
    builtin = StandInServer(StandInSpark(), spec(serve_dir=tmp_path / "d2").document(),
                            router, start, ProgressLog)
    answer = builtin.start_query({"spec": spec(query_name="p3").for_driver().to_json()})
    assert answer["poisoned"] is False and "already exists" in answer["error"]


def test_a_refused_answer_is_the_users_mistake_for_the_run() -> None:
    """The run's side of a refused job: one sentence, exit 2, as from a fresh driver."""
    from types import SimpleNamespace

    from pgval.core.errors import UserMistake
    from pgval.deploy.shared_driver import SharedQuery

    class Control:
        def request(self, req: dict[str, Any], timeout_s: float) -> dict[str, Any]:
            return {"ok": False, "refused": True, "error": "--job j.py:build: no key"}

    shared: Any = SimpleNamespace(control=Control())
    query = SharedQuery(shared, spec(topology="job", job="/j.py:build"), 2,
                        SharedDrivers(Path("/nonexistent"), "t"))
    with pytest.raises(UserMistake, match="no key"):
        query.start()


def test_a_bad_document_and_another_session_are_refused(tmp_path: Path) -> None:
    srv, _router, started = server(tmp_path)
    srv.stop_query({})
    assert "JSON object" in srv.start_query({"argv": ["--topology", "sst"]})["error"]
    bad = {**spec().to_json(), "pg": "a1", "sabotage": "drop-batch:1"}
    assert srv.start_query({"spec": bad})["error"] == (
        "the query's document was refused: sabotage is a self-test of the e1 sink and "
        "needs pg e1, not a1")
    assert "was refused" in srv.start_query({"spec": {"topology": "nope"}})["error"]
    other = spec(conf={"spark.network.timeout": "10s"}).to_json()
    assert srv.start_query({"spec": other})["error"] == (
        "this driver cannot run the query: its conf differs from the session's")
    assert started == []


def test_missing_executors_or_lingering_tasks_poison_the_driver(tmp_path: Path) -> None:
    srv, _router, started = server(tmp_path)
    srv.stop_query({})  # notes the 2 executors it had
    srv.executors = 1  # a crashed worker's executor not yet replaced
    cell2 = spec(query_name="p2-sst-a1",
                 progress_file=tmp_path / "p2.jsonl").for_driver().to_json()
    answer = srv.start_query({"spec": cell2, "ready_timeout_s": 0.3})
    assert answer["poisoned"] and "1 of 2 executors" in answer["error"]
    srv.executors, srv.tasks = 2, 1
    answer = srv.start_query({"spec": cell2, "ready_timeout_s": 0.3})
    assert answer["poisoned"] and "1 task(s) still ran" in answer["error"]
    srv.tasks = 0
    assert srv.start_query({"spec": cell2})["ok"] and started == ["p2-sst-a1"]


def test_a_replacement_that_arrives_while_waiting_lets_the_query_start(tmp_path: Path) -> None:
    srv, _router, started = server(tmp_path)
    srv.stop_query({})
    srv.executors = 1
    threading.Timer(0.3, lambda: setattr(srv, "executors", 2)).start()
    cell2 = spec(query_name="p2-sst-a1",
                 progress_file=tmp_path / "p2.jsonl").for_driver().to_json()
    answer = srv.start_query({"spec": cell2, "ready_timeout_s": 10})
    assert answer["ok"] and answer["setup_s"] >= 0.2


def test_shared_drivers_are_replaced_when_poisoned_or_another_session_is_needed(
        tmp_path: Path) -> None:
    """The hand-out rule alone (no process starts before a query's ``start``)."""
    drivers = SharedDrivers(tmp_path, "m")
    try:
        first = drivers.query(spec())
        assert first.cell == 1 and drivers.started == 1
        # A query of another session needs another driver...
        assert not first.shared.usable_for(spec(conf={"spark.network.timeout": "10s"}))
        other = drivers.query(spec(conf={"spark.network.timeout": "10s"}))
        assert other.shared is not first.shared and drivers.started == 2
        # ...so does one after a driver whose process is gone (here: never started)...
        again = drivers.query(spec(conf={"spark.network.timeout": "10s"}))
        assert again.shared is not other.shared and again.cell == 1
        # ...or was poisoned.
        again.shared.poisoned = "2 task(s) still ran"
        assert not again.shared.usable_for(spec(conf={"spark.network.timeout": "10s"}))
        drivers.query(spec(conf={"spark.network.timeout": "10s"}))
        assert drivers.started == 4
        assert drivers.replaced == ["another session was needed", "its process ended",
                                    "2 task(s) still ran"]
    finally:
        drivers.close()
    assert not list(tmp_path.rglob("state.json"))  # every driver's guard stopped


def test_a_stopped_querys_checkpoint_goes_once_no_state_store_can_touch_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pgval.deploy.shared_driver as shared

    drivers = SharedDrivers(tmp_path, "m")
    old, new = tmp_path / "run1" / "checkpoint", tmp_path / "run2" / "checkpoint"
    for path in (old, new):
        (path / "state" / "0").mkdir(parents=True)
    drivers.retire(old)
    drivers.sweep()
    assert old.exists()  # Spark's maintenance may still write a snapshot into it
    monkeypatch.setattr(shared, "RETIRE_AFTER_S", 0.0)
    drivers.retire(new)
    monkeypatch.setattr(shared, "RETIRE_AFTER_S", 3600.0)
    drivers.sweep()
    assert old.exists() and new.exists()
    drivers.close()  # no driver left: nothing can touch either
    assert not old.exists() and not new.exists()


def test_the_run_records_which_driver(tmp_path: Path) -> None:
    drivers = SharedDrivers(tmp_path, "m")
    try:
        query = drivers.query(spec())
        query.answers["stop"] = {"ok": True, "stop_s": 0.4, "tasks_s": 0.0, "runId": "r"}
        assert query.describe() == {"mode": "shared", "cell": 1,
                                    "dir": str(query.shared.root),
                                    "stop": {"ok": True, "stop_s": 0.4, "tasks_s": 0.0}}
    finally:
        drivers.close()


def test_the_wait_for_executors_is_timed_only_when_the_driver_started_the_query(
        tmp_path: Path) -> None:
    """A poisoned answer has no ``setup_s``: the run, now the first cell of a new driver,
    must not fail reading it."""
    drivers = SharedDrivers(tmp_path, "m")
    try:
        first = drivers.query(spec())
        assert first.setup_s is None  # it started the driver itself
        second = first.shared.query(spec(), drivers)  # its next cell (none started here)
        assert second.cell == 2
        second.answers["start"] = {"ok": True, "setup_s": 1.5}
        assert second.setup_s == 1.5
        second.answers["start"] = {"ok": False, "poisoned": True, "error": "1 of 2 executors"}
        assert second.setup_s is None
        second.cell = 1  # as after the replacement
        second.answers["start"] = {"ok": True, "setup_s": 1.5}
        assert second.setup_s is None
    finally:
        drivers.close()


def test_a_cells_query_reaches_the_driver_as_its_document(tmp_path: Path) -> None:
    """The second cell's start sends its document (JSON, the same mapping a fresh driver
    reads from its file) over the control channel; nothing else of the run goes along."""
    drivers = SharedDrivers(tmp_path, "m")
    asked: list[dict[str, Any]] = []

    class Channel:
        def request(self, action: dict[str, Any], timeout_s: float) -> dict[str, Any]:
            asked.append(action)
            return {"ok": True, "setup_s": 0.1}

    try:
        first = drivers.query(spec())
        first.shared.control = Channel()  # type: ignore[assignment]
        cell2 = spec(query_name="p2-sst-a1", progress_file=tmp_path / "p2.jsonl",
                     kafka_options={"sasl.password": "hunter2"})
        second = first.shared.query(cell2, drivers)
        second.start()
        (request,) = asked
        assert request == {"action": "start_query", "spec": cell2.to_json()}
        assert "hunter2" not in json.dumps(request)
        assert second.setup_s == 0.1
    finally:
        drivers.close()
