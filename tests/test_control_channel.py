"""The driver's control channel as a file protocol: pgval's DriverControl against the
driver's own ControlLoop thread and ProgressLog, no Spark.

The executor source here is a stand-in: these tests check the protocol (numbering, atomic
requests, answers, errors, expiry, executor events) and pgval's bookkeeping around it.
That Spark really kills and replaces an executor is tested on a real cluster in
tests/test_executor_kill.py.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from pgval.core.driver_spec import DriverDocument
from pgval.core.errors import PgvalError
from pgval.deploy.driver_process import DriverControl, DriverSpec, _ProgressTail
from pgval.faults.executor import MECHANISM, ExecutorKill
from pgval.topologies.control_channel import ControlLoop, choose_executor
from pgval.topologies.driver import ProgressLog


class StandInExecutors:
    """Executor ids the test sets by hand; ``kill_and_replace`` only records the call."""

    def __init__(self, ids: list[str]) -> None:
        self.current = list(ids)
        self.killed: list[str] = []
        self.acknowledge = True
        self.lock = threading.Lock()

    def ids(self) -> list[str]:
        with self.lock:
            return list(self.current)

    def hosts(self, ids: Iterable[str]) -> dict[str, str]:
        return {i: f"10.0.0.{i}:4000" for i in ids}

    def kill_and_replace(self, executor_id: str) -> bool:
        self.killed.append(executor_id)
        return self.acknowledge


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[tuple[DriverControl, ControlLoop, StandInExecutors]]:
    progress = tmp_path / "progress.jsonl"
    source = StandInExecutors(["0", "1"])
    loop = ControlLoop(tmp_path / "control", ProgressLog(progress), source).start()
    try:
        yield DriverControl(tmp_path / "control", progress, poll_s=0.02), loop, source
    finally:
        loop.stop()


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_ping_and_executors_answered(channel: tuple) -> None:
    control, _loop, _src = channel
    answer = control.request({"action": "ping"}, timeout_s=10)
    assert answer["ok"] is True and answer["event"] == "control" and answer["request"] == 1
    assert control.request({"action": "executors"}, timeout_s=10)["ids"] == ["0", "1"]
    # Requests are consumed: nothing is left to be acted on twice.
    assert list(control.control_dir.glob("req-*")) == []
    assert [a["request"] for a in control.answers()] == [1, 2]


def test_unknown_action_and_malformed_request_get_errors(channel: tuple) -> None:
    control, loop, _src = channel
    answer = control.request({"action": "reboot"}, timeout_s=10)
    assert answer["ok"] is False and "unknown action 'reboot'" in answer["error"]
    (control.control_dir / "req-77.json").write_text("{not json")
    (control.control_dir / "req-78.json").write_text('{"no": "action"}')
    deadline = time.monotonic() + 10
    while len([a for a in control.answers() if a["request"] in (77, 78)]) < 2:
        assert time.monotonic() < deadline, "the loop never answered the bad requests"
        time.sleep(0.05)
    bad = {a["request"]: a for a in control.answers() if a["request"] in (77, 78)}
    assert all(not a["ok"] and "malformed request" in a["error"] for a in bad.values())
    # The loop survived them: the next request is answered, numbered after the highest.
    nxt = control.request({"action": "ping"}, timeout_s=10)
    assert nxt["ok"] and nxt["request"] == 79
    assert loop._thread is not None and loop._thread.is_alive()


def test_expired_request_is_answered_not_done(tmp_path: Path) -> None:
    progress = tmp_path / "p.jsonl"
    source = StandInExecutors(["0", "1"])
    loop = ControlLoop(tmp_path / "c", ProgressLog(progress), source)
    req = {"action": "kill-executor", "executor": "1", "request": 3, "nonce": "x",
           "deadline_ms": time.time_ns() // 1_000_000 - 1}
    (tmp_path / "c" / "req-3.json").write_text(json.dumps(req))
    assert loop.poll_requests() == [3]
    (answer,) = [r for r in rows(progress) if r["event"] == "control"]
    assert answer["ok"] is False and "expired" in answer["error"] and answer["nonce"] == "x"
    assert source.killed == []


def test_unanswered_request_is_withdrawn_with_a_plain_error(tmp_path: Path) -> None:
    """No driver reads the directory: the asker gives up in time and takes its file back."""
    control = DriverControl(tmp_path / "c", tmp_path / "p.jsonl", poll_s=0.02)
    with pytest.raises(PgvalError, match="did not answer within 0.5 s control request 1"):
        control.request({"action": "ping"}, timeout_s=0.5)
    assert list((tmp_path / "c").iterdir()) == []
    dead = DriverControl(tmp_path / "c", tmp_path / "p.jsonl", alive=lambda: False)
    with pytest.raises(PgvalError, match="exited before answering"):
        dead.request({"action": "ping"}, timeout_s=30)


def test_two_askers_never_share_an_answer(channel: tuple) -> None:
    control, _loop, _src = channel
    other = DriverControl(control.control_dir, control.progress_file, poll_s=0.02)
    results: list[dict] = []
    threads = [threading.Thread(target=lambda c=c: results.append(
        c.request({"action": "ping"}, timeout_s=10))) for c in (control, other) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6
    assert len({(r["request"], r["nonce"]) for r in results}) == 6


def test_one_asker_shared_by_threads_sees_every_answer_once(tmp_path: Path) -> None:
    """Threads sharing one DriverControl (a fault and a watcher) read the progress file
    through one tail: every line is seen exactly once. (CI lost two answers this way.)"""
    progress = tmp_path / "p.jsonl"
    control = DriverControl(tmp_path / "c", progress)
    log = ProgressLog(progress)
    total, stop = 3000, threading.Event()

    def write() -> None:
        for i in range(total):
            log.write("control", request=i + 1, ok=True)
        stop.set()

    def read() -> None:
        while not stop.is_set():
            control.answers()
            # Readers still overlap each other and the writer, but no longer starve it of
            # the GIL on a loaded machine (spinning, the test once took 124 s instead of 0.3).
            time.sleep(0.0005)

    readers = [threading.Thread(target=read) for _ in range(6)]
    writer = threading.Thread(target=write)
    for t in (*readers, writer):
        t.start()
    for t in (*readers, writer):
        t.join()
    assert [a["request"] for a in control.answers()] == list(range(1, total + 1))


def test_executor_events_record_membership_changes(channel: tuple) -> None:
    control, _loop, source = channel

    def wait_events(n: int) -> list[dict]:
        deadline = time.monotonic() + 10
        while len(control.executor_events()) < n:
            assert time.monotonic() < deadline, "no executors event"
            time.sleep(0.05)
        return control.executor_events()

    first = wait_events(1)[0]
    assert first["ids"] == ["0", "1"] and first["added"] == ["0", "1"] and first["removed"] == []
    assert first["hosts"] == {"0": "10.0.0.0:4000", "1": "10.0.0.1:4000"}
    with source.lock:
        source.current = ["0", "2", "10"]
    second = wait_events(2)[1]
    assert second["ids"] == ["0", "2", "10"]  # numeric order
    assert second["added"] == ["2", "10"] and second["removed"] == ["1"]
    assert second["ts"] >= first["ts"]
    time.sleep(1.2)  # unchanged membership writes nothing
    assert len(control.executor_events()) == 2


def test_kill_request_answers(channel: tuple) -> None:
    control, _loop, source = channel
    unknown = control.request({"action": "kill-executor", "executor": "9"}, timeout_s=10)
    assert not unknown["ok"] and "executor 9 is not registered" in unknown["error"]
    assert source.killed == []
    chosen = control.request({"action": "kill-executor", "executor": None, "seed": 7},
                             timeout_s=10)
    assert chosen["ok"] and chosen["mechanism"] == MECHANISM
    assert chosen["executor"] == choose_executor(["1", "0"], 7) == source.killed[0]
    assert chosen["executors_before"] == ["0", "1"]
    assert chosen["host"] == f"10.0.0.{chosen['executor']}:4000"
    indexed = control.request({"action": "kill-executor", "executor": None, "index": 1},
                              timeout_s=10)
    assert indexed["ok"] and indexed["executor"] == "1" == source.killed[1]
    beyond = control.request({"action": "kill-executor", "executor": None, "index": 5},
                             timeout_s=10)
    assert not beyond["ok"] and "out of range" in beyond["error"] and len(source.killed) == 2
    source.acknowledge = False
    refused = control.request({"action": "kill-executor", "executor": "0"}, timeout_s=10)
    assert not refused["ok"] and "did not acknowledge" in refused["error"]


def test_choose_executor_is_deterministic() -> None:
    ids = [str(i) for i in range(12)]
    assert {choose_executor(ids, 3) for _ in range(5)} == {choose_executor(ids[::-1], 3)}
    assert len({choose_executor(ids, s) for s in range(50)}) > 1
    with pytest.raises(ValueError, match="no executor"):
        choose_executor([], 0)


def test_choose_executor_by_index_is_the_sorted_position() -> None:
    ids = ["10", "2", "0"]
    assert [choose_executor(ids, 5, k) for k in range(3)] == ["0", "2", "10"]
    with pytest.raises(ValueError, match="index 3 is out of range: 3 executor"):
        choose_executor(ids, 0, 3)


def test_local_driver_has_no_executor_source(tmp_path: Path) -> None:
    progress = tmp_path / "p.jsonl"
    loop = ControlLoop(tmp_path / "c", ProgressLog(progress), None)
    (tmp_path / "c" / "req-1.json").write_text('{"action": "kill-executor", "executor": null}')
    loop.step()
    (answer,) = rows(progress)
    assert not answer["ok"] and "no executor source" in answer["error"]


def test_failing_executor_source_is_reported_once_and_the_loop_goes_on(tmp_path: Path) -> None:
    class Broken(StandInExecutors):
        def ids(self) -> list[str]:
            raise RuntimeError("py4j: connection refused\nmore")

    progress = tmp_path / "p.jsonl"
    clock = iter(range(0, 100_000, 1000))
    loop = ControlLoop(tmp_path / "c", ProgressLog(progress), Broken([]),
                       clock_ms=lambda: next(clock))
    for _ in range(3):
        loop.step()
    (tmp_path / "c" / "req-1.json").write_text('{"action": "ping"}')
    loop.step()
    events = [(r["event"], r.get("error")) for r in rows(progress)]
    assert events == [("control_error", "py4j: connection refused"), ("control", None)]


def test_progress_tail_waits_for_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    tail = _ProgressTail(path)
    assert tail.read_new() == []
    path.write_text('{"event": "a"}\n{"event": "b"')
    assert tail.read_new() == [{"event": "a"}]
    with open(path, "a") as fh:
        fh.write('}\ngarbage\n{"event": "c"}\n')
    assert tail.read_new() == [{"event": "b"}, {"event": "c"}]
    assert tail.read_new() == []


def test_driver_spec_passes_control_dir(tmp_path: Path) -> None:
    spec = DriverSpec(topology="sst", pg="a1", bootstrap="h:1", master="spark://h:7077",
                      checkpoint=Path("/tmp/ck"), progress_file=Path("/tmp/p.jsonl"),
                      window_ms=2000, watermark_ms=1000, trigger_ms=500,
                      shuffle_partitions=3)
    assert DriverDocument.read(spec.write(tmp_path / "a.json")).control_dir is None
    spec = dataclasses.replace(spec, control_dir=Path("/tmp/run/control"))
    assert DriverDocument.read(spec.write(tmp_path / "b.json")).control_dir == Path(
        "/tmp/run/control")
    spec = dataclasses.replace(spec, path_map=lambda p: "/in-container" + str(p))
    assert DriverDocument.read(spec.write(tmp_path / "c.json")).control_dir == Path(
        "/in-container/tmp/run/control")


# ---- pgval's bookkeeping around a kill (Spark's side: tests/test_executor_kill.py) ---------


def test_executor_kill_records_a_missing_replacement_as_an_error(channel: tuple) -> None:
    """The stand-in acknowledges the kill but nothing changes: the fault must say the
    executor never left and no replacement came, within its bounds, not wait forever."""
    control, _loop, _source = channel
    fault = ExecutorKill(control, executor="1", gone_timeout_s=1.0, replace_timeout_s=1.0,
                         poll_s=0.05)
    t0 = time.monotonic()
    inj = fault.inject()
    assert inj["executor"] == "1" and inj["removed_after_s"] is None
    assert inj["mechanism"] == MECHANISM and inj["executors_before"] == ["0", "1"]
    rem = fault.remove(restore=True)
    assert time.monotonic() - t0 < 10
    assert rem["replacement"] is None and "no replacement for executor 1" in rem["error"]
    assert fault.remove() == {}  # twice is safe


def test_a_replacement_registered_before_the_kill_left_is_found(channel: tuple) -> None:
    """Under load Spark listed the replacement before it dropped the killed executor (CI):
    the replacement still counts from when it appeared, the list after is without the
    killed one."""
    control, _loop, source = channel
    fault = ExecutorKill(control, executor="0", gone_timeout_s=10.0, replace_timeout_s=10.0,
                         poll_s=0.05)

    def cluster_manager() -> None:
        time.sleep(0.6)
        with source.lock:
            source.current = ["0", "1", "2"]  # the replacement first …
        time.sleep(1.2)
        with source.lock:
            source.current = ["1", "2"]  # … then the killed one leaves

    thread = threading.Thread(target=cluster_manager)
    thread.start()
    inj = fault.inject()
    thread.join()
    rem = fault.remove(restore=True)
    assert "error" not in rem and rem["replacement"] == "2"
    assert rem["executors_after"] == ["1", "2"]
    assert 0 < rem["replaced_after_s"] < inj["removed_after_s"]


def test_executor_kill_refused_is_a_plain_error(channel: tuple) -> None:
    control, _loop, source = channel
    source.acknowledge = False
    with pytest.raises(PgvalError, match="did not kill an executor: Spark did not ack"):
        ExecutorKill(control, executor="0").inject()
    assert ExecutorKill(control).remove() == {}
