"""The one place pgval creates and deletes topics, with one rule on every cluster.

Every topic pgval writes — a run's prefixed topics on any deployment, the plain topics of
its embedded cluster, the benches' — is made by :func:`create_topics`, so the oracle and
the validator can rely on the same things everywhere:

* ``LogAppendTime``: the broker's clock stamps ingress, which latency and the phases are
  measured with; ``retention.ms=-1``: nothing a run wrote is deleted before it is read.
* Partition ``p`` of every topic is led by the same broker (``brokers[p % B]``, from the
  cluster's own metadata): a fault on one broker hits the same partitions of the inputs,
  the output and the marker topic, and an output gets its LogAppendTime from the clock of
  its inputs' broker.
* ``min(3, B)`` replicas and ``min.insync.replicas`` 2 with three (1 with fewer,
  :func:`min_insync`): with every writer at ``acks=all`` (pgval's producers, Spark's Kafka
  sink, the e1 sink) a record acknowledged is on two brokers, so one broker may crash
  without losing an acknowledged record or stopping the writes.
* ``max.message.bytes`` :data:`pgval.core.schema.MAX_RECORD_BYTES` (16 MiB, not Kafka's 1 MiB):
  an output row carries the IDs of its inputs, and the instrument must not refuse a row
  Spark can make. Replicas fetch a larger batch anyway (``replica.fetch.max.bytes`` is
  not an absolute maximum since KIP-74).
* The commit-marker topic is compacted.
* A topic that already exists is an error: it would hold someone else's records.
* It returns only once *every* broker's metadata shows every partition with its preferred
  leader, so no client that next talks to another broker finds the topic missing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import MAX_RECORD_BYTES
from pgval.kafka.client import quiet_conf

#: Settings of every topic pgval creates (see the module docstring), but its replicas.
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1",
                "max.message.bytes": str(MAX_RECORD_BYTES)}
#: Replicas of a partition: as many as there are brokers, up to this.
MAX_REPLICATION = 3


def replication_for(brokers: int) -> int:
    """Replicas of every partition on a cluster of ``brokers``: min(3, B)."""
    return max(1, min(MAX_REPLICATION, brokers))


def min_insync(replication: int) -> int:
    """``min.insync.replicas`` for ``replication`` replicas: 2 of 3 (one broker may be down
    and an ``acks=all`` write still lands on two); 1 of 1 or 2 (with two, 2 would stop
    every write while one broker is down)."""
    return 2 if replication >= 3 else 1


def admin_client(config: Mapping[str, object]) -> AdminClient:
    """An admin client for ``config`` (``bootstrap.servers`` and the login), kept quiet."""
    return AdminClient(quiet_conf(str(config["bootstrap.servers"]), config))


def is_reachable(bootstrap: str, timeout_s: float = 5.0,
                 config: Mapping[str, object] | None = None) -> bool:
    """True when some broker at ``bootstrap`` answers a metadata request within ``timeout_s``
    (with ``config``'s login; without one, a closed cluster does not answer)."""
    try:
        admin_client({**(config or {}), "bootstrap.servers": bootstrap}).list_topics(
            timeout=timeout_s)
    except KafkaException:
        return False
    return True


def _brokers(admin: AdminClient, timeout_s: float) -> dict[int, str]:
    """Broker id -> ``host:port`` as the cluster advertises it to this client."""
    try:
        md = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise EnvironmentFailure(f"Kafka did not answer: {exc.args[0].str()}") from exc
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


def broker_ids(config: Mapping[str, object], timeout_s: float = 15.0) -> list[int]:
    """The ids of the brokers the cluster at ``config`` reports, sorted."""
    return sorted(_brokers(admin_client(config), timeout_s))


def wait_for_brokers(config: Mapping[str, object], wanted: set[int], timeout_s: float,
                     poll_s: float = 0.2) -> bool:
    """Whether every broker of ``wanted`` is in the cluster's metadata within ``timeout_s``
    (a restarted broker is listed once it registered again and was unfenced)."""
    admin = admin_client(config)
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(KafkaException):
            if wanted <= set(admin.list_topics(timeout=2.0).brokers):
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def aligned_assignment(brokers: list[int], partitions: int, replication: int) -> list[list[int]]:
    """Partition p of every topic on ``brokers[p % B]`` first (its preferred leader), then
    the next ``replication - 1`` brokers in turn."""
    n = len(brokers)
    return [[brokers[(p + k) % n] for k in range(replication)] for p in range(partitions)]


def create_topics(config: Mapping[str, object], names: Sequence[str], partitions: int,
                  compacted: Sequence[str] = (), timeout_s: float = 60.0) -> None:
    """Create ``names`` (``compacted`` among them compacted) by the rule of the module
    docstring, on the cluster ``config`` reaches (``bootstrap.servers`` and its login)."""
    if partitions < 1:
        raise EnvironmentFailure("topics need at least one partition")
    names = list(dict.fromkeys(names))
    admin = admin_client(config)
    addresses = _brokers(admin, min(timeout_s, 15.0))
    if not addresses:
        raise EnvironmentFailure("Kafka reported no brokers")
    brokers = sorted(addresses)
    replication = replication_for(len(brokers))
    assignment = aligned_assignment(brokers, partitions, replication)
    new = [NewTopic(name, num_partitions=partitions, replica_assignment=assignment,
                    # librdkafka wants the partition count *with* an assignment (not -1).
                    config={**TOPIC_CONFIG,
                            "min.insync.replicas": str(min_insync(replication)),
                            **({"cleanup.policy": "compact"} if name in compacted else {})})
           for name in names]
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise EnvironmentFailure(f"topic {name} already exists; pgval only writes "
                                        "topics it created itself") from exc
            raise EnvironmentFailure(f"could not create topic {name}: {err.str()}") from exc
    _wait_for_leaders(config, [addresses[b] for b in brokers], names, assignment,
                      time.monotonic() + timeout_s)


def _wait_for_leaders(config: Mapping[str, object], targets: list[str], names: list[str],
                      assignment: list[list[int]], deadline: float) -> None:
    """Block until every broker in ``targets`` has every partition of ``names`` with its
    preferred leader in its metadata.

    Asking one broker is not enough: in KRaft each broker applies the controller's records
    on its own, so a client that next talks to another broker can find the topic missing
    (CI failed once with ``KeyError: 'get'`` right after topic creation). Each broker is
    asked through a client bootstrapped on it alone, whose metadata requests go to it.
    """
    wanted = {p: replicas[0] for p, replicas in enumerate(assignment)}
    clients = {t: admin_client({**config, "bootstrap.servers": t}) for t in targets}
    pending = {(t, name) for t in targets for name in names}
    while True:
        for target in sorted({t for t, _ in pending}):
            md = None
            with contextlib.suppress(KafkaException):
                md = clients[target].list_topics(timeout=5.0)
            for name in [n for t, n in pending if t == target]:
                tmd = md.topics.get(name) if md is not None else None
                if (tmd is not None and tmd.error is None
                        and len(tmd.partitions) == len(wanted)
                        and all(p in tmd.partitions and tmd.partitions[p].leader == lead
                                for p, lead in wanted.items())):
                    pending.discard((target, name))
        if not pending:
            return
        if time.monotonic() > deadline:
            late = sorted({n for _, n in pending})
            raise EnvironmentFailure(f"topics {', '.join(late)} did not get their assigned "
                                    "leaders on every broker in time")
        time.sleep(0.2)


def delete_topics(config: Mapping[str, object], names: Sequence[str],
                  timeout_s: float = 60.0) -> list[str]:
    """Delete ``names``; returns the names deleted (a missing one is not an error)."""
    admin = admin_client(config)  # held until the futures resolve: a dropped client fails them
    futures = admin.delete_topics(list(names), operation_timeout=timeout_s,
                                  request_timeout=timeout_s)
    deleted = []
    for name, fut in futures.items():
        try:
            fut.result()
            deleted.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise EnvironmentFailure(f"could not delete topic {name}: "
                                        f"{exc.args[0].str()}") from exc
    return deleted
