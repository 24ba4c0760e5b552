"""A warm cluster: one deployment kept up across the runs of a matrix or an OIR search.

Each run still gets fresh topics (its own prefix), its own checkpoint and, unless the
campaign shares one (``shared_driver``: pgval.deploy.shared_driver), its own driver; only
the cluster's JVMs stay. Before each run the deployment restores what an earlier run's
fault took away (a worker a failed run left crashed). The embedded cluster's daemons read
some settings only at start (the lowered time-outs of ``delay-gt-timeout``), so a run that
needs other daemon settings gets a fresh cluster; :func:`daemon_key` orders cells so that
happens at most once per matrix.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from pgval.core.redact import private_dir
from pgval.core.schema import Deploy
from pgval.core.spec import RunSpec
from pgval.deploy import Deployment, make_deployment
from pgval.deploy.shared_driver import SharedDrivers
from pgval.faults.timeouts import profile_for
from pgval.host import signals


def daemon_conf(cfg: RunSpec) -> dict[str, str]:
    """The Spark daemons' settings a run of ``cfg`` needs (its fault's time-out profile)."""
    return {**profile_for(cfg.fault, cfg.phase_seconds, cfg.delay_ms,
                             [p.fault for p in cfg.schedule_parts]).daemon_conf,
            **cfg.cluster.spark_daemon_conf}


def daemon_key(cfg: RunSpec) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(daemon_conf(cfg).items()))


def cluster_size_key(cfg: RunSpec) -> str:
    """What an embedded cluster is made of (a run asking for 3 brokers never gets a warm
    cluster of 1); the partitions are each run's own topics'."""
    c = cfg.cluster
    return (f"brokers={c.brokers},workers={c.workers},cores={c.cores_per_worker},"
            f"memory={c.worker_memory},heap={c.broker_heap},isolate={c.isolate}")


class WarmDeployments:
    """Hands out a running deployment per run; stops what it started in :meth:`close`."""

    def __init__(self, root: Path, label: str = "cluster", shared_driver: bool = False) -> None:
        self.root = Path(root)
        self.label = label
        self.current: Deployment | None = None
        self._key: str | None = None
        self.started = 0
        #: The campaign's shared driver (None: every run starts its own). It is stopped
        #: before the cluster it runs on.
        self.drivers = SharedDrivers(self.root, label) if shared_driver else None

    def for_run(self, cfg: RunSpec) -> Deployment:
        embedded = Deploy.parse(cfg.deploy) is Deploy.LOCAL and not cfg.running_cluster
        key = f"{cfg.deploy}|{cfg.running_cluster}|{cfg.bootstrap}|{cfg.master}|" + (
            f"{daemon_key(cfg)}|{cluster_size_key(cfg)}" if embedded else "")
        if self.current is not None and key == self._key:
            return self.current
        self.close()
        cluster_cfg = dataclasses.replace(cfg.cluster, spark_daemon_conf=daemon_conf(cfg))
        run_cfg = dataclasses.replace(cfg, cluster=cluster_cfg)
        self.started += 1
        cluster_dir = self.root / f"{self.label}-{self.started}"
        private_dir(cluster_dir)  # 0700, as a run's directory (pgval.core.redact)
        deployment = make_deployment(run_cfg, cluster_dir)
        self.current, self._key = deployment, key
        deployment.start()
        return deployment

    def close(self) -> None:
        """Stop the current deployment (a cluster pgval started); safe to call twice."""
        if self.drivers is not None:
            with signals.shielded(), contextlib.suppress(Exception):
                self.drivers.close()
        if self.current is None:
            return
        deployment, self.current, self._key = self.current, None, None
        with signals.shielded(), contextlib.suppress(Exception):
            deployment.stop()

    def __enter__(self) -> WarmDeployments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
