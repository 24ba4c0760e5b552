"""The one topic rule of pgval.kafka.admin, against a scripted admin client (no broker).

What a real broker makes of it (LogAppendTime, compaction, leaders on three brokers, an
existing topic refused) is tests/test_kafka_runtime.py's; here: the exact requests, which
brokers are asked before it returns, and each failure as one sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pgval.core.errors import PgvalError
from pgval.core.schema import MAX_RECORD_BYTES
from pgval.kafka import admin
from pgval.kafka.admin import aligned_assignment, create_topics, delete_topics

BROKERS = {4: "h4:9092", 7: "h7:9092", 9: "h9:9092"}


class FakeCluster:
    """Brokers ``brokers`` (id -> address); created topics appear in a broker's metadata
    once that broker has been asked more than ``lag[address]`` times."""

    def __init__(self, lag: dict[str, int] | None = None,
                 errors: dict[str, int] | None = None,
                 brokers: dict[int, str] | None = None) -> None:
        self.brokers = BROKERS if brokers is None else brokers
        self.lag = dict(lag or {})
        self.errors = dict(errors or {})  # topic -> KafkaError code of its future
        self.created: list[Any] = []
        self.asked: dict[str, int] = {}
        self.deleted: list[str] = []

    def client(self, conf: dict[str, Any]) -> FakeAdmin:
        return FakeAdmin(self, conf)


class FakeAdmin:
    def __init__(self, cluster: FakeCluster, conf: dict[str, Any]) -> None:
        self.cluster, self.bootstrap = cluster, conf["bootstrap.servers"]
        assert conf["log_level"] == 0  # quiet: pgval says what went wrong itself

    def list_topics(self, timeout: float) -> SimpleNamespace:
        c = self.cluster
        c.asked[self.bootstrap] = c.asked.get(self.bootstrap, 0) + 1
        shown = c.asked[self.bootstrap] > c.lag.get(self.bootstrap, 0)
        topics = {t.topic: SimpleNamespace(error=None, partitions={
            p: SimpleNamespace(leader=r[0]) for p, r in enumerate(t.replica_assignment)})
            for t in c.created} if shown else {}
        brokers = {i: SimpleNamespace(id=i, host=a.split(":")[0], port=int(a.split(":")[1]))
                   for i, a in c.brokers.items()}
        return SimpleNamespace(brokers=brokers, topics=topics)

    def create_topics(self, new: list[Any], **_: object) -> dict[str, Future]:
        out = {}
        for t in new:
            fut: Future = Future()
            if t.topic in self.cluster.errors:
                fut.set_exception(KafkaException(KafkaError(self.cluster.errors[t.topic])))
            else:
                self.cluster.created.append(t)
                fut.set_result(None)
            out[t.topic] = fut
        return out

    def delete_topics(self, names: list[str], **_: object) -> dict[str, Future]:
        out = {}
        for name in names:
            fut: Future = Future()
            code = self.cluster.errors.get(name)
            if code is not None:
                fut.set_exception(KafkaException(KafkaError(code)))
            else:
                self.cluster.deleted.append(name)
                fut.set_result(None)
            out[name] = fut
        return out


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeCluster]:
    def make(**kwargs: Any) -> FakeCluster:
        cluster = FakeCluster(**kwargs)
        monkeypatch.setattr(admin, "AdminClient", cluster.client)
        return cluster
    return make


CONFIG = {"bootstrap.servers": "h4:9092", "sasl.password": "pw"}


def test_every_topic_gets_the_one_rule(fake: Callable[..., FakeCluster]) -> None:
    """LogAppendTime, kept forever, records up to MAX_RECORD_BYTES (an output row carries
    its inputs' IDs); partition p first on broker ids[p % B] of the cluster's
    own ids; min(3, B) replicas and, with 3, min ISR 2 (one broker down loses nothing
    acknowledged: docs/faults.md, "Broker crash"); only the marker compacted; duplicates
    once."""
    cluster = fake()
    create_topics(CONFIG, ["a", "b", "a", "m"], 4, compacted=["m"])
    assert [t.topic for t in cluster.created] == ["a", "b", "m"]
    for t in cluster.created:
        assert t.num_partitions == 4
        assert t.replica_assignment == [[4, 7, 9], [7, 9, 4], [9, 4, 7], [4, 7, 9]]
        assert t.config == {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1",
                            "max.message.bytes": str(MAX_RECORD_BYTES),
                            "min.insync.replicas": "2",
                            **({"cleanup.policy": "compact"} if t.topic == "m" else {})}


def test_it_returns_only_once_every_broker_shows_the_leaders(
        fake: Callable[..., FakeCluster]) -> None:
    """A broker that has not applied the topics yet is asked again; each broker is asked
    through a client of its own."""
    cluster = fake(lag={"h9:9092": 3})
    create_topics(CONFIG, ["a"], 2)
    assert set(cluster.asked) == set(BROKERS.values())
    assert cluster.asked["h9:9092"] == 4 and cluster.asked["h7:9092"] == 1


def test_a_broker_that_never_shows_them_is_one_sentence(
        fake: Callable[..., FakeCluster]) -> None:
    fake(lag={"h7:9092": 10**6})
    with pytest.raises(PgvalError, match="topics a, b did not get their assigned "
                                                "leaders on every broker in time"):
        create_topics(CONFIG, ["b", "a"], 1, timeout_s=0.3)


def test_an_existing_topic_is_refused(fake: Callable[..., FakeCluster]) -> None:
    fake(errors={"a": KafkaError.TOPIC_ALREADY_EXISTS})
    with pytest.raises(PgvalError, match="topic a already exists; pgval only writes"):
        create_topics(CONFIG, ["a"], 1)


def test_other_creation_errors_name_the_topic(fake: Callable[..., FakeCluster]) -> None:
    fake(errors={"a": KafkaError.TOPIC_AUTHORIZATION_FAILED})
    with pytest.raises(PgvalError, match="could not create topic a: "):
        create_topics(CONFIG, ["a"], 1)


def test_delete_ignores_a_missing_topic_only(fake: Callable[..., FakeCluster]) -> None:
    cluster = fake(errors={"gone": KafkaError.UNKNOWN_TOPIC_OR_PART})
    assert delete_topics(CONFIG, ["a", "gone", "b"]) == ["a", "b"]
    assert cluster.deleted == ["a", "b"]
    fake(errors={"a": KafkaError.TOPIC_AUTHORIZATION_FAILED})
    with pytest.raises(PgvalError, match="could not delete topic a"):
        delete_topics(CONFIG, ["a"])


def test_an_unreachable_cluster_is_one_sentence() -> None:
    with pytest.raises(PgvalError, match="Kafka did not answer"):
        create_topics({"bootstrap.servers": "127.0.0.1:1"}, ["a"], 1, timeout_s=1.0)


def test_replicas_are_as_many_as_brokers_up_to_three(fake: Callable[..., FakeCluster]
                                                     ) -> None:
    five = fake(brokers={i: f"b{i}:1" for i in range(5)})
    create_topics(CONFIG, ["a"], 6)
    assert five.created[0].replica_assignment == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0],
                                                  [4, 0, 1], [0, 1, 2]]
    one = fake(brokers={3: "b3:1"})
    create_topics(CONFIG, ["a"], 2)
    assert one.created[0].replica_assignment == [[3], [3]]
    assert aligned_assignment([0, 1, 2, 3], 5, 3) == [[0, 1, 2], [1, 2, 3], [2, 3, 0],
                                                      [3, 0, 1], [0, 1, 2]]


def test_a_cluster_without_brokers_is_one_sentence(fake: Callable[..., FakeCluster]) -> None:
    fake(brokers={})
    with pytest.raises(PgvalError, match="Kafka reported no brokers"):
        create_topics(CONFIG, ["a"], 1)
