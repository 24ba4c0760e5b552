"""Results databases pgval must read but not touch, and one it cannot write.

* A WAL database on read-only storage is read by ``report``, ``recheck`` and ``export``,
  whatever of its ``-wal``/``-shm`` files are there (a read-only tmpfs: root ignores file
  modes, a read-only mount stops root too).
* Another program's SQLite file is refused in one sentence by every command that takes
  ``--db``, and not one byte of it changes.
* A run whose storing fails (the disk full at ``finish_run``) ends in one sentence that
  says how to import it, and the import stores it whole.

No cluster: the runs are the constructed one-event runs of tests/test_evidence.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pgval.cli import main
from pgval.evidence.bundle import Manifest
from pgval.evidence.recheck import recheck
from pgval.store.results import SCHEMA_VERSION, ResultsStore
from tests.test_evidence import build_run
from tests.test_fuzz_cli import assert_plain_failure, run_cli

W = 100


class Mount:
    """A tmpfs mounted at ``path``; ``readonly()`` remounts it so, for root too."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                        str(path)], check=True, capture_output=True)

    def readonly(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True,
                       capture_output=True)

    def unmount(self) -> None:
        """Unmount; lazily when a failed test left a file open there."""
        if subprocess.run(["umount", str(self.path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[callable]:
    """Mount tmpfs file systems under tmp_path; every one is unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made: list[Mount] = []

    def make(name: str, size: str = "16m") -> Mount:
        try:
            made.append(Mount(tmp_path / name, size))
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot mount a tmpfs here: {exc.stderr.decode().strip()}")
        return made[-1]

    try:
        yield make
    finally:
        for m in made:
            m.unmount()
        assert not [m for m in made if os.path.ismount(m.path)], "a tmpfs stayed mounted"


def one_event_run(run_dir: Path, db: Path) -> tuple[ResultsStore, int]:
    """A run directory with one unprocessed GET and its ``running`` row in ``db``."""
    build_run(run_dir, [{"id": 1, "type": "GET", "resource": "r0", "event_ts": 60,
                         "ingress_ts": 60}], [], [], control=0)
    store = ResultsStore(db)
    run_id = store.start_run("validate", "sst", W, pg="a1", fault="none",
                             params={"run_dir": str(run_dir)})
    m = Manifest.read(run_dir)
    m.run_id, m.config = run_id, {"fault": "none", "pg": "a1"}
    m.write(run_dir)
    return store, run_id


def _seal(run_dir: Path, run_id: int) -> dict[str, str] | None:
    from pgval.evidence import bundle as evidence

    seal = getattr(evidence, "seal", None)  # evidence hashes
    return seal(run_dir, run_id) if seal is not None else None


def _finish(store: ResultsStore, run_id: int, run_dir: Path, **kw: object) -> None:
    hashes = _seal(run_dir, run_id)
    store.finish_run(run_id, recheck(run_dir).evaluation, run_dir=run_dir, **kw,
                     **({"evidence": hashes} if hashes is not None else {}))


# --------------------------------------------------------------------------- read-only

CASES = {"no -wal, no -shm": (), "-wal without -shm": ("-wal",), "-wal and -shm": ("-wal",
                                                                                   "-shm")}


@pytest.mark.parametrize("case", list(CASES))
def test_a_wal_database_on_read_only_storage_is_read(tmp_path: Path, mount: callable,
                                                     case: str) -> None:
    """The run's latest row lives only in the ``-wal`` (a writer still had it open when the
    files were copied): a reader that ignored the ``-wal`` would find the run in a folder
    that does not exist and report the fault ``none``."""
    run_dir = tmp_path / "run"
    store, run_id = one_event_run(run_dir, tmp_path / "r.db")
    _finish(store, run_id, run_dir)
    store.db["runs"].update(run_id, {"run_dir": "/nonexistent", "params": "{}"})
    store.close()  # checkpointed: the main file now holds the stale row
    disk = mount("ro")
    writer = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE runs SET run_dir = ?, fault = 'driver-crash' WHERE id = ?",
                   [str(run_dir), run_id])
    db = disk.path / "r.db"
    for suffix in ("", *CASES[case]):
        shutil.copyfile(f"{tmp_path / 'r.db'}{suffix}", f"{db}{suffix}")
    if not CASES[case]:  # what a clean close leaves: the -wal folded into the main file
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        shutil.copyfile(tmp_path / "r.db", db)
    writer.close()
    disk.readonly()
    before = sorted(os.listdir(disk.path))

    rep = run_cli(["report", "--db", str(db), "--format", "csv", "--include-unknown"])
    assert rep.exit_code == 0, rep.output
    assert "driver-crash" in rep.stdout  # the row of the -wal, not the main file's
    res = run_cli(["recheck", str(run_id), "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["expected"] == 1
    out = tmp_path / "export"
    assert run_cli(["export", str(run_id), "--db", str(db), "--out", str(out)]).exit_code == 0
    assert (out / "inputs.jsonl").read_text().count("\n") == 1
    assert sorted(os.listdir(disk.path)) == before


# --------------------------------------------------------------------------- foreign

def _foreign(path: Path, kind: str) -> None:
    conn = sqlite3.connect(path)
    if kind == "another app's tables":
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    elif kind == "a runs table of its own":
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, started TEXT, ok INTEGER)")
        conn.execute("INSERT INTO runs (started, ok) VALUES ('today', 1)")
    else:  # pgval's own version number, by chance
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.commit()
    conn.close()


def _files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()
            if p.is_file()}


@pytest.mark.parametrize("kind", ["another app's tables", "a runs table of its own",
                                  "pgval's version number"])
def test_another_programs_database_is_refused_untouched(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "app"
    folder.mkdir()
    db = folder / "app.db"
    _foreign(db, kind)
    before = _files(folder)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"id": 1, "type": "GET", "resource": "r0", "event_ts": 5, '
                      '"ingress_ts": 5}\n')
    for args in (["check", "--topology", "sst", "--inputs", str(inputs), "--outputs",
                  str(inputs), "--db", str(db)],
                 ["validate", "--topology", "sst", "--pg", "a1", "--db", str(db),
                  "--rate", "10"],
                 ["report", "--db", str(db)],
                 ["recheck", "1", "--db", str(db)],
                 ["export", "1", "--db", str(db), "--out", str(tmp_path / "x")]):
        res = run_cli(args)
        assert res.exit_code == 2, (args, res.output)
        assert "app.db is not a pgval results database" in res.stderr, res.stderr
        assert "give a new file" in res.stderr
    assert _files(folder) == before  # not a byte written, no -wal or -shm left


def test_an_empty_file_becomes_a_results_database(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    db.touch()
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"id": 1, "type": "GET", "resource": "r0", "event_ts": 5, '
                      '"ingress_ts": 5}\n')
    res = run_cli(["check", "--topology", "sst", "--inputs", str(inputs), "--outputs",
                   str(inputs), "--db", str(db), "--allow-malformed"])
    assert res.exit_code == 0 and "stored as run 1" in res.stdout


# --------------------------------------------------------------------------- storing fails

def _fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for block in (65536, 1):
            try:
                while os.write(fd, b"\0" * block):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_a_run_whose_storing_fails_is_one_sentence_and_imports_whole(
        tmp_path: Path, mount: callable) -> None:
    """The disk holding the database fills before ``finish_run``: the error names the run
    directory and the command that imports it; after space is freed that command stores
    the run complete, with its evidence hashes and fault log, and a re-check verifies."""
    from pgval.store.results import unstored_error

    disk = mount("small", size="2m")
    db = disk.path / "r.db"
    run_dir = tmp_path / "run"
    store, run_id = one_event_run(run_dir, db)
    hashes = _seal(run_dir, run_id)
    filler = _fill(disk.path)
    fault_log = [{"step": "inject", "fault": "none", "intended_ms": 1, "actual_ms": 2}]
    evaluation = recheck(run_dir).evaluation
    with pytest.raises(sqlite3.Error) as caught:
        store.finish_run(run_id, evaluation, run_dir=run_dir, fault_log=fault_log,
                         batches=[], **({"evidence": hashes} if hashes else {}))
    err = unstored_error(db, run_id, run_dir, caught.value,
                         {"fault_log": fault_log, "timings": {"total_s": 1.0}})
    store.close()
    text = str(err)
    assert "\n" not in text and "full" in text, text
    assert f"pgval recheck {run_dir} --store --db {db}" in text
    assert (run_dir / "unstored.json").stat().st_mode & 0o077 == 0

    filler.unlink()
    manifest = run_dir / "evidence" / "run.json"
    kept = manifest.read_bytes()
    added = run_dir / "evidence" / "progress.jsonl"
    if hashes:  # an edit or a file added after the run is not laundered by the import
        for edit in (lambda: manifest.write_bytes(kept + b" "),
                     lambda: added.write_text('{"event": "progress", "batchId": 7}\n')):
            edit()
            res = run_cli(["recheck", str(run_dir), "--store", "--db", str(db)])
            assert res.exit_code == 3 and "refusing to import" in res.stderr, res.output
            manifest.write_bytes(kept)
            added.unlink(missing_ok=True)
    res = run_cli(["recheck", str(run_dir), "--store", "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert f"as run {run_id}" in " ".join(res.stdout.split())
    with ResultsStore(db) as again:
        row = again.run(run_id)
        assert row["status"] == "complete" and row["expected"] == 1
        assert again.db["fault_log"].count == 1
        assert json.loads(row["summary"])["timings"] == {"total_s": 1.0}
    assert not (run_dir / "unstored.json").exists()
    res = run_cli(["recheck", str(run_id), "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    if hashes:  # checked against the hashes taken at the import, and said so: the run's
        # own SHA256SUMS cannot rule out an edit made before the import
        evidence = json.loads(res.stdout)["evidence"]
        assert evidence["verified"] is False and "imported" in evidence["note"], evidence
    res = run_cli(["recheck", str(run_dir), "--store", "--db", str(db)])
    assert res.exit_code == 2 and "already stored complete" in res.stderr


def test_import_runs_through_the_entry_point(tmp_path: Path) -> None:
    """Exit codes as a user sees them: 0 imported, 2 refused (tests/test_fuzz_cli.py's
    rules: one plain line, no traceback)."""
    run_dir = tmp_path / "run"
    store, run_id = one_event_run(run_dir, tmp_path / "r.db")
    _seal(run_dir, run_id)
    store.close()
    other = tmp_path / "other.db"  # a database without the run: a new row
    res: Result = CliRunner().invoke(main, ["recheck", str(run_dir), "--store", "--db",
                                            str(other)])
    assert res.exit_code == 0, res.output
    with ResultsStore(other) as s:
        assert [r["status"] for r in s.runs()] == ["complete"]
    res = CliRunner().invoke(main, ["recheck", str(run_dir), "--store", "--db", str(other)])
    assert res.exit_code == 2 and "already stored complete" in res.stderr
    third = tmp_path / "third.db"  # where run id 1 is another run's: a row of its own
    with ResultsStore(third) as s:
        s.start_run("validate", "mst", W, params={"run_dir": str(tmp_path / "elsewhere")})
    res = CliRunner().invoke(main, ["recheck", str(run_dir), "--store", "--db", str(third)])
    assert res.exit_code == 0 and "as run 2" in " ".join(res.stdout.split()), res.output
    res = CliRunner().invoke(main, ["recheck", "2", "--db", str(third), "--json"])
    assert res.exit_code == 0, res.output  # unsealed (the evidence names run 1): readable
    assert json.loads(res.stdout)["expected"] == 1
    res = CliRunner().invoke(main, ["recheck", str(run_dir), "--store"])
    assert res.exit_code == 2
    assert_plain_failure(res.stderr)


def test_an_import_takes_only_evidence_files_from_sha256sums(tmp_path: Path) -> None:
    """A SHA256SUMS that names another file (correct hash and all) is refused at the import:
    stored, that name would make every later re-check of the run refuse."""
    run_dir = tmp_path / "run"
    store, run_id = one_event_run(run_dir, tmp_path / "r.db")
    _seal(run_dir, run_id)
    store.close()
    notes = run_dir / "evidence" / "notes.txt"
    notes.write_text("hello\n")
    sums = run_dir / "evidence" / "SHA256SUMS"
    sums.write_text(sums.read_text() + f"{hashlib.sha256(b'hello' + bytes([10])).hexdigest()}"
                                       "  notes.txt\n")
    res = CliRunner().invoke(main, ["recheck", str(run_dir), "--store", "--db",
                                    str(tmp_path / "other.db")])
    assert res.exit_code == 3 and "which is no evidence file" in res.stderr, res.output


def test_every_reader_refuses_a_database_of_a_newer_schema(tmp_path: Path) -> None:
    """A newer pgval's tables may mean what this one would misread: ``report`` and
    ``recheck`` refuse such a file in one sentence (exit 2), and leave it as it was."""
    import sqlite3

    from click.testing import CliRunner

    from pgval.cli import main
    from pgval.store.results import SCHEMA_VERSION, ResultsStore

    db = tmp_path / "r.db"
    ResultsStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = db.read_bytes()
    for argv in (["report", "--db", str(db)], ["recheck", "1", "--db", str(db)]):
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "written by a newer pgval" in result.output, (argv, result.output)
        assert "Traceback" not in result.output
    assert db.read_bytes() == before
