"""A record's ID from where Kafka put it: one definition for pgval's reader and the job.

``ID = slot << 56 | partition << 40 | offset``: ``slot`` is the position of the record's
input in the run (the first input's topic 0, the second's 1), ``partition`` below 65,536,
``offset`` below 2^40. Every such ID is non-negative. A job builds the same number as a
Spark Column (:func:`pgval.job.record_id`). pgval's own records in those topics carry the
Kafka key :data:`OWN_KEY` and are set aside by it.
"""

from __future__ import annotations

import numpy as np

#: Bits of an ID given to the offset and to the partition; the slot takes the rest.
OFFSET_BITS = 40
PARTITION_BITS = 16
SLOT_SHIFT = OFFSET_BITS + PARTITION_BITS
#: The slot of a topic that is no input of the run (its IDs match no input).
UNKNOWN_SLOT = 127
#: The Kafka key of pgval's own records (priming and closing) in the inputs of a job that
#: reads Kafka itself.
OWN_KEY = b"\x00pgval-own"


def record_ids(slot: int | np.ndarray, partition: np.ndarray, offset: np.ndarray
               ) -> np.ndarray:
    """The IDs of records at ``partition`` / ``offset`` of the input in ``slot`` (int64)."""
    partition = np.asarray(partition, dtype=np.int64)
    offset = np.asarray(offset, dtype=np.int64)
    if partition.size and (partition.min() < 0 or partition.max() >= 1 << PARTITION_BITS):
        raise ValueError(f"a partition outside 0..{(1 << PARTITION_BITS) - 1}")
    if offset.size and (offset.min() < 0 or offset.max() >= 1 << OFFSET_BITS):
        raise ValueError(f"an offset outside 0..2^{OFFSET_BITS}")
    return ((np.asarray(slot, dtype=np.int64) << SLOT_SHIFT) | (partition << OFFSET_BITS)
            | offset)


def coordinates(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slot, partition, offset) of IDs made by :func:`record_ids`."""
    ids = np.asarray(ids, dtype=np.int64)
    return (ids >> SLOT_SHIFT, (ids >> OFFSET_BITS) & ((1 << PARTITION_BITS) - 1),
            ids & ((1 << OFFSET_BITS) - 1))
