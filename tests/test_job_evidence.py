"""A user's job's run as its evidence keeps it: raw input and output records plus the batch
oracle's rows (``expected.parquet``). A re-check judges the outputs by those rows, with no
Spark: each planted anomaly (an output dropped, written twice, a key the batch never had)
comes out as exactly that; a built-in job's rows are compared with pgval's own oracle, and
a disagreement makes the run unknown."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from pgval.core.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC
from pgval.evidence.bundle import (
    EXPECTED,
    EvidenceError,
    Manifest,
    evidence_dir,
    save_expected,
    save_topic,
)
from pgval.evidence.recheck import recheck
from tests.test_evidence import topic

T0 = 1_700_000_000_000
W = 1000


def _inputs(n: int = 12) -> list[dict]:
    """GETs of r0000/r0001 alternately, ``id`` i at event time T0 + 100 i, then one POST."""
    events = [{"id": i, "type": "GET", "resource": f"r{i % 2:04d}", "event_ts": T0 + 100 * i,
               "ingress_ts": T0 + 100 * i + 5} for i in range(n)]
    events.append({"id": 100, "type": "POST", "resource": "r0001", "event_ts": T0 + 50,
                   "ingress_ts": T0 + 55})
    return events


def build_job_run(run_dir: Path, inputs: list[dict], rows: dict[str, list[int]],
                  outputs: list[tuple[str, list[int]]], builtin: dict | None = None) -> None:
    """Write a job run's evidence as `validate --job` would: the input topics, the output
    topic (one record per (key text, ids), 1 ms apart after the last input), and the
    batch oracle's ``rows`` (key text → IDs)."""
    for name, kind in ((GET_TOPIC, "GET"), (POST_TOPIC, "POST")):
        mine = [e for e in inputs if e["type"] == kind]
        save_topic(run_dir, topic([orjson.dumps({k: v for k, v in e.items() if k != "ingress_ts"})
                                   for e in mine], [e["ingress_ts"] for e in mine], name))
    last = max(e["ingress_ts"] for e in inputs)
    values = [orjson.dumps({"_pgval_key": key, "ids": ids, "mine": "anything"})
              for key, ids in outputs]
    save_topic(run_dir, topic(values, [last + 1 + k for k in range(len(values))],
                              OUTPUT_TOPIC, partitions=3))
    save_expected(run_dir, pa.table({"key": list(rows), "ids": list(rows.values())},
                                    schema=pa.schema([("key", pa.string()),
                                                      ("ids", pa.list_(pa.int64()))])))
    Manifest(topology="job", window_ms=W, phases=[T0, T0 + 400, T0 + 800], t4=T0 + 1200,
             resources=2, job={"ref": "/jobs/filter.py:build",
                               "oracle": {"rows": len(rows), "builtin": builtin}}
             ).write(run_dir)


def _by_id(ids: list[int]) -> dict[str, list[int]]:
    return {json.dumps({"id": i}): [i] for i in ids}


def test_a_faithful_job_run_rechecks_exactly_once(tmp_path: Path) -> None:
    kept = [i for i in range(12) if i % 2]  # the job keeps r0001's GETs
    build_job_run(tmp_path, _inputs(), _by_id(kept), list(_by_id(kept).items()))
    s = recheck(tmp_path).summary()
    assert (s["expected"], s["processed"], s["guarantee"]) == (6, 6, "exactly-once")
    assert s["correctness"] == 1.0
    assert "oracles_agree" not in s  # a user's job: nothing to compare with


def test_each_planted_anomaly_is_found_as_what_it_is(tmp_path: Path) -> None:
    kept = [1, 3, 5, 7, 9, 11]
    out = list(_by_id(kept).items())
    out.remove((json.dumps({"id": 5}), [5]))          # dropped: 5 unprocessed
    out.append((json.dumps({"id": 7}), [7]))          # written twice: 7 duplicated
    out.append((json.dumps({"id": 4}), [4]))          # a key the batch never had: incorrect
    build_job_run(tmp_path, _inputs(), _by_id(kept), out)
    again = recheck(tmp_path)
    s = again.summary()
    assert (s["expected"], s["processed"], s["unprocessed"], s["duplicate"],
            s["incorrect"]) == (6, 5, 1, 1, 1)
    assert s["guarantee"] == "none"  # lost and duplicated and wrong
    anomalies = again.evaluation.anomalies().to_pylist()
    assert {(a["kind"], a["id"]) for a in anomalies} == {
        ("unprocessed", 5), ("duplicate", 7), ("incorrect", 4)}


def test_a_job_run_without_its_oracle_rows_is_one_sentence(tmp_path: Path) -> None:
    build_job_run(tmp_path, _inputs(), _by_id([1]), [(json.dumps({"id": 1}), [1])])
    (evidence_dir(tmp_path) / EXPECTED).unlink()
    with pytest.raises(EvidenceError, match="lacks expected.parquet, the batch oracle's rows"):
        recheck(tmp_path)


