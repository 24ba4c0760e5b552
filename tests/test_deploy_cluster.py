"""Deployments on real clusters: a `pgval cluster up` cluster used as an external one and
attached with --cluster (left untouched, only the runs' topics come and go), and a matrix
of a user's job on it whose cells share one driver without seeing each other's records.
(A matrix's own warm cluster is the one WarmDeployments hands its cells:
tests/test_faults_cluster.py runs its cells on one, checking that none started a cluster;
tests/test_soak.py kills a matrix mid-cell and finds its cluster reaped.)

Phases are 15 s (the shared driver's cells 10 s): the warm-up (at least 10 s, until the
outputs' latency stops falling) takes the fresh driver's slow first batches (4-5 s each on 2
shared cores), and a failure phase without outputs (the batch running when an executor is
killed takes 13-15 s, its tasks retried) is a measurement, not an unknown run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from pgval.deploy.driver_process import progress_lines
from pgval.evidence.bundle import Manifest
from pgval.kafka.admin import is_reachable
from pgval.kafka.client import read_client_properties
from pgval.store.results import ResultsStore
from tests.test_redact import MARK, assert_private_run, files_holding

pytestmark = pytest.mark.cluster

RUN_SHAPE = ["--topology", "sst", "--rate", "400", "--resources", "4", "--phase-seconds", "15",
             "--warmup-seconds", "10", "--warmup-max-seconds", "12", "--window-ms", "2000",
             "--watermark-ms", "1000", "--trigger-ms", "1000", "--partitions", "2", "--json"]


def pgval(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgval.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "PGVAL_RUNS": str(cwd / "runs")})


@pytest.fixture(scope="module")
def running_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`pgval cluster up` (3 brokers for a broker crash, 2 workers), stopped with `pgval
    cluster down` always."""
    base = tmp_path_factory.mktemp("held")
    cluster_dir = base / "cluster"
    try:
        up = pgval("cluster", "up", "--run-dir", str(cluster_dir), "--brokers", "3",
                   "--partitions", "2", "--workers", "2", cwd=base)
        assert up.returncode == 0, up.stderr
        status = pgval("cluster", "status", "--run-dir", str(cluster_dir), "--json", cwd=base)
        assert status.returncode == 0, status.stderr
        yield {"dir": cluster_dir, "base": base, **json.loads(status.stdout)}
    finally:
        pgval("cluster", "down", "--run-dir", str(cluster_dir), cwd=base)


def topic_names(info: dict[str, Any]) -> set[str]:
    """The cluster's topics, without Kafka's internal ones (``__consumer_offsets`` appears
    with the first consumer group anyone uses; it is Kafka's, not a run's). The login is
    the cluster's 0600 file that `cluster status --json` names."""
    login = read_client_properties(Path(info["kafka_config_file"]))
    topics = AdminClient({"bootstrap.servers": info["bootstrap"], **login}).list_topics(
        timeout=10).topics
    return {t for t in topics if not t.startswith("__")}


