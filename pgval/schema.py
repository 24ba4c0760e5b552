"""Names shared by every stage: topics, record fields, topologies, guarantees.

One place for them so the generator, the Spark topologies, the oracle and the
validator cannot drift apart (docs/semantics.md is the prose version).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

#: Input topics, one per request type; record key = resource name (UTF-8).
GET_TOPIC: Final = "get"
POST_TOPIC: Final = "post"
#: Output topic of the topology under test; record key = resource name.
OUTPUT_TOPIC: Final = "output"
#: Compacted topic where the exactly-once sink records its committed batches.
MARKER_TOPIC: Final = "pgval-commits"



@dataclass(frozen=True)
class Topics:
    """The topics of one run. A run on a shared cluster (external, or a warm cluster
    kept across matrix cells) gets its own prefix, so no run ever reads another's records."""

    get: str = GET_TOPIC
    post: str = POST_TOPIC
    output: str = OUTPUT_TOPIC
    marker: str = MARKER_TOPIC
    prefix: str = ""

    @classmethod
    def with_prefix(cls, prefix: str) -> Topics:
        """``<prefix>get``, ``<prefix>post``, …; the empty prefix gives the plain names. A
        prefix ends in ``-``, so a topic's role can be read back from its name."""
        if prefix and not prefix.endswith("-"):
            raise ValueError(f"a topic prefix ends in '-', not {prefix!r}")
        return cls(f"{prefix}{GET_TOPIC}", f"{prefix}{POST_TOPIC}", f"{prefix}{OUTPUT_TOPIC}",
                   f"{prefix}{MARKER_TOPIC}", prefix)

    @property
    def inputs(self) -> tuple[str, str]:
        return (self.get, self.post)

    def all(self) -> tuple[str, ...]:
        return (self.get, self.post, self.output, self.marker)


GET: Final = "GET"
POST: Final = "POST"

Topology = Literal["sst", "mst"]
TOPOLOGIES: Final = ("sst", "mst")
#: a1 = Spark's Kafka sink (at-least-once), e1 = transactional foreachBatch sink, m1 = the
#: Kafka sink with Spark's default ``startingOffsets=latest`` and a checkpoint a restart
#: does not find (at-most-once; docs/semantics.md, "m1").
Guarantee = Literal["a1", "e1", "m1"]
PROCESSING_GUARANTEES: Final = ("a1", "e1", "m1")

#: Fields of an input event as written to Kafka (value, JSON).
INPUT_FIELDS: Final = ("id", "type", "resource", "event_ts")
#: Fields of an output record as written by the topologies (value, JSON).
SST_OUTPUT_FIELDS: Final = ("window_start", "window_end", "resource", "count", "ids")
MST_OUTPUT_FIELDS: Final = ("window_start", "window_end", "resource", "gets", "posts", "ids")
#: Fields an output must have to be validated at all; without them it is malformed.
REQUIRED_OUTPUT_FIELDS: Final = ("window_start", "resource", "ids")

PHASES: Final = ("control", "failure", "recovery")
#: Faults injected at T2 and removed at T3 (``none``: a run without a fault).
FAULTS: Final = ("none", "crash", "driver-crash", "delay-lt-timeout", "delay-gt-timeout")
#: Where a run's Kafka and Spark come from: pgval's embedded cluster, the compose stack,
#: or a cluster the user runs (``--deploy external``).
DEPLOYMENTS: Final = ("local", "compose", "external")
#: Where a crash lands: ``timed`` (at T2); ``after-sink-write`` (driver-crash: the first
#: batch after T2 whose outputs are in Kafka, before its commit is checkpointed);
#: ``during-sink-write`` (crash: the worker of the first executor whose sink task has a
#: record in Kafka and has not finished).
CRASH_POINTS: Final = ("timed", "after-sink-write", "during-sink-write")
#: The grid's names for a fault at a crash point other than ``timed`` (``matrix --faults``).
FAULTS_AT_POINTS: Final = ("crash@during-sink-write", "driver-crash@after-sink-write")


def resource_name(index: int) -> str:
    """Resource names are fixed-width so they sort like their index."""
    return f"r{index:04d}"


def window_start(event_ts: int, window_ms: int) -> int:
    """Tumbling event-time window that holds ``event_ts`` (floor division, also for negatives)."""
    return (event_ts // window_ms) * window_ms
