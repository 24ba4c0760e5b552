"""The oracle: expected outputs of SST and MST, computed from the inputs Kafka holds.

Pure, vectorised functions (no per-event Python): events are sorted once by
(window, resource, id) and cut into groups at key changes. The result is
columnar, and it also carries the reverse map ID → expected output that the
validator needs for its membership tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pgval.core.schema import Topology
from pgval.records.parse import InputEvents, ResourceTable


@dataclass
class ExpectedOutputs:
    """Expected outputs (one row per key) plus an ID index for the validator.

    Rows are ordered by (window_start, resource code); ``ids[offsets[k]:offsets[k+1]]``
    are output k's IDs, ascending. ``id_sorted`` holds every expected ID ascending;
    ``id_output[i]`` is the row of ``id_sorted[i]`` and ``id_ingress[i]`` its ingress time.

    A slot ``i`` is an (input, row) pair: where a job's batch result lists one input in
    several rows (fan-out: a sliding window, a join, ``explode``), the ID has a slot per
    row, in row order, and each pair is judged (:mod:`pgval.checker.validator`).
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
    def fans_out(self) -> bool:
        """Some input is expected in more than one row (its slots are pairs)."""
        return bool(len(self.id_sorted) > 1
                    and (self.id_sorted[1:] == self.id_sorted[:-1]).any())

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
            if self.topology == Topology.SST:
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


def stable_argsort_small(key: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative int keys: LSD radix on 16-bit digits where they fit.

    numpy's stable sort is a radix sort for 16-bit types and timsort otherwise; dense
    (window, resource) keys of a run fit in one or two 16-bit digits, which makes
    grouping linear instead of O(n log n).
    """
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64)
    top = int(key.max())
    if top < 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    if top < 1 << 32:
        low = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
        high = np.argsort((key[low] >> 16).astype(np.uint16), kind="stable")
        return low[high]
    return np.argsort(key, kind="stable")


def _id_order(events: InputEvents, read: np.ndarray | None = None
              ) -> tuple[InputEvents, np.ndarray, int]:
    """(events, permutation of the ``read`` ones into ascending ID without duplicates, duplicates).

    ``read`` masks the events the topology reads (SST: GETs; None: all). IDs are
    de-duplicated among those only: a POST never hides a GET with the same ID from SST.
    Events read from Kafka are a few runs already sorted by ID (one per partition),
    which timsort merges in near-linear time. Only the permutation is computed here;
    columns are gathered later, and only those that are needed.
    """
    sel = None if read is None or read.all() else np.flatnonzero(read)
    ids = events.id if sel is None else events.id[sel]
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():
        deduped, duplicates = deduplicate_inputs(events if sel is None else events.take(sel))
        return deduped, np.argsort(deduped.id, kind="stable"), duplicates
    return events, (order if sel is None else sel[order]), 0


def expected_outputs(events: InputEvents, topology: str, window_ms: int) -> ExpectedOutputs:
    """Compute the expected outputs of ``topology`` over ``events`` (docs/semantics.md)."""
    if topology not in ("sst", "mst"):
        raise ValueError(f"unknown topology {topology!r} (expected sst or mst)")
    if window_ms <= 0:
        raise ValueError("window_ms must be positive")
    # Duplicates among the inputs the topology reads: SST's GETs, MST's GETs and POSTs.
    ev, order, duplicates = _id_order(events, events.is_get if topology == Topology.SST else None)
    n = len(order)
    win = window_index(ev.event_ts[order], window_ms)
    res = ev.resource[order]
    n_res = int(res.max()) + 1 if n else 1
    base_win = int(win.min()) if n else 0
    span = int(win.max()) - base_win if n else 0
    # Dense (window, resource) keys; far-apart windows are ranked first so the key fits int64.
    wkey = win - base_win if span < (1 << 62) // n_res else np.unique(win, return_inverse=True)[1]
    key = wkey * n_res + res
    grouped = stable_argsort_small(key)  # by key, IDs ascending within a key
    key_g = key[grouped]
    starts = np.flatnonzero(np.r_[True, key_g[1:] != key_g[:-1]]) if n else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, n]).astype(np.int64)
    is_get = ev.is_get[order]
    gets = (np.add.reduceat(is_get[grouped].astype(np.int64), starts) if n
            else np.zeros(0, np.int64))
    posts = sizes - gets
    mst = topology == Topology.MST
    keep_group = (gets > 0) & (posts > 0) if mst else np.ones(len(starts), bool)
    group_sorted = np.repeat(np.arange(len(starts)), sizes)
    group_of_event = np.empty(n, dtype=np.int64)
    group_of_event[grouped] = group_sorted
    new_group = np.cumsum(keep_group) - 1
    kept_sizes = sizes[keep_group]
    offsets = np.zeros(len(kept_sizes) + 1, dtype=np.int64)
    np.cumsum(kept_sizes, out=offsets[1:])
    if keep_group.all():  # SST, and MST where every key has both types: no filtering needed
        sel = order
        flat = grouped
        id_output = group_of_event
    else:
        kept = keep_group[group_of_event]
        sel = order[kept]
        flat = grouped[keep_group[group_sorted]]
        id_output = new_group[group_of_event[kept]]
    first = grouped[starts][keep_group] if n else np.zeros(0, np.int64)
    ids_id_order = ev.id[order]
    return ExpectedOutputs(
        topology=topology,
        window_ms=window_ms,
        window_start=(win[first] * window_ms).astype(np.int64),
        resource=res[first].astype(np.int32),
        gets=gets[keep_group].astype(np.int64),
        posts=(posts[keep_group] if mst else np.zeros(len(kept_sizes), np.int64)
               ).astype(np.int64),
        ids=ids_id_order[flat],
        offsets=offsets,
        id_sorted=ev.id[sel],
        id_output=id_output.astype(np.int64, copy=False),
        id_ingress=ev.ingress_ts[sel],
        id_event_ts=ev.event_ts[sel],
        resources=events.resources,
        duplicate_inputs=duplicates,
    )
