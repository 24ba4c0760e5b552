"""The Docker Compose stack (compose/docker-compose.yml) as a deployment.

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
from typing import TYPE_CHECKING, Any

from pgval.core.driver_spec import SETTINGS_ENV
from pgval.core.errors import EnvironmentFailure
from pgval.deploy.base import Deployment, DriverPlacement, FaultContext
from pgval.deploy.compose.pumba import PumbaFault
from pgval.deploy.compose.stack import (
    HOST_BOOTSTRAP,
    NETWORK_BOOTSTRAP,
    RUNNER_CONTAINER,
    SPARK_MASTER_URL,
    find_containers,
    require_engine,
    worker_container,
)
from pgval.faults.descriptor import CONTAINERS, DRIVER_PROCESS

if TYPE_CHECKING:
    from pgval.core.spec import RunSpec
    from pgval.faults.timeouts import TimeoutProfile

CONTAINER_RUNS = "/work/runs"
BROKERS = 3


class ComposeDeployment(Deployment):
    """Kafka + Spark from the compose stack; nothing here starts or stops containers."""

    kind = "compose"
    #: pumba on the target worker's container: a kill, or netem on its egress.
    mechanisms = frozenset({DRIVER_PROCESS, CONTAINERS})
    bootstrap_host = HOST_BOOTSTRAP
    driver_bootstrap = NETWORK_BOOTSTRAP
    master_url = SPARK_MASTER_URL
    driver_host = RUNNER_CONTAINER

    def __init__(self, run_dir: Path, partitions: int = 3, runs_root: Path | None = None,
                 workers: int = 2) -> None:
        super().__init__()
        self.run_dir = Path(run_dir).resolve()
        self.runs_root = (runs_root or Path("runs")).resolve()
        self._partitions = partitions
        self._workers = workers
        self.containers: list[Any] = []

    def start(self) -> ComposeDeployment:
        t0 = time.monotonic()
        try:
            self.run_dir.relative_to(self.runs_root)
        except ValueError:
            raise EnvironmentFailure(
                f"with --deploy compose the run directory must be under {self.runs_root} "
                "(the runner container mounts it); drop --run-dir or point it there") from None
        client = require_engine()
        missing = [role for role, need in (("kafka", BROKERS), ("spark-master", 1),
                                           ("spark-worker", 1), ("runner", 1))
                   if sum(c.status == "running" for c in find_containers(role, client)) < need]
        if missing:
            raise EnvironmentFailure(
                "the compose stack is not fully up (missing: " + ", ".join(missing) + "); run "
                "`docker compose -f compose/docker-compose.yml up -d --build` first")
        self.containers = sorted(find_containers("spark-worker", client), key=lambda c: c.index)
        self._workers = len(self.containers)
        self.timings["cluster_start_s"] = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """The stack is the user's; pgval leaves it running."""

    @property
    def partitions(self) -> int:
        return self._partitions

    def client_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_host}

    def driver_placement(self) -> DriverPlacement:
        return DriverPlacement(bootstrap=self.driver_bootstrap, master=self.master_url,
                               driver_host=self.driver_host, launcher=self.driver_launcher(),
                               python="python", path_map=self.container_path,
                               signal_argv=self.driver_signal_argv)

    @property
    def workers(self) -> int:
        return self._workers

    def container_kill(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                       ctx: FaultContext) -> PumbaFault:
        return PumbaFault(cfg.fault, "kill", worker_container(target), **self._fault_files(ctx))

    def container_delay(self, cfg: RunSpec, target: int, profile: TimeoutProfile,
                        ctx: FaultContext) -> PumbaFault:
        """The delay's ``--duration`` is the failure phase plus a margin, so pumba removes
        the delay by itself even if pgval dies; ``remove`` at T3 stops it earlier and
        verifies."""
        return PumbaFault(cfg.fault, "delay", worker_container(target),
                          delay_ms=profile.delay_ms or 500, duration_s=ctx.phase_seconds + 30,
                          **self._fault_files(ctx))

    @staticmethod
    def _fault_files(ctx: FaultContext) -> dict[str, Path]:
        """Where pumba's log, its pid file and the delay's undo record go."""
        return {"log_dir": ctx.run_dir / "faults", "pid_dir": ctx.run_dir / "pids",
                "run_dir": ctx.run_dir}

    def container_path(self, host_path: Path) -> str:
        """Where ``host_path`` (under runs/) appears inside the runner container."""
        rel = Path(host_path).resolve().relative_to(self.runs_root)
        return f"{CONTAINER_RUNS}/{rel.as_posix()}"

    def driver_launcher(self) -> list[str]:
        """``docker exec`` into the runner, passing the user's settings on by name: the
        docker client reads their values from its own environment (the driver's spec)."""
        by_name = [a for name in SETTINGS_ENV for a in ("-e", name)]
        return ["docker", "exec", *by_name, RUNNER_CONTAINER]

    def driver_signal_argv(self, signal_name: str) -> list[str]:
        """Signal the driver inside the container (killing `docker exec` would not)."""
        return ["docker", "exec", RUNNER_CONTAINER, "pkill", f"-{signal_name}", "-f",
                "pgval.topologies.driver"]

    def describe(self) -> dict[str, Any]:
        return {"deploy": "compose", "bootstrap": self.bootstrap_host,
                "driver_bootstrap": self.driver_bootstrap, "master": self.master_url,
                "workers": [w.name for w in self.containers], "timings": self.timings}
