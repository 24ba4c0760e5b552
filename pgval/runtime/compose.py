"""The Docker Compose deployment (compose/docker-compose.yml) as an experiment target.

The user brings the stack up (``docker compose -f compose/docker-compose.yml up -d``);
pgval only uses it: the generator, the output monitor and the validator reach
Kafka through the ports published on 127.0.0.1, the Spark driver runs inside the
``pgval-runner`` container (executors must reach it on the compose network), and
faults go through pumba. Run directories live under ``runs/``, which the runner
container mounts at ``/work/runs``, so the driver's checkpoint and progress file
are visible on both sides.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pgval.faults.pumba import (
    HOST_BOOTSTRAP,
    NETWORK_BOOTSTRAP,
    RUNNER_CONTAINER,
    SPARK_MASTER_URL,
    find_containers,
    require_engine,
)
from pgval.runtime.kafka import KafkaCluster
from pgval.runtime.procs import RuntimeErrorPlain
from pgval.schema import GET_TOPIC, MARKER_TOPIC, OUTPUT_TOPIC, POST_TOPIC

CONTAINER_RUNS = "/work/runs"
BROKERS = 3


class ComposeDeployment:
    """Kafka + Spark from the compose stack; nothing here starts or stops containers."""

    def __init__(self, run_dir: Path, partitions: int = 3, runs_root: Path | None = None) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.runs_root = (runs_root or Path("runs")).resolve()
        self.partitions = partitions
        self.timings: dict[str, float] = {}
        self.workers: list[Any] = []
        self.spark = None  # no local Spark handles: faults go through pumba

    # The same surface the experiment uses on LocalCluster.
    bootstrap = HOST_BOOTSTRAP
    driver_bootstrap = NETWORK_BOOTSTRAP
    master_url = SPARK_MASTER_URL
    driver_host = RUNNER_CONTAINER

    def start(self) -> ComposeDeployment:
        t0 = time.monotonic()
        try:
            self.run_dir.relative_to(self.runs_root)
        except ValueError:
            raise RuntimeErrorPlain(
                f"with --deploy compose the run directory must be under {self.runs_root} "
                "(the runner container mounts it); drop --run-dir or point it there") from None
        client = require_engine()
        missing = [role for role, need in (("kafka", BROKERS), ("spark-master", 1),
                                           ("spark-worker", 1), ("runner", 1))
                   if sum(c.status == "running" for c in find_containers(role, client)) < need]
        if missing:
            raise RuntimeErrorPlain(
                "the compose stack is not fully up (missing: " + ", ".join(missing) + "); run "
                "`docker compose -f compose/docker-compose.yml up -d --build` first")
        self.workers = sorted(find_containers("spark-worker", client), key=lambda c: c.index)
        kafka = KafkaCluster(self.run_dir, brokers=BROKERS, partitions=self.partitions,
                             external_bootstrap=HOST_BOOTSTRAP)
        kafka.create_topics([GET_TOPIC, POST_TOPIC, OUTPUT_TOPIC, MARKER_TOPIC],
                            compacted=[MARKER_TOPIC])
        self.timings["cluster_start_s"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """The stack is the user's; pgval leaves it running."""

    def container_path(self, host_path: Path) -> str:
        """Where ``host_path`` (under runs/) appears inside the runner container."""
        rel = Path(host_path).resolve().relative_to(self.runs_root)
        return f"{CONTAINER_RUNS}/{rel.as_posix()}"

    def driver_launcher(self) -> list[str]:
        return ["docker", "exec", RUNNER_CONTAINER]

    def driver_signal_argv(self, signal_name: str) -> list[str]:
        """Signal the driver inside the container (killing `docker exec` would not)."""
        return ["docker", "exec", RUNNER_CONTAINER, "pkill", f"-{signal_name}", "-f",
                "pgval.topologies.driver"]

    def describe(self) -> dict[str, Any]:
        return {"deploy": "compose", "bootstrap": self.bootstrap,
                "driver_bootstrap": self.driver_bootstrap, "master": self.master_url,
                "workers": [w.name for w in self.workers], "timings": self.timings}
