"""The Docker Compose stack of compose/docker-compose.yml: its containers' names, labels and
addresses, and the Docker engine that runs it. Shared by the compose deployment
(:mod:`pgval.deploy.compose.deployment`) and the pumba faults (:mod:`pgval.deploy.compose.pumba`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound

from pgval.core.errors import EnvironmentFailure

#: Labels every container of compose/docker-compose.yml carries.
ROLE_LABEL = "pgval.role"
INDEX_LABEL = "pgval.index"
ROLES = ("kafka", "spark-master", "spark-worker", "runner")

#: Addresses of the compose deployment, from the host and from inside the compose network.
HOST_BOOTSTRAP = "127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094"
NETWORK_BOOTSTRAP = "kafka-0:19092,kafka-1:19092,kafka-2:19092"
SPARK_MASTER_URL = "spark://spark-master:7077"
RUNNER_CONTAINER = "pgval-runner"

DEFAULT_SOCKET = "unix:///var/run/docker.sock"

def worker_container(index: int) -> str:
    return f"pgval-spark-worker-{index}"


def broker_container(index: int) -> str:
    return f"pgval-kafka-{index}"


def spark_daemon_opts(conf: dict[str, str]) -> str:
    """``PGVAL_SPARK_DAEMON_OPTS`` for a profile's master/worker conf (fixed at container start)."""
    for key, value in conf.items():
        if any(c.isspace() for c in f"{key}{value}"):
            raise ValueError(f"a Spark daemon setting cannot contain spaces: {key}={value}")
    return " ".join(f"-D{key}={value}" for key, value in sorted(conf.items()))


def _engine_reason(exc: BaseException, where: str) -> str:
    """One short clause for why the engine did not answer (the SDK's text is a nested repr)."""
    if where.startswith("unix://") and not os.path.exists(where[len("unix://"):]):
        return "no socket there"
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    if any(isinstance(e, PermissionError) for e in chain) or "Permission denied" in str(exc):
        return "permission denied on the socket; add your user to the docker group"
    text = " ".join(str(exc).split())
    return text[:160] or type(exc).__name__


def require_engine(base_url: str | None = None, timeout_s: float = 10.0) -> docker.DockerClient:
    """A Docker SDK client that answered a ping, or a plain error saying what is missing."""
    where = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    try:
        if base_url:
            client = docker.DockerClient(base_url=base_url, timeout=int(timeout_s))
        else:
            client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except (DockerException, requests.RequestException, OSError) as exc:
        raise EnvironmentFailure(
            f"the Docker engine is not reachable at {where} ({_engine_reason(exc, where)}); "
            "install or start Docker to use --deploy compose") from exc
    return client


@dataclass(frozen=True)
class ContainerRef:
    """A pgval container as the Docker engine sees it right now."""

    name: str
    id: str
    role: str
    index: int
    status: str

    @property
    def running(self) -> bool:
        return self.status == "running"


def _ref(container: Any) -> ContainerRef:
    labels = container.labels or {}
    try:
        index = int(labels.get(INDEX_LABEL, "0"))
    except ValueError:
        index = 0
    return ContainerRef(name=container.name, id=container.id, role=labels.get(ROLE_LABEL, ""),
                        index=index, status=container.status)


def find_containers(role: str, client: docker.DockerClient | None = None) -> list[ContainerRef]:
    """Containers labelled ``pgval.role=<role>``, stopped ones too, ordered by ``pgval.index``."""
    client = client or require_engine()
    found = client.containers.list(all=True, filters={"label": f"{ROLE_LABEL}={role}"})
    return sorted((_ref(c) for c in found), key=lambda r: (r.index, r.name))


def get_container(client: docker.DockerClient, name: str) -> Any:
    try:
        return client.containers.get(name)
    except NotFound as exc:
        raise EnvironmentFailure(
            f"container {name} does not exist; start the deployment with "
            "`docker compose -f compose/docker-compose.yml up -d`") from exc
