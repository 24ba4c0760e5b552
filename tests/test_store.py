"""The results store: declared schema, version and migrations, WAL, one-transaction finish,
owners, and many processes opening and writing one file at once."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from pgval.checker.evaluate import Evaluation
from pgval.checker.recovery import Recovery
from pgval.checker.validity import evaluation_reasons
from pgval.host.identity import Owner
from pgval.report import build_report
from pgval.store.dbfile import StoreError
from pgval.store.results import (
    RECOVERY_COLUMNS,
    RUN_COLUMNS,
    SCHEMA_VERSION,
    TABLES,
    ResultsStore,
    schema_version,
)
from tests.test_report import W, synthetic_run

FORK = mp.get_context("fork")


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    ev, _ = synthetic_run("delay-lt-timeout", 2)  # witnesses of every kind it has
    return ev


def test_fresh_database_declares_everything(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.db")
    conn = store.db.conn
    assert schema_version(conn) == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 60_000
    assert set(store.db.table_names()) == {t.name for t in TABLES}
    for table in TABLES:
        assert set(store.db[table.name].columns_dict) == set(table.columns), table.name
    assert "idx_runs_topology_pg_fault" in {i.name for i in store.db["runs"].indexes}
    fks = {(fk.column, fk.other_table) for fk in store.db["batches"].foreign_keys}
    assert fks == {("run_id", "runs")}


def test_recovery_columns_are_recoverys_fields() -> None:
    """A new Recovery field needs a column and a migration: this test says so."""
    assert set(RECOVERY_COLUMNS) == {f.name for f in dataclasses.fields(Recovery)}
    assert set(RECOVERY_COLUMNS) <= set(RUN_COLUMNS)


def test_finish_run_stores_everything_and_marks_complete(tmp_path: Path,
                                                         evaluation: Evaluation) -> None:
    store = ResultsStore(tmp_path / "r.db")
    run_id = store.start_run("validate", "sst", W, pg="a1", fault="crash")
    assert Owner.from_dict(json.loads(store.run(run_id)["owner"])) == Owner.me()
    batches = [{"event": "progress", "batchId": 0, "numInputRows": 5},
               {"event": "started"}, {"batchId": 1, "numInputRows": 7}]
    fault_log = [{"step": "inject", "fault": "crash", "intended_ms": 1, "actual_ms": 2}]
    store.finish_run(run_id, evaluation, batches=batches, fault_log=fault_log)
    row = store.run(run_id)
    assert row["status"] == "complete" and row["finished_at"] is not None
    assert row["censored"] in (0, 1)  # recovery stored in declared columns
    assert len(store.phase_results(run_id)) == 3
    assert store.db["series"].count == len(evaluation.metrics.inputs_per_s)
    assert store.db["witnesses"].count == sum(len(p) for p in
                                              evaluation.validation.witnesses.values())
    assert [r["batch_id"] for r in store.db["batches"].rows] == [0, 1]
    assert [r["step"] for r in store.db["fault_log"].rows] == ["inject"]
    # Without a validity given, the data's own reasons, stored as sentences and with kinds.
    data = evaluation_reasons(evaluation)
    assert json.loads(row["validity_reasons"]) == data.texts
    assert json.loads(row["validity"]) == [r.as_record() for r in data.reasons]


@pytest.mark.parametrize("step", ["save_unprocessed_causes", "save_batches",
                                  "save_fault_log"])
def test_a_failing_step_leaves_the_run_running_with_nothing_stored(
        tmp_path: Path, evaluation: Evaluation, monkeypatch: pytest.MonkeyPatch,
        step: str) -> None:
    store = ResultsStore(tmp_path / "r.db")
    run_id = store.start_run("validate", "sst", W, pg="a1", fault="crash")

    def boom(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(ResultsStore, step, boom)
    with pytest.raises(OSError, match="disk full"):
        store.finish_run(run_id, evaluation, batches=[{"batchId": 0}],
                         fault_log=[{"step": "inject"}])
    row = store.run(run_id)
    assert row["status"] == "running" and row["reliability"] is None
    assert row["summary"] is None and row["downtime_s"] is None
    for table in ("phase_results", "series", "witnesses", "batches", "fault_log"):
        assert store.db[table].count == 0, table
    # The lock is released: another connection can write at once.
    ResultsStore(tmp_path / "r.db").fail_run(run_id, "stored nothing")


def _age(path: Path) -> None:
    """Make ``path`` look like a database of a pgval before the schema had a version."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
        for table in ("series", "witnesses", "unprocessed_causes", "batches", "oir"):
            conn.execute(f"DROP TABLE {table}")
        for column in ("owner", "valid", "validity_reasons", "run_dir", *RECOVERY_COLUMNS):
            conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        for column in ("reliable", "duplicated_ids", "incorrect_ids"):
            conn.execute(f"ALTER TABLE phase_results DROP COLUMN {column}")
        conn.execute("CREATE TABLE oir (topology TEXT, pg TEXT, rate TEXT, measured_at FLOAT,"
                     " trials TEXT)")  # as a first insert with rate None made it
        conn.execute("INSERT INTO oir VALUES ('sst', 'a1', '4000.0', 1.0, '[]')")
        conn.execute("PRAGMA user_version = 0")


