"""The full anomaly set: kept with a run's evidence, re-checked, exported, counted per second.

Hand-built run: every planted anomaly must be in the set once, with its kind, phase, cause
and the Kafka record of the output involved; a re-check recomputes the same set, and says
so plainly when the kept one differs.
"""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa

from pgval.checker.anomalies import counts
from pgval.checker.evaluate import evaluate
from pgval.core.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC
from pgval.evidence.bundle import (
    INPUT_TOPICS,
    Manifest,
    load_streams,
    load_topic,
    save_anomalies,
    save_topic,
    seal,
)
from pgval.evidence.export import export
from pgval.evidence.recheck import compare_anomalies, evaluate_run, recheck
from pgval.kafka.topic_records import TopicRecords
from pgval.records.phases import Phases
from pgval.store.results import ResultsStore

W = 100
PHASES = [1_000, 2_000, 3_000]


def records(values: list[bytes], timestamps: list[int], name: str) -> TopicRecords:
    """One partition, offsets 0…n-1."""
    n = len(values)
    return TopicRecords(keys=[None] * n, values=values,
                        timestamps=np.asarray(timestamps, dtype=np.int64),
                        partitions=np.zeros(n, dtype=np.int32),
                        offsets=np.arange(n, dtype=np.int64), topic=name,
                        end_offsets={0: n}, reached={0: n})


