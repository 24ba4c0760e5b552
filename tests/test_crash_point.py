"""The crash point after-sink-write, pgval's side: the conversation with the driver's commit
hook (a thread plays the hook here; tests/test_topologies.py runs the real one in Spark),
and the options that may ask for it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from pgval.config import resolve
from pgval.core.errors import PgvalError
from pgval.faults.process import DriverCrash


class FakeDriver:
    """The driver's process: alive until the hook halts it or pgval kills it."""

    def __init__(self) -> None:
        self.dead = threading.Event()
        self.kills = 0
        self.starts = 0

    def pid(self) -> int:
        return 4242

    def alive(self) -> bool:
        return not self.dead.is_set()

    def kill(self) -> None:
        self.kills += 1
        self.dead.set()

    def start(self) -> float:
        self.starts += 1
        self.dead.clear()
        return 0.0


def _ask(trigger: Path, stage: str, batch: int, path: Path) -> str:
    """What CrashBeforeCommit.ask does: say (stage, batch), wait for the matching answer."""
    at = trigger.with_name(trigger.name + ".at")
    answer = trigger.with_name(trigger.name + ".answer")
    at.write_text(json.dumps({"stage": stage, "batch": batch, "file": f"file:{path}"}))
    while trigger.exists():
        if answer.exists():
            line = answer.read_text().strip()
            answer.unlink()
            if line.startswith(f"{stage} {batch} "):
                at.unlink()
                return line.rsplit(" ", 1)[1]
        time.sleep(0.002)
    return "go"


def _query(trigger: Path, checkpoint: Path, outputs: dict[int, int], driver: FakeDriver,
           verdicts: list[tuple[int, str]], topic: list[int]) -> None:
    """A query whose batch N appends outputs[N] records to the output topic between its
    offsets and its commit, with the hook in the way once armed."""
    while not trigger.exists():
        time.sleep(0.002)
    for batch, n in outputs.items():
        offsets = checkpoint / "offsets" / str(batch)
        offsets.parent.mkdir(parents=True, exist_ok=True)
        _ask(trigger, "planned", batch, offsets)
        offsets.write_text("{}")
        topic[0] += n  # the sink writes
        commit = checkpoint / "commits" / str(batch)
        verdict = _ask(trigger, "commit", batch, commit)
        verdicts.append((batch, verdict))
        if verdict == "halt":
            trigger.with_name(trigger.name + ".hit").write_text(json.dumps({"batch": batch}))
            driver.dead.set()
            return
        commit.parent.mkdir(exist_ok=True)
        commit.write_text("{}")


def test_batches_without_outputs_commit_and_the_first_with_outputs_is_hit(
        tmp_path: Path) -> None:
    trigger = tmp_path / "control" / "crash-before-commit"
    trigger.parent.mkdir()
    checkpoint = tmp_path / "checkpoint"
    driver = FakeDriver()
    topic = [40]  # records in the output topic before T2
    verdicts: list[tuple[int, str]] = []
    query = threading.Thread(target=_query, args=(
        trigger, checkpoint, {5: 0, 6: 0, 7: 3, 8: 2}, driver, verdicts, topic))
    query.start()
    fault = DriverCrash(driver, trigger=trigger, output_count=lambda: topic[0],
                        reach_timeout_s=10.0)
    entry = fault.inject()
    query.join(timeout=10)
    assert verdicts == [(5, "go"), (6, "go"), (7, "halt")]
    assert entry["batch"] == 7 and entry["outputs_written"] == 3
    assert entry["batches_passed"] == [{"batch": 5, "outputs": 0}, {"batch": 6, "outputs": 0}]
    assert entry["offsets_logged"] and not entry["commit_logged"] and "error" not in entry
    assert not list(trigger.parent.iterdir())  # disarmed: no trigger, no answer left
    assert driver.kills == 1
    assert fault.remove()["target"] == "driver" and driver.starts == 1


