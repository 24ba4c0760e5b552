"""Streams for another engine (a Flink or Kafka Streams job) judged by ``pgval check``:
:func:`generate` writes the generator's events to Kafka topics or a JSON-lines file, and
:func:`record` reads the topics back, with the completeness proof every run has, into the
files ``check`` reads.

The job in between is the user's: it reads the input topics and writes outputs with the
fields of docs/semantics.md (``window_start``, ``window_end``, ``resource``, ``count`` or
``gets``/``posts``, ``ids``) to an output topic. Latency and the phases use each record's
Kafka timestamp as its ingress time, so topics should stamp ``LogAppendTime`` (the broker's
clock): :func:`generate` creates its topics so, and :func:`record` says which of the topics
it read stamp ``CreateTime`` instead (then the ingress times are the producers' clocks, and
a job that copies event time into its outputs' timestamps makes latency meaningless).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.core.clock import now_ms
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.core.files import write_public
from pgval.core.schema import Topics
from pgval.datasets.generator import GeneratorConfig, GeneratorReport, run_producers
from pgval.datasets.writers import FileSink, KafkaSink

#: What :func:`record` writes into its folder.
INPUTS_FILE, OUTPUTS_FILE, RECORD_FILE = "inputs.jsonl", "outputs.jsonl", "record.json"
#: The IDs of :func:`generate`'s closing events (inclusive): far below any other ID pgval
#: writes (its own runs' control events count down from -1), set aside by :func:`record`.
CLOSING_IDS = (-(1 << 62), -(1 << 62) + (1 << 20) - 1)


@dataclass(frozen=True)
class Target:
    """Where :func:`generate` writes: a file, or the ``get``/``post`` topics at a broker."""

    path: Path | None = None
    bootstrap: str | None = None
    topics: Topics = field(default_factory=Topics)
    partitions: int = 3
    config: Mapping[str, object] | None = None

    def describe(self) -> str:
        if self.path is not None:
            return str(self.path)
        return f"topics {self.topics.get} and {self.topics.post} at {self.bootstrap}"


@dataclass(frozen=True)
class Generated:
    """What :func:`generate` wrote: the generator's report, and the closing events."""

    report: GeneratorReport
    closing_events: int = 0
    closing_event_ts: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.report.to_dict(), "closing_events": self.closing_events,
                "closing_event_ts": self.closing_event_ts,
                "closing_ids": list(CLOSING_IDS) if self.closing_events else None}


def generate(cfg: GeneratorConfig, target: Target, close_after_ms: int = 600_000,
             on_progress: Callable[[int], None] | None = None) -> Generated:
    """Run the generator into ``target`` (topics created first, with ``LogAppendTime``);
    a file gets the wall clock as each event's ``ingress_ts``. Topics then get closing
    events (:func:`write_closing_events`) ``close_after_ms`` past the wall clock, unless
    it is 0."""
    cfg.validate()
    if target.path is not None:
        report = run_producers(cfg, FileSink(target.path), on_progress=_delivered(on_progress))
        return Generated(report)
    from pgval.kafka.admin import create_topics

    if target.bootstrap is None:
        raise ValueError("a target needs a path or a bootstrap")
    conf = {**(target.config or {}), "bootstrap.servers": target.bootstrap}
    names = [target.topics.get, target.topics.post]
    if taken := existing_topics(conf, names):
        raise UserMistake(f"topic {', '.join(taken)} already exists at {target.bootstrap}: "
                          "generate writes only topics it creates (choose another "
                          "--topic-prefix)")
    create_topics(conf, names, target.partitions)
    sink = KafkaSink(target.bootstrap, target.topics, config=dict(target.config or {}))
    report = run_producers(cfg, sink, on_progress=_delivered(on_progress))
    if not close_after_ms:
        return Generated(report)
    event_ts = now_ms() + close_after_ms
    n = write_closing_events(conf, target.topics, target.partitions, cfg.resources, event_ts)
    return Generated(report, n, event_ts)


def existing_topics(config: Mapping[str, object], names: Sequence[str]) -> list[str]:
    """Which of ``names`` exist on the cluster (a PgvalError if it does not answer)."""
    from confluent_kafka import KafkaException

    from pgval.kafka.admin import admin_client

    try:
        present = admin_client(config).list_topics(timeout=15).topics
    except KafkaException as exc:
        raise EnvironmentFailure(f"Kafka at {config['bootstrap.servers']} did not answer: "
                                f"{exc.args[0].str()}") from exc
    return [n for n in names if n in present]


def _delivered(on_progress: Callable[[int], None] | None
               ) -> Callable[[Sequence[Any]], None]:
    def progress(states: Sequence[Any]) -> None:
        if on_progress is not None:
            on_progress(sum(s.delivered for s in states))
    return progress


