"""What Kafka holds after the drain, read to every partition's end and kept as evidence.

Inputs and outputs are read read_committed (e1's aborted writes never count). A short read,
an error or a time-out is a validity reason (the run becomes unknown), never raised: what
was read is still stored and evaluated. The evidence files carry the topics' roles
(``get``, ``post``, ``output``), not the run's prefixed names, so a re-check reads every
run the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.checker.result import Result, compose
from pgval.checker.validity import generator_reasons, readback_reasons, reconcile_inputs
from pgval.core.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC, Topics
from pgval.evidence.bundle import save_topic
from pgval.kafka.reader import read_topics, records_after
from pgval.kafka.topic_records import TopicRecords
from pgval.records.own_inputs import decode_chunk


@dataclass
class ReadBack:
    records: dict[str, TopicRecords]  # by role: get, post, output
    describe: dict[str, Any]  # per role, plus "inputs": the reconciliation
    reasons: Result = field(default_factory=Result)  # readback and reconcile kinds


def read_back(client_config: dict[str, Any], topics: Topics, run_dir: Path,
              generator: dict[str, Any], own_events: int) -> ReadBack:
    """Read the run's three topics, save them as evidence, and reconcile the input records
    with the generator's deliveries plus pgval's own events."""
    delivered = int(generator.get("delivered") or 0)
    timeout_s = max(120.0, (delivered + own_events) / 50_000)
    bootstrap = str(client_config["bootstrap.servers"])
    extra = {k: v for k, v in client_config.items() if k != "bootstrap.servers"}
    roles = {topics.get: GET_TOPIC, topics.post: POST_TOPIC, topics.output: OUTPUT_TOPIC}
    # pgval's own inputs are decoded chunk by chunk while the Java reader reads on.
    by_name = read_topics(bootstrap, tuple(roles), timeout_s=timeout_s, idle_timeout_s=30.0,
                          strict=False, config=extra, on_chunk=decode_chunk)
    by_name[topics.output].problems += written_after(bootstrap, extra, by_name[topics.output])
    records: dict[str, TopicRecords] = {}
    for name, recs in by_name.items():
        records[roles[name]] = recs
        save_topic(run_dir, recs, name=roles[name])
    described: dict[str, Any] = {role: r.describe() for role, r in records.items()}
    short = readback_reasons(described)
    read = len(records[GET_TOPIC]) + len(records[POST_TOPIC])
    ends = sum(sum(records[t].end_offsets.values()) for t in (GET_TOPIC, POST_TOPIC))
    info, reasons = reconcile_inputs(read, ends, delivered, own_events,
                                     generator_reasons(generator).valid)
    described["inputs"] = info
    return ReadBack(records, described, compose(short, reasons))


def written_after(bootstrap: str, config: dict[str, Any], read: TopicRecords) -> list[str]:
    """Problems if the topic ``read`` came from holds records past the read's snapshot
    (:func:`pgval.kafka.reader.records_after`)."""
    return records_after(bootstrap, config, read.topic, read.end_offsets)