def test_external_crash_kills_an_executor_through_spark_and_leaves_the_cluster_alone(
        running_cluster: dict[str, Any]) -> None:
    info, base = running_cluster, running_cluster["base"]
    before = topic_names(info)
    # The held cluster's Kafka is closed: no login, no metadata; the login file is 0600.
    login_file = Path(info["kafka_config_file"])
    assert login_file.stat().st_mode & 0o777 == 0o600
    assert not is_reachable(info["bootstrap"], timeout_s=2.0)
    conf = [a for k, v in info["spark_conf"].items() for a in ("--spark-conf", f"{k}={v}")]
    # Nothing secret stored: the Kafka login's password, a secret --spark-conf
    # and a nemesis token (given, unused by a crash) are in no file of the run nor in the
    # database.
    password = read_client_properties(login_file)["sasl.password"]
    nemesis = f"true --token {MARK} {{worker}}"
    proc = pgval("validate", "--deploy", "external", "--bootstrap", info["bootstrap"],
                 "--kafka-config", f"@{login_file}",
                 "--master", info["master"], *conf, "--fault", "crash", "--db",
                 str(base / "r.db"), "--spark-conf", f"spark.pgval.test.password={MARK}",
                 "--nemesis-inject", nemesis, "--nemesis-remove", nemesis, *RUN_SHAPE,
                 cwd=base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    run_dir = Path(ResultsStore(base / "r.db").runs()[-1]["run_dir"])
    assert files_holding(MARK, run_dir, *base.glob("r.db*")) == []
    assert files_holding(password, run_dir, *base.glob("r.db*")) == []
    assert_private_run(run_dir, base / "r.db")
    inject = next(e for e in out["fault_log"] if e["step"] == "inject")
    remove = next(e for e in out["fault_log"] if e["step"] == "remove")
    assert inject["executor"] in inject["executors_before"], inject
    assert remove["replacement"] not in inject["executors_before"], remove
    assert out["valid"], out["validity_reasons"]
    # Untouched: every process of the cluster still up, and only the run's topics came
    # and went.
    status = json.loads(pgval("cluster", "status", "--run-dir", str(info["dir"]), "--json",
                              cwd=base).stdout)
    assert status["master"] == info["master"] and status["bootstrap"] == info["bootstrap"]
    cluster_is_whole(info)
    assert topic_names(info) == before


def cluster_is_whole(info: dict[str, Any]) -> None:
    status = json.loads(pgval("cluster", "status", "--run-dir", str(info["dir"]), "--json",
                              cwd=info["base"]).stdout)
    assert status["processes"] and all(status["processes"].values()), status
    assert len([p for p in status["processes"] if p.startswith("kafka-broker-")]) == 3


def test_a_broker_crash_on_a_running_cluster_with_cluster_dir(
        running_cluster: dict[str, Any]) -> None:
    """--cluster: the leader of the output is killed by its recorded pid and started again
    from its recorded command; the cluster is whole afterwards, the run valid."""
    info, base = running_cluster, running_cluster["base"]
    before = topic_names(info)
    proc = pgval("validate", "--cluster", str(info["dir"]), "--db", str(base / "r.db"),
                 "--fault", "broker-crash", *RUN_SHAPE, cwd=base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["valid"], out["validity_reasons"]
    assert out["timings"]["cluster_start_s"] < 5  # nothing was started
    inject = next(e for e in out["fault_log"] if e["step"] == "inject")
    remove = next(e for e in out["fault_log"] if e["step"] == "remove")
    assert inject["killed"] and inject["broker_pid"], inject
    assert inject["led_before"] and inject["leadership_moved"] and inject["deregistered"]
    assert remove["in_sync"] and remove["restarted_pid"] != inject["broker_pid"], remove
    run_dir = Path(ResultsStore(base / "r.db").runs()[-1]["run_dir"])
    assert not list((run_dir / "undo").glob("*.json"))  # the restart's undo was done
    cluster_is_whole(info)
    assert topic_names(info) == before


def test_a_broker_crash_through_a_users_nemesis(running_cluster: dict[str, Any],
                                                tmp_path: Path) -> None:
    """--deploy external's broker crash, the fault alone on the real brokers: the user's
    commands (here `pgval cluster broker kill/start`) stop and start broker {broker};
    pgval sees only the cluster's metadata. Until T3 the start command is an undo record,
    which a reaper runs if pgval dies (run here as the reaper would)."""
    from pgval.faults.broker_crash import BrokerCrash
    from pgval.faults.nemesis import NemesisBrokers
    from pgval.host import undo

    info = running_cluster
    login = read_client_properties(Path(info["kafka_config_file"]))

    def cli(action: str) -> str:
        return (f"{sys.executable} -m pgval.cli cluster broker {action} "
                f"--run-dir {info['dir']} {{broker}}")

    brokers = NemesisBrokers(cli("kill"), cli("start"),
                             {"bootstrap.servers": info["bootstrap"], **login})
    crash = BrokerCrash(brokers, [], "none", target=1, run_dir=tmp_path)
    inject = crash.inject()
    assert inject["killed"] and inject["nemesis"]["exit_code"] == 0, inject
    assert inject["deregistered"] and 1 not in inject["after"]["registered_brokers"], inject
    assert crash.problem() is None  # still down
    assert [u["name"] for u in undo.pending(tmp_path)] == ["broker-crash-1"]
    assert undo.run_pending(tmp_path) and not undo.pending(tmp_path)  # the reaper's way
    remove = crash.remove()
    assert remove["registered"] and remove["in_sync"], remove
    assert BrokerCrash.reasons([{"step": "inject", **inject},
                                {"step": "remove", **remove}]) == []
    cluster_is_whole(info)


def test_a_shared_driver_runs_cells_one_after_another_and_they_never_meet(
        running_cluster: dict[str, Any]) -> None:
    """``pgval matrix --job … --driver shared`` on a `pgval cluster up` cluster: one
    driver process runs four cells' queries of a user's job (SST written as a job: each
    cell loads it anew), a crash (an executor killed through that driver) in the middle;
    each cell reads and writes only its own records, its events reach only its own
    progress file, a cell's output topic is unchanged after the next cells ran, and each
    cell's batch oracle agrees with pgval's own (pgval.deploy.shared_driver; the memo:
    experiments/overhead-26/shared-driver.md). A built-in topology's query differs from a
    job's only in how it is built (topologies/driver.py, ``_kafka_writer``)."""
    info, base = running_cluster, running_cluster["base"]
    db, runs = base / "shared.db", base / "shared-runs"
    job = base / "sst_job.py"
    job.write_text("from pgval.topologies.builtin import make_sst\n"
                   "build = make_sst(window_ms=2000, watermark_ms=1000)\n")
    # 10 s phases and a warm-up of 4-6 s: from the second cell on the driver and its
    # executors are warm, a failure phase without outputs is a measurement, and what is
    # judged here is isolation, not latency (CI time).
    shape = [a for a in RUN_SHAPE if a not in ("--topology", "sst", "--json")]
    for flag, value in (("--phase-seconds", "10"), ("--warmup-seconds", "4"),
                        ("--warmup-max-seconds", "6")):
        shape[shape.index(flag) + 1] = value
    done = pgval("matrix", "--cluster", str(info["dir"]), "--driver", "shared",
                 "--job", f"{job}:build", "--no-lint", "--pgs", "a1,e1",
                 "--faults", "none,crash", "--repeat", "1", "--keep-topics",
                 "--db", str(db), "--runs-dir", str(runs), *shape, cwd=base, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = sorted((r for r in ResultsStore(db).runs() if r["status"] == "complete"),
                  key=lambda r: r["id"])
    assert len(rows) == 4 and all(r["valid"] for r in rows), [
        r["validity_reasons"] for r in rows]
    extras = [json.loads(r["summary"]) for r in rows]
    manifests = [Manifest.read(Path(r["run_dir"])) for r in rows]
    drivers = [m.config["driver"] for m in manifests]
    assert [d["mode"] for d in drivers] == ["shared"] * 4, drivers
    assert [e["driver"] for e in extras] == drivers  # in the database too
    assert [d["cell"] for d in drivers] == [1, 2, 3, 4]
    assert len({d["dir"] for d in drivers}) == 1
    assert all(d["stop"]["ok"] for d in drivers), drivers
    assert all(d["start"]["ok"] for d in drivers[1:]), drivers

    started = []
    for row in rows:
        lines = progress_lines(Path(row["run_dir"]) / "progress.jsonl")
        (start,) = [r for r in lines if r["event"] == "started"]
        started.append(start)
        # Routed by run id: every progress line in a run's file is its own query's.
        progress = [r for r in lines if r["event"] == "progress"]
        assert progress and {r["runId"] for r in progress} == {start["runId"]}
        assert lines[-1]["event"] == "terminated" and lines[-1]["stopped_by"] == "pgval"
    assert len({s["pid"] for s in started}) == 1  # one driver process...
    assert len({s["runId"] for s in started}) == len({s["checkpoint"] for s in started}) == 4
    with pytest.raises(ProcessLookupError):  # ...gone with the matrix
        os.kill(started[0]["pid"], 0)
    # Each query's checkpoint outlived its run (state stores may still write into it) and
    # went with the driver.
    assert not list(runs.glob("*/checkpoint"))

    for extra, row in zip(extras, rows, strict=True):
        # Each run read exactly its own inputs, and never lost one (a1, e1).
        inputs = extra["readback"]["inputs"]
        assert inputs["ok"] and inputs["read"] == inputs["expected"], inputs
        assert extra["unprocessed"] == 0 and extra["incorrect"] == 0, row["id"]
        assert extra["oracles_agree"] is True, extra.get("oracles_disagreement")
        if row["fault"] == "none":
            assert extra["guarantee"] == "exactly-once", row["id"]
    # Nothing reached a cell's output topic after its read-back: not the next cells, not a
    # producer Spark cached across them.
    login = read_client_properties(Path(info["kafka_config_file"]))
    consumer = Consumer({"bootstrap.servers": info["bootstrap"], "group.id": "pgval-test",
                         **login})
    try:
        for extra in extras:
            output = extra["readback"]["output"]
            now = {str(p): consumer.get_watermark_offsets(
                TopicPartition(output["topic"], int(p)), timeout=10)[1]
                for p in output["end_offsets"]}
            assert now == output["end_offsets"], output["topic"]
    finally:
        consumer.close()
