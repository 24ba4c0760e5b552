"""Matrix bookkeeping: completed cells are skipped, stale 'running' rows are redone."""

from __future__ import annotations

from pathlib import Path

from pgval.experiment import ExperimentConfig
from pgval.matrix import cells, completed, mark_stale, matrix_key, run_matrix
from pgval.store import ResultsStore


def test_resume_skips_complete_cells_and_marks_stale(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    base = ExperimentConfig(phase_seconds=5)
    key = matrix_key(base)
    store = ResultsStore(db)
    grid = cells(["sst"], ["a1", "e1"], ["none"], 2)
    for cell in grid:
        rid = store.start_run("validate", cell.topology, 10_000, pg=cell.pg, fault=cell.fault,
                              repeat=cell.repeat, params={"matrix_key": key})
        store.db["runs"].update(rid, {"status": "complete"})
    stale = store.start_run("validate", "mst", 10_000, pg="a1", fault="crash", repeat=0,
                            params={"matrix_key": key})
    other = store.start_run("validate", "mst", 10_000, pg="a1", fault="crash", repeat=0,
                            params={"matrix_key": "another"})
    assert completed(store, key) == set(grid)
    assert mark_stale(store, key) == 1
    assert store.db["runs"].get(stale)["status"] == "interrupted"
    assert store.db["runs"].get(other)["status"] == "running"
    seen = []
    counts = run_matrix(base, grid, db, tmp_path / "runs",
                        on_cell=lambda c, state, info: seen.append(state))
    assert counts == {"done": 0, "skipped": 4, "failed": 0}
    assert seen == ["skipped"] * 4


def test_key_ignores_grid_axes_but_not_run_shape() -> None:
    a = ExperimentConfig(topology="sst", pg="a1", fault="none", seed=1)
    b = ExperimentConfig(topology="mst", pg="e1", fault="crash", seed=9)
    c = ExperimentConfig(rate=5000)
    assert matrix_key(a) == matrix_key(b)
    assert matrix_key(a) != matrix_key(c)
