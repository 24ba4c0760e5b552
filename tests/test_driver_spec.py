"""The driver's document (pgval.core.driver_spec): one mapping both ways, checked once when made,
written as a private file that holds no secret, and the driver program's only input."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pgval.core.driver_spec import DriverDocument
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.deploy.driver_process import SPEC_FILE, DriverProcess, DriverSpec
from pgval.host.procs import spawn

SECRET = "hunter2-MARKER-d41b"


def spec(**kw: Any) -> DriverSpec:
    base: dict[str, Any] = dict(
        topology="mst", pg="e1", bootstrap="h:1", master="spark://m:7077",
        checkpoint=Path("/runs/r1/checkpoint"), progress_file=Path("/runs/r1/progress.jsonl"),
        window_ms=2000, watermark_ms=1000, trigger_ms=500, shuffle_partitions=3)
    return DriverSpec(**{**base, **kw})


def test_the_document_round_trips_through_json() -> None:
    doc = spec(sabotage="dup-batch:2", topic_prefix="pgval-ab-", driver_host="10.0.0.1",
               conf={"spark.network.timeout": "10s"}, control_dir=Path("/runs/r1/control"),
               crash_trigger=Path("/runs/r1/trigger"), class_sharing=True,
               executor_java_flags="-Xshare:auto", max_offsets_per_trigger=500,
               serve_dir=Path("/runs/m/driver-1")).document()
    text = json.dumps(doc.to_json())
    back = DriverDocument.from_json(json.loads(text))
    assert back == doc and type(back) is DriverDocument
    assert json.loads(text)["checkpoint"] == "/runs/r1/checkpoint"  # paths as strings
    assert back.checkpoint == Path("/runs/r1/checkpoint")
    assert back.topics.get == "pgval-ab-get" and back.output == "pgval-ab-output"
    assert dataclasses.replace(back, output_topic="elsewhere").output == "elsewhere"


def test_launch_settings_and_secrets_stay_out_of_the_document() -> None:
    full = spec(kafka_options={"sasl.password": SECRET}, user_conf={"spark.x": SECRET},
                extra_env={"PGVAL_SPARK_SECRET_FILE": "/runs/r1/spark/auth-secret"},
                launcher=["docker", "exec", "runner"], python="python")
    mapping = full.to_json()
    assert set(mapping) == {f.name for f in dataclasses.fields(DriverDocument)}
    assert SECRET not in json.dumps(mapping)
    assert SECRET in full.env()["PGVAL_KAFKA_OPTIONS"] and SECRET in full.env()["PGVAL_SPARK_CONF"]
    argv = full.argv(Path("/runs/r1") / SPEC_FILE)
    assert argv == ["docker", "exec", "runner", "python", "-m", "pgval.topologies.driver",
                    "--spec", f"/runs/r1/{SPEC_FILE}"]


@pytest.mark.parametrize(("change", "said"), [
    (dict(pg="a1", sabotage="drop-batch:1"), "sabotage is a self-test of the e1 sink and "
                                             "needs pg e1, not a1"),
    (dict(topology="job"), "topology job"),
    (dict(pg="a1", job="/j.py:build"), "topology job"),
    (dict(topology="job", pg="a1", job="/j.py:build", sink="files"), "sink 'files' needs"),
    (dict(topology="job", pg="e1", job="/j.py:build", sink="files", sink_dir=Path("/s")),
     "pg a1"),
    (dict(topic_prefix="pgval"), "must end in '-'"),
    (dict(window_ms="2000"), "window_ms must be an integer"),
    (dict(class_sharing=1), "class_sharing must be true or false"),
    (dict(conf={"spark.x": 1}), "conf must be an object of strings"),
    (dict(topology="nope"), "unknown topology 'nope'"),
])
def test_a_bad_document_is_refused_when_made_in_one_sentence(change: dict[str, Any],
                                                             said: str) -> None:
    with pytest.raises(UserMistake, match=said) as caught:
        spec(**change)
    message = str(caught.value)
    assert "\n" not in message and message.count(". ") == 0


def test_the_driver_side_refuses_the_same_document(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A document pgval would not make (edited by hand) is refused by the driver program
    with the same sentence, before any Spark starts; unknown and missing keys too."""
    from pgval.topologies.driver import main

    good = spec().to_json()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**good, "pg": "a1", "sabotage": "drop-batch:1"}))
    assert main(["--spec", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("pgval-driver: error: sabotage is a self-test of the e1 sink and needs "
                   "pg e1, not a1")
    with pytest.raises(UserMistake, match="has no field argv"):
        DriverDocument.from_json({**good, "argv": []})
    with pytest.raises(UserMistake, match="lacks bootstrap, master"):
        DriverDocument.from_json({k: v for k, v in good.items()
                                  if k not in ("bootstrap", "master")})
    (tmp_path / "text.json").write_text("--topology sst")
    with pytest.raises(UserMistake, match="is not JSON"):
        DriverDocument.read(tmp_path / "text.json")
    with pytest.raises(UserMistake, match="cannot read the driver document"):
        DriverDocument.read(tmp_path / "missing.json")


def test_paths_are_mapped_for_a_launcher_that_sees_them_elsewhere(tmp_path: Path) -> None:
    full = spec(control_dir=Path("/runs/r1/control"),
                path_map=lambda p: "/work" + str(p))
    doc = full.for_driver()
    assert doc.checkpoint == Path("/work/runs/r1/checkpoint")
    assert doc.control_dir == Path("/work/runs/r1/control")
    assert doc.sink_dir is None and doc.crash_trigger is None  # nothing to map
    assert full.argv(tmp_path / SPEC_FILE)[-1] == f"/work{tmp_path}/{SPEC_FILE}"
    written = json.loads(full.write(tmp_path / SPEC_FILE).read_text())
    assert written["progress_file"] == "/work/runs/r1/progress.jsonl"
    assert full.checkpoint == Path("/runs/r1/checkpoint")  # pgval keeps its host paths


def test_the_file_is_private_and_no_planted_link_is_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "run" / SPEC_FILE
    target.parent.mkdir()
    target.symlink_to(victim)
    full = spec(kafka_options={"sasl.password": SECRET}, user_conf={"spark.y": SECRET})
    full.write(target)
    assert victim.read_text() == "keep"
    info = os.lstat(target)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert SECRET.encode() not in target.read_bytes()
    assert DriverDocument.read(target) == full.document()


def test_each_start_writes_the_document_beside_the_logs(tmp_path: Path) -> None:
    """The driver is started with ``--spec`` naming the file it was just written to (a
    stand-in that exits at once: only the hand-over is looked at here)."""
    full = spec(python="/bin/true", user_conf={"spark.z": SECRET},
                progress_file=tmp_path / "progress.jsonl")
    driver = DriverProcess(full, tmp_path / "logs", tmp_path / "pids")
    assert driver.spec_file == tmp_path / SPEC_FILE
    with pytest.raises(EnvironmentFailure, match="exited before its query started"):
        driver.start(timeout_s=10)
    assert DriverDocument.read(driver.spec_file) == full.document()
    assert stat.S_IMODE(os.stat(driver.spec_file).st_mode) == 0o600
    assert SECRET.encode() not in driver.spec_file.read_bytes()


def test_a_served_query_must_match_the_session() -> None:
    first = spec().document()
    assert first.session_mismatch(spec(topology="sst", pg="a1", query_name="q2").document()) \
        is None
    other = spec(conf={"spark.network.timeout": "10s"}).document()
    assert first.session_mismatch(other) == "its conf differs from the session's"
    assert "crash point" in str(first.session_mismatch(
        spec(sink_trigger=Path("/t")).document()))
    # A user's job's queries share a session of that job's; a sink of theirs does not.
    job = spec(topology="job", pg="a1", job="/j.py:build").document()
    assert job.session_mismatch(spec(topology="job", pg="e1", job="/j.py:build",
                                     query_name="q2").document()) is None
    assert first.session_mismatch(job) == "its job differs from the session's"
    assert "sink" in str(first.session_mismatch(
        spec(topology="job", pg="a1", job="/j.py:build", sink="files",
             sink_dir=Path("/runs/r1/sink")).document()))


def test_a_stop_begun_early_is_waited_for_and_timed(tmp_path: Path) -> None:
    """stop_soon() stops the driver in a thread (beside the read-back); stop() waits for
    that stop, so the teardown never signals a driver that is still shutting down."""
    slow_exit = ("import signal, sys, time\n"
                 "def bye(*_):\n    time.sleep(1.0)\n    sys.exit(0)\n"
                 "signal.signal(signal.SIGTERM, bye)\nprint('up', flush=True)\n"
                 "time.sleep(60)\n")
    driver = DriverProcess(spec(progress_file=tmp_path / "progress.jsonl"),
                           tmp_path / "logs", tmp_path / "pids")
    driver.proc = spawn("driver-1", [sys.executable, "-c", slow_exit],
                        tmp_path / "logs" / "driver-1.log", pid_dir=tmp_path / "pids")
    deadline = time.monotonic() + 10
    while b"up" not in (tmp_path / "logs" / "driver-1.log").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    t0 = time.monotonic()
    driver.stop_soon()
    driver.stop_soon()  # once only
    assert time.monotonic() - t0 < 0.5  # it returned at once
    driver.stop()
    assert time.monotonic() - t0 >= 1.0  # stop() waited for the graceful exit
    assert not driver.proc.alive()
    assert driver.stop_s is not None and 1.0 <= driver.stop_s < 10
    assert driver.proc.popen.returncode == 0  # SIGTERM's handler ran: not killed
