"""Evidence that cannot be edited unseen: hashes stored with the run, verified on re-check.

Offline, on a run stored exactly as ``Experiment.run`` stores one (manifest, ``seal``,
``finish_run`` with the hashes) from constructed records; tests/test_validate.py adds the
same checks to a real run. The edit this guards against — Kafka timestamps shifted in
``output.parquet``, which silently moved downtime 13.4 → 60.0 s — must now be refused.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pgval.checker.evaluate import evaluate
from pgval.checker.result import Reason
from pgval.checker.validity import (
    Validity,
    evaluation_reasons,
    generator_reasons,
    readback_reasons,
    reconcile_inputs,
)
from pgval.cli import main
from pgval.core.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC
from pgval.evidence.bundle import INPUT_TOPICS, SUMS, Manifest, load_streams, load_topic, seal
from pgval.evidence.recheck import NO_ANCHOR, legacy_reason_kind, stored_reasons
from pgval.faults.took_effect import fault_reasons
from pgval.store.results import EVIDENCE_SCHEMA, SCHEMA_VERSION, ResultsStore
from tests.test_evidence import W, build_run

REFUSED = "differs from what was stored at the end of the run"
GENERATOR = {"delivered": 15, "failed": 0, "undelivered": 0, "errors": []}


def _readback(run_dir: Path, incomplete: str | None = None) -> dict[str, Any]:
    """run.json's read-back proof for the records on disk (offsets are dense, so each
    partition's end offset is its record count), as ``read_back`` describes it."""
    out: dict[str, Any] = {}
    for role in (*INPUT_TOPICS, OUTPUT_TOPIC):
        recs = load_topic(run_dir, role)
        parts, counts = np.unique(recs.partitions, return_counts=True)
        ends = {str(int(p)): int(c) for p, c in zip(parts, counts, strict=True)}
        out[role] = {"topic": role, "records": len(recs), "complete": role != incomplete,
                     "end_offsets": ends, "reached": ends,
                     "problems": ["partition 0 not reached"] if role == incomplete else []}
    read = sum(out[t]["records"] for t in INPUT_TOPICS)
    out["inputs"], _ = reconcile_inputs(read, read, read - 2, 2, True)
    return out


