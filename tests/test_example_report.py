"""The committed example report is what `pgval report` makes of the committed database:
docs/example-report/report.md is regenerated from experiments/grid-23/results.db (the
grid's database, the example report's since the grid was assembled), never edited by hand."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from pgval.report.build import build_report

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = Path("docs/example-report")
DB = Path("experiments/grid-23/results.db")


def _tables(text: str) -> str:
    """The report without its generation time and its plot links (PNGs are not compared)."""
    text = re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "generated <time>", text)
    return text.split("\n## Plots\n", 1)[0].rstrip()


def test_the_committed_report_is_reproduced_from_the_committed_database(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the report names the database as it was given
    before = DB.read_bytes()
    made = build_report(DB, fmt="markdown")
    assert isinstance(made, str)
    assert _tables(made) == _tables((EXAMPLE / "report.md").read_text(encoding="utf-8"))
    assert DB.read_bytes() == before  # reading changed nothing


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_the_readme_table_is_what_the_database_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example README's results table is table (h) of the report of results.db, as is:
    a number changed by hand, or a database re-made without the README, fails here."""
    monkeypatch.chdir(ROOT)
    made = build_report(DB, fmt="markdown")
    assert isinstance(made, str)
    table_h = made.split("## (h) Every cell, run by run\n", 1)[1].split("\n## ", 1)[0]
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- table (h) of `pgval report`", 1)[1]
    block = block.split("<!-- end of table (h) -->", 1)[0]
    assert _table_lines(block) == _table_lines(table_h)
    assert len(_table_lines(block)) > 2


def _grid_runs(db: Path) -> list[tuple[str, str, str, str | None, str | None, int]]:
    """(topology, pg, fault, crash point, restart, valid) of every complete run the grid
    made: the runs copied from the previous example database (``summary.copied_from``)
    left out."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT topology, pg, fault, params, summary, valid FROM runs "
                            "WHERE status = 'complete' AND kind = 'validate'").fetchall()
    finally:
        conn.close()
    out = []
    for topology, pg, fault, params, summary, valid in rows:
        if "copied_from" in json.loads(summary or "{}"):
            continue
        p = json.loads(params or "{}")
        out.append((topology, pg, fault, p.get("crash_point"), p.get("restart"), valid))
    return out


def test_the_readme_summary_counts_what_the_database_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """README.md's summary of the example report says how many cells and runs the grid has
    and that every run is valid: counted here from the committed database, so a grid
    re-made or extended without the README fails."""
    monkeypatch.chdir(ROOT)
    section = Path("README.md").read_text(encoding="utf-8").split("## The example report", 1)[1]
    said = re.search(r"(\d+) cells, ([\d,]+) runs, every one valid", " ".join(section.split()))
    assert said, "README.md's example-report summary no longer says its cells and runs"
    runs = _grid_runs(DB)
    cells = {run[:5] for run in runs}
    assert (int(said.group(1)), int(said.group(2).replace(",", ""))) == (len(cells), len(runs))
    assert all(run[5] == 1 for run in runs)


def test_the_readme_numbers_are_what_the_database_says() -> None:
    """Every number the example README quotes from its database is marked and computed
    from it (tests/example_facts.py): the warm-up once read "35–67 s" where the database
    has 34.8–73.6 s. A number changed by hand, or a database re-made without the README,
    fails here; `python -m tests.example_facts` rewrites them."""
    from tests.example_facts import facts, marked

    known = facts(ROOT / DB)
    found = marked((ROOT / EXAMPLE / "README.md").read_text(encoding="utf-8"))
    assert len(found) > 40
    wrong = [(name, said, known.get(name)) for name, said in found if known.get(name) != said]
    assert not wrong, wrong
    assert set(known) == {name for name, _ in found}  # every computed number is quoted


def test_the_paper_comparison_labels_costs_at_another_load_not_comparable() -> None:
    """The grid ran at an eighth of this machine's OIR, the paper at the OIR: a cost set
    beside the paper's is labelled not comparable, with why, and the header says each
    side's load (the table once said "yes" for the process crash's cost)."""
    readme = (ROOT / EXAMPLE / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Side by side with the paper", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in _table_lines(section)]
    header, body = rows[0], rows[2:]
    assert header[-1] == "comparable?" and "1/8 of the OIR" in header[1]
    assert all("at the OIR" in cell for cell in header[2:5])
    costs = [row for row in body if "failure cost" in row[0]]
    assert len(costs) == 4
    for row in costs:
        assert row[-1].startswith("no: "), row
    assert "No cost or latency here is comparable with the paper's" in section
