"""Nothing passes the gate, or a report's cells, that verified evidence does not back.

Each test is an attack that once passed: a run directory whose run.json names a `check`
row (re-checked as "not verified", exit 0, and `--expect` met); a database row edited by
hand (re-checked as "evidence verified", exit 0, the edited numbers in the report); an
import of a directory whose SHA256SUMS was deleted (stored as a normal run and pooled into
its cell); an `output.parquet` that is an empty directory or has other columns (judged
at-most-once, valid); `check` results of unrelated jobs pooled into one group. Offline, on
runs stored as ``Experiment.run`` stores one (tests/test_evidence_seal.py).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pgval.checker.gate import IMPORTED_SEALS, UNKNOWN, Case, exit_status, sentence
from pgval.cli import main
from pgval.evidence.bundle import SUMS
from pgval.evidence.recheck import recheck
from pgval.report import Selection, build_report, group_runs, load_runs
from pgval.store.results import (
    SCHEMA_VERSION,
    SEALED_AT_IMPORT,
    UNSEALED_IMPORT,
    ResultsStore,
    schema_version,
)
from tests.test_evidence_seal import stored_sealed_run


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    assert "Traceback" not in res.output, res.output
    return res.exit_code, " ".join(res.output.split())


def one_line(output: str) -> str:
    """A refusal: one `error:` line, nothing else."""
    assert output.startswith("error: ") and output.count("error:") == 1, output
    return output


# --------------------------------------------------------------------------- the gate


def test_the_gate_takes_only_verified_evidence() -> None:
    """A summary whose evidence is not verified, whose stored row differs from its
    re-check, or a stored row marked imported meets nothing: unknown, exit 3, the reason
    in the gate's line and in the verdict JUnit shows."""
    base = {"guarantee": "exactly-once", "valid": True, "validity_reasons": []}
    assert Case.of_summary("r", "t", base).doubt is None  # a live run, a check: no anchor
    doubts = {
        "no database": {**base, "evidence": {"verified": False,
                                             "note": "evidence not verified: no results "
                                                     "database"}},
        "row edited": {**base, "evidence": {"verified": True, "note": "ok"},
                       "stored_figures": {"same": False, "note": "processed 9 stored, 8 now"}},
        "imported": {**base, "sealed": UNSEALED_IMPORT},
    }
    for name, summary in doubts.items():
        case = Case.of_summary(name, "t", summary)
        assert case.outcome("at-most-once") == UNKNOWN, name
        assert exit_status([case], "exactly-once") == 3, name
        assert case.doubt and case.doubt in sentence([case], "exactly-once"), name
        assert "not verified" in case.verdict(), name
    verified = {**base, "evidence": {"verified": True, "note": "ok"},
                "stored_figures": {"same": True}, "sealed": 1}
    assert exit_status([Case.of_summary("ok", "t", verified)], "exactly-once") == 0
    # The gate reads the store's marks without importing it: the numbers must agree.
    assert set(IMPORTED_SEALS) == {SEALED_AT_IMPORT, UNSEALED_IMPORT}


def test_a_run_directory_naming_a_check_row_is_refused(tmp_path: Path) -> None:
    """run.json edited to name a `pgval check` row (no hashes, no run directory), its
    SHA256SUMS deleted: that row cannot vouch for the directory — refused, exit 3 — where
    it re-checked as "not verified", exit 0, and passed `--expect at-least-once`."""
    run_dir, db, _ = stored_sealed_run(tmp_path)
    with ResultsStore(db) as store:
        check_id = store.save_check(recheck(run_dir).evaluation, params={"inputs": "in"})
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    manifest = other / "evidence" / "run.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "run_id": check_id}))
    (other / "evidence" / SUMS).unlink()
    for extra in ([], ["--expect", "at-least-once"]):
        code, out = cli("recheck", str(other), "--db", str(db), *extra)
        assert code == 3, out
        assert f"run {check_id} in {db} is a `pgval check` result" in one_line(out)
    code, out = cli("export", str(other), "--db", str(db), "--out", str(tmp_path / "x"))
    assert code == 3 and "is a `pgval check` result" in one_line(out)


