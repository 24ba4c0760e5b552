"""The embedded cluster: Kafka + Spark standalone on this machine, started by pgval.

:class:`EmbeddedDeployment` starts (and stops) its own :class:`LocalCluster`; a matrix or an
OIR search keeps one up across runs (a warm cluster), and :meth:`restore` restarts a worker
a failed run left crashed. :class:`AttachedDeployment` uses a cluster a `pgval cluster up`
started (``--cluster DIR``): it never starts or stops it, so its faults go through Spark's
API (executor kill) and the namespaces the cluster recorded (packet delay).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.cluster.brokers import RecordedBrokers
from pgval.cluster.guard import cluster_processes, read_state, reaper_problem
from pgval.cluster.local import LocalCluster
from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import PAUSE_DRIVER, Partition
from pgval.core.spec import ClusterSpec
from pgval.deploy.base import Deployment, DriverPlacement, FaultContext
from pgval.faults.broker_crash import BrokerCrash, SignalledBrokers
from pgval.faults.descriptor import (
    BROKER_PROCESSES,
    DRIVER_PROCESS,
    EXECUTOR_KILL,
    WORKER_NETNS,
    WORKER_PROCESSES,
)
from pgval.faults.network import NetworkPath, WorkerDelay
from pgval.faults.partition import PartitionLink, WorkerPartition
from pgval.faults.pause import ProcessPause, group_members
from pgval.faults.process import WorkerCrash
from pgval.host.cds import ClassArchive
from pgval.kafka.broker import CLIENT_PROPERTIES, KafkaCredentials
from pgval.spark.daemons import SECRET_FILE_ENV

if TYPE_CHECKING:
    from pgval.core.spec import RunSpec
    from pgval.faults.timeouts import TimeoutProfile


def handoff(cluster_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
    """What `pgval validate --deploy external` needs to use a `pgval cluster up` cluster:
    its addresses and the Spark settings of a driver on this machine (the bridge address
    workers in namespaces reach; the cluster's secret by file, never by value). The Kafka
    login is a file too (``kafka_config_file``, give it as ``--kafka-config @FILE``)."""
    host = state.get("driver_host")
    conf = {"spark.driver.host": host, "spark.driver.bindAddress": host} if host else {}
    secret = Path(cluster_dir).resolve() / "spark" / "auth-secret"
    if secret.exists():
        conf.update({"spark.authenticate": "true",
                     "spark.authenticate.secret.file": str(secret)})
    kafka_file = kafka_credentials_file(cluster_dir)
    return {"bootstrap": state.get("bootstrap"), "master": state.get("master"),
            "kafka_config_file": str(kafka_file) if kafka_file.exists() else None,
            "spark_conf": conf, "workers": state.get("workers"),
            "processes": {name: alive for name, alive in cluster_processes(cluster_dir)}}


def kafka_credentials_file(cluster_dir: Path) -> Path:
    """Where a cluster keeps its Kafka client login (0600; see pgval.kafka.broker)."""
    return Path(cluster_dir).resolve() / "kafka" / CLIENT_PROPERTIES


def delay_cap_s(phase_seconds: float) -> float:
    """A delay (or partition) ends by itself this long after T2 whatever happens to pgval."""
    return 1.5 * phase_seconds + 60


def partition_of(cfg: RunSpec, worker: str, ns: str | None, bootstrap: str,
                 master: str | None, ctx: FaultContext) -> WorkerPartition:
    """The partition ``--partition`` asks for on one worker: the brokers' and the master's
    ports read from the cluster's addresses (``HOST:PORT,...``, ``spark://HOST:PORT``)."""
    brokers = tuple(int(a.rsplit(":", 1)[1]) for a in bootstrap.split(",") if ":" in a)
    master_port = int(master.rsplit(":", 1)[1]) if master and ":" in master else None
    link = PartitionLink(worker, ns, cfg.partition or Partition.WORKER_KAFKA, brokers,
                         master_port)
    return WorkerPartition(link, ctx.run_dir, delay_cap_s(ctx.phase_seconds))


class EmbeddedDeployment(Deployment):
    """pgval's own cluster in ``cluster_dir`` (a run's directory, or a matrix's)."""

    kind = "local"
    #: Its workers' process groups and namespaces, and its brokers, are pgval's own.
    mechanisms = frozenset({DRIVER_PROCESS, WORKER_PROCESSES, WORKER_NETNS, BROKER_PROCESSES})
    owns_cluster = True

    def __init__(self, cluster_dir: Path, config: ClusterSpec) -> None:
        super().__init__()
        self.cluster_dir = Path(cluster_dir)
        self.config = config
        self.cluster: LocalCluster | None = None

    def start(self) -> EmbeddedDeployment:
        if self.cluster is None:
            cluster = LocalCluster(self.cluster_dir, self.config)
            self.cluster = cluster  # before start: a failed start still gets stopped
            cluster.start()
            self.timings.update(cluster.timings)
        return self

    def stop(self) -> None:
        """The cluster is this run's or this campaign's alone, and everything of it that
        counts was read back and stored: no controlled shutdown (docs/performance.md)."""
        if self.cluster is not None:
            self.cluster.stop(fast=True)
            self.cluster = None

    def restore(self) -> list[str]:
        """Restart any worker or Kafka broker that is not running (a run that failed
        mid-crash); a cluster whose master died is started again as a whole."""
        assert self.cluster is not None
        spark, kafka = self.cluster.spark, self.cluster.kafka
        whole = (spark is not None and spark.master is not None and spark.master.alive()
                 and kafka is not None)
        if not whole:
            self.stop()
            self.start()
            return ["the whole cluster"]
        restored = []
        assert kafka is not None
        for node in kafka.node_ids:
            if kafka.node_pid(node) is None:
                kafka.restart_node(node)
                restored.append(f"kafka-broker-{node}")
        for worker in self._spark().workers:
            if not worker.alive():
                worker.restart()
                restored.append(worker.name)
        return restored

    @property
    def partitions(self) -> int:
        return self.config.partitions

    def client_config(self) -> dict[str, Any]:
        assert self.cluster is not None and self.cluster.kafka is not None
        return self.cluster.kafka.client_config

    def driver_placement(self) -> DriverPlacement:
        spark = self._spark()
        assert self.cluster is not None
        assert self.cluster.kafka is not None
        # The Kafka login reaches the driver in its environment (PGVAL_KAFKA_OPTIONS).
        return DriverPlacement(bootstrap=self.cluster.bootstrap, master=spark.master_url,
                               driver_host=spark.driver_host, extra_env=spark.driver_env(),
                               kafka_options=self.cluster.kafka.auth_config,
                               executor_java_flags=spark.executor_java_flags())

    @property
    def workers(self) -> int:
        return self.config.workers

    def daemon_conf(self) -> dict[str, str]:
        return dict(self.config.spark_daemon_conf)

    def worker_path(self, target: int) -> NetworkPath:
        worker = self._spark().workers[target]
        return NetworkPath(worker.name, worker.netns, worker.host, worker.webui_port)

    def worker_partition(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                         ctx: FaultContext) -> WorkerPartition:
        """One link of worker ``target`` cut (``--partition``)."""
        worker = self._spark().workers[target]
        assert self.cluster is not None
        return partition_of(cfg, worker.name, worker.netns, self.cluster.bootstrap,
                            self._spark().master_url, ctx)

    def process_pause(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                      ctx: FaultContext) -> ProcessPause:
        """The executors of worker ``target``, or with ``--target driver`` the driver's
        process group (found at T2: the processes running then)."""
        if cfg.target == PAUSE_DRIVER:
            driver = ctx.driver
            return ProcessPause(cfg.fault, "driver",
                                lambda: group_members(driver.pid()) if driver.pid() else [])
        worker = self._spark().workers[target]
        return ProcessPause(cfg.fault, f"{worker.name}'s executors", worker.executor_pids)

    def broker_crash(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                     ctx: FaultContext) -> BrokerCrash:
        """``--target``: a broker id, ``coordinator``, or by default ``leader``."""
        assert self.cluster is not None and self.cluster.kafka is not None
        return self.crash_a_broker(SignalledBrokers(self.cluster.kafka), cfg, ctx, undo=False)

    def worker_crash(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                     ctx: FaultContext) -> WorkerCrash:
        workers = list(self._spark().workers)
        return WorkerCrash(workers[target], checkpoint=ctx.checkpoint,
                           sink_trigger=ctx.sink_trigger, workers=workers,
                           reach_timeout_s=ctx.reach_timeout_s)

    def worker_delay(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                     ctx: FaultContext) -> WorkerDelay:
        return WorkerDelay(cfg.fault, self.worker_path(target), profile, ctx.run_dir,
                           delay_cap_s(ctx.phase_seconds))

    def describe(self) -> dict[str, Any]:
        try:
            return self.cluster.describe() if self.cluster else {}
        except Exception:
            return {}

    def log_dirs(self) -> list[Path]:
        return [self.cluster_dir.resolve() / "logs"]

    def class_dumps(self) -> list[tuple[ClassArchive, int]]:
        if self.cluster is None or self.cluster.spark is None or self.cluster.kafka is None:
            return []
        return [*self.cluster.spark.class_dumps(), *self.cluster.kafka.class_dumps()]

    def reaper_problem(self) -> str | None:
        return reaper_problem(self.cluster.reaper) if self.cluster is not None else None

    def _spark(self) -> Any:
        if self.cluster is None or self.cluster.spark is None:
            raise EnvironmentFailure("the Spark cluster is not running")
        return self.cluster.spark


class AttachedDeployment(Deployment):
    """A running `pgval cluster up` cluster, used as it is (see the module docstring)."""

    kind = "local"
    #: Not pgval's processes to kill: a crash is an executor kill through the driver; the
    #: namespaces and brokers the cluster recorded.
    mechanisms = frozenset({DRIVER_PROCESS, EXECUTOR_KILL, WORKER_NETNS, BROKER_PROCESSES})

    def __init__(self, cluster_dir: Path) -> None:
        super().__init__()
        self.cluster_dir = Path(cluster_dir).resolve()
        self.state: dict[str, Any] = {}
        self.kafka_auth: dict[str, str] = {}

    def start(self) -> AttachedDeployment:
        t0 = time.monotonic()
        state = read_state(self.cluster_dir)
        if not state or not state.get("complete"):
            raise EnvironmentFailure(f"no running cluster in {self.cluster_dir}; start one with "
                                    f"`pgval cluster up --run-dir {self.cluster_dir}`")
        dead = [name for name, alive in cluster_processes(self.cluster_dir) if not alive]
        if dead:
            raise EnvironmentFailure(f"the cluster in {self.cluster_dir} is not whole "
                                    f"({', '.join(dead)} not running); restart it with "
                                    "`pgval cluster down` and `pgval cluster up`")
        self.state = state
        creds = KafkaCredentials.read(kafka_credentials_file(self.cluster_dir))
        self.kafka_auth = creds.client_config() if creds is not None else {}
        self.timings["cluster_start_s"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """The cluster belongs to `pgval cluster up`; it stays up."""

    @property
    def partitions(self) -> int:
        return int((self.state.get("config") or {}).get("partitions") or 3)

    def client_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.state["bootstrap"], **self.kafka_auth}

    def driver_placement(self) -> DriverPlacement:
        host = self.state["driver_host"]
        env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": host, "SPARK_LOCAL_HOSTNAME": host}
        secret = self.cluster_dir / "spark" / "auth-secret"
        if secret.exists():
            env[SECRET_FILE_ENV] = str(secret)
        return DriverPlacement(bootstrap=self.state["bootstrap"], master=self.state["master"],
                               driver_host=host, extra_env=env,
                               kafka_options=dict(self.kafka_auth))

    @property
    def workers(self) -> int:
        return len(self.state.get("workers") or [])

    def worker_path(self, target: int) -> NetworkPath:
        worker = self.state["workers"][target]
        return NetworkPath(f"spark-worker-{worker['index']}", worker.get("netns"),
                           worker["host"], int(worker.get("webui_port") or 0))

    def broker_crash(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                     ctx: FaultContext) -> BrokerCrash:
        """Killed by its recorded pid and started again from its recorded command, into
        the cluster's own pid directory (:mod:`pgval.cluster.brokers`); if this run dies
        between the two, its reaper starts it again (``python -m pgval.cluster.brokers``)."""
        brokers = RecordedBrokers(self.cluster_dir, self.client_config())
        restart = [sys.executable, "-m", "pgval.cluster.brokers", "start",
                   "--run-dir", str(self.cluster_dir), "{broker}"]
        return self.crash_a_broker(SignalledBrokers(brokers, undo=restart), cfg, ctx)

    def worker_partition(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                         ctx: FaultContext) -> WorkerPartition:
        worker = self.state["workers"][target]
        return partition_of(cfg, f"spark-worker-{worker['index']}", worker.get("netns"),
                            self.state["bootstrap"], self.state["master"], ctx)

    def worker_delay(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                     ctx: FaultContext) -> WorkerDelay:
        return WorkerDelay(cfg.fault, self.worker_path(target), profile, ctx.run_dir,
                           delay_cap_s(ctx.phase_seconds))

    def describe(self) -> dict[str, Any]:
        return {"deploy": "local", "attached": str(self.cluster_dir),
                **{k: self.state.get(k) for k in ("bootstrap", "master", "workers")}}

    def log_dirs(self) -> list[Path]:
        return [self.cluster_dir / "logs"]
