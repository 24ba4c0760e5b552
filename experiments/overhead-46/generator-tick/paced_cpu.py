"""CPU of one paced generator at a run's rate (400 events/s, 15 s) into a local broker, by
pacing tick: the producer process's own CPU (librdkafka's threads included) and the
broker's, each pair of ticks measured three times in turn.

    PYTHONPATH=. .venv/bin/python experiments/overhead-46/generator-tick/paced_cpu.py
"""

from __future__ import annotations

import os
import resource
import tempfile
from pathlib import Path

from datasets.generator import GeneratorConfig, produce
from datasets.writers import KafkaSink
from pgval.campaigns.kafka_bench import bench_broker
from pgval.core.schema import Topics
from pgval.kafka.admin import create_topics


def broker_cpu_s() -> float:
    """The broker JVM's CPU seconds so far (the only kafka.Kafka process here)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes():
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            continue
    return 0.0


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, bench_broker(Path(tmp), 3) as cluster:
        for k, tick in enumerate([0.005, 0.02] * 3):
            topics = Topics.with_prefix(f"tick{k}-")
            create_topics(cluster.client_config, topics.inputs, 3)
            sink = KafkaSink(cluster.bootstrap, topics=topics,
                             config={"log_level": 3, **cluster.auth_config})
            cfg = GeneratorConfig(resources=4, rate=400, duration_s=15, seed=1, tick_s=tick)
            broker0, own0 = broker_cpu_s(), own_cpu_s()
            report = produce(cfg, sink)
            print(f"tick {tick * 1000:.0f} ms: {report.delivered} delivered, producer "
                  f"{own_cpu_s() - own0:.2f} s CPU, broker {broker_cpu_s() - broker0:.2f} s",
                  flush=True)


if __name__ == "__main__":
    main()
