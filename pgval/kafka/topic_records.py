"""What was read of one topic, and the proof of how much: the model the evidence keeps.

:class:`TopicRecords` is made by the reader (:mod:`pgval.kafka.reader`) and kept, written
and read again by the evidence (:mod:`pgval.evidence.bundle`), which is a layer above Kafka. It
lives here, in a module of its own with nothing but numpy and Arrow, so both use the one
model without the evidence importing a reader or the reader importing the evidence. The
same :data:`RECORD_SCHEMA` is the wire between reader processes (Arrow IPC) and the
evidence's Parquet files, so the columns a run read are the columns it keeps.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

#: One record per row, as read: partition, offset, broker timestamp (ms), raw key and value.
RECORD_SCHEMA = pa.schema([
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()),
])


def binary_column(values: pa.ChunkedArray | pa.Array | Iterable[bytes | None]
                  ) -> pa.ChunkedArray:
    """Keys or values as one chunked Arrow binary column (lists are converted)."""
    if isinstance(values, pa.ChunkedArray):
        return values if values.type == pa.binary() else values.cast(pa.binary())
    if isinstance(values, pa.Array):
        arr = values if values.type == pa.binary() else values.cast(pa.binary())
        return pa.chunked_array([arr], type=pa.binary())
    return pa.chunked_array([pa.array(list(values), type=pa.binary())], type=pa.binary())


def _numpy(table: pa.Table, name: str, dtype: type) -> np.ndarray:
    col = table.column(name)
    if len(col) == 0:
        return np.zeros(0, dtype=dtype)
    return col.to_numpy().astype(dtype, copy=False)


@dataclass
class TopicRecords:
    """A topic's records, column by column (arrival order; offset order within a partition).

    ``keys`` and ``values`` are Arrow binary columns (null: no key or value), built by Arrow
    from each fetched batch, so millions of records cost no Python object per field; lists
    given to the constructor are converted. ``rows()`` gives Python tuples for small checks.

    Also the proof of what was read: ``end_offsets`` are the per-partition ends the read
    aimed for (the high watermarks, every transaction below them settled first under
    read_committed), ``reached`` the position each
    partition actually got to, and ``problems`` why the read stopped short (empty when
    :attr:`complete`). A short read is never silent: callers decide what it means.
    """

    keys: pa.ChunkedArray
    values: pa.ChunkedArray
    timestamps: np.ndarray  # int64, ms
    partitions: np.ndarray  # int32
    offsets: np.ndarray  # int64
    topic: str = ""
    end_offsets: dict[int, int] = field(default_factory=dict)
    reached: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: Which client read it: "librdkafka" or "jvm" (:mod:`pgval.kafka.jvm_reader`), and
    #: why not the JVM one when it was not; empty for records not read from Kafka.
    reader: str = ""
    #: What the read's caller noted of each chunk of ``values`` while the Java reader read
    #: on (``read_topics``'s ``on_chunk``: pgval's own inputs decoded, say), one per chunk,
    #: in order; None when nothing was noted. Never part of the evidence.
    chunk_notes: list[object] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.keys = binary_column(self.keys)
        self.values = binary_column(self.values)
        self.timestamps = np.asarray(self.timestamps, dtype=np.int64)
        self.partitions = np.asarray(self.partitions, dtype=np.int32)
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        n = len(self.values)
        if not (len(self.keys) == len(self.timestamps) == len(self.partitions)
                == len(self.offsets) == n):
            raise ValueError("the columns of a TopicRecords differ in length")

    @classmethod
    def from_table(cls, table: pa.Table, topic: str = "") -> TopicRecords:
        """The records of a :data:`RECORD_SCHEMA` table (no proof: the caller adds it)."""
        return cls(keys=table.column("key"), values=table.column("value"),
                   timestamps=_numpy(table, "timestamp", np.int64),
                   partitions=_numpy(table, "partition", np.int32),
                   offsets=_numpy(table, "offset", np.int64), topic=topic)

    def to_table(self) -> pa.Table:
        """The records as a :data:`RECORD_SCHEMA` table (the proof is not part of it)."""
        return pa.table({"partition": self.partitions, "offset": self.offsets,
                         "timestamp": self.timestamps, "key": self.keys,
                         "value": self.values}, schema=RECORD_SCHEMA)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def complete(self) -> bool:
        """Every partition was read up to its end offset and nothing went wrong."""
        return not self.problems and all(
            self.reached.get(p, 0) >= end for p, end in self.end_offsets.items())

    def rows(self) -> list[tuple[bytes | None, bytes | None, int, int, int]]:
        """(key, value, timestamp_ms, partition, offset) tuples, for small checks and tests."""
        return list(
            zip(
                self.keys.to_pylist(),
                self.values.to_pylist(),
                self.timestamps.tolist(),
                self.partitions.tolist(),
                self.offsets.tolist(),
                strict=True,
            )
        )

    def describe(self) -> dict[str, object]:
        """What the read proves, for run.json and the store (JSON-ready)."""
        return {"topic": self.topic, "records": len(self), "complete": self.complete,
                "end_offsets": {str(p): o for p, o in sorted(self.end_offsets.items())},
                "reached": {str(p): o for p, o in sorted(self.reached.items())},
                "problems": list(self.problems),
                **({"reader": self.reader} if self.reader else {})}
