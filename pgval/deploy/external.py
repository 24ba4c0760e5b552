"""A user's own Kafka and Spark (``--deploy external``).

pgval never starts, stops or reconfigures them: it creates the run's topics (its own
prefix) and deletes them afterwards unless ``--keep-topics``, and runs the driver on this
machine in client mode against ``--master`` (spark://, k8s://, yarn, local[N]); the driver
ships the Kafka connector jars to the executors itself (``spark.jars``). The user's Kafka
client settings (``--kafka-config``, e.g. SASL/SSL) go to pgval's own clients and to
Spark's Kafka source and sink; ``--spark-conf`` to the driver.

Faults: ``driver-crash`` kills the local driver; ``crash`` asks the driver to kill one
executor through Spark's own API (any cluster manager replaces it); delay faults and
``broker-crash`` run the user's nemesis commands. See docs/deploy.md.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pgval.core.errors import EnvironmentFailure
from pgval.deploy.base import Deployment, DriverPlacement, FaultContext
from pgval.faults.broker_crash import BROKER_CRASH_NEMESIS, BrokerCrash
from pgval.faults.descriptor import DRIVER_PROCESS, EXECUTOR_KILL, NEMESIS
from pgval.faults.nemesis import NemesisBrokers, NemesisDelay
from pgval.kafka.admin import broker_ids

if TYPE_CHECKING:
    from pgval.core.spec import RunSpec
    from pgval.faults.timeouts import TimeoutProfile


class ExternalDeployment(Deployment):
    kind = "external"
    #: The cluster is the user's: a crash is an executor kill through the driver, a delay
    #: or a broker crash the user's own nemesis.
    mechanisms = frozenset({DRIVER_PROCESS, EXECUTOR_KILL, NEMESIS})

    def __init__(self, bootstrap: str, master: str, partitions: int,
                 kafka_config: dict[str, str] | None = None,
                 spark_conf: dict[str, str] | None = None, workers: int = 1) -> None:
        super().__init__()
        self._bootstrap = bootstrap
        self.master = master
        self._partitions = partitions
        self.kafka_config = dict(kafka_config or {})
        self.spark_conf = dict(spark_conf or {})
        self._workers = max(1, workers)
        self.brokers: list[int] = []

    def start(self) -> ExternalDeployment:
        """Check that Kafka answers (nothing is started)."""
        t0 = time.monotonic()
        self.brokers = broker_ids(self.client_config())
        if not self.brokers:
            raise EnvironmentFailure(f"Kafka at {self._bootstrap} reported no brokers")
        self.timings["cluster_start_s"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """The cluster is the user's; nothing to stop."""

    @property
    def partitions(self) -> int:
        return self._partitions

    def client_config(self) -> dict[str, Any]:
        return {**self.kafka_config, "bootstrap.servers": self._bootstrap}

    def driver_placement(self) -> DriverPlacement:
        return DriverPlacement(bootstrap=self._bootstrap, master=self.master,
                               driver_host=self.spark_conf.get("spark.driver.host"),
                               kafka_options=self.kafka_config)

    @property
    def workers(self) -> int:
        return self._workers

    def nemesis_delay(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                      ctx: FaultContext) -> NemesisDelay:
        if not (cfg.nemesis_inject and cfg.nemesis_remove):
            raise EnvironmentFailure(f"--fault {cfg.fault} on an external cluster needs "
                                    "--nemesis-inject and --nemesis-remove")
        return NemesisDelay(cfg.fault, cfg.nemesis_inject, cfg.nemesis_remove, target,
                            profile.delay_ms or 500, run_dir=ctx.run_dir)

    def broker_crash(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                     ctx: FaultContext) -> BrokerCrash:
        """The user's nemesis stops broker ``{broker}`` and starts it again; pgval judges
        from the cluster's metadata (:class:`NemesisBrokers`)."""
        if not (cfg.nemesis_inject and cfg.nemesis_remove):
            raise EnvironmentFailure(BROKER_CRASH_NEMESIS)
        if "{broker}" not in cfg.nemesis_inject and not isinstance(cfg.target, int):
            raise EnvironmentFailure(
                "--nemesis-inject must name {broker}: pgval chooses the broker at T2 (the "
                "output's leader, or the coordinator); or give --target K for a fixed one")
        brokers = NemesisBrokers(cfg.nemesis_inject, cfg.nemesis_remove, self.client_config())
        return self.crash_a_broker(brokers, cfg, ctx)

    def describe(self) -> dict[str, Any]:
        return {"deploy": "external", "bootstrap": self._bootstrap, "master": self.master,
                "brokers": self.brokers,
                "kafka_config_keys": sorted(self.kafka_config),  # values may be secrets
                "spark_conf_keys": sorted(self.spark_conf), "timings": self.timings}