def test_a_halt_the_driver_does_not_confirm_is_an_error(tmp_path: Path) -> None:
    """The hook answered for batch 7 but never recorded a hit (it timed out, say)."""
    trigger = tmp_path / "crash-before-commit"
    checkpoint = tmp_path / "checkpoint"
    driver = FakeDriver()
    topic = [0]

    def query() -> None:
        while not trigger.exists():
            time.sleep(0.002)
        offsets = checkpoint / "offsets" / "7"
        offsets.parent.mkdir(parents=True)
        _ask(trigger, "planned", 7, offsets)
        offsets.write_text("{}")
        topic[0] += 1
        _ask(trigger, "commit", 7, checkpoint / "commits" / "7")  # halts, but no .hit

    thread = threading.Thread(target=query)
    thread.start()
    entry = DriverCrash(driver, trigger=trigger, output_count=lambda: topic[0],
                        reach_timeout_s=5.0).inject()
    thread.join(timeout=10)
    assert entry["batch"] == 7 and "did not confirm" in entry["error"]


def test_a_crash_point_never_reached_is_an_error_in_the_fault_log(tmp_path: Path) -> None:
    trigger = tmp_path / "crash-before-commit"
    driver = FakeDriver()
    entry = DriverCrash(driver, trigger=trigger, output_count=lambda: 1,
                        reach_timeout_s=0.3).inject()
    assert "was not reached" in entry["error"] and "batch" not in entry
    assert driver.kills == 1 and not trigger.exists()  # killed anyway: the run goes on


def test_timed_is_a_plain_kill() -> None:
    driver = FakeDriver()
    entry = DriverCrash(driver).inject()
    assert entry["crash_point"] == "timed" and driver.kills == 1
    assert "in_flight_batch" not in entry  # no checkpoint given: nothing claimed


