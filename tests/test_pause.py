"""The pauses without Spark: a real process group stopped and resumed by the fault's own
code, the rule that judges its log, and the settings that are refused. On the real
cluster: tests/test_faults_cluster.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pgval.config import resolve
from pgval.core.errors import PgvalError
from pgval.core.schema import Fault
from pgval.core.spec import ClusterSpec, RunSpec
from pgval.faults.pause import PAUSE_WHERE, SIGSTOP, ProcessPause, group_members, process_state
from pgval.faults.timeouts import profile_for
from pgval.faults.took_effect import fault_reasons


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    """A process group of two: a shell leader and its child, both sleeping."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        subprocess.run(["pkill", "-KILL", "-g", str(proc.pid)], check=False)
        proc.wait()


def test_a_pause_stops_every_process_and_the_removal_resumes_them(
        group: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + 5
    while len(group_members(group.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    members = group_members(group.pid)
    assert len(members) == 2 and group.pid in members
    pause = ProcessPause(Fault.PAUSE_LT_TIMEOUT, "driver", lambda: group_members(group.pid))
    inject = pause.inject()
    assert inject["stopped"] == members and set(inject["states"].values()) == {"T"}
    assert pause.problem() is None
    remove = pause.remove()
    assert remove["resumed"] == members and remove["still_stopped"] == []
    assert all(process_state(p) == "S" for p in members)
    assert pause.remove() == {"skipped": "nothing was paused"}  # safe twice
    # What a re-check reads: stopped, resumed, and (no executor lost) below the time-outs.
    entries = [{"step": "inject", **inject}, {"step": "remove", **remove},
               {"step": "timeouts", "fired": {}}]
    assert fault_reasons("pause-lt-timeout", entries) == []


def test_a_process_that_ends_on_resume_is_counted_so_even_before_it_is_reaped() -> None:
    """A SIGTERM sent while a process is stopped acts on the SIGCONT: the process ends, and
    until its parent reaps it (here: this test, later) it is a zombie. Every paused process
    has exactly one fate in the removal's record."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        pause = ProcessPause(Fault.PAUSE_GT_TIMEOUT, "an executor", lambda: [proc.pid])
        assert pause.inject()["stopped"] == [proc.pid]
        proc.terminate()  # pending until the SIGCONT
        remove = pause.remove()
        assert remove["states"] == {str(proc.pid): "Z"}
        fates = [remove[k] for k in ("killed_while_stopped", "ended_on_resume",
                                     "running_after_resume", "still_stopped")]
        assert fates == [[], [proc.pid], [], []]
    finally:
        proc.kill()
        proc.wait()


def test_nothing_to_pause_is_an_error_in_the_log() -> None:
    entry = ProcessPause(Fault.PAUSE_GT_TIMEOUT, "spark-worker-1's executors", list).inject()
    assert entry["error"] == "spark-worker-1's executors had no process to pause at T2"


def reasons(fault: str, inject: dict[str, Any], remove: dict[str, Any],
            fired: dict[str, int]) -> list[str]:
    entries = [{"step": "inject", "mechanism": SIGSTOP, "fault": fault, **inject},
               {"step": "remove", **remove}, {"step": "timeouts", "fired": fired}]
    return [r.text for r in fault_reasons(fault, entries)]


def test_the_rule_wants_stopped_resumed_and_the_time_outs_its_name_says() -> None:
    ok = {"pids": [1, 2], "stopped": [1, 2]}
    lost = {"executor lost (driver)": 1}
    assert reasons("pause-gt-timeout", ok, {}, lost) == []
    assert reasons("pause-gt-timeout", ok, {}, {}) == [
        "pause-gt-timeout: the driver reported no executor lost: the pause did not act as "
        "one above the time-outs"]
    assert reasons("pause-lt-timeout", ok, {}, lost) == [
        "pause-lt-timeout: the driver reported an executor lost (1×): the pause behaved as "
        "one above the time-out"]
    assert reasons("pause-lt-timeout", {"pids": [1, 2], "stopped": [1]}, {"still_stopped": [1]},
                   {}) == ["pause-lt-timeout: not every process was stopped: [2]",
                           "pause-lt-timeout: processes still stopped after SIGCONT: [1]"]


def test_pause_gt_lowers_the_time_outs_as_delay_gt_does() -> None:
    assert profile_for("pause-gt-timeout", 40).daemon_conf == \
        profile_for("delay-gt-timeout", 40).daemon_conf
    assert profile_for("pause-lt-timeout", 40).daemon_conf == {}


@pytest.mark.parametrize(("kw", "sentence"), [
    ({"fault": "pause-lt-timeout", "phase_seconds": 100}, "--fault pause-lt-timeout pauses "
                                                          "for the failure phase"),
    ({"fault": "pause-gt-timeout", "running_cluster": "/x"}, PAUSE_WHERE),
    ({"fault": "crash", "target": "driver"}, "--target driver: a worker index"),
    ({"fault": "pause-gt-timeout", "target": "coordinator"}, "--target coordinator: a worker"),
])
def test_a_pause_that_cannot_run_is_one_sentence(kw: dict[str, Any], sentence: str) -> None:
    with pytest.raises(PgvalError) as err:
        resolve(RunSpec(cluster=ClusterSpec(brokers=1), **kw))
    assert str(err.value).startswith(sentence), str(err.value)
    resolve(RunSpec(fault="pause-gt-timeout", target="driver"))
    resolve(RunSpec(fault="pause-lt-timeout", target=1))
    assert sys.platform.startswith("linux")  # /proc is where states are read
