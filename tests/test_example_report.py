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