def test_rows_that_fan_out_are_judged_pair_by_pair_and_an_id_twice_in_a_row_is_not(
        tmp_path: Path) -> None:
    rows = {'{"w":0}': [1, 3], '{"w":1}': [3, 5]}  # sliding windows: 3 in two rows
    build_job_run(tmp_path / "fan", _inputs(), rows, list(rows.items()))
    s = recheck(tmp_path / "fan").summary()
    assert (s["expected"], s["expected_inputs"], s["guarantee"]) == (4, 3, "exactly-once")
    # Window 1 lost: its pairs (3, w1) and (5, w1) unprocessed, though 3 is in window 0.
    build_job_run(tmp_path / "lost", _inputs(), rows, [('{"w":0}', [1, 3])])
    s = recheck(tmp_path / "lost").summary()
    assert (s["unprocessed"], s["guarantee"]) == (2, "at-most-once"), s
    twice = {'{"w":0}': [1, 3, 3]}
    build_job_run(tmp_path / "twice", _inputs(), twice, list(twice.items()))
    with pytest.raises(EvidenceError, match="cannot be judged ID by ID: .* ID 3 twice in one"):
        recheck(tmp_path / "twice")


def _sst_rows(inputs: list[dict]) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for e in inputs:
        if e["type"] == "GET":
            key = json.dumps({"window_start": e["event_ts"] // W * W, "resource": e["resource"]})
            rows.setdefault(key, []).append(e["id"])
    return rows


def test_a_builtin_jobs_rows_are_checked_against_pgvals_own_oracle(tmp_path: Path) -> None:
    inputs = _inputs()
    rows = _sst_rows(inputs)
    builtin = {"topology": "sst", "window_ms": W}
    build_job_run(tmp_path / "agree", inputs, rows, list(rows.items()), builtin)
    s = recheck(tmp_path / "agree").summary()
    assert s["oracles_agree"] is True and s["guarantee"] == "exactly-once"
    assert s["valid"], s["validity_reasons"]
    # Move ID 3 to another window in the batch's rows: the streaming outputs are the
    # batch's (exactly-once by them), but pgval's own oracle disagrees: unknown.
    moved = {k: [i for i in v if i != 3] for k, v in rows.items()}
    moved = {k: v for k, v in moved.items() if v}
    moved[json.dumps({"window_start": T0 + 5 * W, "resource": "r0001"})] = [3]
    build_job_run(tmp_path / "moved", inputs, moved, list(moved.items()), builtin)
    s = recheck(tmp_path / "moved").summary()
    assert s["oracles_agree"] is False and s["guarantee"] == "exactly-once"
    assert "disagree on 1 IDs' outputs, e.g. ID 3" in s["oracles_disagreement"]
    assert not s["valid"]
    assert any("two oracles disagree" in r for r in s["validity_reasons"])
    # An ID only one of them expects.
    fewer = {k: [i for i in v if i != 4] for k, v in rows.items()}
    build_job_run(tmp_path / "fewer", inputs, fewer, list(fewer.items()), builtin)
    s = recheck(tmp_path / "fewer").summary()
    assert "ID 4 only in pgval's own" in s["oracles_disagreement"]


def test_a_sinks_short_log_makes_the_recheck_unknown_as_it_made_the_run(tmp_path: Path) -> None:
    """A file sink's read-back reasons are kept in run.json's record of the read and
    recomputed by a re-check from it (the checkpoint they came from is deleted)."""
    from pgval.evidence.bundle import save_sink_rows

    kept = [1, 5, 9]  # one in each phase
    build_job_run(tmp_path, _inputs(), _by_id(kept), [])
    rows = pa.table({"key": [json.dumps({"id": i}) for i in kept], "ids": [[i] for i in kept],
                     "written_ms": [T0 + 100 * i + 50 for i in kept], "batch": [0, 1, 2],
                     "origin": ["a", "b", "c"]})
    save_sink_rows(tmp_path, rows)
    save_sink_rows(tmp_path, rows, "output-raw.parquet")
    manifest = Manifest.read(tmp_path)
    for read, unknown in (({"log_batches": 2, "committed_batches": 2}, False),
                          ({"log_batches": 2, "committed_batches": 3}, True),
                          ({"log_batches": 2, "committed_batches": 2,
                            "problem_counts": {"unreadable_logged": 1},
                            "problems": {"unreadable_logged": ["part-0.parquet"]}}, True)):
        manifest.sink = {"kind": "files", "ref": "files", "clock": "commit", "read": read}
        manifest.readback = {"output": {"complete": True, "end_offsets": {}}}
        manifest.write(tmp_path)
        s = recheck(tmp_path).summary()
        assert s["guarantee"] == "exactly-once" and s["raw_read"]["guarantee"] == "exactly-once"
        assert s["valid"] is not unknown, s["validity_reasons"]
        if unknown:
            assert any("file sink's log names" in r for r in s["validity_reasons"])