def test_a_timed_driver_crash_notes_the_batch_it_caught_in_flight(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoint"
    for n in (0, 1):
        _batch(ck, n, committed=True)
    entry = DriverCrash(FakeDriver(), checkpoint=ck).inject()
    assert entry["in_flight_batch"] is None  # between batches
    _batch(ck, 2, committed=False)
    entry = DriverCrash(FakeDriver(), checkpoint=ck).inject()
    assert entry["in_flight_batch"] == 2 and entry["crash_point"] == "timed"
    elsewhere = DriverCrash(FakeDriver(), checkpoint=tmp_path / "not-here").inject()
    assert "in_flight_batch" not in elsewhere  # a checkpoint not on this machine: unknown


@pytest.mark.parametrize(("changes", "needle"), [
    ({"fault": "crash", "crash_point": "after-sink-write"}, "applies to --fault driver-crash"),
    ({"fault": "driver-crash", "crash_point": "after-sink-write", "deploy": "compose"},
     "need the driver on this machine"),
    ({"fault": "driver-crash", "crash_point": "sometime"}, "unknown crash point"),
    ({"fault": "driver-crash", "crash_point": "during-sink-write"},
     "applies to --fault crash on the embedded cluster"),
    ({"fault": "crash", "crash_point": "during-sink-write", "pg": "e1"},
     "cannot be hit for e1"),
    ({"fault": "crash", "crash_point": "during-sink-write", "deploy": "external",
      "bootstrap": "b:1", "master": "spark://m:7077"}, "on the embedded cluster"),
    ({"fault": "crash", "crash_point": "during-sink-write", "target": 0},
     "--target does not apply"),
])
def test_crash_points_are_refused_where_they_cannot_work(changes: dict, needle: str) -> None:
    with pytest.raises(PgvalError, match=needle):
        resolve({"topology": "sst", **changes})


class FakeWorker:
    def __init__(self, name: str = "spark-worker-0", pid: int = 77, executor: int = 78) -> None:
        self.name, self.pid, self.executor = name, pid, executor
        self.killed_at: float | None = None

    def executor_pids(self) -> list[int]:
        return [self.executor]

    def kill(self) -> None:
        self.killed_at = time.monotonic()

    def group_pids(self) -> list[int]:
        return []

    def restart(self) -> None:
        self.killed_at = None


def _batch(checkpoint: Path, n: int, committed: bool) -> None:
    for d in ("offsets", *(("commits",) if committed else ())):
        (checkpoint / d).mkdir(parents=True, exist_ok=True)
        (checkpoint / d / str(n)).write_text("{}")


def test_the_open_batch_is_the_newest_planned_and_uncommitted(tmp_path: Path) -> None:
    from pgval.faults.process import open_batch

    ck = tmp_path / "checkpoint"
    assert open_batch(ck) is None
    for n in (0, 1):
        _batch(ck, n, committed=True)
    assert open_batch(ck) is None  # everything planned is committed
    _batch(ck, 2, committed=False)
    assert open_batch(ck) == (ck, 2)
    m1 = tmp_path / "m1"  # m1: a checkpoint per driver start; the newest one counts
    _batch(m1 / "m1-start-1", 9, committed=False)
    time.sleep(0.02)
    _batch(m1 / "m1-start-2", 0, committed=True)
    assert open_batch(m1) is None


def _executor_halts_on_write(trigger: Path, worker_pid: int, after_s: float = 0.0,
                             batch: int | None = 1, record_after_s: float = 0.0
                             ) -> threading.Thread:
    """What HaltOnSinkWrite does in the executor: once armed, claim, record, halt."""
    def run() -> None:
        time.sleep(after_s)
        while not trigger.exists():
            time.sleep(0.002)
        trigger.with_name(trigger.name + ".claim").touch(exist_ok=False)
        time.sleep(record_after_s)
        trigger.with_name(trigger.name + ".hit").write_text(json.dumps(
            {"pid": 4711, "parent_pid": worker_pid, "executor": "1", "batch": batch,
             "task": {"stage": 7, "partition": 2, "attempt": 0}, "topic": "out",
             "partition": 0, "offset": 41, "ts_ms": int(time.time() * 1000)}))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_worker_whose_executor_wrote_dies_not_the_seeded_target(tmp_path: Path) -> None:
    from pgval.faults.process import WorkerCrash

    ck = tmp_path / "checkpoint"
    _batch(ck, 0, committed=True)
    _batch(ck, 1, committed=False)
    trigger = tmp_path / "control" / "halt-on-sink-write"
    trigger.parent.mkdir()
    seeded, writer = FakeWorker(), FakeWorker(name="spark-worker-1", pid=88, executor=89)
    thread = _executor_halts_on_write(trigger, worker_pid=88, after_s=0.1)
    crash = WorkerCrash(seeded, checkpoint=ck, sink_trigger=trigger, workers=[seeded, writer],
                        reach_timeout_s=10.0)
    entry = crash.inject()
    thread.join(timeout=10)
    assert writer.killed_at is not None and seeded.killed_at is None
    assert entry["crash_point"] == "during-sink-write" and entry["batch"] == 1
    assert entry["target"] == "spark-worker-1" and entry["executor_id"] == "1"
    assert entry["record"] == "out-0@41" and entry["halted_pid"] == 4711
    assert entry["task"] == {"stage": 7, "partition": 2, "attempt": 0}
    assert entry["commit_logged"] is False and "error" not in entry
    assert not trigger.exists()  # disarmed; the claim stays until the next arm
    crash.remove()
    assert writer.killed_at is None  # T3 restarts the worker that died


def test_a_claim_made_just_before_disarming_is_waited_for(tmp_path: Path) -> None:
    """The executor claimed while armed and records its hit after the time-out: pgval
    waits for it and kills its worker, rather than a worker that did not halt."""
    from pgval.faults.process import WorkerCrash

    trigger = tmp_path / "halt-on-sink-write"
    seeded, writer = FakeWorker(), FakeWorker(name="spark-worker-1", pid=88, executor=89)
    thread = _executor_halts_on_write(trigger, worker_pid=88, record_after_s=0.6)
    entry = WorkerCrash(seeded, checkpoint=tmp_path / "checkpoint", sink_trigger=trigger,
                        workers=[seeded, writer], reach_timeout_s=0.3).inject()
    thread.join(timeout=10)
    assert "error" not in entry and entry["target"] == "spark-worker-1"
    assert seeded.killed_at is None and writer.killed_at is not None


def test_a_hit_without_its_batch_is_an_error(tmp_path: Path) -> None:
    from pgval.faults.process import WorkerCrash

    trigger = tmp_path / "halt-on-sink-write"
    worker = FakeWorker()
    thread = _executor_halts_on_write(trigger, worker_pid=77, batch=None)
    entry = WorkerCrash(worker, checkpoint=tmp_path / "checkpoint", sink_trigger=trigger,
                        reach_timeout_s=5.0).inject()
    thread.join(timeout=10)
    assert "could not name the micro-batch" in entry["error"] and worker.killed_at is not None


def test_a_timed_worker_crash_notes_the_batch_in_flight_without_waiting(tmp_path: Path) -> None:
    from pgval.faults.process import WorkerCrash

    ck = tmp_path / "checkpoint"
    _batch(ck, 0, committed=True)
    _batch(ck, 1, committed=False)
    worker = FakeWorker()
    entry = WorkerCrash(worker, checkpoint=ck).inject()
    assert entry["crash_point"] == "timed" and entry["in_flight_batch"] == 1
    assert worker.killed_at is not None and "batch" not in entry and "error" not in entry


def test_a_sink_write_never_seen_is_an_error_and_the_worker_still_dies(tmp_path: Path) -> None:
    from pgval.faults.process import WorkerCrash

    worker = FakeWorker()
    trigger = tmp_path / "halt-on-sink-write"
    entry = WorkerCrash(worker, checkpoint=tmp_path / "checkpoint", sink_trigger=trigger,
                        reach_timeout_s=0.3).inject()
    assert "was not reached" in entry["error"] and worker.killed_at is not None
    assert not trigger.exists()


def test_a_halt_by_an_unknown_executor_is_an_error(tmp_path: Path) -> None:
    from pgval.faults.process import WorkerCrash

    _batch(tmp_path / "checkpoint", 3, committed=False)
    trigger = tmp_path / "halt-on-sink-write"
    worker = FakeWorker()
    thread = _executor_halts_on_write(trigger, worker_pid=12345, batch=3)
    entry = WorkerCrash(worker, checkpoint=tmp_path / "checkpoint", sink_trigger=trigger,
                        reach_timeout_s=5.0).inject()
    thread.join(timeout=10)
    assert "belongs to no worker" in entry["error"] and worker.killed_at is not None


def test_a_crash_point_waits_half_the_phase_or_two_windows() -> None:
    """A windowed job writes once a window: the wait for a batch with outputs covers two
    windows where half the phase is shorter, and never more than 0.8 of the failure phase
    (the crash stays in it) or a minute."""
    from pgval.deploy.base import FaultContext

    def wait(phase_s: float, window_s: float) -> float:
        return FaultContext(Path("/nonexistent"), phase_s, driver=object(),  # type: ignore[arg-type]
                            window_seconds=window_s).reach_timeout_s

    assert wait(20, 10) == 16.0  # was 10 s: once no batch with outputs came in it
    assert wait(30, 10) == 20.0
    assert wait(10, 10) == 8.0
    assert wait(40, 2) == 20.0
    assert wait(300, 60) == 60.0
    assert wait(2, 0) == 2.0


class WritingDriver(FakeDriver):
    """A driver whose foreachBatch writes the test plays in its progress: each ``(begins
    after s, batch, lasts ms)`` logs its start then, and its end when it lasted (a write
    still running when pgval kills the driver never ends)."""

    def __init__(self, writes: list[tuple[float, int, float]], median_ms: float) -> None:
        super().__init__()
        self.t0 = time.time()
        self.writes = writes
        self.done = [{"event": "sink_write", "batchId": i, "rows": 5, "ms": median_ms,
                      "wall_ms": 0} for i in range(3)]

    def progress(self) -> list[dict]:
        now = time.time()
        lines = list(self.done)
        for after, batch, ms in self.writes:
            begin = self.t0 + after
            if now >= begin:
                lines.append({"event": "sink_write_start", "batchId": batch, "rows": 5,
                              "wall_ms": int(begin * 1000)})
            if now >= begin + ms / 1000 and not self.dead.is_set():
                lines.append({"event": "sink_write", "batchId": batch, "rows": 5,
                              "wall_ms": int((begin + ms / 1000) * 1000)})
        return lines


def test_a_write_that_ended_before_the_aim_is_passed_over_for_the_next() -> None:
    """On a busy machine pgval may see a write's start late: a write that already ended
    when the kill would land is never killed after (that would be a crash after the write,
    logged as a miss), the next write is aimed at instead."""
    from pgval.faults.process import SinkWriteCrash

    # Writes of 40 ms (median): the aim is 20 ms into one. Batch 3 lasts 5 ms, batch 4 runs on.
    driver = WritingDriver([(0.05, 3, 5.0), (0.3, 4, 10_000.0)], median_ms=40.0)
    entry = SinkWriteCrash(driver, reach_timeout_s=5).inject()
    assert driver.kills == 1
    assert entry["passed_over"] == [3] and entry["batch"] == 4
    assert entry["write_finished"] is False and "error" not in entry


def test_no_write_still_running_at_the_aim_is_an_error_and_the_driver_still_dies() -> None:
    from pgval.faults.process import SinkWriteCrash

    driver = WritingDriver([(0.05, 3, 1.0), (0.1, 4, 1.0)], median_ms=40.0)
    entry = SinkWriteCrash(driver, reach_timeout_s=0.5).inject()
    assert driver.kills == 1 and entry["passed_over"] == [3, 4]
    assert "was not reached" in entry["error"]


def test_a_write_running_when_armed_is_hit_and_one_that_ended_before_is_not() -> None:
    """A sink slower than its input writes for longer than the time-out allows a new
    write to begin: the write still running when pgval arms is aimed at (its wait is
    over, the kill lands at once); one that began and ended before arming never is."""
    from pgval.faults.process import SinkWriteCrash

    # Batch 3 began 0.3 s before arming and ended; batch 4 began 0.2 s before and runs on.
    driver = WritingDriver([(-0.3, 3, 50.0), (-0.2, 4, 10_000.0)], median_ms=40.0)
    entry = SinkWriteCrash(driver, reach_timeout_s=0.5).inject()
    assert driver.kills == 1 and "error" not in entry, entry
    assert entry["batch"] == 4 and entry["passed_over"] == []
    assert entry["effective_ms"] - entry["armed_ms"] < 300, entry


class LongRunDriver(WritingDriver):
    """A driver whose progress already holds ``past`` ended writes (and, if told, an
    earlier process's start that never ended, before this process's ``started`` line);
    it counts how often pgval reads the progress."""

    def __init__(self, writes: list[tuple[float, int, float]], past: int,
                 dead_start: bool = False) -> None:
        super().__init__(writes, median_ms=40.0)
        wall = int(self.t0 * 1000) - 10 * past - 1000
        self.done = [line for i in range(past) for line in (
            {"event": "sink_write_start", "batchId": i, "rows": 5, "wall_ms": wall + 10 * i},
            {"event": "sink_write", "batchId": i, "rows": 5, "ms": 40.0,
             "wall_ms": wall + 10 * i + 5})]
        if dead_start:  # the last process died in a write; this one started after it
            self.done += [{"event": "sink_write_start", "batchId": past, "rows": 5,
                           "wall_ms": wall + 10 * past},
                          {"event": "started", "wall_ms": wall + 10 * past + 5}]
        self.reads = 0

    def progress(self) -> list[dict]:
        self.reads += 1
        return super().progress()


def test_a_long_runs_progress_is_read_once_a_poll() -> None:
    """A run hundreds of batches long: the progress is read once a poll (not once for each
    earlier write), so a short write after arming is seen while it runs and hit."""
    from pgval.faults.process import SinkWriteCrash

    driver = LongRunDriver([(0.1, 400, 10_000.0)], past=400)
    crash = SinkWriteCrash(driver, reach_timeout_s=2.0)
    entry = crash.inject()
    assert entry["batch"] == 400 and "error" not in entry, entry
    polls = (entry["effective_ms"] - entry["armed_ms"]) / (1000 * crash.poll_s) + 1
    assert driver.reads <= 2 * polls + 4, (driver.reads, polls)


def test_a_start_an_earlier_driver_never_ended_is_no_write_under_way() -> None:
    """The driver process before this one died in a write (its start has no end line):
    that is not a write running now; the next write of this process is aimed at."""
    from pgval.faults.process import SinkWriteCrash

    driver = LongRunDriver([(0.2, 7, 10_000.0)], past=5, dead_start=True)
    entry = SinkWriteCrash(driver, reach_timeout_s=2.0).inject()
    assert entry["batch"] == 7 and entry["passed_over"] == [], entry
