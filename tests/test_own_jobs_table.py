"""docs/your-job.md's table of the example jobs' verdicts is the committed database's:
each row's job, guarantee, fault, verdict, count (IDs, or rows for a verdict by rows) and
validity are those of the run it names in experiments/own-jobs/results.db, and every run of
the database has its row."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "your-job.md"
DB = ROOT / "experiments" / "own-jobs" / "results.db"
ROW = re.compile(r"^\| `(?P<job>[\w.]+)` \| (?P<pg>\w+) \| (?P<fault>[\w@-]+)"
                 r"(?: \| (?P<trigger>[\w-]+))? \| (?P<verdict>[\w-]+) \| (?P<count>[\d,]+) "
                 r"(?P<unit>IDs|rows) \| (?P<valid>yes|no) \(run (?P<run>\d+)\) \|$")


def doc_rows() -> list[dict[str, str]]:
    section = DOC.read_text().split("**Verdicts of the examples**", 1)[1]
    return [m.groupdict() for line in section.splitlines() if (m := ROW.match(line))]


def stored_runs() -> dict[int, dict]:
    db = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT id, pg, fault, guarantee, expected, valid, params, summary "
                          "FROM runs WHERE status = 'complete'").fetchall()
    finally:
        db.close()
    return {r[0]: {"pg": r[1], "fault": r[2], "verdict": r[3], "expected": r[4],
                   "valid": r[5], "params": json.loads(r[6]), "summary": json.loads(r[7])}
            for r in rows}


def by_rows(summary: dict) -> bool:
    undefined = summary["latency"]["control"].get("undefined") or ""
    return "by rows" in undefined


def test_the_docs_table_is_the_databases() -> None:
    rows, runs = doc_rows(), stored_runs()
    assert rows, "docs/your-job.md lost its table of the examples' verdicts"
    assert sorted(int(r["run"]) for r in rows) == sorted(runs), \
        "every stored run has one row, and every row a stored run"
    for row in rows:
        run = runs[int(row["run"])]
        assert Path(run["params"]["job"].split(":")[0]).name == row["job"], row
        trigger = run["params"].get("trigger") or "micro-batch"
        assert (row["trigger"] or "micro-batch") == (
            "real-time" if trigger.startswith("real-time") else "micro-batch"), row
        point = run["params"].get("crash_point") or "timed"
        fault = run["fault"] + ("" if point == "timed" else f"@{point}")
        assert (run["pg"], fault, run["verdict"]) == (row["pg"], row["fault"],
                                                      row["verdict"]), row
        assert int(row["count"].replace(",", "")) == run["expected"], row
        assert row["unit"] == ("rows" if by_rows(run["summary"]) else "IDs"), row
        assert row["valid"] == ("yes" if run["valid"] else "no"), row


def test_every_run_of_the_table_rechecks_from_the_evidence_beside_its_database() -> None:
    """The database carries its runs' evidence (experiments/ship_evidence.py), so each
    verdict of the table re-checks from any clone; one run by rows and one by coordinates
    are re-checked here, each meeting its stored verdict."""
    import subprocess
    import sys

    for run_id in stored_runs():
        assert (DB.parent / "evidence" / f"run-{run_id}" / "evidence" / "run.json").is_file()
    for run_id, verdict in ((16, "at-least-once"), (12, "exactly-once")):
        done = subprocess.run([sys.executable, "-m", "pgval.cli", "recheck", str(run_id),
                               "--db", str(DB), "--expect", verdict],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