def test_unverified_evidence_does_not_meet_expect(tmp_path: Path) -> None:
    """A run directory re-checked without its database is at-least-once, but nothing
    vouches for it: `--expect at-least-once` exits 3 and says why, JUnit has the error."""
    run_dir, db, run_id = stored_sealed_run(tmp_path)
    junit = tmp_path / "r.xml"
    code, out = cli("recheck", str(run_dir), "--expect", "at-least-once", "--junit",
                    str(junit))
    assert code == 3, out
    assert ("expect at-least-once: 1 unknown — exit 3 (sst kafka a1 none: evidence not "
            "verified: no results database)") in out
    error = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert error is not None and "no results database" in str(error.get("message"))
    # The same directory with its database: verified, the row equal, met.
    code, out = cli("recheck", str(run_id), "--db", str(db), "--expect", "at-least-once")
    assert code == 0 and f"stored figures: run {run_id}'s row equals its re-check" in out


# --------------------------------------------------------------------------- stored figures


def _edit(db: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(sql, args)
    conn.close()


def test_a_row_edited_by_hand_is_named_and_fails_the_gate(tmp_path: Path) -> None:
    """The evidence is untouched (its hashes match), the row says exactly-once with every
    ID processed: recheck names each figure that differs, and `--expect` exits 3 where it
    said "evidence verified", exit 0 (and the gate judged the recomputed verdict only)."""
    _, db, run_id = stored_sealed_run(tmp_path)
    _edit(db, "UPDATE runs SET guarantee = 'exactly-once', processed = 99, duplicate = 0 "
              "WHERE id = ?", run_id)
    _edit(db, "UPDATE phase_results SET duplicate = 0, latency_p50_s = 0.001 "
              "WHERE run_id = ? AND phase = 'control'", run_id)
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["evidence"]["verified"] is True
    figures = summary["stored_figures"]
    assert figures["same"] is False
    assert figures["differ"]["guarantee"] == {"stored": "exactly-once", "now": "at-least-once"}
    assert figures["differ"]["processed"]["stored"] == 99
    assert figures["differ"]["duplicate"] == {"stored": 0, "now": 1}
    assert set(figures["differ"]) >= {"control.duplicate", "control.latency_p50_s"}
    code, out = cli("recheck", str(run_id), "--db", str(db))
    assert code == 0 and "guarantee exactly-once stored, at-least-once now" in out
    code, out = cli("recheck", str(run_id), "--db", str(db), "--expect", "at-least-once")
    assert code == 3, out
    assert "1 unknown — exit 3" in out and f"the stored row of run {run_id} differs" in out


def test_recovery_measures_that_differ_say_how_to_refresh_them(tmp_path: Path) -> None:
    """Only a derived measure differs (a newer definition would do that): named, with the
    command that stores the recomputed one, which makes the row equal again."""
    _, db, run_id = stored_sealed_run(tmp_path)
    _edit(db, "UPDATE runs SET downtime_s = 123.0 WHERE id = ?", run_id)
    code, out = cli("recheck", str(run_id), "--db", str(db), "--expect", "at-least-once")
    assert code == 3 and "downtime_s 123 stored" in out
    assert f"pgval recheck {run_id} --db DB --store" in out
    assert cli("recheck", str(run_id), "--db", str(db), "--store")[0] == 0
    assert cli("recheck", str(run_id), "--db", str(db), "--expect", "at-least-once")[0] == 0


# --------------------------------------------------------------------------- imports


def _import_without_sums(tmp_path: Path) -> tuple[Path, int, int]:
    """A sealed run (run 1) and a copy of its directory with SHA256SUMS deleted, imported
    into the same database (a new row: the copy is not run 1's directory)."""
    run_dir, db, run_id = stored_sealed_run(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / "evidence" / SUMS).unlink()
    code, out = cli("recheck", str(copy), "--store", "--db", str(db))
    assert code == 0, out
    assert "as run 2" in out and "unsealed (its evidence has no SHA256SUMS)" in out
    return db, run_id, 2


def test_an_import_without_hashes_is_unsealed_and_never_verified(tmp_path: Path) -> None:
    db, _, imported = _import_without_sums(tmp_path)
    with ResultsStore(db) as store:
        assert store.run(imported)["sealed"] == UNSEALED_IMPORT  # type: ignore[index]
    code, out = cli("recheck", str(imported), "--db", str(db), "--json")
    assert code == 0
    assert json.loads(out)["evidence"] == {
        "verified": False,
        "note": f"run {imported} was imported without evidence hashes (unsealed): not "
                "verified"}
    code, out = cli("recheck", str(imported), "--db", str(db), "--expect", "at-least-once")
    assert code == 3 and "imported without evidence hashes (unsealed)" in out


def test_an_own_row_finished_by_an_import_without_hashes_is_unsealed(tmp_path: Path
                                                                    ) -> None:
    """The storing failed (the row still `running`) and SHA256SUMS is gone: the import
    finishes the run's own row, marked unsealed, not as a run sealed at its end."""
    run_dir, _, run_id = stored_sealed_run(tmp_path)
    db = tmp_path / "fresh.db"
    with ResultsStore(db) as store:
        assert store.start_run("validate", "sst", 100, params={"run_dir": str(run_dir)}) \
            == run_id
    (run_dir / "evidence" / SUMS).unlink()
    code, out = cli("recheck", str(run_dir), "--store", "--db", str(db))
    assert code == 0 and f"as run {run_id}" in out and "unsealed" in out, out
    with ResultsStore(db) as store:
        row = store.run(run_id)
        assert row is not None and row["status"] == "complete"
        assert row["sealed"] == UNSEALED_IMPORT


def test_report_holds_imported_runs_apart_unless_asked(tmp_path: Path) -> None:
    """The unsealed import would have pooled into run 1's cell (n = 2); it is listed apart
    with why, and joins the cell only with --include-unsealed. A run sealed with its own
    SHA256SUMS at an import, and an import stored by an older pgval (``sealed = 0``,
    summary ``imported``), are held apart alike."""
    db, run_id, imported = _import_without_sums(tmp_path)
    cells = group_runs(load_runs(db))
    assert [[r.id for r in g.runs] for g in cells] == [[run_id]]
    text = build_report(db, fmt="markdown")
    assert isinstance(text, str)
    assert "1 runs in 1 groups" in text and "1 imported run held apart" in text
    assert "Runs held apart" in text
    assert f"| {imported} | sst |" in text and "imported without evidence hashes" in text
    with_it = build_report(db, Selection(include_unsealed=True), fmt="markdown")
    assert "2 runs in 1 groups" in str(with_it) and "Runs held apart" not in str(with_it)
    code, out = cli("report", "--db", str(db), "--include-unsealed", "--format", "csv")
    assert code == 0
    for sealed, why in ((SEALED_AT_IMPORT, "the run's own SHA256SUMS"),
                        (0, "imported without evidence hashes")):
        _edit(db, "UPDATE runs SET sealed = ? WHERE id = ?", sealed, imported)
        (run,) = [r for r in load_runs(db, Selection(include_unsealed=True))
                  if r.id == imported]
        assert run.held_apart is not None and why in run.held_apart
        assert [r.id for r in load_runs(db)] == [run_id]
    _edit(db, "DELETE FROM runs WHERE id = ?", run_id)  # nothing but the import left
    code, out = cli("report", "--db", str(db))
    assert code == 2 and "1 imported, with no seal kept at the end of the run " \
                         "(--include-unsealed)" in one_line(out)


# --------------------------------------------------------------------------- evidence files


def _record_table(**columns: pa.Array) -> pa.Table:
    return pa.table(columns)


@pytest.mark.parametrize(("name", "damage", "said"), [
    ("output.parquet", "empty dir", "output.parquet is a directory, not one Parquet file of "
                                    "Kafka records; refusing it"),
    ("output.parquet", "other columns", "output.parquet is not a file of Kafka records: it "
                                        "lacks the columns partition, offset, timestamp, "
                                        "key, value (its columns: x); refusing it"),
    ("get.parquet", "no timestamps", "get.parquet is not a file of Kafka records: 15 of its "
                                     "15 rows have no timestamp; refusing it"),
    ("anomalies.parquet", "other columns", "anomalies.parquet is not a file of a run's "
                                           "anomalies: it lacks the columns"),
])
def test_evidence_files_of_the_wrong_kind_are_refused(tmp_path: Path, name: str, damage: str,
                                                      said: str) -> None:
    """Where they were judged (an empty output directory: at-most-once, valid), each is
    one sentence, exit 2, by recheck and export."""
    run_dir, _, _ = stored_sealed_run(tmp_path)
    path = run_dir / "evidence" / name
    path.unlink(missing_ok=True)
    if damage == "empty dir":
        path.mkdir()
    elif damage == "other columns":
        pq.write_table(_record_table(x=pa.array([1, 2])), path)
    else:
        pq.write_table(_record_table(
            partition=pa.array([0] * 15, pa.int32()), offset=pa.array(range(15), pa.int64()),
            timestamp=pa.nulls(15, pa.int64()), key=pa.nulls(15, pa.binary()),
            value=pa.array([b"{}"] * 15, pa.binary())), path)
    for args in (["recheck", str(run_dir), "--json"],
                 ["export", str(run_dir), "--out", str(tmp_path / "x")]):
        code, out = cli(*args)
        assert code == 2, out
        assert said in one_line(out)


# --------------------------------------------------------------------------- labels


def _check(tmp_path: Path, db: Path, *label: str) -> tuple[int, str]:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps({"id": i, "type": "GET", "resource": "a",
                                          "event_ts": 100 * i, "ingress_ts": 100 * i}) + "\n"
                              for i in range(30)))
    outputs = tmp_path / "out.jsonl"
    outputs.write_text("".join(json.dumps(
        {"resource": "a", "window_start": 1000 * w, "window_end": 1000 * w + 1000,
         "count": 10, "ids": list(range(10 * w, 10 * w + 10)), "ingress_ts": 1000 * w + 1300})
        + "\n" for w in range(3)))
    return cli("check", "--topology", "sst", "--inputs", str(inputs), "--outputs",
               str(outputs), "--window-ms", "1000", "--db", str(db), *label)


