"""The embedded local cluster: Spark standalone (master + workers) and KRaft Kafka.

Start order matters: Spark first, because with isolation it creates the bridge
whose address Kafka must listen on (executors in worker namespaces cannot reach
the root namespace's 127.0.0.1). Stop order is the reverse. A ``state.json`` in
the run directory lets ``pgval cluster status/down`` work from another process.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pgval.runtime import netns
from pgval.runtime.kafka import KafkaCluster
from pgval.runtime.procs import RuntimeErrorPlain, kill_recorded
from pgval.runtime.spark import SparkCluster
from pgval.schema import OUTPUT_TOPIC


@dataclass
class ClusterConfig:
    """Sizes that fit a 2-core, 24 GiB machine by default; scale up with flags."""

    brokers: int = 3
    partitions: int = 3
    workers: int = 2
    cores_per_worker: int = 1
    worker_memory: str = "1g"
    broker_heap: str = "384m"
    #: Spark settings for master and workers (``-D``), e.g. spark.worker.timeout.
    spark_daemon_conf: dict[str, str] = field(default_factory=dict)
    isolate: bool | None = None  # None: namespaces when root and supported


class LocalCluster:
    """Kafka + Spark on this machine, stopped on error, exit and Ctrl-C (use ``with``)."""

    def __init__(self, run_dir: Path, config: ClusterConfig | None = None) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.config = config or ClusterConfig()
        self.spark: SparkCluster | None = None
        self.kafka: KafkaCluster | None = None
        self.timings: dict[str, float] = {}

    def start(self) -> LocalCluster:
        cfg = self.config
        if cfg.isolate:
            ok, why = netns.namespaces_supported()
            if not ok:
                raise RuntimeErrorPlain(f"worker isolation was requested but {why}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            self.spark = SparkCluster(self.run_dir, workers=cfg.workers,
                                      cores_per_worker=cfg.cores_per_worker,
                                      worker_memory=cfg.worker_memory, isolate=cfg.isolate,
                                      extra_conf=cfg.spark_daemon_conf)
            self.spark.start()
            self.timings["spark_start_s"] = time.monotonic() - t0
            self._write_state(partial=True)  # so `pgval cleanup` finds the namespaces
            t1 = time.monotonic()
            self.kafka = KafkaCluster(self.run_dir, brokers=cfg.brokers,
                                      partitions=cfg.partitions, host=self.spark.driver_host,
                                      heap=cfg.broker_heap)
            self.kafka.start()
            self.kafka.ensure_experiment_topics([OUTPUT_TOPIC])
            self.timings["kafka_start_s"] = time.monotonic() - t1
        except BaseException:
            self.stop()
            raise
        self.timings["cluster_start_s"] = time.monotonic() - t0
        self._write_state()
        return self

    def stop(self) -> None:
        """Stop everything this cluster started; idempotent."""
        errors = []
        for part in (self.kafka, self.spark):
            if part is None:
                continue
            try:
                part.stop()
            except Exception as exc:  # keep stopping the rest
                errors.append(str(exc))
        (self.run_dir / "state.json").unlink(missing_ok=True)
        if errors:
            raise RuntimeErrorPlain("stopping the cluster failed: " + "; ".join(errors))

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def bootstrap(self) -> str:
        assert self.kafka is not None
        return self.kafka.bootstrap

    def describe(self) -> dict[str, Any]:
        assert self.spark is not None
        return {
            "bootstrap": self.kafka.bootstrap if self.kafka and self.kafka.procs else None,
            "master": self.spark.master_url,
            "driver_host": self.spark.driver_host,
            "isolated": self.spark.isolated,
            "netns_prefix": (f"{netns.NS_PREFIX}{self.spark.net.suffix}-"
                             if self.spark.net is not None else None),
            "workers": [{"index": w.index, "host": w.host, "netns": w.netns}
                        for w in self.spark.workers],
            "config": asdict(self.config),
            "timings": self.timings,
        }

    def _write_state(self, partial: bool = False) -> None:
        state = {**self.describe(), "complete": not partial}
        (self.run_dir / "state.json").write_text(json.dumps(state, indent=1))


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / "state.json").read_text())
    except (OSError, ValueError):
        return None


def force_down(run_dir: Path) -> list[str]:
    """Stop whatever a (possibly killed) pgval left in ``run_dir``; remove its namespaces.

    Only this run's namespaces are removed (their prefix is in ``state.json``), so other
    runs on the same host are left alone.
    """
    state = read_state(run_dir) or {}
    stopped = kill_recorded(Path(run_dir) / "pids")
    prefix = state.get("netns_prefix")
    if prefix:
        from pgval.faults.delay import cleanup_delays

        stopped += [f"delay {d}" for d in cleanup_delays(prefix)]
        stopped += [f"netns {n}" for n in netns.cleanup_all(prefix)]
    (Path(run_dir) / "state.json").unlink(missing_ok=True)
    return stopped


def cluster_processes(run_dir: Path) -> list[tuple[str, bool]]:
    """(name, alive) for every process group recorded in the run's pid files."""
    out = []
    for pid_file in sorted((Path(run_dir) / "pids").glob("*.json")):
        try:
            info = json.loads(pid_file.read_text())
            pgid = int(info["pgid"])
        except (OSError, ValueError, KeyError):
            continue
        try:
            os.killpg(pgid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
        out.append((str(info.get("name", pgid)), alive))
    return out


def cleanup_runs(runs_root: Path) -> list[str]:
    """``pgval cleanup``: force every run directory under ``runs_root`` down."""
    stopped: list[str] = []
    root = Path(runs_root)
    if not root.is_dir():
        return stopped
    for pid_dir in sorted(root.glob("**/pids")):
        stopped += force_down(pid_dir.parent)
    return stopped
