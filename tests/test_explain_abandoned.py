"""The batch an m1 driver died in: its IDs were read and are *lost*, not *skipped*.

Hand-built progress (two queries, the first killed in its batch 2) and a hand-built
checkpoint for the driver's ``abandoned`` record, which is how that batch's offsets reach
the attribution: Spark writes ``offsets/N`` before batch N runs and ``commits/N`` after,
and no progress line is written for a batch that never finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from pgval.checker.evaluate import evaluate
from pgval.checker.explain import batch_ranges, explain_unprocessed
from pgval.records.parse import ResourceTable
from pgval.topologies.driver import abandoned_batch
from tests.strategies import to_inputs, to_outputs

T0 = 1_700_000_000_000


def iso(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def progress(batch: int, start: int, end: int, watermark: int) -> dict:
    return {"event": "progress", "batchId": batch, "eventTime": {"watermark": iso(watermark)},
            "sources": [{"startOffset": {"pgval-x-get": {"0": start}},
                         "endOffset": {"pgval-x-get": {"0": end}}}]}


#: (offset in partition 0 of the GET topic, event time - T0, cause expected) per ID.
CASES = {
    1: (4, 3_000, "lost"),     # read by the batch the driver died in; window closed later
    2: (5, 100, "late"),       # read by it, but behind batch 1's watermark: Spark drops it
    3: (6, 60_000, "lost"),    # read by it; window beyond every watermark: never re-read
    4: (7, 3_100, "skipped"),  # written after that batch was planned: nobody read it
    5: (8, 3_200, "skipped"),  # written while no driver ran
    6: (10, 4_000, "lost"),    # read by the new query, on time, missing: lost as before
    7: (11, 90_000, "in-flight at end"),  # read by the new query, window still open
}

QUERY_1 = [{"event": "started", "id": "q1"},
           progress(0, 0, 2, 0), progress(1, 2, 4, T0 + 2_000)]
ABANDONED = {"event": "abandoned", "id": "q1", "batchId": 2,
             "sources": [{"startOffset": {"pgval-x-get": {"0": 4}},
                          "endOffset": {"pgval-x-get": {"0": 7}}}]}
QUERY_2 = [{"event": "started", "id": "q2"},
           progress(0, 9, 10, 0), progress(1, 10, 12, T0 + 20_000)]


def causes(log: list[dict]) -> dict[int, str]:
    rt = ResourceTable()
    rows = [{"id": i, "type": "GET", "resource": "a", "event_ts": T0 + ts,
             "ingress_ts": T0 + 10 * off} for i, (off, ts, _) in CASES.items()]
    events = to_inputs(rows, rt)
    events.offset = np.array([off for off, _, _ in CASES.values()], dtype=np.int64)
    events.topic = np.zeros(len(rows), dtype=np.int64)
    events.partition = np.zeros(len(rows), dtype=np.int64)
    ev = evaluate(events, to_outputs([], rt), "sst", 1000)
    out = explain_unprocessed(events, ev.expected, ev.validation, log)
    assert sum(out["counts"].values()) == len(CASES)
    found = {}
    for cause, ids in out["examples"].items():
        found.update(dict.fromkeys(ids, cause))
    return found


def test_the_batch_the_driver_died_in_is_lost_not_skipped() -> None:
    got = causes([*QUERY_1, ABANDONED, *QUERY_2])
    assert got == {i: cause for i, (_, _, cause) in CASES.items()}


def test_without_the_abandoned_record_those_ids_look_skipped() -> None:
    """What pgval said before: the dead batch's IDs are unread and read past."""
    got = causes([*QUERY_1, *QUERY_2])
    assert [got[i] for i in (1, 2, 3)] == ["skipped"] * 3


def test_an_abandoned_batch_raises_no_watermark_and_keeps_its_querys() -> None:
    br = batch_ranges([*QUERY_1, ABANDONED, *QUERY_2])
    assert br.final_watermark_ms == T0 + 20_000
    starts, ends, wms = br.abandoned[(0, 0)]
    assert (starts.tolist(), ends.tolist(), wms.tolist()) == ([4], [7], [T0 + 2_000])
    assert br.ranges[(0, 0)][0].tolist() == [0, 2, 9, 10]  # the recorded batches only


def checkpoint(root: Path, name: str, planned: int, committed: int, mtime: int,
               topics: tuple[str, ...] = ("pgval-x-get",)) -> Path:
    """An m1 start's checkpoint as Spark leaves it: offsets/0..planned, commits/0..committed."""
    ck = root / name
    for sub in ("offsets", "commits"):
        (ck / sub).mkdir(parents=True)
    (ck / "metadata").write_text(json.dumps({"id": f"id-{name}"}))
    for k, topic in enumerate(topics):
        (ck / "sources" / str(k)).mkdir(parents=True)
        (ck / "sources" / str(k) / "0").write_text("\x00v1\n" + json.dumps({topic: {"0": 5}}))
    for batch in range(planned + 1):
        lines = ["v1", json.dumps({"batchWatermarkMs": 0, "conf": {}})]
        lines += [json.dumps({t: {"0": 10 * (batch + 1) + k, "1": 3}})
                  for k, t in enumerate(topics)]
        (ck / "offsets" / str(batch)).write_text("\n".join(lines))
    for batch in range(committed + 1):
        (ck / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    os.utime(ck, (mtime, mtime))
    return ck


def test_the_driver_reads_the_dead_batch_from_the_newest_start(tmp_path: Path) -> None:
    checkpoint(tmp_path, "m1-start-1", planned=5, committed=4, mtime=1_000)  # older start
    newest = checkpoint(tmp_path, "m1-start-2", planned=2, committed=1, mtime=2_000,
                        topics=("pgval-x-get", "pgval-x-post"))
    rec = abandoned_batch(tmp_path)
    assert rec == {"id": "id-m1-start-2", "batchId": 2, "checkpoint": str(newest),
                   "sources": [{"startOffset": {"pgval-x-get": {"0": 20, "1": 3},
                                                "pgval-x-post": {"0": 21, "1": 3}},
                                "endOffset": {"pgval-x-get": {"0": 30, "1": 3},
                                              "pgval-x-post": {"0": 31, "1": 3}}}]}


def test_a_first_batch_in_flight_starts_at_the_initial_offsets(tmp_path: Path) -> None:
    checkpoint(tmp_path, "m1-start-1", planned=0, committed=-1, mtime=1_000)
    rec = abandoned_batch(tmp_path)
    assert rec is not None and rec["batchId"] == 0
    assert rec["sources"] == [{"startOffset": {"pgval-x-get": {"0": 5}},
                               "endOffset": {"pgval-x-get": {"0": 10, "1": 3}}}]


def test_nothing_abandoned_when_the_last_batch_committed(tmp_path: Path) -> None:
    checkpoint(tmp_path, "m1-start-1", planned=3, committed=3, mtime=1_000)
    assert abandoned_batch(tmp_path) is None
    assert abandoned_batch(tmp_path / "empty") is None
