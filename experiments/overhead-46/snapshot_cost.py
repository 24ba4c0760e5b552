"""Cost of the read-back's snapshot: the end-offset look as before (one read_committed
client, the last stable offsets) against now (high watermarks, then the settle check), and
the look for records after the read; 3 topics x 2 partitions on a 1-broker cluster.

    .venv/bin/python experiments/overhead-46/snapshot_cost.py
"""

import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from pgval.kafka.admin import create_topics
from pgval.kafka.broker import KafkaCluster
from pgval.kafka.reader import (
    end_snapshot,
    offsets_snapshot,
    read_topics,
    reader_conf,
    records_after,
)

ROUNDS = 15
TOPICS = ["a", "b", "c"]


def main() -> None:
    cluster = KafkaCluster(Path(tempfile.mkdtemp()), brokers=1, partitions=2, heap="256m",
                           sasl=False)
    cluster.start()
    try:
        create_topics(cluster.client_config, TOPICS, 2)
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        for topic in TOPICS:
            for i in range(1000):
                producer.produce(topic, value=b"x%d" % i, partition=i % 2)
        producer.flush(30)
        conf = reader_conf(cluster.bootstrap, "read_committed")
        took: dict[str, list[float]] = {"before: one read_committed client, the LSO": [],
                                        "now: high watermarks, then the settle check": [],
                                        "records after the read (one topic)": [],
                                        "the whole read of the three topics, now": []}
        steps = list(took.values())
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            consumer = Consumer(conf)
            for topic in TOPICS:
                end_snapshot(consumer, cluster.bootstrap, topic, 30)
            consumer.close()
            t1 = time.perf_counter()
            ends, _, _ = offsets_snapshot(conf, cluster.bootstrap, TOPICS, 30)
            t2 = time.perf_counter()
            records_after(cluster.bootstrap, {}, "c", ends["c"])
            t3 = time.perf_counter()
            read_topics(cluster.bootstrap, TOPICS, workers=1)
            t4 = time.perf_counter()
            for step, (a, b) in zip(steps, ((t0, t1), (t1, t2), (t2, t3), (t3, t4)),
                                    strict=True):
                step.append(b - a)
        for name, xs in took.items():
            print(f"{name}: median {statistics.median(xs) * 1000:.1f} ms "
                  f"(min {min(xs) * 1000:.1f}, max {max(xs) * 1000:.1f})")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
