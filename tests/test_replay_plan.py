"""The run's micro-batches cut from its progress, and the replay's rows against the batch's
(:mod:`pgval.oracle.replay`): no Spark. Which records each batch read follows the offsets
the progress recorded, a batch whose line is missing ends where the next starts, two
queries are refused; a pair the replay lacks leaves the expectation only when a batch of
the run read its input, and a pair the batch lacks refuses the replay."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.oracle.replay import (
    NoReplay,
    apply_replay,
    batch_by_run,
    dropped_by_run,
    plan_replay,
    replay_mismatch,
)
from pgval.records.parse import ResourceTable


def batch(b: int, start: dict | None, end: dict, wm: str | None = None,
          dropped: int = 0, rows: int | None = None) -> dict:
    source = {"startOffset": start, "endOffset": end}
    if rows is not None:
        source["numInputRows"] = rows
    line = {"event": "progress", "batchId": b, "sources": [source],
            "stateOperators": [{"numRowsDroppedByWatermark": dropped}]}
    if wm:
        line["eventTime"] = {"watermark": wm}
    return line


def test_each_record_goes_to_the_batch_whose_range_holds_its_offset() -> None:
    progress = [{"event": "started", "id": "q"},
                batch(0, None, {"t": {"0": 3, "1": 2}}, "1970-01-01T00:00:00.000Z"),
                batch(1, {"t": {"0": 3, "1": 2}}, {"t": {"0": 3, "1": 2}},
                      "1970-01-01T00:00:10.000Z"),  # read nothing: an empty batch
                batch(2, {"t": {"0": 3, "1": 2}}, {"t": {"0": 5, "1": 4}},
                      "1970-01-01T00:00:20.000Z", dropped=2)]
    parts = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    offs = np.array([0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4])
    plan = plan_replay(progress, {"x": ("t", parts, offs)})
    assert plan.batches == 3
    assert plan.batch_of["x"].tolist() == [0, 0, 0, 2, 2, -1, 0, 0, 2, 2, -1]
    assert plan.watermarks == {0: 0, 1: 10_000, 2: 20_000}
    assert dropped_by_run(progress) == 2 and plan.dropping() == [2]
    marks = {0: 0, 1: 10_000, 2: 20_000}
    assert replay_mismatch(plan, marks, {2: 5}) is None  # counts may differ, batches not
    assert "batch 2" in replay_mismatch(plan, {**marks, 2: 19_000}, {2: 2})
    assert "no batch 1" in replay_mismatch(plan, {0: 0, 2: 20_000}, {2: 2})
    assert "batch 1 dropped 0 rows" in replay_mismatch(plan, marks, {1: 3, 2: 2})


def test_the_cut_must_give_each_batch_the_records_the_run_read() -> None:
    """A query that began at the latest offsets (its first batch names no start) read
    fewer records in batch 0 than the cut from offset 0 gives: refused, as are batches
    that do not follow each other or two lines of one batch with other offsets. A batch
    that reports more than its cut (a stage run twice) is no doubt."""
    parts, offs = np.zeros(6, dtype=int), np.arange(6)
    ok = [batch(0, None, {"t": {"0": 3}}, rows=3), batch(1, {"t": {"0": 3}}, {"t": {"0": 6}},
                                                         rows=3)]
    assert plan_replay(ok, {"x": ("t", parts, offs)}).batch_of["x"].tolist() == [0] * 3 + [1] * 3
    # A stage run again after a lost executor counts its records twice: more is no doubt.
    again = [batch(0, None, {"t": {"0": 3}}, rows=5), ok[1]]
    assert plan_replay(again, {"x": ("t", parts, offs)}).batches == 2
    late_start = [batch(0, None, {"t": {"0": 3}}, rows=1), ok[1]]
    with pytest.raises(NoReplay, match="batch 0 of the run read 1 records"):
        plan_replay(late_start, {"x": ("t", parts, offs)})
    with pytest.raises(NoReplay, match="starts elsewhere"):
        plan_replay([ok[0], batch(1, {"t": {"0": 2}}, {"t": {"0": 6}})],
                    {"x": ("t", parts, offs)})
    with pytest.raises(NoReplay, match="two lines for batch 0"):
        plan_replay([ok[0], batch(0, None, {"t": {"0": 4}}), ok[1]], {"x": ("t", parts, offs)})


def test_a_batch_without_its_line_ends_where_the_next_one_starts() -> None:
    progress = [batch(0, None, {"t": {"0": 2}}),
                batch(2, {"t": {"0": 4}}, {"t": {"0": 6}})]
    plan = plan_replay(progress, {"x": ("t", np.zeros(6, dtype=int), np.arange(6))})
    assert plan.batch_of["x"].tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(NoReplay, match="neither batch 1"):
        plan_replay([batch(0, None, {"t": {"0": 2}}), batch(2, None, {"t": {"0": 6}})],
                    {"x": ("t", np.zeros(1, dtype=int), np.zeros(1, dtype=int))})


def test_a_query_started_afresh_is_not_replayed() -> None:
    progress = [{"event": "started", "id": "a"}, batch(0, None, {"t": {"0": 2}}),
                {"event": "started", "id": "b"}, batch(0, None, {"t": {"0": 4}})]
    with pytest.raises(NoReplay, match="new checkpoint"):
        plan_replay(progress, {"x": ("t", np.zeros(1, dtype=int), np.zeros(1, dtype=int))})


def rows(*pairs: tuple[str, list[int], str]) -> pa.Table:
    return pa.table({"key": [k for k, _, _ in pairs], "ids": [i for _, i, _ in pairs],
                     "value": [v for _, _, v in pairs]},
                    schema=pa.schema([("key", pa.string()), ("ids", pa.list_(pa.int64())),
                                      ("value", pa.string())]))


def test_a_pair_the_replay_lacks_leaves_the_row_and_the_row_takes_the_replays_value() -> None:
    batch_rows = rows(("w1", [1, 2, 3], '{"n":3}'), ("w2", [4], '{"n":1}'),
                      ("w3", [5, 6], '{"n":2}'))
    replay = rows(("w1", [1, 3], '{"n":2}'), ("w3", [5, 6], '{"n":2}'))
    # 2 and 4 were read by the run and dropped; 7 would not matter.
    applied = apply_replay(batch_rows, replay, np.array([1, 2, 3, 4, 5, 6]))
    assert sorted(applied.dropped.tolist()) == [2, 4]
    got = applied.rows.to_pylist()
    assert got == [{"key": "w1", "ids": [1, 3], "value": '{"n":2}'},
                   {"key": "w3", "ids": [5, 6], "value": '{"n":2}'}]


def test_an_input_no_batch_read_stays_expected() -> None:
    batch_rows = rows(("w1", [1, 2], '{"n":2}'))
    replay = rows(("w1", [1], '{"n":1}'))
    applied = apply_replay(batch_rows, replay, np.array([1]))  # 2 never read: skipped
    assert applied.dropped.tolist() == []
    assert applied.rows.to_pylist() == batch_rows.to_pylist()


def test_a_pair_only_the_replay_has_refuses_it() -> None:
    with pytest.raises(NoReplay, match="differs from its batch"):
        apply_replay(rows(("w1", [1], "a")), rows(("w1", [1, 9], "b")), np.array([1, 9]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=5, unique=True),
                min_size=1, max_size=8), st.data())
def test_what_is_kept_is_the_replay_where_the_run_read(groups: list[list[int]],
                                                       data: st.DataObject) -> None:
    keyed = [(f"k{i}", g, f"v{i}") for i, g in enumerate(groups)]
    kept = [(k, [i for i in g if data.draw(st.booleans())], v) for k, g, v in keyed]
    replay = rows(*[(k, g, v + "'") for k, g, v in kept if g])
    every = np.unique(np.concatenate([np.array(g) for g in groups]))
    applied = apply_replay(rows(*keyed), replay, every)
    got = {r["key"]: (r["ids"], r["value"]) for r in applied.rows.to_pylist()}
    assert got == {k: (g, v + "'") if len(g) < len(dict((x[0], x[1]) for x in keyed)[k])
                   else (g, v) for k, g, v in kept if g}
    assert len(applied.dropped) == sum(len(g) for g in groups) - sum(len(g) for _, g, _ in kept)


def test_batch_by_run_finds_each_records_batch_by_its_topic() -> None:
    progress = [batch(0, None, {"pgval-x-get": {"0": 2}, "pgval-x-post": {"0": 1}}),
                batch(1, {"pgval-x-get": {"0": 2}, "pgval-x-post": {"0": 1}},
                      {"pgval-x-get": {"0": 3}, "pgval-x-post": {"0": 1}})]
    found, plan = batch_by_run(progress, ["pgval-x-get", "pgval-x-post"],
                               np.array([0, 0, 0, 1, 1]), np.zeros(5, dtype=int),
                               np.array([0, 1, 2, 0, 1]))
    assert found.tolist() == [0, 0, 1, 0, -1] and plan.batches == 2


def test_a_watermark_is_read_to_the_millisecond() -> None:
    from pgval.oracle.replay import watermark_ms

    assert watermark_ms({"eventTime": {"watermark": "2026-12-04T09:00:00.123Z"}}) == \
        1_796_374_800_123
    assert watermark_ms({"eventTime": {}}) is None


def test_progress_lines_the_replay_cannot_read_are_skipped_like_a_cut_line(
        tmp_path: object) -> None:
    """A negative batch id or state operators of the wrong type (an edited or damaged
    progress file) are skipped when the evidence is read, not a traceback later."""
    import json
    from pathlib import Path

    from pgval.evidence.bundle import PROGRESS, evidence_dir, load_progress

    run = Path(str(tmp_path))
    evidence_dir(run).mkdir(parents=True)
    good = batch(0, None, {"t": {"0": 2}}, dropped=1)
    lines = [good, {**good, "batchId": -1}, {**good, "stateOperators": ["x"]},
             {**good, "stateOperators": [{"numRowsDroppedByWatermark": "5"}]}]
    (evidence_dir(run) / PROGRESS).write_text("\n".join(json.dumps(x) for x in lines))
    assert load_progress(run) == [good]


@pytest.mark.parametrize(("batch_1", "excused"), [
    (None, True),  # no line: its drops cannot be shown, the replay's word stands
    (batch(1, {"get": {"0": 1}}, {"get": {"0": 2}}, dropped=0), False),  # read on time
    (batch(1, {"get": {"0": 1}}, {"get": {"0": 2}}, dropped=4), True),
])
def test_a_pair_is_excused_only_if_its_batch_dropped_rows_or_has_no_line(
        batch_1: dict | None, excused: bool) -> None:
    """The rows of the run's evidence less the replay's dropped pairs: an input read in a
    batch whose operators dropped nothing was not dropped by the watermark, whatever the
    replay lacks (a window still open at the end): it stays expected."""
    from pgval.evidence.bundle import late_drops
    from tests.strategies import to_inputs

    rt = ResourceTable()
    events = to_inputs([{"id": i, "type": "GET", "resource": "a", "event_ts": 1000 * i,
                         "ingress_ts": 1000 * i} for i in (1, 3, 4)], rt)
    events.offset = np.array([0, 1, 2], dtype=np.int64)
    events.topic = np.zeros(3, dtype=np.int64)
    events.partition = np.zeros(3, dtype=np.int64)
    progress = [batch(0, None, {"get": {"0": 1}}, dropped=0),
                *([batch_1] if batch_1 else []),
                batch(2, {"get": {"0": 2}}, {"get": {"0": 3}}, dropped=1)]
    kept, late = late_drops(rows(("w", [1, 3, 4], '{"n":3}')),
                            {"used": True, "run_dropped": 5, "progress": progress,
                             "topics": ["get", "post"], "rows": rows(("w", [1, 4], '{"n":2}'))},
                            events, None)
    assert late.used and late.dropped_ids.tolist() == ([3] if excused else [])
    assert kept.to_pylist()[0]["ids"] == ([1, 4] if excused else [1, 3, 4])
