"""A run's topics on a cluster pgval does not own (compose, external, a warm cluster).

Every run gets its own prefix (:meth:`pgval.schema.Topics.with_prefix`), so two runs on one
cluster never read each other's records, and its topics are deleted once the run is stored.
Inputs and outputs use ``LogAppendTime``: the broker's clock stamps ingress, which the
validator's latency and phases are measured with.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from pgval.errors import RuntimeErrorPlain
from pgval.schema import Topics

TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1"}


def broker_ids(admin: AdminClient, timeout_s: float = 15.0) -> list[int]:
    try:
        return sorted(admin.list_topics(timeout=timeout_s).brokers)
    except KafkaException as exc:
        raise RuntimeErrorPlain(f"Kafka did not answer: {exc.args[0].str()}") from exc


def aligned_assignment(brokers: list[int], partitions: int, replication: int) -> list[list[int]]:
    """Partition p of every topic led by the same broker (``brokers[p % B]``), so an output
    lands on the broker of its inputs and both get their LogAppendTime from one clock."""
    n = len(brokers)
    return [[brokers[(p + k) % n] for k in range(replication)] for p in range(partitions)]


def create_topics(admin: AdminClient, topics: Topics, partitions: int,
                  replication: int | None = None, timeout_s: float = 60.0) -> None:
    """Create the run's four topics (replication: up to 3, no more than there are brokers)
    and wait until every partition has its preferred leader; an existing topic is an error
    (it would hold someone else's records)."""
    brokers = broker_ids(admin)
    if not brokers:
        raise RuntimeErrorPlain("Kafka reported no brokers")
    assignment = aligned_assignment(brokers, partitions, replication or min(3, len(brokers)))
    new = []
    for name in topics.all():
        config = dict(TOPIC_CONFIG)
        config["min.insync.replicas"] = "1"
        if name == topics.marker:
            config["cleanup.policy"] = "compact"
        # librdkafka wants the partition count *with* an assignment (not -1 as documented).
        new.append(NewTopic(name, num_partitions=partitions, replica_assignment=assignment,
                            config=config))
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeErrorPlain(f"topic {name} already exists; pgval only writes topics "
                                        "it created for the run") from exc
            raise RuntimeErrorPlain(f"could not create topic {name}: {err.str()}") from exc
    wait_for_leaders(admin, topics.all(), assignment, time.monotonic() + timeout_s)


def wait_for_leaders(admin: AdminClient, names: tuple[str, ...], assignment: list[list[int]],
                     deadline: float) -> None:
    while True:
        md = admin.list_topics(timeout=10)
        ready = all(
            name in md.topics and md.topics[name].error is None
            and len(md.topics[name].partitions) == len(assignment)
            and all(pm.leader == assignment[p][0]
                    for p, pm in md.topics[name].partitions.items())
            for name in names)
        if ready:
            return
        if time.monotonic() > deadline:
            raise RuntimeErrorPlain(f"the run's topics ({', '.join(names)}) got no leaders in "
                                    "time")
        time.sleep(0.2)


def delete_topics(admin: AdminClient, topics: Topics, timeout_s: float = 60.0) -> list[str]:
    """Delete the run's topics; returns the names deleted (a missing one is not an error)."""
    futures = admin.delete_topics(list(topics.all()), operation_timeout=timeout_s,
                                  request_timeout=timeout_s)
    deleted = []
    for name, fut in futures.items():
        try:
            fut.result()
            deleted.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise RuntimeErrorPlain(f"could not delete topic {name}: "
                                        f"{exc.args[0].str()}") from exc
    return deleted