def test_check_labels_are_stored_and_grouped_apart(tmp_path: Path) -> None:
    """Unrelated `check` results of one topology pooled into one group; with labels each
    job is its own group, named in the report, and a result without a label its own."""
    db = tmp_path / "r.db"
    for label in (["--label", "nightly"], ["--label", "nightly"], ["--label", "flink job"],
                  []):
        assert _check(tmp_path, db, *label)[0] == 0
    with ResultsStore(db) as store:
        assert [r["label"] for r in store.runs()] == ["nightly", "nightly", "flink job", None]
    groups = group_runs(load_runs(db, Selection(kind="check")))
    assert [(g.label, g.n) for g in groups] == [(None, 1), ("flink job", 1), ("nightly", 2)]
    assert [g.shape_label for g in groups] == ["", "label flink job", "label nightly"]
    code, out = cli("report", "--db", str(db), "--kind", "check", "--format", "markdown")
    assert code == 0 and "| sst | – | – | label nightly | 2 |" in out, out


@pytest.mark.parametrize(("label", "said"), [
    ("", "--label must be 1 to 80 printable characters"),
    ("a\nb", "--label must be 1 to 80 printable characters"),
    ("x" * 81, "--label must be 1 to 80 printable characters"),
])
def test_a_label_that_cannot_be_shown_is_refused(tmp_path: Path, label: str, said: str
                                                 ) -> None:
    code, out = _check(tmp_path, tmp_path / "r.db", "--label", label)
    assert code == 2 and said in one_line(out)
    assert not (tmp_path / "r.db").exists()


def test_a_label_without_a_database_is_refused(tmp_path: Path) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("")
    code, out = cli("check", "--topology", "sst", "--inputs", str(inputs), "--outputs",
                    str(inputs), "--window-ms", "1000", "--label", "x")
    assert code == 2 and "give --db too" in one_line(out)


def test_a_version_6_database_gains_the_label_column(tmp_path: Path) -> None:
    """Stored formats only grow: a database from before labels opens, is migrated, and
    its runs have no label (one group each, as before)."""
    db = tmp_path / "r.db"
    assert _check(tmp_path, db)[0] == 0
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN label")
        conn.execute("PRAGMA user_version = 6")
    conn.close()
    assert [g.label for g in group_runs(load_runs(db))] == [None]  # read as it is
    assert _check(tmp_path, db, "--label", "after")[0] == 0
    with ResultsStore(db) as store:
        assert schema_version(store.db.conn) == SCHEMA_VERSION
        assert [r["label"] for r in store.runs()] == [None, "after"]
