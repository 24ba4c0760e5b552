"""Why was it unprocessed? A cause for every unprocessed ID, from the batch progress.

Spark drops rows behind the watermark and has no late-data side output, so the
paper's Algorithm 2 has nothing to read. Instead pgval uses what the driver
recorded per micro-batch (source offsets and the watermark each batch ran with):

* ``skipped`` — no batch read its offset, yet batches read past it in its
  partition: the query jumped over it (a restart from the latest offsets, ``--pg m1``),
  so it was never read at all;
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
* ``lost`` — neither: read, on time, window closed, yet not in any output. That
  includes the batch a driver died in: its offsets were logged and its commit was
  not, so no progress line shows it; an m1 restart records it (the driver's
  ``abandoned`` event, pgval.topologies.driver.abandoned_batch), and a new query
  from the latest offsets never reads it again. Its IDs were read and died with
  the driver: lost (or late, by the same rule), not skipped;
* ``late or lost`` — a user's job's ID read with its event time behind the watermark, in
  a run whose batches could not be replayed: pgval does not know the job's window, so it
  cannot tell Spark's drop of a late row from a loss. Where the replay ran
  (:mod:`pgval.oracle.replay`), what Spark's rule dropped left the expectation, and such an
  ID is ``lost`` (docs/semantics.md, "Late data in a user's job").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from pgval.checker.validator import Validation
from pgval.core.schema import GET_TOPIC, POST_TOPIC
from pgval.oracle.expected import ExpectedOutputs
from pgval.oracle.rows import JOB
from pgval.records.parse import InputEvents

CAUSES = ("late", "skipped", "in-flight at end", "lost", "late or lost")
_LATE, _SKIPPED, _IN_FLIGHT, _LOST, _LATE_OR_LOST = range(len(CAUSES))
TOPIC_CODES = {GET_TOPIC: 0, POST_TOPIC: 1}


Ranges = dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass
class BatchRanges:
    """Per (topic, partition): offset ranges read by each batch and its late-event watermark.

    The late-event watermark of a batch is the highest watermark of the recorded
    batches before it (Spark filters late rows with batch k − 1's watermark).
    ``abandoned`` holds the batches a driver died in (no progress line, never committed).
    """

    ranges: Ranges
    final_watermark_ms: int
    abandoned: Ranges = field(default_factory=dict)


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
    """Collect [start, end) offsets and the watermark of every recorded micro-batch, and of
    every abandoned one (the driver's ``abandoned`` events)."""
    batches, queries = [], []
    query = ""
    for p in progress:  # a batch belongs to the query of the driver start before it
        if p.get("event") == "started":
            query = str(p.get("id", ""))
        elif p.get("event") == "progress":
            batches.append(p)
            queries.append(query)
        elif p.get("event") == "abandoned":  # names its own (dead) query
            batches.append(p)
            queries.append(str(p.get("id", "")))
    ids = np.array([int(p.get("batchId", -1)) for p in batches], dtype=np.int64)
    done = np.array([p.get("event") == "progress" for p in batches], dtype=bool)
    # An abandoned batch reported no watermark: it raises nobody's.
    marks = np.array([watermark_ms(p) if ok else 0 for p, ok in zip(batches, done, strict=True)],
                     dtype=np.int64)
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
    read: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    dead: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for p, wm, ok in zip(batches, late_wm.tolist(), done.tolist(), strict=True):
        acc = read if ok else dead
        for src in p.get("sources") or []:
            start = src.get("startOffset") or {}
            end = src.get("endOffset") or {}
            if isinstance(start, str) or isinstance(end, str):
                continue
            for topic, parts in end.items():
                code = topic_code(topic)
                if code is None:
                    continue
                if not ok and topic not in start:  # an abandoned range must have its start
                    continue
                for part, end_off in parts.items():
                    begin = int((start.get(topic) or {}).get(part, 0))
                    if int(end_off) > begin:
                        acc.setdefault((code, int(part)), []).append((begin, int(end_off), wm))
    return BatchRanges(_arrays(read), final_wm, _arrays(dead))


def _arrays(acc: Mapping[tuple[int, int], list[tuple[int, int, int]]]) -> Ranges:
    """(starts, ends, late-event watermarks) per partition, sorted by start."""
    ranges = {}
    for key, rows in acc.items():
        arr = np.array(sorted(rows), dtype=np.int64)
        ranges[key] = (arr[:, 0], arr[:, 1], arr[:, 2])
    return ranges


def _read_by(ranges: Ranges, topic: np.ndarray, part: np.ndarray, off: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per record: the late-event watermark of the batch whose range holds its offset (−1:
    none did), and whether a batch read past it in its partition."""
    read_wm = np.full(len(off), -1, dtype=np.int64)
    read_past = np.zeros(len(off), dtype=bool)
    for (t, p), (starts, ends, wms) in ranges.items():
        sel = np.flatnonzero((topic == t) & (part == p))
        if len(sel) == 0:
            continue
        k = np.searchsorted(starts, off[sel], side="right") - 1
        inside = (k >= 0) & (off[sel] < ends[np.maximum(k, 0)])
        read_wm[sel[inside]] = wms[k[inside]]
        read_past[sel] = off[sel] < ends.max()
    return read_wm, read_past


def explain_unprocessed(events: InputEvents, expected: ExpectedOutputs, validation: Validation,
                        progress: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts per cause, plus a few example IDs per cause."""
    return summarize_causes(expected.id_sorted[validation.unprocessed_slots],
                            unprocessed_cause_codes(events, expected, validation, progress))


#: Causes only a user's job can have: listed only where some ID has one.
JOB_CAUSES = ("late or lost",)


def summarize_causes(ids: np.ndarray, cause: np.ndarray) -> dict[str, Any]:
    """Counts per cause and a few example IDs per cause, from each ID's cause code."""
    found = {name: int((cause == code).sum()) for code, name in enumerate(CAUSES)}
    names = [n for n in CAUSES if n not in JOB_CAUSES or found[n]]
    result: dict[str, Any] = {"counts": {n: found[n] for n in names}, "examples": {}}
    if len(ids) == 0:
        return result
    for name in names:
        result["examples"][name] = ids[cause == CAUSES.index(name)][:5].tolist()
    return result


def unprocessed_cause_codes(events: InputEvents, expected: ExpectedOutputs,
                            validation: Validation, progress: Iterable[Mapping[str, Any]],
                            ruled: bool = False) -> np.ndarray:
    """Each unprocessed ID's cause (``validation.unprocessed_slots`` order), as an index
    into :data:`CAUSES`: what the full anomaly set keeps per ID. ``ruled``: a job's late
    drops were told apart by Spark's own rule (:mod:`pgval.oracle.replay`) and left the
    expectation, so an ID still expected that was read behind the watermark was one the
    rule kept: lost."""
    slots = validation.unprocessed_slots
    if len(slots) == 0:
        return np.zeros(0, dtype=np.int8)
    ids = expected.id_sorted[slots]
    if expected.topology == JOB:
        # A job's window is its own: Spark drops a row behind the watermark by its
        # event-time column, which for a windowed job ends after the event's own time, so
        # ``event_ts < watermark`` holds for every row the job's watermark dropped.
        window_end = expected.id_event_ts[slots] + 1
    else:
        window_end = expected.window_start[expected.id_output[slots]] + expected.window_ms
    br = batch_ranges(progress)
    cause = np.full(len(ids), _LOST, dtype=np.int8)  # lost unless shown otherwise
    skipped = np.zeros(len(ids), dtype=bool)
    died = np.zeros(len(ids), dtype=bool)  # read by a batch its driver died in
    died_wm = np.zeros(len(ids), dtype=np.int64)
    if events.offset is not None and events.topic is not None and events.partition is not None:
        order = np.argsort(events.id)
        pos = np.minimum(np.searchsorted(events.id[order], ids), len(order) - 1)
        src = order[pos]
        topic, part, off = events.topic[src], events.partition[src], events.offset[src]
        read_wm, read_past = _read_by(br.ranges, topic, part, off)
        abandoned_wm, _ = _read_by(br.abandoned, topic, part, off)
        died = (read_wm < 0) & (abandoned_wm >= 0)
        died_wm = abandoned_wm
        cause[(read_wm >= 0) & (window_end <= read_wm)] = _LATE
        cause[read_wm < 0] = _IN_FLIGHT
        skipped = (read_wm < 0) & read_past & ~died
    cause[window_end > br.final_watermark_ms] = _IN_FLIGHT
    cause[skipped] = _SKIPPED  # never read whatever its window: the query went past it
    # Read by the batch the driver died in: never read again, whatever its window.
    cause[died] = np.where(window_end[died] <= died_wm[died], _LATE, _LOST)
    if expected.topology == JOB:
        # By the event time alone a drop cannot be told from a loss: an event a little
        # behind the watermark is dropped only when its window had closed, which pgval does
        # not know of a user's job. So "late or lost", never plain "late" (Spark's doing).
        cause[cause == _LATE] = _LOST if ruled else _LATE_OR_LOST
    return cause
