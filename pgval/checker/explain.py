"""Why was it unprocessed? A cause for every unprocessed ID, from the batch progress.

Spark drops rows behind the watermark and has no late-data side output, so the
paper's Algorithm 2 has nothing to read. Instead pgval uses what the driver
recorded per micro-batch (source offsets and the watermark each batch ran with):

* ``skipped`` — no recorded batch read its offset, yet batches read past it in
  its partition: the query jumped over it (a restart from the latest offsets,
  ``--pg m1``), so it was never read at all;
* ``in-flight at end`` — the event's window ends after the last watermark the
  query reached, or no batch read its offset and none read past it: the run
  ended before its window could be emitted;
* ``late`` — Spark's own rule: batch *k* drops a row whose window ends at or
  before the watermark of batch *k − 1* (``WatermarkSupport.watermarkExpression``
  is ``window.end <= watermark``; the late-event watermark of batch *k* is
  ``PropagateWatermarkSimulator.getInputWatermarkForLateEvents(k)`` =
  ``getInputWatermark(k - 1)``, and the stream-stream join uses
  ``inputWatermark(currentBatchId - 1)`` the same way). The batch that read the
  event is found by its topic, partition and offset; batch ids are per query (the
  ``started`` event before them: m1's restart on a new checkpoint is a new query);
* ``lost`` — neither: read, on time, window closed, yet not in any output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from pgval.checker.validator import Validation
from pgval.oracle.expected import ExpectedOutputs
from pgval.records import InputEvents
from pgval.schema import GET_TOPIC, POST_TOPIC

CAUSES = ("late", "skipped", "in-flight at end", "lost")
_LATE, _SKIPPED, _IN_FLIGHT, _LOST = range(len(CAUSES))
TOPIC_CODES = {GET_TOPIC: 0, POST_TOPIC: 1}


@dataclass
class BatchRanges:
    """Per (topic, partition): offset ranges read by each batch and its late-event watermark.

    The late-event watermark of a batch is the highest watermark of the recorded
    batches before it (Spark filters late rows with batch k − 1's watermark).
    """

    ranges: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]
    final_watermark_ms: int


def topic_code(topic: str) -> int | None:
    """0 for the GET input topic, 1 for POST, whatever the run's prefix (``pgval-…-get``)."""
    for name, code in TOPIC_CODES.items():
        if topic == name or topic.endswith(f"-{name}"):
            return code
    return None


def watermark_ms(progress: Mapping[str, Any]) -> int:
    """The watermark a batch ran with (``eventTime.watermark``, ISO-8601 UTC) in ms; 0 if none."""
    iso = (progress.get("eventTime") or {}).get("watermark")
    if not iso:
        return 0
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
    except (TypeError, ValueError, OverflowError):  # year 1 or 9999 at an offset
        return 0


def batch_ranges(progress: Iterable[Mapping[str, Any]]) -> BatchRanges:
    """Collect [start, end) offsets and the watermark of every recorded micro-batch."""
    acc: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    batches, queries = [], []
    query = ""
    for p in progress:  # a batch belongs to the query of the driver start before it
        if p.get("event") == "started":
            query = str(p.get("id", ""))
        elif p.get("event") == "progress":
            batches.append(p)
            queries.append(query)
    ids = np.array([int(p.get("batchId", -1)) for p in batches], dtype=np.int64)
    marks = np.array([watermark_ms(p) for p in batches], dtype=np.int64)
    final_wm = int(marks.max()) if len(marks) else 0
    # Highest watermark among batches of the same query with a smaller id. A query
    # restarted from its checkpoint keeps its id and re-runs batch ids; one started on a
    # new checkpoint (m1) is another query, numbered from 0 with no watermark.
    late_wm = np.zeros(len(batches), dtype=np.int64)
    query_of = np.array(queries)
    for one in set(queries):
        mine = np.flatnonzero(query_of == one)
        order = mine[np.argsort(ids[mine], kind="stable")]
        running = np.maximum.accumulate(marks[order])
        k = np.searchsorted(ids[order], ids[mine], side="left")
        late_wm[mine] = np.where(k > 0, running[np.maximum(k - 1, 0)], 0)
    for p, wm in zip(batches, late_wm.tolist(), strict=True):
        for src in p.get("sources") or []:
            start = src.get("startOffset") or {}
            end = src.get("endOffset") or {}
            if isinstance(start, str) or isinstance(end, str):
                continue
            for topic, parts in end.items():
                code = topic_code(topic)
                if code is None:
                    continue
                for part, end_off in parts.items():
                    begin = int((start.get(topic) or {}).get(part, 0))
                    if int(end_off) > begin:
                        acc.setdefault((code, int(part)), []).append((begin, int(end_off), wm))
    ranges = {}
    for key, rows in acc.items():
        arr = np.array(sorted(rows), dtype=np.int64)
        ranges[key] = (arr[:, 0], arr[:, 1], arr[:, 2])
    return BatchRanges(ranges, final_wm)


def explain_unprocessed(events: InputEvents, expected: ExpectedOutputs, validation: Validation,
                        progress: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per cause, plus a few example IDs per cause."""
    slots = validation.unprocessed_slots
    result: dict[str, Any] = {"counts": dict.fromkeys(CAUSES, 0), "examples": {}}
    if len(slots) == 0:
        return result
    ids = expected.id_sorted[slots]
    window_end = expected.window_start[expected.id_output[slots]] + expected.window_ms
    br = batch_ranges(progress)
    cause = np.full(len(ids), _LOST, dtype=np.int8)  # lost unless shown otherwise
    skipped = np.zeros(len(ids), dtype=bool)

    if events.offset is not None and events.topic is not None and events.partition is not None:
        order = np.argsort(events.id)
        pos = np.minimum(np.searchsorted(events.id[order], ids), len(order) - 1)
        src = order[pos]
        topic, part, off = events.topic[src], events.partition[src], events.offset[src]
        read_wm = np.full(len(ids), -1, dtype=np.int64)  # late-event watermark; -1: unread
        read_past = np.zeros(len(ids), dtype=bool)  # a batch read beyond its offset
        for (t, p), (starts, ends, wms) in br.ranges.items():
            sel = np.flatnonzero((topic == t) & (part == p))
            if len(sel) == 0:
                continue
            k = np.searchsorted(starts, off[sel], side="right") - 1
            inside = (k >= 0) & (off[sel] < ends[np.maximum(k, 0)])
            read_wm[sel[inside]] = wms[k[inside]]
            read_past[sel] = off[sel] < ends.max()
        cause[(read_wm >= 0) & (window_end <= read_wm)] = _LATE
        cause[read_wm < 0] = _IN_FLIGHT
        skipped = (read_wm < 0) & read_past
    cause[window_end > br.final_watermark_ms] = _IN_FLIGHT
    cause[skipped] = _SKIPPED  # never read whatever its window: the query went past it
    for code, name in enumerate(CAUSES):
        mask = cause == code
        result["counts"][name] = int(mask.sum())
        result["examples"][name] = ids[mask][:5].tolist()
    return result
