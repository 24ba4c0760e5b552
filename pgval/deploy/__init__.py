"""Where a run's Kafka and Spark come from; see :mod:`pgval.deploy.base`."""

from __future__ import annotations

from pathlib import Path

from pgval.core.schema import Deploy
from pgval.core.spec import RunSpec
from pgval.deploy.base import Deployment, DriverPlacement, FaultContext


def make_deployment(cfg: RunSpec, cluster_dir: Path) -> Deployment:
    """The deployment ``cfg`` asks for (not started). ``cluster_dir``: where an embedded
    cluster pgval starts keeps its logs and data (the run's directory for one run)."""
    deploy = Deploy.parse(cfg.deploy)
    if deploy is Deploy.EXTERNAL:
        from pgval.deploy.external import ExternalDeployment

        assert cfg.bootstrap and cfg.master
        return ExternalDeployment(cfg.bootstrap, cfg.master, cfg.cluster.partitions,
                                  cfg.kafka_config, cfg.spark_conf, workers=cfg.cluster.workers)
    if deploy is Deploy.COMPOSE:
        from pgval.core.extras import require

        require("docker")
        from pgval.deploy.compose.deployment import ComposeDeployment

        return ComposeDeployment(cluster_dir, cfg.cluster.partitions,
                                 workers=cfg.cluster.workers)
    from pgval.deploy.embedded import AttachedDeployment, EmbeddedDeployment

    if cfg.running_cluster:
        return AttachedDeployment(Path(cfg.running_cluster))
    return EmbeddedDeployment(cluster_dir, cfg.cluster)


__all__ = ["Deployment", "DriverPlacement", "FaultContext", "make_deployment"]
