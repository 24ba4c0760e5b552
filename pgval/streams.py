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

from pgval.datasets.generator import GeneratorConfig, GeneratorReport, run_producers
from pgval.datasets.sinks import FileSink, KafkaSink
from pgval.errors import RuntimeErrorPlain
from pgval.schema import Topics

#: What :func:`record` writes into its folder.
INPUTS_FILE, OUTPUTS_FILE, RECORD_FILE = "inputs.jsonl", "outputs.jsonl", "record.json"


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


def generate(cfg: GeneratorConfig, target: Target,
             on_progress: Callable[[int], None] | None = None) -> GeneratorReport:
    """Run the generator into ``target`` (topics created first, with ``LogAppendTime``);
    a file gets the wall clock as each event's ``ingress_ts``."""
    cfg.validate()
    if target.path is not None:
        sink: FileSink | KafkaSink = FileSink(target.path)
    else:
        from pgval.kafka.admin import create_topics

        if target.bootstrap is None:
            raise ValueError("a target needs a path or a bootstrap")
        conf = {**(target.config or {}), "bootstrap.servers": target.bootstrap}
        create_topics(conf, [target.topics.get, target.topics.post], target.partitions)
        sink = KafkaSink(target.bootstrap, target.topics,
                         config={k: v for k, v in (target.config or {}).items()})

    def progress(states: Sequence[Any]) -> None:
        if on_progress is not None:
            on_progress(sum(s.delivered for s in states))

    return run_producers(cfg, sink, on_progress=progress)


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
            raise RuntimeErrorPlain(f"could not read the settings of topic {resource.name}: "
                                    f"{exc.args[0].str()}") from exc
        entry = entries.get("message.timestamp.type")
        out[resource.name] = entry.value if entry is not None else "unknown"
    return out


def record(bootstrap: str, inputs: Sequence[str], outputs: str, out_dir: Path,
           config: Mapping[str, object] | None = None, isolation: str = "read_committed",
           timeout_s: float = 120.0) -> dict[str, Any]:
    """Read ``inputs`` and ``outputs`` from their beginning up to one end-offset snapshot
    (all of it, or :class:`RuntimeErrorPlain` saying what was short: nothing is written
    then) into ``out_dir``'s ``inputs.jsonl`` and ``outputs.jsonl`` for ``pgval check``,
    and ``record.json``: per topic its end offsets, records and timestamp type."""
    from pgval.evidence import INPUT_TOPICS, streams_from_records
    from pgval.export import write_inputs, write_outputs
    from pgval.kafka.reader import read_topics

    names = list(dict.fromkeys([*inputs, outputs]))
    if outputs in inputs:
        raise RuntimeErrorPlain(f"topic {outputs} is both an input and the output")
    if len(inputs) > len(INPUT_TOPICS):
        raise RuntimeErrorPlain(f"at most {len(INPUT_TOPICS)} input topics (GETs and POSTs)")
    from pgval.kafka.admin import is_reachable

    if not is_reachable(bootstrap, min(timeout_s, 15.0), config):
        raise RuntimeErrorPlain(f"no Kafka broker answered at {bootstrap} within "
                                f"{min(timeout_s, 15.0):g} s")
    stamps = timestamp_types(bootstrap, names, config, timeout_s=min(timeout_s, 15.0))
    read = read_topics(bootstrap, names, isolation=isolation, timeout_s=timeout_s,
                       strict=True, config=config)
    streams = streams_from_records(dict(zip(INPUT_TOPICS, (read[t] for t in inputs),
                                            strict=False)),
                                   read[outputs], resources=0, control_ids=None)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_in = write_inputs(streams.events, out_dir / INPUTS_FILE)
    n_out = write_outputs(streams.outputs, out_dir / OUTPUTS_FILE)
    info: dict[str, Any] = {
        "bootstrap": bootstrap, "isolation": isolation, "inputs": n_in, "outputs": n_out,
        "malformed_inputs": streams.events.malformed,
        "malformed_outputs": streams.outputs.malformed,
        "topics": {t: {"role": "output" if t == outputs else "input",
                       "records": len(read[t]), "complete": read[t].complete,
                       "end_offsets": {str(p): o for p, o in sorted(read[t].end_offsets.items())},
                       "timestamp_type": stamps.get(t, "unknown")} for t in names},
    }
    info["create_time_topics"] = [t for t in names if stamps.get(t) == "CreateTime"]
    (out_dir / RECORD_FILE).write_text(json.dumps(info, indent=1) + "\n")
    return info
