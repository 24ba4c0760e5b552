"""The embedded local cluster: Spark standalone (master + workers) and KRaft Kafka.

Start order matters: Spark first, because with isolation it creates the bridge
whose address Kafka must listen on (executors in worker namespaces cannot reach
the root namespace's 127.0.0.1). Stop order is the reverse.

``state.json`` in the run directory is written FIRST, before any process or namespace
exists: its owner (pid + start time), the namespace prefix about to be used and the
reaper watching the owner (:mod:`pgval.runtime.reaper`). It is updated as parts come up
and removed only when everything stopped, so a kill at any moment leaves a record that
``pgval cleanup`` (and the reaper) can act on, and ``pgval cluster status/down`` work
from another process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pgval.runtime import netns, ownership, signals
from pgval.runtime.kafka import KafkaCluster
from pgval.runtime.owner import Owner
from pgval.runtime.procs import RuntimeErrorPlain, kill_recorded
from pgval.runtime.spark import SparkCluster
from pgval.schema import OUTPUT_TOPIC

#: The reaper's module (:mod:`pgval.runtime.reaper`), started as ``python -m``; named, not
#: imported: the reaper imports this module.
REAPER_MODULE = "pgval.runtime.reaper"


@dataclass
class ClusterConfig:
    """Sizes that fit a 2-core, 24 GiB machine by default; scale up with flags.

    ``metadata`` is the command-line help, as in :class:`pgval.config.ExperimentConfig`
    (:mod:`pgval.cli_options` turns each field into an option)."""

    brokers: int = field(default=3, metadata={"help": "Kafka brokers (KRaft).", "min": 1})
    partitions: int = field(default=3, metadata={
        "help": "Partitions of each input and output topic.", "min": 1})
    workers: int = field(default=2, metadata={"help": "Spark standalone workers.", "min": 1})
    cores_per_worker: int = field(default=1, metadata={
        "help": "Cores each Spark worker offers to executors.", "min": 1})
    worker_memory: str = field(default="1g", metadata={
        "help": "Memory each Spark worker offers to executors (e.g. 1g)."})
    broker_heap: str = field(default="384m", metadata={
        "help": "JVM heap (-Xmx) of each Kafka broker (e.g. 384m)."})
    #: Spark settings for master and workers (``-D``), e.g. spark.worker.timeout; set by
    #: the faults (lowered time-outs), not an option.
    spark_daemon_conf: dict[str, str] = field(default_factory=dict)
    isolate: bool | None = field(default=None, metadata={
        "help": "Workers in their own network namespaces (default: when root and "
                "supported)."})


class LocalCluster:
    """Kafka + Spark on this machine, stopped on error, exit and Ctrl-C (use ``with``).

    ``held=True`` (``pgval cluster up``): the cluster outlives the command that started
    it, so it gets no reaper and belongs to its record until ``pgval cluster down``.
    """

    def __init__(self, run_dir: Path, config: ClusterConfig | None = None,
                 held: bool = False) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.config = config or ClusterConfig()
        self.held = held
        self.spark: SparkCluster | None = None
        self.kafka: KafkaCluster | None = None
        self.timings: dict[str, float] = {}
        self.owner = Owner.me()
        self.netns_suffix = netns.new_suffix()
        self.reaper: subprocess.Popen[bytes] | None = None
        self._stage = "new"

    def start(self) -> LocalCluster:
        cfg = self.config
        if cfg.isolate:
            ok, why = netns.namespaces_supported()
            if not ok:
                raise RuntimeErrorPlain(f"worker isolation was requested but {why}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            self._stage = "starting"
            self._write_state()  # first: whatever is created next can be found again
            if not self.held:
                self.reaper = start_reaper(self.run_dir, self.owner)
                self._write_state()
            self.spark = SparkCluster(self.run_dir, workers=cfg.workers,
                                      cores_per_worker=cfg.cores_per_worker,
                                      worker_memory=cfg.worker_memory, isolate=cfg.isolate,
                                      extra_conf=cfg.spark_daemon_conf,
                                      netns_suffix=self.netns_suffix)
            self.spark.start()
            self.timings["spark_start_s"] = time.monotonic() - t0
            self._stage = "spark up"
            self._write_state()
            t1 = time.monotonic()
            self.kafka = KafkaCluster(self.run_dir, brokers=cfg.brokers,
                                      partitions=cfg.partitions, host=self.spark.driver_host,
                                      heap=cfg.broker_heap)
            self.kafka.start()
            self.kafka.ensure_experiment_topics([OUTPUT_TOPIC])
            self.timings["kafka_start_s"] = time.monotonic() - t1
        except BaseException:
            with signals.shielded():
                self.stop()
            raise
        self.timings["cluster_start_s"] = time.monotonic() - t0
        self._stage = "up"
        self._write_state()
        if self.held and self.spark.net is not None:
            ownership.register_netns(self.netns_suffix, self.run_dir, held=True)
        return self

    def stop(self) -> None:
        """Stop everything this cluster started; idempotent.

        ``state.json`` and the reaper stay when a part failed to stop: the record is what
        lets ``pgval cleanup`` (or the reaper, once this process exits) finish the job.
        """
        errors = []
        self._stage = "stopping"
        for part in (self.kafka, self.spark):
            if part is None:
                continue
            try:
                part.stop()
            except Exception as exc:  # keep stopping the rest
                errors.append(str(exc))
        if errors:
            self._stage = "stop failed"
            with contextlib.suppress(OSError):
                self._write_state()
            raise RuntimeErrorPlain("stopping the cluster failed: " + "; ".join(errors))
        (self.run_dir / "state.json").unlink(missing_ok=True)
        self._stage = "stopped"
        stop_reaper(self.reaper)
        self.reaper = None

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
            "workers": [{"index": w.index, "host": w.host, "netns": w.netns,
                         "webui_port": w.webui_port}
                        for w in self.spark.workers],
            "config": asdict(self.config),
            "timings": self.timings,
        }

    def _write_state(self) -> None:
        """Atomically replace ``state.json`` (a reader never sees half a file)."""
        spark_up = self.spark is not None and self.spark.master is not None
        state = {**(self.describe() if spark_up else {"config": asdict(self.config)}),
                 "owner": self.owner.as_dict(), "held": self.held, "stage": self._stage,
                 "complete": self._stage == "up",
                 "netns_prefix": f"{netns.NS_PREFIX}{self.netns_suffix}-",
                 "reaper_pid": self.reaper.pid if self.reaper is not None else None}
        path = self.run_dir / "state.json"
        tmp = path.with_name("state.json.tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(path)


def start_reaper(run_dir: Path, owner: Owner) -> subprocess.Popen[bytes]:
    """Start the watcher that cleans ``run_dir`` up if ``owner`` dies (own session)."""
    log = run_dir / "logs" / "reaper.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", REAPER_MODULE, "--run-dir", str(run_dir),
             "--owner-pid", str(owner.pid), "--owner-start", str(owner.start)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)


def stop_reaper(reaper: subprocess.Popen[bytes] | None) -> None:
    """The owner is done: end its reaper quietly (and reap it, no zombie)."""
    if reaper is None:
        return
    with contextlib.suppress(ProcessLookupError):
        reaper.send_signal(signal.SIGTERM)
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait(timeout=5)


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / "state.json").read_text())
    except (OSError, ValueError):
        return None


def force_down(run_dir: Path) -> list[str]:
    """Stop whatever a (possibly killed) pgval left in ``run_dir``; remove its namespaces.

    Only this run's namespaces are removed (their prefix is in ``state.json``), so other
    runs on the same host are left alone. ``state.json`` goes last, and only when nothing
    of the run is left, so a failed attempt can be repeated.
    """
    state = read_state(run_dir) or {}
    stopped = kill_recorded(Path(run_dir) / "pids")
    prefix = state.get("netns_prefix")
    if prefix:
        from pgval.runtime.delay import cleanup_delays

        stopped += [f"delay {d}" for d in cleanup_delays(prefix)]
        stopped += [f"netns {n}" for n in netns.cleanup_all(prefix)]
        suffix = prefix[len(netns.NS_PREFIX):].rstrip("-")
        if not any(n.startswith(prefix) for n in netns.list_namespaces()):
            ownership.unregister_netns(suffix)
    if not [name for name, alive in cluster_processes(run_dir) if alive]:
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
