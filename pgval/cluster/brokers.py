"""The Kafka brokers of a `pgval cluster up` cluster, killed and started from its directory.

Why from the directory: a `cluster up` cluster outlives the command that started it, so a
run on it (``--cluster DIR``, or ``--deploy external`` with ``pgval cluster broker`` as its
nemesis) has no handle on its brokers — only what the cluster wrote: each broker's pid
file (``pids/kafka-broker-N.json``, with its start ticks, so a reused pid is never
killed) and its restart recipe (``kafka/broker-N/restart.json``, written at every start
by :class:`pgval.kafka.broker.KafkaCluster`). A broker started again here is recorded in
the cluster's own pid directory, in its own session: it belongs to the cluster (``pgval
cluster down`` stops it), not to the run that restarted it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from pgval.cluster.guard import read_state
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.host.identity import boot_id, start_ticks
from pgval.host.procs import spawn, wait_for_port
from pgval.host.registry import trusted_file
from pgval.kafka.admin import wait_for_brokers
from pgval.kafka.broker import (
    CLIENT_PROPERTIES,
    RESTART_FILE,
    KafkaCredentials,
    broker_process_name,
)


class RecordedBrokers:
    """The brokers of the cluster in ``cluster_dir`` (the protocol of
    :class:`pgval.kafka.broker.KafkaCluster`'s one-broker methods)."""

    def __init__(self, cluster_dir: Path, client_config: dict[str, str]) -> None:
        self.cluster_dir = Path(cluster_dir).resolve()
        self.client_config = dict(client_config)

    @classmethod
    def of_cluster(cls, cluster_dir: Path) -> RecordedBrokers:
        """The brokers of the running cluster in ``cluster_dir``, reached with its own
        address and login (``state.json``, ``kafka/client.properties``)."""
        state = read_state(cluster_dir) or {}
        if not state.get("complete"):
            raise UserMistake(f"no running cluster in {cluster_dir}")
        creds = KafkaCredentials.read(Path(cluster_dir).resolve() / "kafka" / CLIENT_PROPERTIES)
        return cls(cluster_dir, {"bootstrap.servers": state["bootstrap"],
                                 **(creds.client_config() if creds is not None else {})})

    @property
    def node_ids(self) -> list[int]:
        ids = sorted(recipe["node_id"] for recipe in self._recipes())
        if not ids and list((self.cluster_dir / "pids").glob("kafka-broker-*.json")):
            raise EnvironmentFailure(
                f"the cluster in {self.cluster_dir} was started by an older pgval, which did "
                "not record how to restart its brokers; restart it with `pgval cluster "
                "down` and `pgval cluster up`")
        return ids

    def node_pid(self, node_id: int) -> int | None:
        """The running process of broker ``node_id`` (the JVM leads its group), or None.

        By the JVM's own start ticks, not by its group: the broker is no child of this
        process, and where nothing reaps orphans (a container's init may not) a killed
        broker stays a zombie, whose group still exists but which runs nothing."""
        record = self._pid_record(node_id)
        try:
            pgid, start = int(record["pgid"]), int(record["start"])  # type: ignore[index]
        except (TypeError, KeyError, ValueError):
            return None
        if record.get("boot") not in (None, boot_id()) or start_ticks(pgid) != start:
            return None
        return pgid

    def kill_node(self, node_id: int, timeout_s: float = 10.0) -> int | None:
        """SIGKILL broker ``node_id``'s process group; the pid killed, None if it was down.
        Returns once the JVM has ended (dead or a zombie)."""
        self._recipe(node_id)  # a plain error for an id the cluster does not have
        pid = self.node_pid(node_id)
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while self.node_pid(node_id) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        return pid

    def restart_node(self, node_id: int, timeout_s: float = 90.0) -> int:
        """Start broker ``node_id`` again from its recipe (its ports, storage and config);
        returns once it listens and the cluster lists every broker."""
        running = self.node_pid(node_id)
        if running is not None:
            return running
        recipe = self._recipe(node_id)
        deadline = time.monotonic() + timeout_s
        node_dir = self._node_dir(node_id)
        # As every process of the cluster: its files this user's alone (LocalCluster.start).
        old_umask = os.umask(0o077)
        try:
            proc = spawn(broker_process_name(node_id), [str(a) for a in recipe["argv"]],
                         node_dir / "broker.log", cwd=node_dir,
                         pid_dir=self.cluster_dir / "pids")
        finally:
            os.umask(old_umask)
        wait_for_port(str(recipe["host"]), int(recipe["port"]), timeout_s, proc)
        self._wait_registered(deadline)
        return proc.pid

    def _wait_registered(self, deadline: float) -> None:
        if not wait_for_brokers(self.client_config, set(self.node_ids),
                                max(1.0, deadline - time.monotonic())):
            raise EnvironmentFailure(f"the restarted Kafka broker of {self.cluster_dir} did "
                                    "not register with the cluster in time")

    def _node_dir(self, node_id: int) -> Path:
        return self.cluster_dir / "kafka" / f"broker-{node_id}"

    def _recipes(self) -> list[dict[str, Any]]:
        """The restart recipes the cluster wrote; only trusted files (this user's, not
        writable by others, no link): the reaper may run one as root."""
        out = []
        for path in sorted((self.cluster_dir / "kafka").glob(f"broker-*/{RESTART_FILE}")):
            if not trusted_file(path):
                continue
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def _recipe(self, node_id: int) -> dict[str, Any]:
        for recipe in self._recipes():
            if recipe.get("node_id") == node_id:
                return recipe
        raise UserMistake(f"no Kafka broker {node_id} in the cluster in {self.cluster_dir} "
                          f"(brokers {self.node_ids})")

    def _pid_record(self, node_id: int) -> dict[str, Any] | None:
        path = self.cluster_dir / "pids" / f"{broker_process_name(node_id)}.json"
        if not trusted_file(path):
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None


def main(argv: list[str] | None = None) -> int:
    """``python -m pgval.cluster.brokers start --run-dir DIR BROKER``: what a reaper runs to
    bring back a broker a run on this cluster had killed (the undo of a broker crash)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m pgval.cluster.brokers")
    ap.add_argument("action", choices=("start",))
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("broker", type=int)
    args = ap.parse_args(argv)
    try:
        pid = RecordedBrokers.of_cluster(args.run_dir).restart_node(args.broker)
    except (UserMistake, EnvironmentFailure) as exc:
        print(f"error: {exc}", flush=True)
        return exc.exit_status
    print(f"Kafka broker {args.broker} is running (pid {pid})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
