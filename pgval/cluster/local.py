"""The embedded local cluster: Spark standalone (master + workers) and KRaft Kafka.

Start order matters: Spark first, because with isolation it creates the bridge
whose address Kafka must listen on (executors in worker namespaces cannot reach
the root namespace's 127.0.0.1). Stop order is the reverse.

``state.json`` in the run directory is written FIRST, before any process or namespace
exists: its owner (pid + start time), the namespace prefix about to be used and the
reaper watching the owner (:mod:`pgval.cluster.reaper`). It is updated as parts come up
and removed only when everything stopped, so a kill at any moment leaves a record that
``pgval cleanup`` (and the reaper) can act on, and ``pgval cluster status/down`` work
from another process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pgval.cluster.guard import start_reaper, stop_reaper
from pgval.core.errors import EnvironmentFailure
from pgval.core.files import write_private_json
from pgval.core.redact import private_dir
from pgval.core.spec import ClusterSpec
from pgval.host import netns, registry, signals
from pgval.host.identity import Owner
from pgval.kafka.broker import KafkaCluster
from pgval.spark.daemons import SparkCluster


class LocalCluster:
    """Kafka + Spark on this machine, stopped on error, exit and Ctrl-C (use ``with``).

    ``held=True`` (``pgval cluster up``): the cluster outlives the command that started
    it, so it gets no reaper and belongs to its record until ``pgval cluster down``.
    """

    def __init__(self, run_dir: Path, config: ClusterSpec | None = None,
                 held: bool = False) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.config = config or ClusterSpec()
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
                raise EnvironmentFailure(f"worker isolation was requested but {why}")
        registry.check_run_dir(self.run_dir)  # the reaper and cleanup trust its files
        # 0700, and the JVMs started below keep umask 077 for life: a `cluster up` cluster's
        # topic data, logs and credentials are this user's alone (a run's are already so).
        private_dir(self.run_dir)
        registry.check_run_dir(self.run_dir)  # again: it may have existed, or been planted
        t0 = time.monotonic()
        old_umask = os.umask(0o077)
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
            self.spark.prepare()  # the namespaces: the brokers listen on the bridge address
            self.kafka = KafkaCluster(self.run_dir, brokers=cfg.brokers,
                                      partitions=cfg.partitions, host=self.spark.driver_host,
                                      heap=cfg.broker_heap)
            self._write_state()
            self._start_both()
        except BaseException:
            with signals.shielded():
                self.stop()
            raise
        finally:
            os.umask(old_umask)
        self.timings["cluster_start_s"] = time.monotonic() - t0
        self._stage = "up"
        self._write_state()
        if self.held and self.spark.net is not None:
            registry.register_netns(self.netns_suffix, self.run_dir, held=True)
        return self

    def _start_both(self) -> None:
        """Spark's daemons and the brokers at once: each side is mostly JVM start-up, which
        the other core can do meanwhile (docs/performance.md, "Local cluster"). Both
        threads are waited for before an error goes up, so ``stop`` never races a start."""
        assert self.spark is not None and self.kafka is not None

        def timed(name: str, start: Callable[[], object]) -> None:
            t0 = time.monotonic()
            start()
            self.timings[f"{name}_start_s"] = time.monotonic() - t0

        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="cluster-start") as pool:
            futures = [pool.submit(timed, "spark", self.spark.start),
                       pool.submit(timed, "kafka", self.kafka.start)]
            wait(futures)
        for future in futures:
            if (error := future.exception()) is not None:
                raise error

    def stop(self, fast: bool = False) -> None:
        """Stop everything this cluster started; idempotent. ``fast``: SIGKILL every
        process at once (no controlled shutdown of the brokers, no graceful worker exit),
        for a cluster whose data nobody reads again: a run's own, once it is read back.

        ``state.json`` and the reaper stay when a part failed to stop: the record is what
        lets ``pgval cleanup`` (or the reaper, once this process exits) finish the job.
        """
        errors = []
        self._stage = "stopping"
        for part in (self.kafka, self.spark):
            if part is None:
                continue
            try:
                part.stop(grace_s=0.0) if fast else part.stop()
            except Exception as exc:  # keep stopping the rest
                errors.append(str(exc))
        if errors:
            self._stage = "stop failed"
            with contextlib.suppress(OSError):
                self._write_state()
            raise EnvironmentFailure("stopping the cluster failed: " + "; ".join(errors))
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
        write_private_json(self.run_dir / "state.json", state, indent=1)
