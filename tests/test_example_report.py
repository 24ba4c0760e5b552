"""The committed example report is what `pgval report` makes of the committed database:
docs/example-report/report.md is regenerated from results.db, never edited by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgval.report.build import build_report

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = Path("docs/example-report")


def _tables(text: str) -> str:
    """The report without its generation time and its plot links (PNGs are not compared)."""
    text = re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "generated <time>", text)
    return text.split("\n## Plots\n", 1)[0].rstrip()


def test_the_committed_report_is_reproduced_from_the_committed_database(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the report names the database as it was given
    before = (EXAMPLE / "results.db").read_bytes()
    made = build_report(EXAMPLE / "results.db", fmt="markdown")
    assert isinstance(made, str)
    assert _tables(made) == _tables((EXAMPLE / "report.md").read_text(encoding="utf-8"))
    assert (EXAMPLE / "results.db").read_bytes() == before  # reading changed nothing


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_the_readme_table_is_what_the_database_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example README's results table is table (h) of the report of results.db, as is:
    a number changed by hand, or a database re-made without the README, fails here."""
    monkeypatch.chdir(ROOT)
    made = build_report(EXAMPLE / "results.db", fmt="markdown")
    assert isinstance(made, str)
    table_h = made.split("## (h) Every cell, run by run\n", 1)[1].split("\n## ", 1)[0]
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- table (h) of `pgval report`", 1)[1]
    block = block.split("<!-- end of table (h) -->", 1)[0]
    assert _table_lines(block) == _table_lines(table_h)
    assert len(_table_lines(block)) > 2
