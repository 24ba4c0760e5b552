"""`--db` paths: taken literally, and a missing or foreign file is one plain line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgval.cli import main
from pgval.store.results import ResultsStore
from tests.test_report import W, synthetic_streams

NOT_SQLITE = "results, as a spreadsheet someone saved with the wrong name\n" * 30


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_line(res: object, needle: str) -> None:
    output = getattr(res, "output", "")
    assert getattr(res, "exit_code", 0) != 0, output
    assert needle in " ".join(output.split()), output
    assert "Traceback" not in output and getattr(res, "exception", None).__class__ in (
        SystemExit, type(None)), output


def test_report_reads_a_path_with_a_hash_literally(cwd: Path) -> None:
    from pgval.checker.evaluate import evaluate

    inputs, outputs, _ = synthetic_streams("none", 0)
    with ResultsStore("a#b.db") as store:
        store.save_check(evaluate(inputs, outputs, "sst", W))
    res = CliRunner().invoke(main, ["report", "--db", "a#b.db", "--format", "markdown"])
    assert res.exit_code == 0, res.output
    assert "1 runs in 1 groups from a#b.db" in res.output
    assert sorted(os.listdir(cwd)) == ["a#b.db"]  # no stray `a`, no -wal/-shm left


@pytest.mark.parametrize("args", [["report", "--db", "missing.db"],
                                  ["recheck", "3", "--db", "missing.db"],
                                  ["export", "3", "--db", "missing.db", "--out", "x"]])
def test_a_missing_database_is_one_line_and_not_created(cwd: Path, args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    _one_line(res, "no results database at missing.db")
    assert os.listdir(cwd) == []


@pytest.mark.parametrize("args", [
    ["report", "--db", "notes.db"],
    ["recheck", "3", "--db", "notes.db"],
    ["check", "--topology", "sst", "--inputs", "in.jsonl", "--outputs", "out.jsonl",
     "--db", "notes.db"],
    ["validate", "--topology", "sst", "--db", "notes.db"],
    ["validate", "--topology", "sst", "--rate", "oir", "--db", "notes.db"],
    ["matrix", "--db", "notes.db", "--repeat", "1"],
    ["oir", "--topology", "sst", "--db", "notes.db"],
])
def test_a_file_that_is_not_sqlite_is_one_line(cwd: Path, args: list[str]) -> None:
    (cwd / "notes.db").write_text(NOT_SQLITE)
    (cwd / "in.jsonl").write_text("")
    (cwd / "out.jsonl").write_text("")
    res = CliRunner().invoke(main, args)
    _one_line(res, "notes.db is not a SQLite database")
    assert (cwd / "notes.db").read_text() == NOT_SQLITE
    assert sorted(os.listdir(cwd)) == ["in.jsonl", "notes.db", "out.jsonl"]  # nothing started


def test_the_entry_point_prints_one_line(cwd: Path) -> None:
    (cwd / "notes.db").write_text(NOT_SQLITE)
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "report", "--db", "notes.db"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == ["error: notes.db is not a SQLite database"]
    assert proc.stdout == ""
