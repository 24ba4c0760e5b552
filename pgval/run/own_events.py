"""pgval's own events in the input topics: priming, closing and (self-test) late events.

Closing events: Spark closes a window only when the watermark passes it, and the watermark
moves only with new events. When the generators stop, the last windows would stay open
forever and their events would look unprocessed. So after T4 one event per resource and
topic with a negative ID and an event time past every real window is written; those
events are not inputs of the experiment (the oracle never sees negative IDs from a run) and
only move the watermark, like the paper's "first input of the next window".

Priming events: Spark's first micro-batches are slow (executors start, classes load, state
stores open). Before T1 a few events with negative IDs go into an old window, and the run
waits until a batch has read them; the warm-up after T1 (:mod:`pgval.run.warmup`) then
waits until the query's latency stops falling, which priming alone does not reach. Exactly
the range of negative IDs written here is set aside before validation
(:func:`pgval.evidence.bundle.set_aside_control`); any other ID is judged.
"""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Producer

from pgval.core.errors import EnvironmentFailure
from pgval.core.record_ids import OWN_KEY
from pgval.core.schema import GET, POST, Topics, Topology, resource_name
from pgval.datasets.models import PreparedModel

#: IDs of planted late events (a self-test): far above any generator ID, so a test can
#: tell them apart; they are ordinary inputs for the oracle and the validator.
LATE_ID_BASE = 1 << 62


class ControlEvents:
    """Writes pgval's own events and accounts for every one (the read-back reconciles
    the input topics with the generator's deliveries plus :attr:`written`)."""

    def __init__(self, client_config: dict[str, Any], topics: Topics, resources: int,
                 own_key: bool = False, model: PreparedModel | None = None) -> None:
        self.client_config = client_config
        self.topics = topics
        self.resources = resources
        #: A job that reads Kafka itself knows its records by their coordinates, so pgval's
        #: own are told apart by their Kafka key (:data:`OWN_KEY`), not by negative IDs;
        #: with an input model they are the model's records (the job parses them as its own).
        self.own_key = own_key or model is not None
        self.model = model
        self.next_id = -1
        self.written = 0  # every event pgval wrote to the input topics (late ones too)
        #: Inclusive range [lo, hi] of the negative IDs written (None: none yet), and how
        #: many priming and closing events that is: run.json's ``control_ids`` and
        #: ``control_events``, the only IDs a validation sets aside.
        self.control_ids: list[int] | None = None
        self.control_events = 0

    def _producer(self) -> Producer:
        return Producer({**self.client_config, "partitioner": "murmur2_random", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5, "log_level": 3})

    def write(self, event_ts: int, per_resource: int = 1, step_ms: int = 0) -> int:
        """Negative-ID GET+POST pairs per resource from ``event_ts`` on, ``step_ms`` apart.

        Spread over windows (one pair per key), so MST's join stays one row per key.
        Returns the next free ID.
        """
        if self.model is not None:
            return self._write_model(event_ts, per_resource, step_ms)
        producer = self._producer()
        first_id = self.next_id
        ident = first_id
        lo = first_id - 2 * per_resource * self.resources + 1
        # Recorded before writing, so a crash mid-write is still covered; only grows.
        prev = self.control_ids[0] if self.control_ids else -1
        self.control_ids = [min(lo, prev), -1]
        for k in range(per_resource):
            for r in range(self.resources):
                name = resource_name(r)
                for topic, typ in ((self.topics.get, "GET"), (self.topics.post, "POST")):
                    value = json.dumps({"id": ident, "type": typ, "resource": name,
                                        "event_ts": event_ts + k * step_ms}).encode()
                    while True:
                        try:
                            producer.produce(topic, value=value, key=OWN_KEY
                                             if self.own_key else name.encode())
                            break
                        except BufferError:
                            producer.poll(0.1)
                    ident -= 1
        if producer.flush(30) != 0:
            raise EnvironmentFailure("could not write pgval's control events to Kafka in 30 s")
        written = first_id - ident
        self.written += written
        self.control_events += written
        self.next_id = ident
        return ident

    def _write_model(self, event_ts: int, per_resource: int, step_ms: int) -> int:
        """The model's records in place of the web log's pairs: as many per input, with
        the Kafka key :data:`OWN_KEY` (the evidence sets them aside by it)."""
        assert self.model is not None
        producer = self._producer()
        topics = (self.topics.get, self.topics.post)
        written = 0
        for k in range(per_resource):
            for slot in range(len(self.model.streams)):
                for value in self.model.own_records(slot, self.resources,
                                                    event_ts + k * step_ms):
                    while True:
                        try:
                            producer.produce(topics[slot], key=OWN_KEY, value=value)
                            break
                        except BufferError:
                            producer.poll(0.1)
                    written += 1
        if producer.flush(30) != 0:
            raise EnvironmentFailure("could not write pgval's control events to Kafka in 30 s")
        self.written += written
        self.control_events += written
        return self.next_id

    def priming(self, now_ms: int, window_ms: int, prime_events: int) -> None:
        """``prime_events`` events in windows far in the past (one pair per key each)."""
        per_resource = max(1, prime_events // (2 * self.resources))
        old = now_ms - (per_resource + 100) * window_ms
        self.write(old, per_resource, step_ms=window_ms)

    def closing(self, now_ms: int, window_ms: int, watermark_ms: int) -> int:
        """Events past every real window, on both topics; returns their event time."""
        closing_ts = now_ms + window_ms + watermark_ms + 1_000
        self.write(closing_ts)
        return closing_ts

    def plant_late(self, count: int, watermark: int, window_ms: int, topology: str,
                   now_ms: int) -> dict[str, Any]:
        """SELF-TEST: write events whose window already closed, so Spark must drop them.

        Their event time is two windows behind the watermark the query last reported, so
        ``window end <= watermark`` holds for whichever batch reads them: Spark's late-row
        rule for windowed aggregations and for the window-equality join (see
        docs/semantics.md, "Why unprocessed"). They are ordinary inputs to the oracle, so
        they must come out *unprocessed*, attributed *late*. MST gets a GET and a POST per
        event, so the late key would have had an output.
        """
        if watermark <= 0:
            return {"late_ids": [], "note": "no watermark reported yet"}
        event_ts = watermark - 2 * window_ms
        producer = self._producer()
        ids = []
        types = (GET,) if topology == Topology.SST else (GET, POST)
        for k in range(count):
            name = resource_name(k % self.resources)
            for typ in types:
                ident = LATE_ID_BASE + len(ids)
                ids.append(ident)
                topic = self.topics.get if typ == GET else self.topics.post
                producer.produce(topic, key=name.encode(), value=json.dumps(
                    {"id": ident, "type": typ, "resource": name, "event_ts": event_ts}).encode())
        if producer.flush(30) != 0:
            raise EnvironmentFailure("could not write the planted late events to Kafka in 30 s")
        self.written += len(ids)
        return {"late_ids": ids, "event_ts": event_ts, "watermark_ms": watermark,
                "written_ms": now_ms}
