"""The oracle over an unbounded stream, with memory bounded by the open windows.

Events arrive in chunks (as read from Kafka or a file). A window is closed and
its outputs emitted once the largest event time seen is ``horizon_ms`` past the
window's end. An event for a window that is already closed would change an
output already emitted, so it raises :class:`OracleHorizonError` instead of
being silently wrong; rerun with a larger horizon (or use the batch oracle).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from pgval.core.errors import UserMistake
from pgval.oracle.expected import ExpectedOutputs, expected_outputs, window_index
from pgval.records.parse import InputEvents, ResourceTable


class OracleHorizonError(UserMistake, ValueError):
    """An event arrived for a window the streaming oracle had already closed: the horizon
    asked for is too short for these inputs (a ``ValueError`` too)."""


def stream_expected_outputs(chunks: Iterable[InputEvents], topology: str, window_ms: int,
                            horizon_ms: int, resources: ResourceTable | None = None
                            ) -> Iterator[ExpectedOutputs]:
    """Yield expected outputs window by window as they close; the rest at the end.

    Duplicated input IDs are only removed within the open windows, which is
    exact as long as a retried produce lands within the horizon (it does: a
    retry carries the same event time).
    """
    pending: list[InputEvents] = []
    closed_before = None  # windows with index < closed_before are emitted
    max_ts = None
    table = resources
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        table = chunk.resources
        win = window_index(chunk.event_ts, window_ms)
        if closed_before is not None and (win < closed_before).any():
            late = chunk.id[win < closed_before][:5].tolist()
            raise OracleHorizonError(
                f"events {late} belong to windows the oracle already closed; "
                f"rerun with a horizon larger than {horizon_ms} ms")
        pending.append(chunk)
        chunk_max = int(chunk.event_ts.max())
        max_ts = chunk_max if max_ts is None else max(max_ts, chunk_max)
        # Windows whose end + horizon <= max_ts are closed: index < floor((max_ts - horizon)/W).
        close_upto = int(window_index(np.array([max_ts - horizon_ms]), window_ms)[0])
        if closed_before is not None and close_upto <= closed_before:
            continue
        merged = InputEvents.concat(pending, table)
        mwin = window_index(merged.event_ts, window_ms)
        ready = mwin < close_upto
        if ready.any():
            yield expected_outputs(merged.take(np.flatnonzero(ready)), topology, window_ms)
        pending = [merged.take(np.flatnonzero(~ready))]
        closed_before = close_upto
    if pending and table is not None:
        merged = InputEvents.concat(pending, table)
        if len(merged):
            yield expected_outputs(merged, topology, window_ms)