def write_closing_events(config: Mapping[str, object], topics: Topics, partitions: int,
                         resources: int, event_ts: int) -> int:
    """One event per resource on every partition of both topics, IDs from
    :data:`CLOSING_IDS`, event time ``event_ts``: an event-time job closes its last windows
    only when its watermark (Flink: the minimum over partitions; Kafka Streams: stream time
    per partition) passes them, and it moves only with later events. ``record`` sets these
    IDs aside; they are no input of the experiment. Returns how many were written."""
    from confluent_kafka import Producer

    from pgval.core.schema import resource_name
    from pgval.kafka.client import quiet_conf

    producer = Producer({**quiet_conf(str(config["bootstrap.servers"]), config),
                         "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    ident = CLOSING_IDS[0]
    for topic, kind in ((topics.get, "GET"), (topics.post, "POST")):
        for partition in range(partitions):
            for r in range(resources):
                name = resource_name(r)
                value = json.dumps({"id": ident, "type": kind, "resource": name,
                                    "event_ts": event_ts}).encode()
                producer.produce(topic, key=name.encode(), value=value, partition=partition)
                ident += 1
                if ident > CLOSING_IDS[1]:
                    raise EnvironmentFailure("too many closing events (partitions × resources)")
    if producer.flush(30) != 0:
        raise EnvironmentFailure("could not write the closing events to Kafka in 30 s")
    return ident - CLOSING_IDS[0]


def timestamp_types(bootstrap: str, topics: Sequence[str],
                    config: Mapping[str, object] | None = None,
                    timeout_s: float = 15.0) -> dict[str, str]:
    """Each topic's ``message.timestamp.type`` (``LogAppendTime`` or ``CreateTime``)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    from pgval.kafka.admin import admin_client

    admin = admin_client({**(config or {}), "bootstrap.servers": bootstrap})
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in dict.fromkeys(topics)]
    out: dict[str, str] = {}
    for resource, fut in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entries = fut.result()
        except KafkaException as exc:
            raise EnvironmentFailure(f"could not read the settings of topic {resource.name}: "
                                    f"{exc.args[0].str()}") from exc
        entry = entries.get("message.timestamp.type")
        out[resource.name] = entry.value if entry is not None else "unknown"
    return out


def topics_problem(inputs: Sequence[str], outputs: str) -> str | None:
    """Why these topics cannot be recorded together (None: they can)."""
    from pgval.evidence.bundle import INPUT_TOPICS

    if not inputs or not outputs:
        return "name the input topics and the output topic"
    if len(set(inputs)) != len(inputs):
        return f"an input topic is named twice ({', '.join(inputs)})"
    if outputs in inputs:
        return f"topic {outputs} is both an input and the output"
    if len(inputs) > len(INPUT_TOPICS):
        return f"at most {len(INPUT_TOPICS)} input topics (the GETs and the POSTs)"
    return None


def record(bootstrap: str, inputs: Sequence[str], outputs: str, out_dir: Path,
           config: Mapping[str, object] | None = None, isolation: str = "read_committed",
           timeout_s: float = 120.0) -> dict[str, Any]:
    """Read ``inputs`` and ``outputs`` from their beginning up to their end offsets, taken
    for every topic before any is read (all of it, or :class:`EnvironmentFailure` saying
    what was short: nothing is written then), into ``out_dir``'s ``inputs.jsonl`` and
    ``outputs.jsonl`` for ``pgval check``, with :func:`generate`'s closing events
    (:data:`CLOSING_IDS`) set aside; and ``record.json``: per topic its end offsets, records
    and timestamp type. :class:`UserMistake` for topics that cannot be recorded together."""
    from pgval.evidence.bundle import INPUT_TOPICS, streams_from_records
    from pgval.evidence.export import write_inputs, write_outputs
    from pgval.kafka.reader import read_topics

    names = [*inputs, outputs]
    if problem := topics_problem(inputs, outputs):
        raise UserMistake(problem)
    from pgval.kafka.admin import is_reachable

    if not is_reachable(bootstrap, min(timeout_s, 15.0), config):
        raise EnvironmentFailure(f"no Kafka broker answered at {bootstrap} within "
                                f"{min(timeout_s, 15.0):g} s")
    stamps = timestamp_types(bootstrap, names, config, timeout_s=min(timeout_s, 15.0))
    read = read_topics(bootstrap, names, isolation=isolation, timeout_s=timeout_s,
                       strict=True, config=config)
    streams = streams_from_records(dict(zip(INPUT_TOPICS, (read[t] for t in inputs),
                                            strict=False)),
                                   read[outputs], resources=0, control_ids=CLOSING_IDS)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_in = write_inputs(streams.events, out_dir / INPUTS_FILE)
    n_out = write_outputs(streams.outputs, out_dir / OUTPUTS_FILE)
    info: dict[str, Any] = {
        "bootstrap": bootstrap, "isolation": isolation, "inputs": n_in, "outputs": n_out,
        "closing_events_set_aside": streams.control_inputs,
        "malformed_inputs": streams.events.malformed,
        "malformed_outputs": streams.outputs.malformed,
        "topics": {t: {"role": "output" if t == outputs else "input",
                       "records": len(read[t]), "complete": read[t].complete,
                       "end_offsets": {str(p): o for p, o in sorted(read[t].end_offsets.items())},
                       "timestamp_type": stamps.get(t, "unknown")} for t in names},
    }
    info["create_time_topics"] = [t for t in names if stamps.get(t) == "CreateTime"]
    write_public(out_dir / RECORD_FILE, json.dumps(info, indent=1) + "\n")
    return info