def planted_run(run_dir: Path) -> tuple[Manifest, list[tuple]]:
    """GETs 1–3 in control (window 1000), 4–6 in failure (window 2000), 7–9 in recovery
    (window 3000). Outputs (offset: what): 0 window 1000 (IDs 1–3); 1 window 2000 without
    ID 5; 2 window 1000 again, in failure: 3 duplicates; 3 window 3000 with a foreign ID 99
    and ID 1 (another key's); 4 window 3000 a second time, in recovery, stamped before
    input 9 arrived (3_095): 4 holds 9 before its input, and makes 3's 7 and 8 duplicates
    (4 is first in stream order)."""
    gets = [(i, 1_000 * (1 + (i - 1) // 3) + 10 * i, 1_000 * (1 + (i - 1) // 3) + 10 * i + 5)
            for i in range(1, 10)]
    gets[8] = (9, 3_085, 3_095)
    get_values = [orjson.dumps({"id": i, "type": "GET", "resource": "r0000", "event_ts": ts})
                  for i, ts, _ in gets]
    save_topic(run_dir, records(get_values, [ing for *_, ing in gets], GET_TOPIC))
    save_topic(run_dir, records([], [], POST_TOPIC))
    outs = [(1_000, [1, 2, 3], 1_500), (2_000, [4, 6], 2_500), (1_000, [1, 2, 3], 2_600),
            (3_000, [7, 8, 9, 99, 1], 3_500), (3_000, [7, 8, 9], 3_090)]
    values = [orjson.dumps({"window_start": w, "window_end": w + W, "resource": "r0000",
                            "count": len(ids), "ids": ids}) for w, ids, _ in outs]
    save_topic(run_dir, records(values, [ts for *_, ts in outs], OUTPUT_TOPIC))
    manifest = Manifest(topology="sst", window_ms=W, phases=PHASES, t4=4_000, resources=1)
    manifest.write(run_dir)
    # kind, id, phase, input phase, cause, output offset, first output offset
    want = [("unprocessed", 5, "failure", "failure", "in-flight at end", None, None),
            *[("duplicate", i, "failure", "control", None, 2, 0) for i in (1, 2, 3)],
            *[("duplicate", i, "recovery", "recovery", None, 3, 4) for i in (7, 8)],
            ("incorrect", 99, "recovery", None, "not expected", 3, None),
            ("incorrect", 1, "recovery", "control", "another key", 3, None),
            ("output-before-input", 9, "recovery", "recovery", None, 4, None)]
    return manifest, want


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted((r["kind"], r["id"], r["phase"], r["input_phase"], r["cause"],
                   r["output_offset"], r["first_offset"]) for r in table.to_pylist())


def stored_run(tmp_path: Path) -> tuple[Path, Path, int, list[tuple]]:
    """The run evaluated, its anomalies kept and sealed, and stored, as validate does."""
    run_dir, db = tmp_path / "run", tmp_path / "r.db"
    manifest, want = planted_run(run_dir)
    streams = load_streams(run_dir)
    # No progress recorded: no batch read anything, so the lost ID is "in-flight at end".
    ev = evaluate(streams.events, streams.outputs, "sst", W, manifest.phase_bounds,
                  progress=[])
    save_anomalies(run_dir, ev.anomalies())
    with ResultsStore(db) as store:
        run_id = store.start_run("validate", "sst", W, params={"run_dir": str(run_dir)})
        manifest.run_id = run_id
        manifest.write(run_dir)
        store.finish_run(run_id, ev, run_dir=run_dir, evidence=seal(run_dir, run_id))
    return run_dir, db, run_id, want


def test_every_planted_anomaly_is_kept_once_with_its_kind_and_phase(tmp_path: Path) -> None:
    run_dir, db, run_id, want = stored_run(tmp_path)
    again = recheck(run_dir, db, run_id)
    assert again.evidence.verified  # anomalies.parquet is sealed with the rest
    table = again.evaluation.anomalies()
    assert rows_of(table) == sorted(want)
    summary = again.summary()
    assert (summary["unprocessed"], summary["duplicate"], summary["incorrect"],
            summary["output_before_input"]) == (1, 5, 3, 1)
    assert summary["guarantee"] == "none"
    assert summary["anomalies"]["same"] is True
    assert summary["anomalies"]["stored"] == {"unprocessed": 1, "duplicate": 5,
                                              "incorrect": 2, "output-before-input": 1,
                                              "wrong-value": 0}


def test_export_writes_the_kept_anomalies(tmp_path: Path) -> None:
    run_dir, db, run_id, want = stored_run(tmp_path)
    info = export(run_dir, tmp_path / "out", db, run_id)
    assert info["anomalies"] == len(want)
    assert info["anomalies_source"] == "as kept with the run's evidence"
    rows = [json.loads(line) for line in (tmp_path / "out" / "anomalies.jsonl").open()]
    assert sorted((r["kind"], r["id"], r["phase"], r["input_phase"], r["cause"],
                   r["output_offset"], r["first_offset"]) for r in rows) == sorted(want)
    assert {r["output_partition"] for r in rows if r["kind"] != "unprocessed"} == {0}


def test_a_kept_set_that_differs_is_a_plain_mismatch(tmp_path: Path) -> None:
    run_dir, *_ = stored_run(tmp_path)
    now = recheck(run_dir).evaluation.anomalies()
    short = compare_anomalies(now.slice(1), now)
    assert short["same"] is False
    assert short["note"] == ("the recomputed anomaly set differs from the kept one: "
                             "unprocessed 0 kept, 1 now")
    moved = now.set_column(now.schema.get_field_index("phase"), "phase",
                           pa.array(["control"] * len(now)))
    assert compare_anomalies(moved, now)["note"].endswith("rows differ (the first is row 0)")
    assert compare_anomalies(None, now)["same"] is None


def test_a_kept_set_with_rows_of_no_known_kind_is_a_sentence(tmp_path: Path) -> None:
    """Rows no count shows (a null or unknown kind) make the kept set longer with the same
    counts per kind: a sentence through ``pgval recheck``, not a traceback from comparing
    rows of two lengths."""
    from click.testing import CliRunner

    from pgval.cli import main

    run_dir, *_ = stored_run(tmp_path)
    now = recheck(run_dir).evaluation.anomalies()
    for kind in (None, "mystery"):
        kept = pa.Table.from_pylist([*now.to_pylist(), {**now.to_pylist()[0], "kind": kind}],
                                    schema=now.schema)
        result = compare_anomalies(kept, now)
        assert result["same"] is False
        assert result["note"] == ("the recomputed anomaly set differs from the kept one: the "
                                  f"same counts per kind, but {len(now) + 1} rows kept and "
                                  f"{len(now)} now (kept rows of no known kind)")
    save_anomalies(run_dir, kept)
    res = CliRunner().invoke(main, ["recheck", str(run_dir), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    assert "no known kind" in json.loads(res.stdout)["anomalies"]["note"]
    same_rows = pa.Table.from_pylist(now.to_pylist(), schema=pa.schema(
        [f.with_nullable(False) if f.name == "kind" else f for f in now.schema]))
    assert compare_anomalies(same_rows, now)["note"].endswith("in a table of another schema")


def test_series_counts_anomalies_per_second(tmp_path: Path) -> None:
    run_dir, db, run_id, _ = stored_run(tmp_path)
    with ResultsStore(db) as store:
        rows = list(store.db["series"].rows_where("run_id = ?", [run_id], order_by="t_ms"))
        run = store.run(run_id)
    assert run["output_before_input"] == 1
    by_second = {r["t_ms"]: r for r in rows}
    t0 = rows[0]["t_ms"]
    # Duplicates at 2_600 (3) and 3_500 (2); the unprocessed ID at its input, 2_055.
    assert {t: r["duplicate"] for t, r in by_second.items() if r["duplicate"]} == {
        t0 + ((2_600 - t0) // 1000) * 1000: 3, t0 + ((3_500 - t0) // 1000) * 1000: 2}
    assert sum(r["unprocessed"] for r in rows) == 1
    assert sum(r["incorrect"] for r in rows) == 2  # the two not before their input
    assert sum(r["output_before_input"] for r in rows) == 1
    assert counts(recheck(run_dir).evaluation.anomalies())["incorrect"] == 2


def test_unprocessed_ids_carry_their_cause(tmp_path: Path) -> None:
    """With the driver's progress, each unprocessed ID has the cause explain gives it."""
    run_dir, *_ = stored_run(tmp_path)
    streams = load_streams(run_dir)
    progress = [{"event": "started", "id": "q"},
                {"event": "progress", "batchId": 0, "eventTime": {"watermark":
                                                                  "1970-01-01T00:00:09Z"},
                 "sources": [{"startOffset": {"pgval-get": {"0": 0}},
                              "endOffset": {"pgval-get": {"0": 9}}}]}]
    ev = evaluate(streams.events, streams.outputs, "sst", W, Phases(*PHASES), progress)
    (row,) = [r for r in ev.anomalies().to_pylist() if r["kind"] == "unprocessed"]
    assert row["cause"] == "lost"  # read by batch 0, on time, window closed: lost
    assert ev.unprocessed_causes["counts"]["lost"] == 1


def test_a_version_5_database_gains_the_anomaly_columns_and_still_plots(tmp_path: Path
                                                                        ) -> None:
    """Stored formats only grow: a run stored before anomalies were counted keeps NULLs,
    re-opens (migrated to v6), and its plot says it has no anomaly series."""
    import sqlite3

    from pgval.report.plots import plot_run
    from pgval.store.results import SCHEMA_VERSION

    _, db, run_id, _ = stored_run(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE runs DROP COLUMN output_before_input")
    for column in ("unprocessed", "duplicate", "incorrect", "output_before_input"):
        conn.execute(f"ALTER TABLE series DROP COLUMN {column}")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    old_plot = plot_run(db, run_id, tmp_path / "old.png")  # read as is, before migrating
    assert old_plot.stat().st_size > 0
    with ResultsStore(db) as store:
        assert SCHEMA_VERSION >= 6  # migrated past v6
        assert store.run(run_id)["output_before_input"] is None
        assert "duplicate" in store.db["series"].columns_dict
    assert plot_run(db, run_id, tmp_path / "new.png").stat().st_size > 0


def test_a_run_lets_go_of_its_records_before_the_validation(tmp_path: Path) -> None:
    """What validate does (``release``): once the records are streams, nothing the judgement
    keeps holds them, so the validation reuses their memory; the verdict is the same."""
    run_dir = tmp_path / "run"
    manifest, want = planted_run(run_dir)
    output = load_topic(run_dir, OUTPUT_TOPIC)
    kept = evaluate_run(run_dir, manifest, {t: load_topic(run_dir, t) for t in INPUT_TOPICS},
                        output, [])[1]
    inputs = {t: load_topic(run_dir, t) for t in INPUT_TOPICS}
    alive = [weakref.ref(r) for r in inputs.values()]
    gone: list[bool] = []

    def release() -> None:
        inputs.clear()
        gc.collect()
        gone.append(all(ref() is None for ref in alive))

    let_go = evaluate_run(run_dir, manifest, inputs, output, [], release=release)[1]
    assert gone == [True]
    assert rows_of(let_go.anomalies()) == rows_of(kept.anomalies()) == sorted(want)
