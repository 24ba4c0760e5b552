"""What Spark's watermark dropped in a run, by Spark's own rule: the run's micro-batches replayed.

Structured Streaming drops, in micro-batch N, the rows a stateful operator finds behind the
watermark of batch N−1 (``eventTimeWatermarkForLateEvents``): by their window's end for a
windowed aggregation, by their event time for a dedup or a join, per operator where there
are several. A batch run keeps them (``withWatermark`` does nothing in a batch), so the
batch oracle alone would count them lost. Where the run's progress says a stateful
operator dropped rows behind the watermark, the batch oracle process therefore replays the
run (:mod:`pgval.topologies.replay`): the job again as a stream over exactly the records each
of the run's micro-batches read, found by the offsets its progress recorded, one file per
input and batch (an empty file for a batch that read nothing, so the watermark moves at the
same batches as in the run). Spark's own code decides what is late.

This module is the part without Spark: :func:`plan_replay` cuts the run's records into its
batches (checked against the run's offsets and record counts), :func:`replay_mismatch`
compares the replay's batches with the run's (watermarks, the batches that dropped rows),
and :func:`apply_replay` compares the replay's rows with the batch's. An (input, row) pair
the batch has and the replay lacks, of an input read in a batch whose operators dropped
rows (or one the run has no progress line of), was dropped behind the watermark: it leaves
the expectation and is reported apart. A replay with a pair the batch lacks (a stream that
differs from its batch beyond the watermark, which ``pgval lint`` names) is not used;
nothing is then set apart, and the reason is said.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgval.core.errors import UserMistake

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The reason a replay was not needed: the run's stateful operators dropped nothing.
NOTHING_DROPPED = "the run's stateful operators dropped no row behind the watermark"


def watermark_ms(progress: Mapping[str, Any]) -> int | None:
    """The watermark a batch ran with (``eventTime.watermark``) in epoch ms; None if none."""
    iso = (progress.get("eventTime") or {}).get("watermark")
    if not iso:
        return None
    try:
        at = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
        return (at - EPOCH) // timedelta(milliseconds=1)
    except (TypeError, ValueError, OverflowError):
        return None


def dropped_by_run(progress: Iterable[Mapping[str, Any]]) -> int:
    """Rows the run's stateful operators reported dropped behind the watermark, over every
    recorded batch (a batch re-run after a restart counts once: its last line)."""
    last: dict[int, int] = {}
    for p in progress:
        if p.get("event") == "progress" and isinstance(p.get("batchId"), int):
            last[p["batchId"]] = sum(_int(op.get("numRowsDroppedByWatermark"))
                                     for op in p.get("stateOperators") or [])
    return sum(last.values())


@dataclass(frozen=True)
class ReplayPlan:
    """The run's micro-batches: ``batches`` of them (ids 0 to ``batches`` − 1), each input's
    records' batch (``batch_of``, −1: no batch of the run read it), the watermark each
    recorded batch ran with (``watermarks``) and the rows its stateful operators dropped
    behind it (``dropped``), by batch id."""

    batches: int
    batch_of: dict[str, np.ndarray]
    watermarks: dict[int, int]
    dropped: dict[int, int]

    def dropping(self) -> list[int]:
        """The batches in which the run's operators dropped rows behind the watermark."""
        return sorted(b for b, n in self.dropped.items() if n > 0)


class NoReplay(UserMistake, ValueError):
    """The run's batches cannot stand for a replay (one sentence: why). Always caught: the
    run is then judged without it, and says why."""


Offsets = dict[str, dict[int, int]]


def _offsets(value: object) -> Offsets | None:
    """A source's ``startOffset``/``endOffset`` as {topic: {partition: offset}} (None: a
    string such as ``latest``, or nothing)."""
    if not isinstance(value, dict):
        return None
    try:
        return {str(t): {int(k): int(v) for k, v in parts.items()}
                for t, parts in value.items()}
    except (AttributeError, TypeError, ValueError):
        return None


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0


@dataclass
class _Lines:
    """What the run's progress lines say, batch by batch."""

    queries: set[str]
    ends: dict[int, Offsets]
    starts: dict[int, Offsets]
    rows: dict[int, list[tuple[frozenset[str], int]]]  # per source: its topics, rows read
    marks: dict[int, int]
    dropped: dict[int, int]
    conflict: int | None = None  # a batch with two lines that disagree on its offsets


