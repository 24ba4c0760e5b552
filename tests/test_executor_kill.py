"""``crash`` as an executor kill through the driver, on a real cluster (1 broker, 2 workers).

The driver pgval runs is asked, through its control channel, to kill one executor with
``SparkContext.killAndReplaceExecutor`` while a query processes data. Checked for real:
the executor's JVM exits, the driver's executor list loses its id, the cluster manager
starts a replacement under a new id, and the query keeps producing batches after it.
The numbers are printed (``-s``) for docs/faults.md.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from pgval.cluster.local import LocalCluster
from pgval.core.schema import Topics
from pgval.core.spec import ClusterSpec
from pgval.datasets.generator import GeneratorConfig, ProducerGroup
from pgval.datasets.writers import KafkaSink
from pgval.deploy.driver_process import DriverProcess, DriverSpec
from pgval.faults.executor import MECHANISM, ExecutorKill
from pgval.faults.took_effect import fault_reasons
from pgval.kafka.admin import create_topics
from pgval.spark.daemons import WorkerHandle, _cmdline
from tests.conftest import processes_mentioning, wait_until

pytestmark = pytest.mark.cluster


def _executor_pids(workers: list[WorkerHandle]) -> dict[str, int]:
    """Executor id → JVM pid, from ``--executor-id`` on each executor's command line."""
    out = {}
    for w in workers:
        for pid in w.executor_pids():
            argv = _cmdline(pid).split(b"\0")
            if b"--executor-id" in argv:
                out[argv[argv.index(b"--executor-id") + 1].decode()] = pid
    return out


def _gone(pid: int) -> bool:
    """Exited, or a zombie waiting for its parent (the worker) to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _batches_with_input(driver: DriverProcess, after_ms: int) -> list[dict[str, Any]]:
    return [r for r in driver.progress() if r.get("event") == "progress"
            and (r.get("numInputRows") or 0) > 0 and r.get("wall_ms", 0) > after_ms]


def test_executor_kill_is_replaced_and_the_query_runs_on(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cluster = LocalCluster(run_dir, ClusterSpec(brokers=1, partitions=3, workers=2,
                                                  isolate=False))
    driver: DriverProcess | None = None
    group: ProducerGroup | None = None
    try:
        cluster.start()
        spark = cluster.spark
        assert spark is not None and cluster.kafka is not None
        # The embedded cluster makes no topics (each run makes its own, prefixed); the
        # driver and the generator here use the plain names.
        plain = Topics()
        create_topics(cluster.kafka.client_config, plain.all(), 3, compacted=[plain.marker])
        spec = DriverSpec(topology="sst", pg="a1", bootstrap=cluster.bootstrap,
                          master=spark.master_url, checkpoint=run_dir / "checkpoint",
                          progress_file=run_dir / "progress.jsonl", window_ms=2000,
                          watermark_ms=1000, trigger_ms=1000, shuffle_partitions=3,
                          driver_host=spark.driver_host, extra_env=spark.driver_env(),
                          query_name="pgval-execkill", control_dir=run_dir / "control",
                          kafka_options=cluster.kafka.auth_config)  # the closed Kafka's login
        driver = DriverProcess(spec, run_dir / "logs", run_dir / "pids")
        driver.start()
        control = driver.control()

        def registered() -> list[str]:
            events = control.executor_events()
            return events[-1]["ids"] if events else []

        # No spark.cores.max: the application takes both workers' cores, one executor each.
        wait_until(lambda: len(registered()) == 2, 120, "two executors in the driver's list")
        assert set(_executor_pids(spark.workers)) == set(registered())

        group = ProducerGroup(GeneratorConfig(resources=4, rate=200, duration_s=600, seed=1),
                              KafkaSink(cluster.bootstrap, config=cluster.kafka.auth_config),
                              pid_dir=run_dir / "pids")
        group.start()
        wait_until(lambda: len(_batches_with_input(driver, 0)) >= 3, 120,
                   "batches with input before the kill")

        # The channel against the real driver: answers, and refuses what it cannot do.
        assert control.request({"action": "ping"}, 30)["ok"] is True
        refused = control.request({"action": "kill-executor", "executor": "99"}, 30)
        assert refused["ok"] is False and "not registered" in refused["error"]
        assert len(registered()) == 2

        pids = _executor_pids(spark.workers)
        fault = ExecutorKill(control, seed=3)
        inj = fault.inject()
        victim = inj["executor"]
        assert inj["mechanism"] == MECHANISM
        assert inj["executors_before"] == sorted(pids, key=int) and victim in pids
        assert inj["host"], "the status store knew the executor's host:port"
        # Really killed: its JVM exits and the driver's list loses it.
        wait_until(lambda: _gone(pids[victim]), 30, f"executor {victim}'s JVM to exit")
        assert inj["removed_after_s"] is not None and inj["removed_after_s"] >= 0

        rem = fault.remove(restore=True)
        assert "error" not in rem, rem
        new = rem["replacement"]
        assert new not in inj["executors_before"] and rem["replaced_after_s"] > 0
        assert victim not in rem["executors_after"] and new in rem["executors_after"]
        wait_until(lambda: new in _executor_pids(spark.workers), 30,
                   f"a JVM for replacement executor {new}")
        replaced_ms = next(e["ts"] for e in control.executor_events() if new in e["ids"])

        # The query runs on: new batches with input after the replacement registered.
        wait_until(lambda: len(_batches_with_input(driver, replaced_ms)) >= 3, 120,
                   "batches with input after the replacement")
        driver.check()
        first_after = _batches_with_input(driver, replaced_ms)[0]
        log = [{"step": "inject", **inj}, {"step": "remove", **rem}]
        assert fault_reasons("crash", log) == []
        print("executor-kill", {"victim": victim, "host": inj["host"],
                                "removed_after_s": inj["removed_after_s"],
                                "replacement": new, "replaced_after_s": rem["replaced_after_s"],
                                "first_batch_after_replacement_s":
                                    round((first_after["wall_ms"] - replaced_ms) / 1000, 3)})
    finally:
        if group is not None:
            group.stop()
            with contextlib.suppress(Exception):
                group.close()
        if driver is not None:
            driver.stop()
        cluster.stop()
    wait_until(lambda: not processes_mentioning(str(run_dir)), 15, "the run's processes")
    assert os.path.isdir(run_dir / "control") and not list((run_dir / "control").iterdir())