def stored_sealed_run(tmp_path: Path, fault: str = "none",
                      fault_log: list[dict[str, Any]] | None = None,
                      incomplete: str | None = None, name: str = "run"
                      ) -> tuple[Path, Path, int]:
    """A run stored as ``Experiment.run`` stores one: fifteen GETs (one duplicated in the
    outputs), two control events, the manifest with run id, generator report and read-back,
    ``seal``, then ``finish_run`` with the hashes."""
    run_dir = tmp_path / name
    # Five GETs per phase (control [50, 150), failure, recovery), each phase's window
    # output in the next phase's first half, one ID duplicated: valid, at-least-once.
    inputs = [{"id": i, "type": "GET", "resource": "r0", "event_ts": 60 + 100 * (i // 5) + i,
               "ingress_ts": 60 + 100 * (i // 5) + i} for i in range(15)]
    outputs = [{"window_start": w, "window_end": w + W, "resource": "r0", "count": 5 + (w == 0),
                "ids": [*range(w // 20, w // 20 + 5), *([4] if w == 0 else [])],
                "ingress_ts": w + 120} for w in (0, 100, 200)]
    manifest = build_run(run_dir, inputs, outputs, [], control=2)
    db = tmp_path / "results.db"
    store = ResultsStore(db)
    run_id = store.start_run("validate", "sst", W, fault=fault,
                             params={"run_dir": str(run_dir)})
    streams = load_streams(run_dir, manifest)
    evaluation = evaluate(streams.events, streams.outputs, "sst", W, manifest.phase_bounds)
    manifest.readback = _readback(run_dir, incomplete)
    validity = Validity(readback_reasons({k: v for k, v in manifest.readback.items()
                                          if k != "inputs"}),
                        generator_reasons(GENERATOR), evaluation_reasons(evaluation),
                        fault_reasons(fault, fault_log or []))
    manifest.config = {"fault": fault}
    manifest.valid, manifest.validity_reasons = validity.valid, validity.texts
    manifest.validity = validity.records()
    manifest.run_id, manifest.generator, manifest.observed_reasons = run_id, GENERATOR, []
    manifest.write(run_dir)
    store.finish_run(run_id, evaluation, validity=validity, run_dir=run_dir,
                     fault_log=fault_log, evidence=seal(run_dir, run_id))
    store.close()
    return run_dir, db, run_id


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def one_sentence(output: str) -> str:
    """The output as one line; the test fails on a traceback or a second sentence."""
    assert "Traceback" not in output, output
    flat = " ".join(output.split())
    assert flat.count("; refusing") == 1, flat
    return flat


# --------------------------------------------------------------------------- (a)


def test_a_sealed_run_rechecks_verified_and_identical(tmp_path: Path) -> None:
    run_dir, db, run_id = stored_sealed_run(tmp_path)
    rows = sqlite3.connect(db).execute("SELECT path FROM evidence_files WHERE run_id = ? "
                                       "ORDER BY rowid", [run_id]).fetchall()
    assert [r[0] for r in rows] == ["evidence/run.json", "evidence/get.parquet",
                                    "evidence/post.parquet", "evidence/output.parquet",
                                    "evidence/SHA256SUMS"]
    # The manifest file is the standard format and names the run.
    sums = (run_dir / "evidence" / SUMS).read_text()
    assert sums.startswith(f"# pgval evidence of run {run_id}\n")
    check = subprocess.run(["sha256sum", "-c", SUMS], cwd=run_dir / "evidence",
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0, out
    again = json.loads(out)
    stored = ResultsStore(db).run(run_id)
    assert stored is not None
    assert again["evidence"] == {"verified": True, "note": "evidence verified: its 5 files "
                                 f"match the hashes stored with run {run_id}"}
    for key in ("guarantee", "expected", "processed", "duplicate", "unprocessed"):
        assert again[key] == stored[key], key
    assert again["validity_reasons"] == json.loads(stored["validity_reasons"])
    assert again["validity_changes"] == {} and again["validity_carried"] == []
    code, out = cli("export", str(run_id), "--db", str(db), "--out", str(tmp_path / "x"))
    assert code == 0 and "evidence verified" in out, out
    assert json.loads((tmp_path / "x" / "run.json").read_text())["evidence"]["verified"]
    # A directory without the database: the output says there is no anchor.
    code, out = cli("recheck", str(run_dir), "--json")
    assert code == 0 and json.loads(out)["evidence"] == {"verified": False, "note": NO_ANCHOR}
    code, out = cli("recheck", str(run_dir))
    assert code == 0 and NO_ANCHOR in out
    # A directory with the database: verified against the run its run.json names.
    code, out = cli("recheck", str(run_dir), "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["evidence"]["verified"] is True


# --------------------------------------------------------------------------- (b)


def _flip_byte(run_dir: Path) -> str:
    path = run_dir / "evidence" / "output.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return "evidence/output.parquet"


def _shift_timestamps(run_dir: Path) -> str:
    """The tampering edit: output records' Kafka timestamps moved (a valid Parquet file)."""
    path = run_dir / "evidence" / "output.parquet"
    table = pq.read_table(path)
    ts = table.column("timestamp").to_numpy() + 45_000
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp",
                             pa.array(ts, type=pa.int64()))
    pq.write_table(table, path, compression="zstd")
    return "evidence/output.parquet"


def _edit_validity(run_dir: Path) -> str:
    path = run_dir / "evidence" / "run.json"
    data = json.loads(path.read_text())
    data["valid"] = not data["valid"]
    data["validity_reasons"] = [] if data["validity_reasons"] else ["the driver died at x"]
    path.write_text(json.dumps(data, indent=1) + "\n")
    return "evidence/run.json"


def _drop_an_input(run_dir: Path) -> str:
    path = run_dir / "evidence" / f"{POST_TOPIC}.parquet"
    shutil.copyfile(run_dir / "evidence" / f"{GET_TOPIC}.parquet", path)
    return f"evidence/{POST_TOPIC}.parquet"


@pytest.mark.parametrize("edit", [_flip_byte, _shift_timestamps, _edit_validity,
                                  _drop_an_input])
def test_edited_evidence_is_refused_by_recheck_and_export(tmp_path: Path, edit: Any) -> None:
    run_dir, db, run_id = stored_sealed_run(tmp_path)
    name = edit(run_dir)
    expected = f"{name} of run {run_id} {REFUSED}"
    for args in (["recheck", str(run_id), "--db", str(db), "--json"],
                 ["recheck", str(run_dir), "--db", str(db)],
                 ["recheck", str(run_id), "--db", str(db), "--store"],
                 ["export", str(run_id), "--db", str(db), "--out", str(tmp_path / "x")]):
        code, out = cli(*args)
        flat = one_sentence(out)
        assert code == 3 and expected in flat and "refusing to re-check edited evidence" \
            in flat, (args, flat)
    assert not (tmp_path / "x" / "inputs.jsonl").exists()


def test_missing_added_and_renamed_evidence_is_refused(tmp_path: Path) -> None:
    run_dir, db, run_id = stored_sealed_run(tmp_path)
    ev = run_dir / "evidence"
    (ev / "progress.jsonl").write_text('{"batchId": 0}\n')  # recheck would read it
    code, out = cli("recheck", str(run_id), "--db", str(db))
    assert code == 3 and "evidence/progress.jsonl of run" in one_sentence(out) \
        and "was not there at the end of the run" in out
    (ev / "progress.jsonl").unlink()
    (ev / "output.parquet").rename(tmp_path / "away")
    code, out = cli("recheck", str(run_id), "--db", str(db))
    assert code == 3 and "evidence/output.parquet of run" in one_sentence(out) \
        and "missing" in out
    (tmp_path / "away").rename(ev / "output.parquet")
    assert cli("recheck", str(run_id), "--db", str(db))[0] == 0
    # The hashes deleted from a run that was sealed: refused, not taken for an old run.
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM evidence_files")
    code, out = cli("recheck", str(run_id), "--db", str(db))
    assert code == 3 and "holds none for it" in out and "Traceback" not in out


def test_another_runs_evidence_is_refused(tmp_path: Path) -> None:
    """Run 1's directory swapped for run 2's (same records; only run.json's run id
    differs, and it is the first file checked)."""
    a_dir, db, a = stored_sealed_run(tmp_path, name="a")
    b_dir, _, b = stored_sealed_run(tmp_path, name="b")
    assert b == a + 1
    shutil.rmtree(a_dir)
    shutil.copytree(b_dir, a_dir)
    code, out = cli("recheck", str(a), "--db", str(db))
    assert code == 3 and f"evidence/run.json of run {a} {REFUSED}" in one_sentence(out)


# --------------------------------------------------------------------------- (c)


def test_validity_is_recomputed_not_read_from_run_json(tmp_path: Path) -> None:
    """A run unknown for an incomplete read-back: run.json's verdict edited to valid (and a
    made-up reason added) changes nothing in a re-check without the database, which has no
    anchor and says so; with it, the edit is refused."""
    run_dir, db, run_id = stored_sealed_run(tmp_path, incomplete=OUTPUT_TOPIC)
    path = run_dir / "evidence" / "run.json"
    data = json.loads(path.read_text())
    real = data["validity_reasons"]
    assert [r["kind"] for r in data["validity"]] == ["readback"]
    data["valid"], data["validity_reasons"] = True, ["the generator had 7 failed sends"]
    data["validity"] = [{"kind": "generator", "text": "the generator had 7 failed sends"}]
    path.write_text(json.dumps(data))
    code, out = cli("recheck", str(run_dir), "--json")
    assert code == 0, out
    again = json.loads(out)
    assert again["valid"] is False and again["validity_reasons"] == real
    assert again["validity_changes"] == {"only_now": ["readback"], "only_stored": ["generator"]}
    assert again["evidence"]["note"] == NO_ANCHOR
    code, out = cli("recheck", str(run_id), "--db", str(db))
    assert code == 3 and "evidence/run.json" in one_sentence(out)


def test_fault_reasons_come_from_the_databases_fault_log(tmp_path: Path) -> None:
    """A crash whose log shows no worker killed: the reason is recomputed from the fault
    log rows even when the stored verdict lost it; without the database it is carried."""
    log = [{"step": "inject", "fault": "crash", "intended_ms": 150, "actual_ms": 151},
           {"step": "remove", "fault": "crash", "intended_ms": 250, "actual_ms": 251}]
    run_dir, db, run_id = stored_sealed_run(tmp_path, fault="crash", fault_log=log)
    stored = json.loads(ResultsStore(db).run(run_id)["validity_reasons"])  # type: ignore[index]
    assert "crash: no worker process was killed" in stored
    with sqlite3.connect(db) as conn:  # the stored verdict (not the evidence) rewritten
        conn.execute("UPDATE runs SET valid = 1, validity_reasons = '[]', validity = '[]'")
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0, out
    again = json.loads(out)
    assert "crash: no worker process was killed" in again["validity_reasons"]
    assert again["validity_changes"] == {"only_now": ["fault"]}
    assert again["validity_carried"] == []
    code, out = cli("recheck", str(run_dir), "--json")  # run.json still has the reason
    assert code == 0 and json.loads(out)["validity_carried"] == ["fault"]
    assert "crash: no worker process was killed" in json.loads(out)["validity_reasons"]


# --------------------------------------------------------------------------- (d)


def _before_hashes(db: Path) -> None:
    """Make ``db`` what the pgval before evidence hashes wrote (schema EVIDENCE_SCHEMA - 1)."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE evidence_files")
        conn.execute("ALTER TABLE runs DROP COLUMN sealed")
        conn.execute(f"PRAGMA user_version = {EVIDENCE_SCHEMA - 1}")


def test_a_database_from_before_hashes_rechecks_with_a_note(tmp_path: Path) -> None:
    run_dir, db, run_id = stored_sealed_run(tmp_path)
    _before_hashes(db)
    (run_dir / "evidence" / SUMS).unlink()  # an old run had none
    note = f"stored before evidence hashes (schema v{EVIDENCE_SCHEMA - 1} or older): " \
           "not verified"
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0, out
    assert json.loads(out)["evidence"] == {"verified": False, "note": note}
    code, out = cli("export", str(run_id), "--db", str(db), "--out", str(tmp_path / "x"))
    assert code == 0 and note in " ".join(out.split())
    with sqlite3.connect(db) as conn:  # read-only so far: still the old schema
        assert conn.execute("PRAGMA user_version").fetchone()[0] == EVIDENCE_SCHEMA - 1
    ResultsStore(db).close()  # migrated: the old run stays unsealed, re-checkable
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["evidence"]["note"] == note


def test_every_reason_has_its_checks_kind_and_the_legacy_reader_agrees() -> None:
    """Each check gives its reasons its own kind; the reader of runs stored before kinds
    (:func:`legacy_reason_kind`) finds that same kind in every sentence pgval writes, so
    an old run is compared as it would be stored today."""
    made = {
        "readback": readback_reasons({"get": {"complete": False}}).reasons,
        "reconcile": (*reconcile_inputs(5, 6, 3, 1, True)[1].reasons,
                      *reconcile_inputs(9, 9, 3, 1, True)[1].reasons),
        "generator": generator_reasons({"failed": 1, "undelivered": 2,
                                        "errors": ["x"]}).reasons,
        "fault": (*fault_reasons("crash", []),
                  *fault_reasons("delay-gt-timeout", [{"step": "inject", "error": "e"}]),
                  *fault_reasons("driver-crash", [{"step": "inject"},
                                                  {"step": "remove", "error": "x"}])),
    }
    samples = [r for reasons in made.values() for r in reasons]
    assert all(r.kind == kind for kind, reasons in made.items() for r in reasons), samples
    samples += [Reason("observed", "the drain timed out after 60 s: the query had not read "
                       "every input"),
                Reason("observed", "the driver died during the drain: exit 1"),
                Reason("observed", "the driver died at failure: exit 1"),
                Reason("data", "nothing was expected: no usable inputs"),
                Reason("data", "the failure phase had no outputs (latency longer than the "
                       "phase?)")]
    assert [legacy_reason_kind(r.text) for r in samples] == [r.kind for r in samples]
    assert legacy_reason_kind("a sentence no rule knows") == "other"
    assert Manifest(topology="sst", window_ms=1, phases=[0, 1, 2]).observed_reasons is None
    assert Manifest(topology="sst", window_ms=1, phases=[0, 1, 2]).validity is None


# --------------------------------------------------------------------------- (e) kinds


def _stored_validity(db: Path, run_id: int) -> list[dict[str, str]]:
    value = json.loads(ResultsStore(db).run(run_id)["validity"])  # type: ignore[index]
    assert isinstance(value, list)
    return value


def _set_stored_validity(db: Path, records: list[dict[str, str]] | None) -> None:
    """The database's typed validity rewritten (it is not evidence: nothing hashes it)."""
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET validity = ?",
                     [None if records is None else json.dumps(records)])
    conn.close()


def test_kinds_are_stored_and_survive_a_recheck(tmp_path: Path) -> None:
    """run.json and the database keep each reason's kind next to the sentences; a re-check
    of the stored run finds the same kinds, with or without the database."""
    run_dir, db, run_id = stored_sealed_run(tmp_path, incomplete=OUTPUT_TOPIC)
    text = "read-back of topic output incomplete: partition 0 not reached"
    assert _stored_validity(db, run_id) == [{"kind": "readback", "text": text}]
    manifest = json.loads((run_dir / "evidence" / "run.json").read_text())
    assert manifest["validity"] == [{"kind": "readback", "text": text}]
    assert manifest["validity_reasons"] == [text]
    for args in ([str(run_id), "--db", str(db)], [str(run_dir)]):
        code, out = cli("recheck", *args, "--json")
        assert code == 0, out
        again = json.loads(out)
        assert again["validity_reasons"] == [text] and again["valid"] is False
        assert again["validity_changes"] == {} and again["validity_carried"] == []


def test_a_reworded_reason_of_the_same_kind_agrees(tmp_path: Path) -> None:
    """Stored and recomputed validity are compared by kind: a sentence an older pgval
    worded otherwise is no change, and the recomputed wording is what is shown."""
    run_dir, db, run_id = stored_sealed_run(tmp_path, incomplete=OUTPUT_TOPIC)
    now = [r["text"] for r in _stored_validity(db, run_id)]
    _set_stored_validity(db, [{"kind": "readback", "text": "output: read-back short"}])
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0, out
    again = json.loads(out)
    assert again["validity_changes"] == {} and again["validity_reasons"] == now


def test_a_stored_kind_that_differs_is_reported(tmp_path: Path) -> None:
    """The same sentence stored under another kind is a change (the wording is never
    compared): the stored kind is only_stored, the recomputed one only_now."""
    run_dir, db, run_id = stored_sealed_run(tmp_path, incomplete=OUTPUT_TOPIC)
    (reason,) = _stored_validity(db, run_id)
    _set_stored_validity(db, [{**reason, "kind": "generator"}])
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0, out
    assert json.loads(out)["validity_changes"] == {"only_now": ["readback"],
                                                   "only_stored": ["generator"]}
    # A valid run whose stored verdict claims a reason the evidence does not give.
    ok_dir, ok_db, ok_id = stored_sealed_run(tmp_path / "ok")
    _set_stored_validity(ok_db, [{"kind": "observed", "text": "the driver died at x"}])
    code, out = cli("recheck", str(ok_id), "--db", str(ok_db), "--json")
    assert code == 0 and json.loads(out)["validity_changes"] == {"only_stored": ["observed"]}


def _before_kinds(db: Path) -> None:
    """Make ``db`` what the pgval before reason kinds wrote (schema 4: no ``validity``)."""
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN validity")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.close()


def test_a_run_stored_before_kinds_rechecks_by_its_sentences(tmp_path: Path) -> None:
    """An old database (no ``validity`` column) and an old run.json (no ``validity``): the
    kinds of the stored sentences are read by the legacy reader, for those runs only, and
    the re-check agrees; the migration keeps the old run's ``validity`` NULL."""
    run_dir, db, run_id = stored_sealed_run(tmp_path, incomplete=OUTPUT_TOPIC)
    _before_kinds(db)
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0, out
    again = json.loads(out)
    assert again["valid"] is False and again["validity_changes"] == {}
    assert again["evidence"]["verified"] is True
    with sqlite3.connect(db) as conn:  # read only: still the old schema
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION - 1
    conn.close()
    ResultsStore(db).close()
    assert ResultsStore(db).run(run_id)["validity"] is None  # type: ignore[index]
    code, out = cli("recheck", str(run_id), "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["validity_changes"] == {}
    # An old run.json, without the database: its sentences are read the same way, and a
    # kind it kept no inputs for (no observed_reasons then) is carried from them.
    path = run_dir / "evidence" / "run.json"
    data = json.loads(path.read_text())
    for key in ("validity", "observed_reasons"):
        del data[key]
    data["valid"] = False
    data["validity_reasons"] = [*data["validity_reasons"],
                                "the drain timed out after 300 s: the query had not read "
                                "every input"]
    path.write_text(json.dumps(data))
    code, out = cli("recheck", str(run_dir), "--json")
    assert code == 0, out
    again = json.loads(out)
    assert again["validity_changes"] == {} and again["validity_carried"] == ["observed"]
    assert again["validity_reasons"] == data["validity_reasons"]


@pytest.mark.parametrize("value", [[{"kind": "nope", "text": "x"}], "readback", [1]])
def test_a_damaged_stored_validity_is_one_sentence(tmp_path: Path, value: object) -> None:
    run_dir, _, _ = stored_sealed_run(tmp_path)
    path = run_dir / "evidence" / "run.json"
    data = json.loads(path.read_text())
    data["validity"] = value
    path.write_text(json.dumps(data))
    code, out = cli("recheck", str(run_dir))
    assert code == 2 and "Traceback" not in out, out
    assert "is damaged: its validity must be null or a list of {kind, text} objects" in \
        " ".join(out.split())


def test_a_fault_pgval_does_not_know_is_one_sentence(tmp_path: Path) -> None:
    run_dir, _, _ = stored_sealed_run(tmp_path)
    path = run_dir / "evidence" / "run.json"
    data = json.loads(path.read_text())
    data["config"]["fault"] = "meteor"
    path.write_text(json.dumps(data))
    code, out = cli("recheck", str(run_dir))
    assert code == 2 and "Traceback" not in out, out
    assert 'names the fault "meteor", which is none of none, crash' in " ".join(out.split())


@pytest.mark.parametrize("cell", [None, 1e308, -1, "", "x", "{", "[]", "{}", "null", "[1, 2]",
                                  '[{"kind": "data"}]', b"\xff\x00", "[" * 5000])
def test_a_damaged_database_validity_falls_back_to_the_sentences(cell: object) -> None:
    """The database is no evidence file (nothing hashes its cells): a ``validity`` or
    ``validity_reasons`` cell of any value is read without a traceback, the sentences
    (legacy reader) standing in for kinds that cannot be read."""
    texts = json.dumps(["the drain timed out after 1 s: x"])
    assert stored_reasons(cell, texts) == [Reason("observed", "the drain timed out after 1 s: x")]
    assert all(isinstance(r, Reason) for r in stored_reasons(cell, cell))


def test_the_restart_policys_t3_survives_the_manifest(tmp_path: Path) -> None:
    """A run whose T3 was the job's own restart says so in run.json, and a re-check judges it
    the same way; a manifest from before restart policies had every removal at T3."""
    manifest = Manifest(topology="sst", window_ms=W, phases=[0, 20_000, 40_000], t4=60_000,
                        resources=2, removal_scheduled=False)
    manifest.write(tmp_path)
    assert Manifest.read(tmp_path).phase_bounds.removal_scheduled is False
    old = json.loads((tmp_path / "evidence" / "run.json").read_text())
    del old["removal_scheduled"]
    (tmp_path / "evidence" / "run.json").write_text(json.dumps(old))
    assert Manifest.read(tmp_path).phase_bounds.removal_scheduled is True