def _report(path: Path) -> str:
    text = build_report(path, fmt="markdown")
    assert isinstance(text, str)
    return re.sub(r"generated \S+ \S+", "generated", text)


def test_old_database_is_migrated_without_losing_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = ResultsStore(path)
    for fault, repeat in (("crash", 0), ("crash", 1), ("none", 0)):
        ev, _ = synthetic_run(fault, repeat)
        store.finish_run(store.start_run("validate", "sst", W, pg="a1", fault=fault,
                                         repeat=repeat), ev)
    store.close()
    _age(path)
    before = _report(path)
    with sqlite3.connect(path) as conn:
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("runs", "phase_results", "oir")}
        old_runs = conn.execute("SELECT id, status, reliability, summary FROM runs").fetchall()
    assert "(f) Recovery" not in before

    store = ResultsStore(path)  # migrates
    assert schema_version(store.db.conn) == SCHEMA_VERSION
    for table in TABLES:
        assert set(table.columns) <= set(store.db[table.name].columns_dict), table.name
    assert {t: store.db[t].count for t in counts} == counts
    assert [tuple(r.values()) for r in store.db.query(
        "SELECT id, status, reliability, summary FROM runs")] == old_runs
    assert _report(path) == before  # the same report, from the same rows
    ev, _ = synthetic_run("crash", 2)  # and the migrated file takes new runs
    store.finish_run(store.start_run("validate", "sst", W, pg="a1", fault="crash"), ev)
    assert store.db["series"].count > 0 and "(f) Recovery" in _report(path)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    ResultsStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer pgval"):
        ResultsStore(path)


def test_paths_are_literal_and_bad_files_are_one_sentence(tmp_path: Path) -> None:
    odd = tmp_path / "a#b?c=1.db"
    ResultsStore(odd).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a#b?c=1.db"]
    text = tmp_path / "notes.db"
    text.write_text("not a database, just some text that is long enough\n" * 20)
    with pytest.raises(StoreError, match=r"^.*notes\.db is not a SQLite database$"):
        ResultsStore(text)
    assert text.read_text().startswith("not a database")


# ---------------------------------------------------------------- many processes at once
def _open_and_start(path: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        with ResultsStore(path) as store:
            store.start_run("validate", "sst", W)
        out.put("ok")
    except Exception as exc:  # reported to the parent, which asserts
        out.put(f"{type(exc).__name__}: {exc}")


def test_concurrent_first_opens_never_lock(tmp_path: Path) -> None:
    """4 processes open the same fresh file at once, 15 times: no 'database is locked'."""
    results: list[str] = []
    t0 = time.monotonic()
    for round_ in range(15):
        path = str(tmp_path / f"fresh-{round_}.db")
        barrier, out = FORK.Barrier(4), FORK.Queue()
        procs = [FORK.Process(target=_open_and_start, args=(path, barrier, out))
                 for _ in range(4)]
        for p in procs:
            p.start()
        results += [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert ResultsStore(path).db["runs"].count == 4
    assert results == ["ok"] * 60, [r for r in results if r != "ok"]
    assert time.monotonic() - t0 < 20


def _finish_many(path: str, evaluation: Evaluation, n: int, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        store = ResultsStore(path)
        for _ in range(n):
            run_id = store.start_run("validate", "sst", W, pg="a1", fault="crash")
            store.finish_run(run_id, evaluation, batches=[{"batchId": 0}],
                             fault_log=[{"step": "inject"}])
        out.put("ok")
    except Exception as exc:
        out.put(f"{type(exc).__name__}: {exc}")


def test_concurrent_finish_runs_are_all_stored(tmp_path: Path, evaluation: Evaluation) -> None:
    path = str(tmp_path / "busy.db")
    ResultsStore(path).close()
    barrier, out = FORK.Barrier(4), FORK.Queue()
    procs = [FORK.Process(target=_finish_many, args=(path, evaluation, 5, barrier, out))
             for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert results == ["ok"] * 4
    store = ResultsStore(path)
    assert [r["status"] for r in store.runs()] == ["complete"] * 20
    assert store.db["phase_results"].count == 60
    assert store.db["batches"].count == store.db["fault_log"].count == 20
    n_series = len(evaluation.metrics.inputs_per_s)
    assert store.db["series"].count == 20 * n_series
