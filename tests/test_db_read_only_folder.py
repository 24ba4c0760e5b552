"""A WAL results database in a folder the reader may not write to is read.

Why: another user's folder (or one made read-only) is not a read-only mount. There SQLite
refuses a ``mode=ro`` reader of a WAL database with "attempt to write a readonly
database" (SQLITE_READONLY_DIRECTORY: it cannot create the ``-shm``), where a read-only
mount gives "unable to open" (tests/test_db_safety.py); ``report`` and ``recheck`` ended in
that sentence instead of reading the file. Root may write to any folder, so as root the
commands run as the user ``nobody``; as anyone else, in a folder of mode 0555.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_db_safety import CASES, _finish, one_event_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder every user can read (pytest's own tmp_path is its owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="pgval-ro-folder-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for d, _, _ in os.walk(folder):
            os.chmod(d, 0o755)
        shutil.rmtree(folder)


def _as_reader() -> list[str]:
    """The argv prefix of a user who may not write the database's folder."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to read as another user")
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def _readable_by_all(folder: Path) -> None:
    for d, _, files in os.walk(folder):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(Path(d) / f, 0o644)


def _pgval(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_as_reader(), sys.executable, "-m", "pgval.cli", *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("case", list(CASES))
def test_a_wal_database_in_a_folder_the_reader_cannot_write_is_read(shared_tmp: Path,
                                                                    case: str) -> None:
    """The run's latest row is in the ``-wal`` where one was kept (as in test_db_safety's
    read-only mount): read, and nothing created beside the database."""
    run_dir, made = shared_tmp / "run", shared_tmp / "made"
    made.mkdir()
    store, run_id = one_event_run(run_dir, made / "r.db")
    _finish(store, run_id, run_dir)
    store.close()
    writer = sqlite3.connect(made / "r.db", isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE runs SET fault = 'driver-crash' WHERE id = ?", [run_id])
    folder = shared_tmp / "db"
    folder.mkdir()
    db = folder / "r.db"
    for suffix in ("", *CASES[case]):
        shutil.copyfile(f"{made / 'r.db'}{suffix}", f"{db}{suffix}")
    if not CASES[case]:  # what a clean close leaves: the -wal folded into the main file
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        shutil.copyfile(made / "r.db", db)
    writer.close()
    _readable_by_all(shared_tmp)
    folder.chmod(0o555)
    before = sorted(os.listdir(folder))

    rep = _pgval(["report", "--db", str(db), "--format", "csv", "--include-unknown"], folder)
    assert rep.returncode == 0, rep.stderr
    assert "driver-crash" in rep.stdout  # the -wal's row where there is one
    res = _pgval(["recheck", str(run_id), "--db", str(db), "--json"], folder)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["expected"] == 1
    assert sorted(os.listdir(folder)) == before