def _read_lines(progress: Iterable[Mapping[str, Any]]) -> _Lines:
    """The progress lines gathered per batch id (the first batch whose lines disagree on
    its offsets noted: two queries')."""
    got = _Lines(set(), {}, {}, {}, {}, {})
    for p in progress:
        if p.get("event") == "started" and p.get("id"):
            got.queries.add(str(p["id"]))
        if p.get("event") != "progress" or not isinstance(p.get("batchId"), int):
            continue
        b = int(p["batchId"])
        end: Offsets = {}
        start: Offsets = {}
        rows = []
        for src in p.get("sources") or []:
            src_end = _offsets(src.get("endOffset")) or {}
            end.update(src_end)
            start.update(_offsets(src.get("startOffset")) or {})
            if isinstance(src.get("numInputRows"), int):
                rows.append((frozenset(src_end), int(src["numInputRows"])))
        if b in got.ends and got.ends[b] != end and got.conflict is None:
            got.conflict = b
        if end:
            got.ends[b] = end
        if start:
            got.starts[b] = start
        got.rows[b] = rows
        if (wm := watermark_ms(p)) is not None:
            got.marks[b] = wm
        got.dropped[b] = sum(_int(op.get("numRowsDroppedByWatermark"))
                             for op in p.get("stateOperators") or [])
    return got


def plan_replay(progress: Iterable[Mapping[str, Any]],
                inputs: Mapping[str, tuple[str, np.ndarray, np.ndarray]],
                every_record: bool = True) -> ReplayPlan:
    """Each record's micro-batch in the run, from the offsets its progress recorded.

    ``inputs``: per input name, its topic and its records' partitions and offsets. A batch
    whose line is missing (a driver killed before its listener wrote it) ends where the
    next batch starts. The cut is checked against the run: each batch starts where the
    one before ended, and no source of a recorded batch read fewer records than the cut
    gives it. Refused (:class:`NoReplay`) when the run's batches are not one query's (a
    restart on a new checkpoint starts another stream, with no watermark), a batch's end
    cannot be known, or the cut does not match. ``every_record`` False: ``inputs`` are not
    all the records the run read (pgval's own set aside), so the counts are not checked.
    """
    got = _read_lines(progress)
    if len(got.queries) > 1:
        raise NoReplay("the run's query started afresh on a new checkpoint (its batches "
                       "are two streams, the second with no watermark)")
    if got.conflict is not None:
        raise NoReplay(f"the run's progress has two lines for batch {got.conflict} with "
                       "other offsets (two queries)")
    if not got.ends:
        raise NoReplay("the run's progress records no batch's offsets")
    count = max(got.ends) + 1
    ends = dict(got.ends)
    for b in range(count):
        if b not in ends:
            if b + 1 not in got.starts:
                raise NoReplay(f"the run's progress has neither batch {b}'s end offsets nor "
                               f"batch {b + 1}'s start offsets")
            ends[b] = got.starts[b + 1]
        elif b + 1 in got.starts and any(
                ends[b].get(t, {}).get(part, off) != off
                for t, parts in got.starts[b + 1].items() for part, off in parts.items()):
            raise NoReplay(f"batch {b + 1} of the run starts elsewhere than batch {b} ended")
    batch_of = {name: _cut(topic, partitions, offsets, ends, got.starts.get(0) or {}, count)
                for name, (topic, partitions, offsets) in inputs.items()}
    if every_record:
        _check_rows(got, inputs, batch_of, count)
    return ReplayPlan(count, batch_of, got.marks, got.dropped)


