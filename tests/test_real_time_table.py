"""The example report's table of micro-batch against Real-time Mode is what
experiments/real-time/table.py makes of experiments/real-time/results.db, as is, and its
claims hold there: every run valid, every Real-time Mode run at-least-once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "docs" / "example-report" / "README.md"


def _table_module():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(
        "real_time_table", ROOT / "experiments" / "real-time" / "table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_table_is_the_databases() -> None:
    table = _table_module()
    rows = table.runs()
    block = README.read_text(encoding="utf-8").split(
        "<!-- table of experiments/real-time/table.py -->", 1)[1]
    block = block.split("<!-- end of the real-time table -->", 1)[0]
    assert block.strip() == table.markdown(rows)
    assert len(rows) == 12 and all(r["valid"] for r in rows)
    assert {r["verdict"] for r in rows if r["mode"] == "real-time"} == {"at-least-once"}
    assert {(r["mode"], r["fault"]) for r in rows} == {
        (m, f) for m in ("micro-batch", "real-time") for f in ("crash", "driver-crash")}


def test_every_run_carries_its_evidence_beside_the_database() -> None:
    db = ROOT / "experiments" / "real-time" / "results.db"
    for row in _table_module().runs(db):
        assert (db.parent / "evidence" / f"run-{row['run']}" / "evidence" / "run.json").is_file()
