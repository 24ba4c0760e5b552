"""The oracle: expected outputs of SST and MST, computed from the inputs Kafka holds.

Pure, vectorised functions (no per-event Python): events are sorted once by
(window, resource, id) and cut into groups at key changes. The result is
columnar, and it also carries the reverse map ID → expected output that the
validator needs for its membership tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pgval.records import InputEvents, ResourceTable


@dataclass
class ExpectedOutputs:
    """Expected outputs (one row per key) plus an ID index for the validator.

    Rows are ordered by (window_start, resource code); ``ids[offsets[k]:offsets[k+1]]``
    are output k's IDs, ascending. ``id_sorted`` holds every expected ID ascending;
    ``id_output[i]`` is the row of ``id_sorted[i]`` and ``id_ingress[i]`` its ingress time.
    """

    topology: str
    window_ms: int
    window_start: np.ndarray
    resource: np.ndarray
    gets: np.ndarray
    posts: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray
    id_sorted: np.ndarray
    id_output: np.ndarray
    id_ingress: np.ndarray
    id_event_ts: np.ndarray
    resources: ResourceTable
    duplicate_inputs: int = 0

    def __len__(self) -> int:
        return len(self.window_start)

    @property
    def window_end(self) -> np.ndarray:
        return self.window_start + self.window_ms

    @property
    def count(self) -> np.ndarray:
        """SST's ``count`` field (number of GETs)."""
        return self.gets

    def to_records(self) -> list[dict[str, object]]:
        """Rows as the JSON objects ``pgval oracle`` prints (fields of docs/semantics.md)."""
        ws = self.window_start.tolist()
        we = self.window_end.tolist()
        gets = self.gets.tolist()
        posts = self.posts.tolist()
        names = [self.resources.names[c] for c in self.resource.tolist()]
        offsets = self.offsets.tolist()
        ids = self.ids
        rows: list[dict[str, object]] = []
        for k in range(len(ws)):
            row: dict[str, object] = {"window_start": ws[k], "window_end": we[k],
                                      "resource": names[k]}
            if self.topology == "sst":
                row["count"] = gets[k]
            else:
                row["gets"] = gets[k]
                row["posts"] = posts[k]
            row["ids"] = ids[offsets[k]:offsets[k + 1]].tolist()
            rows.append(row)
        return rows


def deduplicate_inputs(events: InputEvents) -> tuple[InputEvents, int]:
    """Keep the first ingress of every ID: a retried produce must not count twice."""
    if len(events) == 0:
        return events, 0
    order = np.lexsort((events.ingress_ts, events.id))
    sorted_ids = events.id[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    duplicates = int(len(order) - first.sum())
    if duplicates == 0:
        return events, 0
    keep = np.sort(order[first])
    return events.take(keep), duplicates


def window_index(event_ts: np.ndarray, window_ms: int) -> np.ndarray:
    """Floor division: the tumbling window index, correct for negative timestamps too."""
    return np.floor_divide(event_ts, window_ms)


def expected_outputs(events: InputEvents, topology: str, window_ms: int) -> ExpectedOutputs:
    """Compute the expected outputs of ``topology`` over ``events`` (docs/semantics.md)."""
    if topology not in ("sst", "mst"):
        raise ValueError(f"unknown topology {topology!r} (expected sst or mst)")
    if window_ms <= 0:
        raise ValueError("window_ms must be positive")
    events, duplicates = deduplicate_inputs(events)
    if topology == "sst":
        events = events.take(np.flatnonzero(events.is_get))
    win = window_index(events.event_ts, window_ms)
    order = np.lexsort((events.id, events.resource, win))
    win_s = win[order]
    res_s = events.resource[order]
    get_s = events.is_get[order]
    n = len(order)
    starts = np.flatnonzero(np.r_[True, (win_s[1:] != win_s[:-1]) | (res_s[1:] != res_s[:-1])]
                            ) if n else np.zeros(0, dtype=np.int64)
    bounds = np.r_[starts, n].astype(np.int64)
    sizes = np.diff(bounds)
    gets = np.add.reduceat(get_s.astype(np.int64), starts) if n else np.zeros(0, np.int64)
    posts = sizes - gets
    if topology == "mst":
        keep_group = (gets > 0) & (posts > 0)
    else:
        keep_group = np.ones(len(starts), dtype=bool)
    group_of_event = np.repeat(np.arange(len(starts)), sizes)
    keep_event = keep_group[group_of_event] if n else np.zeros(0, dtype=bool)
    kept_order = order[keep_event]
    new_group = np.cumsum(keep_group) - 1
    kept_sizes = sizes[keep_group]
    offsets = np.zeros(len(kept_sizes) + 1, dtype=np.int64)
    np.cumsum(kept_sizes, out=offsets[1:])

    ids = events.id[kept_order]
    id_output = new_group[group_of_event[keep_event]] if n else np.zeros(0, dtype=np.int64)
    by_id = np.argsort(ids, kind="stable")
    return ExpectedOutputs(
        topology=topology,
        window_ms=window_ms,
        window_start=(win_s[starts][keep_group] * window_ms).astype(np.int64),
        resource=res_s[starts][keep_group].astype(np.int32),
        gets=gets[keep_group].astype(np.int64),
        posts=(posts[keep_group] if topology == "mst" else np.zeros(len(kept_sizes), np.int64)
               ).astype(np.int64),
        ids=ids.astype(np.int64),
        offsets=offsets,
        id_sorted=ids[by_id].astype(np.int64),
        id_output=id_output[by_id].astype(np.int64),
        id_ingress=events.ingress_ts[kept_order][by_id].astype(np.int64),
        id_event_ts=events.event_ts[kept_order][by_id].astype(np.int64),
        resources=events.resources,
        duplicate_inputs=duplicates,
    )