def _cut(topic: str, partitions: np.ndarray, offsets: np.ndarray, ends: Mapping[int, Offsets],
         first_start: Offsets, count: int) -> np.ndarray:
    """Each record's batch: the first whose end offset in its partition is past it."""
    partitions = np.asarray(partitions, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    out = np.full(len(offsets), -1, dtype=np.int64)
    first = first_start.get(topic, {})
    for part in np.unique(partitions).tolist():
        sel = np.flatnonzero(partitions == part)
        # Each batch's end in this partition, carried over a batch that names none.
        line, last = np.zeros(count, dtype=np.int64), int(first.get(part, 0))
        for b in range(count):
            last = int(ends[b].get(topic, {}).get(part, last))
            line[b] = last
        if np.any(np.diff(line) < 0):
            raise NoReplay(f"the run's end offsets of {topic} partition {part} go back")
        k = np.searchsorted(line, offsets[sel], side="right")
        read = (k < count) & (offsets[sel] >= int(first.get(part, 0)))
        out[sel[read]] = k[read]
    return out


def _check_rows(got: _Lines, inputs: Mapping[str, tuple[str, np.ndarray, np.ndarray]],
                batch_of: Mapping[str, np.ndarray], count: int) -> None:
    """No recorded batch's source read fewer records than the cut gives it (a source
    whose topics are not all inputs here is not checked). Not "as many": Spark counts a
    source's rows in every task that ran, so a batch whose stage ran again after an
    executor was lost reports more (measured: 746 rows over an offset range of 410)."""
    per_topic: dict[str, np.ndarray] = {}
    for name, (topic, _, _) in inputs.items():
        counts = np.bincount(batch_of[name][batch_of[name] >= 0], minlength=count)
        per_topic[topic] = per_topic.get(topic, np.zeros(count, dtype=np.int64)) + counts
    for b, sources in sorted(got.rows.items()):
        for topics, rows in sources:
            if topics and topics <= per_topic.keys():
                cut = sum(int(per_topic[t][b]) for t in topics)
                if cut > rows:
                    raise NoReplay(f"batch {b} of the run read {rows:,} records of "
                                   f"{', '.join(sorted(topics))}; its offsets give {cut:,}")


def topic_of(role: str, progress: Iterable[Mapping[str, Any]]) -> str:
    """The run's topic of input ``role`` as its progress names it: the role itself, or
    pgval's prefixed name (``pgval-…-get``)."""
    names = {t for p in progress if p.get("event") == "progress"
             for s in p.get("sources") or [] if isinstance(s.get("endOffset"), dict)
             for t in s["endOffset"]}
    if role in names:
        return role
    found = sorted(t for t in names if t.endswith(f"-{role}"))
    return found[0] if found else role


def batch_by_run(progress: list[dict[str, Any]], topics: list[str], codes: np.ndarray,
                 partitions: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, ReplayPlan]:
    """The batch of the run that read each record (its topic ``topics[code]``; −1: none),
    and the run's batches as :func:`plan_replay` cuts them (the records need not be all
    the run read: the batch oracle checked the cut on all of them)."""
    inputs = {str(code): (topic, partitions[codes == code], offsets[codes == code])
              for code, topic in enumerate(topics)}
    plan = plan_replay(progress, inputs, every_record=False)
    batch = np.full(len(offsets), -1, dtype=np.int64)
    for code in range(len(topics)):
        batch[codes == code] = plan.batch_of[str(code)]
    return batch, plan


def replay_mismatch(plan: ReplayPlan, marks: Mapping[int, int],
                    dropped: Mapping[int, int]) -> str | None:
    """Where the replay did not run as the run did (one sentence), or None: at every batch
    the run recorded, the replay ran with the same watermark, and its operators dropped
    rows behind it in the same batches (counts may differ: an aggregation drops partial
    aggregates, whose number depends on how the input is partitioned)."""
    for b in sorted(plan.watermarks):
        if b not in marks:
            return f"the replay has no batch {b}"
        if marks[b] != plan.watermarks[b]:
            return (f"batch {b} ran with watermark {plan.watermarks[b]} ms in the run and "
                    f"{marks[b]} ms in the replay")
    for b in sorted(plan.dropped):
        if (plan.dropped[b] > 0) != (dropped.get(b, 0) > 0):
            return (f"batch {b} dropped {plan.dropped[b]:,} rows behind the watermark in the "
                    f"run and {dropped.get(b, 0):,} in the replay")
    return None


@dataclass(frozen=True)
class Applied:
    """The batch's rows less what the replay shows dropped: ``rows`` (each row's IDs less
    its dropped pairs, a row left without an ID gone; a changed row's value the replay's,
    null when the replay has none), and ``dropped`` (one input ID per dropped pair)."""

    rows: pa.Table
    dropped: np.ndarray


def _pairs(table: pa.Table, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, key code, id) of each (row, ID) pair of a table of rows."""
    ids = table.column("ids").combine_chunks()
    row = pc.list_parent_indices(ids).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(ids).to_numpy(zero_copy_only=False).astype(np.int64)
    return row, codes[row], flat


def _dense_codes(values: np.ndarray) -> np.ndarray:
    """Each value's rank among the distinct values (0, 1, …): by one sort, without the
    hash table ``np.unique`` builds (5 s for 2M values here, against 0.2 s)."""
    order = np.argsort(values, kind="stable")
    ranks = np.zeros(len(values), dtype=np.int64)
    if len(values):
        ranks[order] = np.concatenate([[0], np.cumsum(np.diff(values[order]) != 0)])
    return ranks


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each value is in ``sorted_set`` (binary search; ``np.isin`` hashes)."""
    if len(sorted_set) == 0:
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def apply_replay(rows: pa.Table, replay: pa.Table, read: np.ndarray) -> Applied:
    """``rows`` (the batch's, pgval's own IDs set aside) less the pairs ``replay`` (the
    same, from the replay) lacks whose input a batch of the run read (``read``: sorted
    IDs). A replay pair the batch lacks is :class:`NoReplay` (the stream differs from the
    batch beyond the watermark)."""
    both = pa.concat_arrays([rows.column("key").combine_chunks().cast(pa.string()),
                             replay.column("key").combine_chunks().cast(pa.string())])
    codes = pc.dictionary_encode(both).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    b_row, b_key, b_id = _pairs(rows, codes[:rows.num_rows])
    r_row, r_key, r_id = _pairs(replay, codes[rows.num_rows:])
    if len(b_id) + len(r_id) == 0:
        return Applied(rows, np.zeros(0, dtype=np.int64))
    # One integer per (key, id) pair: the IDs coded densely first (a record ID may use all
    # 64 bits), then key code × distinct IDs + ID code.
    id_code = _dense_codes(np.concatenate([b_id, r_id]))
    width = int(id_code.max()) + 1
    b_code = b_key * width + id_code[:len(b_id)]
    r_code = r_key * width + id_code[len(b_id):]
    extra = ~_member(r_code, np.sort(b_code))
    if extra.any():
        i = int(np.flatnonzero(extra)[0])
        raise NoReplay(f"the replay has {int(extra.sum()):,} (input, row) pairs the batch has "
                       f"not (input {int(r_id[i])} in row "
                       f"{replay.column('key')[int(r_row[i])].as_py()}): the job's stream "
                       "differs from its batch beyond the watermark (pgval lint says where)")
    drop = ~_member(b_code, np.sort(r_code)) & _member(b_id, np.sort(read))
    if not drop.any():
        return Applied(rows, np.zeros(0, dtype=np.int64))
    keep = ~drop
    lengths = np.bincount(b_row[keep], minlength=rows.num_rows)
    changed = np.bincount(b_row[drop], minlength=rows.num_rows) > 0
    offsets = np.zeros(rows.num_rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(b_id[keep], pa.int64()))
    columns = {name: rows.column(name).combine_chunks() for name in rows.column_names}
    columns["ids"] = ids
    if "value" in columns:
        # A changed row's value is the replay's row with the same key, if it has one.
        replay_row = np.full(int(codes.max(initial=-1)) + 1, -1, dtype=np.int64)
        replay_row[codes[rows.num_rows:]] = np.arange(replay.num_rows)
        mine = replay_row[codes[:rows.num_rows]]
        values = replay.column("value").combine_chunks().take(
            pa.array(np.maximum(mine, 0), mask=mine < 0)) if replay.num_rows else \
            pa.nulls(rows.num_rows, pa.string())
        columns["value"] = pc.if_else(pa.array(changed), values, columns["value"])
    table = pa.table(columns, schema=rows.schema)
    return Applied(table.filter(pa.array((lengths > 0) | ~changed)), b_id[drop])


@dataclass(frozen=True)
class LateDrops:
    """What a run's watermark dropped, as the validator gets it: the replay ``used`` (else
    ``why`` not), the input ID of each (input, row) pair it showed dropped, and the rows
    the run's own progress reported dropped (``run_dropped``)."""

    used: bool
    why: str | None
    dropped_ids: np.ndarray
    run_dropped: int

    @classmethod
    def unused(cls, why: str, run_dropped: int) -> LateDrops:
        return cls(False, why, np.zeros(0, dtype=np.int64), run_dropped)
