"""Matrix bookkeeping: completed cells are skipped, stale 'running' rows are redone, a cell
is claimed by exactly one process, and every attempt gets a fresh run directory."""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from pgval.campaigns.matrix import (
    Cell,
    cells,
    claim_cell,
    completed,
    mark_stale,
    matrix_key,
    new_run_dir,
    prepared_experiment,
    run_matrix,
)
from pgval.core.spec import RunSpec
from pgval.store.results import ResultsStore


def test_resume_skips_complete_cells_and_marks_stale(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    base = RunSpec(phase_seconds=5)
    key = matrix_key(base)
    store = ResultsStore(db)
    grid = cells(["sst"], ["a1", "e1"], ["none"], 2)
    for cell in grid:
        rid = store.start_run("validate", cell.topology, 10_000, pg=cell.pg, fault=cell.fault.kind,
                              repeat=cell.repeat, params={"matrix_key": key})
        store.db["runs"].update(rid, {"status": "complete"})
    stale = store.start_run("validate", "mst", 10_000, pg="a1", fault="crash", repeat=0,
                            params={"matrix_key": key})
    store.db["runs"].update(stale, {"owner": None})  # as older stores wrote: counts as dead
    live = store.start_run("validate", "mst", 10_000, pg="e1", fault="crash", repeat=0,
                           params={"matrix_key": key})  # owned by this (live) process
    other = store.start_run("validate", "mst", 10_000, pg="a1", fault="crash", repeat=0,
                            params={"matrix_key": "another"})
    store.db["runs"].update(other, {"owner": None})
    assert set(completed(store, key)) == set(grid)
    assert mark_stale(store, key) == 1
    assert store.db["runs"].get(stale)["status"] == "interrupted"
    assert store.db["runs"].get(live)["status"] == "running"
    assert store.db["runs"].get(other)["status"] == "running"
    seen = []
    counts = run_matrix(base, grid, db, tmp_path / "runs",
                        on_cell=lambda c, state, info: seen.append(state))
    assert counts == {"done": 0, "skipped": 4, "taken": 0, "failed": 0}
    assert seen == ["skipped"] * 4


def test_key_ignores_grid_axes_but_not_run_shape() -> None:
    a = RunSpec(topology="sst", pg="a1", fault="none", seed=1)
    b = RunSpec(topology="mst", pg="e1", fault="crash", seed=9)
    c = RunSpec(rate=5000)
    assert matrix_key(a) == matrix_key(b)
    assert matrix_key(a) != matrix_key(c)
    # --rate oir: the fraction keys the matrix, not the placeholder rate (a matrix at
    # 0.25 × OIR once skipped cells complete at 0.5 × OIR).
    assert matrix_key(a, 0.5) != matrix_key(a, 0.25)
    assert matrix_key(a, 0.25) == matrix_key(c, 0.25) != matrix_key(a)


def _grid_base(*args: str) -> RunSpec:
    """The base config `pgval matrix ARGS` builds (what its key is made from)."""
    import click

    from pgval.cli import main
    from pgval.cli.common import parse_rate
    from pgval.cli.options import build_config, option_fields

    cmd = main.commands["matrix"]
    root = click.Context(main, info_name="pgval", **main.context_settings)
    with cmd.make_context("matrix", list(args), parent=root) as ctx:
        params = dict(ctx.params)
    names = {f.name for f, _ in option_fields()}
    values = {k: v for k, v in params.items() if k in names}
    topology = {"topology": "job"} if values.get("job") else {}
    return build_config(values, rate=parse_rate(values["rate"]), **topology)


def test_a_grid_stored_before_jobs_keeps_its_key() -> None:
    """`--job` (a setting added while experiments/grid-23 was half done) must not change
    the key of a grid that does not set it: that grid resumes; a job is another grid."""
    root = Path(__file__).resolve().parents[1]
    conn = sqlite3.connect(root / "experiments" / "grid-23" / "results.db")
    params = json.loads(conn.execute("SELECT params FROM runs WHERE id = 1").fetchone()[0])
    conn.close()
    grid = ("--rate", "12000", "--phase-seconds", "90", "--brokers", "1", "--workers", "2")
    assert matrix_key(_grid_base(*grid)) == params["matrix_key"]  # experiments/grid-23/run.sh
    assert matrix_key(_grid_base(*grid, "--job", "/j.py:build")) != params["matrix_key"]


def test_a_crash_point_is_its_own_cell_of_the_same_matrix(tmp_path: Path) -> None:
    """``crash`` and ``crash@during-sink-write`` are different cells of one matrix: one
    complete does not skip the other. Rows stored before crash points count as timed."""
    grid = cells(["sst"], ["a1"], ["crash", "crash@during-sink-write",
                                  "driver-crash@after-sink-write"], 1)
    assert [c.label() for c in grid] == ["sst a1 crash #0", "sst a1 crash@during-sink-write #0",
                                         "sst a1 driver-crash@after-sink-write #0"]
    assert [(c.fault.kind, c.fault.point) for c in grid] == [
        ("crash", "timed"), ("crash", "during-sink-write"),
        ("driver-crash", "after-sink-write")]
    assert matrix_key(RunSpec(crash_point="during-sink-write", fault="crash")) == \
        matrix_key(RunSpec())
    store = ResultsStore(tmp_path / "r.db")
    old = store.start_run("validate", "sst", 10_000, pg="a1", fault="crash", repeat=0,
                          params={"matrix_key": KEY})  # no crash_point: an older store
    store.db["runs"].update(old, {"status": "complete"})
    assert set(completed(store, KEY)) == {grid[0]}
    assert claim_cell(store, KEY, grid[0], window_ms=1, seed=0, params={}) is None
    point = claim_cell(store, KEY, grid[1], window_ms=1, seed=0, params={})
    assert point is not None
    assert json.loads(store.run(point)["params"])["crash_point"] == "during-sink-write"
    store.db["runs"].update(point, {"status": "complete"})
    assert set(completed(store, KEY)) == {grid[0], grid[1]}
    # A new stored OIR gives the cell another rate: the run at the old rate does not count.
    store.db["runs"].update(point, {"params": json.dumps({"matrix_key": KEY, "rate": 24_000.0,
                                                          "crash_point": "during-sink-write"})})
    assert completed(store, KEY)[grid[1]] == {24_000.0}
    assert claim_cell(store, KEY, grid[1], window_ms=1, seed=0, params={}, rate=24_000.0) \
        is None
    assert claim_cell(store, KEY, grid[1], window_ms=1, seed=0, params={},
                      rate=30_000.0) is not None


# ---------------------------------------------------------------- claims and run directories
FORK = mp.get_context("fork")
KEY = "k"
GRID = cells(["sst", "mst"], ["a1", "e1"], ["none", "crash", "delay-lt-timeout"], 3)


def _claim_all(path: str, order: int, barrier: Any, out: Any, done: Any) -> None:
    """Claim every cell of GRID (in a shuffled order), report the claimed ones, stay alive.

    A few ms between claims, as a cell's run would take: otherwise the first process
    takes every cell while the others sleep in SQLite's busy handler, and nothing races."""
    rng = random.Random(order)
    grid = list(GRID)
    rng.shuffle(grid)
    barrier.wait()
    try:
        store = ResultsStore(path)
        claimed = []
        for c in grid:
            if claim_cell(store, KEY, c, window_ms=10_000, seed=c.repeat, params={}) is not None:
                claimed.append(c)
            time.sleep(rng.uniform(0, 0.004))
        out.put(claimed)
    except Exception as exc:
        out.put(f"{type(exc).__name__}: {exc}")
    done.wait(60)  # a claim holds only while its owner lives


def test_concurrent_claims_take_every_cell_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "r.db")
    n = 4
    barrier, out, done = FORK.Barrier(n), FORK.Queue(), FORK.Event()
    procs = [FORK.Process(target=_claim_all, args=(path, k, barrier, out, done))
             for k in range(n)]
    for p in procs:
        p.start()
    try:
        claimed = [out.get(timeout=60) for _ in procs]
        assert all(isinstance(c, list) for c in claimed), claimed
        flat = [c for per in claimed for c in per]
        assert sorted(flat, key=Cell.label) == sorted(GRID, key=Cell.label)
        rows = ResultsStore(path).runs()
        assert len(rows) == len(GRID) and {r["status"] for r in rows} == {"running"}
        # While the claimers live, nobody else gets a cell, and their runs are not stale.
        store = ResultsStore(path)
        assert all(claim_cell(store, KEY, c, window_ms=1, seed=0, params={}) is None
                   for c in GRID)
        assert mark_stale(store, KEY) == 0
    finally:
        done.set()
        for p in procs:
            p.join(timeout=60)
    # Their owners are gone now: the cells are stale and can be claimed again.
    assert mark_stale(ResultsStore(path), KEY) == len(GRID)
    assert claim_cell(ResultsStore(path), KEY, GRID[0], window_ms=1, seed=0,
                      params={}) == len(GRID) + 1


def _claim_and_exit(path: str) -> None:
    claim_cell(ResultsStore(path), KEY, GRID[0], window_ms=1, seed=0, params={})


def test_claim_skips_complete_and_live_and_retakes_dead(tmp_path: Path) -> None:
    path = str(tmp_path / "r.db")
    store = ResultsStore(path)
    child = FORK.Process(target=_claim_and_exit, args=(path,))
    child.start()
    child.join(timeout=60)
    (dead,) = store.runs()
    again = claim_cell(store, KEY, GRID[0], window_ms=1, seed=0, params={"rate": 5})
    assert again is not None and again != dead["id"]
    assert store.run(dead["id"])["status"] == "interrupted"
    row = store.run(again)
    assert json.loads(row["params"]) == {"rate": 5, "crash_point": "timed", "matrix_key": KEY}
    assert (row["topology"], row["pg"], row["fault"], row["repeat"]) == ("sst", "a1", "none", 0)
    assert claim_cell(store, KEY, GRID[0], window_ms=1, seed=0, params={}) is None  # live
    store.db["runs"].update(again, {"status": "complete"})
    assert claim_cell(store, KEY, GRID[0], window_ms=1, seed=0, params={}) is None
    assert claim_cell(store, "other-key", GRID[0], window_ms=1, seed=0, params={}) is not None


class FailingExperiment:
    """Stands in for Experiment: records its directory, leaves a log there, fails."""

    dirs: list[Path] = []
    configs: list[RunSpec] = []

    def __init__(self, config: RunSpec, run_dir: Path, db: Path | None = None,
                 run_id: int | None = None, extra_params: dict | None = None,
                 **kwargs: Any) -> None:
        self.config, self.run_dir, self.db, self.run_id = config, Path(run_dir), db, run_id
        self.extra_params = dict(extra_params or {})

    def run(self) -> None:
        assert self.run_dir.is_dir() and not any(self.run_dir.iterdir())  # fresh and empty
        (self.run_dir / "driver.log").write_text("attempt\n")
        FailingExperiment.dirs.append(self.run_dir)
        FailingExperiment.configs.append(self.config)
        assert self.db is not None and self.run_id is not None
        ResultsStore(self.db).fail_run(self.run_id, "boom")
        raise RuntimeError("boom")


class NoCluster:
    """Stands in for the warm cluster: FailingExperiment needs none."""

    drivers = None  # no shared driver

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def for_run(self, cfg: RunSpec) -> None:
        return None

    def __enter__(self) -> NoCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_a_crash_point_cell_runs_at_its_crash_point(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The config a cell's experiment gets, and the row it leaves, carry the cell's crash
    point (a matrix once ran 'driver-crash@after-sink-write' cells as timed crashes)."""
    monkeypatch.setattr("pgval.campaigns.matrix.Experiment", FailingExperiment)
    monkeypatch.setattr("pgval.campaigns.matrix.WarmDeployments", NoCluster)
    FailingExperiment.dirs, FailingExperiment.configs = [], []
    db = tmp_path / "r.db"
    grid = cells(["sst"], ["a1"], ["driver-crash@after-sink-write", "crash"], 1)
    run_matrix(RunSpec(phase_seconds=5), grid, db, tmp_path / "runs")
    assert [(c.fault, c.crash_point) for c in FailingExperiment.configs] == [
        ("driver-crash", "after-sink-write"), ("crash", "timed")]
    assert FailingExperiment.dirs[0].name.split("-run")[0].endswith(
        "driver-crash-at-after-sink-write-0")
    points = [json.loads(r["params"])["crash_point"] for r in ResultsStore(db).runs()]
    assert points == ["after-sink-write", "timed"]


def test_a_retry_gets_a_fresh_run_directory(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pgval.campaigns.matrix.Experiment", FailingExperiment)
    monkeypatch.setattr("pgval.campaigns.matrix.WarmDeployments", NoCluster)
    FailingExperiment.dirs = []
    db, runs = tmp_path / "r.db", tmp_path / "runs"
    base = RunSpec(phase_seconds=5)
    grid = cells(["sst"], ["a1"], ["none"], 1)
    for _ in range(2):
        assert run_matrix(base, grid, db, runs) == {"done": 0, "skipped": 0, "taken": 0,
                                                    "failed": 1}
    first, second = FailingExperiment.dirs
    assert first != second and first.name.endswith("-run1") and second.name.endswith("-run2")
    assert (first / "driver.log").read_text() == "attempt\n"  # the old attempt untouched
    rows = ResultsStore(db).runs()
    assert [json.loads(r["params"])["run_dir"] for r in rows] == [str(first), str(second)]
    with pytest.raises(FileExistsError):
        new_run_dir(first)


def test_prepared_experiment_records_what_experiment_would(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.db")
    cfg = RunSpec(phase_seconds=5, fault="delay-gt-timeout")
    run_id = claim_cell(store, KEY, GRID[0], window_ms=cfg.window_ms, seed=cfg.seed,
                        params=cfg.to_record())
    assert run_id is not None
    exp = prepared_experiment(store, run_id, cfg, tmp_path / "r.db", tmp_path / "runs" / "x",
                              extra_params={"matrix_key": KEY}, repeat=0)
    assert exp.run_id == run_id and exp.run_dir == (tmp_path / "runs" / "x").resolve()
    params = json.loads(store.run(run_id)["params"])
    assert params == {**exp.config.to_record(), "matrix_key": KEY, "run_dir": str(exp.run_dir)}
    # A directory that exists already: the claimed row is failed, not left running.
    again = claim_cell(store, KEY, GRID[1], window_ms=1, seed=0, params={})
    assert again is not None
    with pytest.raises(FileExistsError):
        prepared_experiment(store, again, cfg, tmp_path / "r.db", tmp_path / "runs" / "x")
    assert store.run(again)["status"] == "failed"


def test_a_cell_that_cannot_be_hit_is_left_out_and_says_why(tmp_path: Path) -> None:
    """e1 writes from the driver: crash@during-sink-write is left out of a matrix (a run of
    it would only ever be unknown), the other cells stay."""
    from click.testing import CliRunner

    from pgval.cli import main

    res = CliRunner().invoke(main, [
        "matrix", "--topologies", "sst", "--pgs", "e1", "--faults", "crash@during-sink-write",
        "--rate", "1000", "--repeat", "2", "--db", str(tmp_path / "r.db"),
        "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert "sst e1 crash@during-sink-write: left out — crash@during-sink-write cannot be hit " \
           "for e1" in " ".join(res.output.split())
    assert "matrix: 0 run" in res.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_left_out_cells_need_no_oir_and_wrong_options_are_still_refused(tmp_path: Path) -> None:
    """With --rate oir only the pairs that will run need a stored OIR (e1 has none here and
    all its cells are left out); a crash point on the wrong fault is an error, not a cell
    left out for e1's reason (during-sink-write is for the embedded cluster)."""
    from click.testing import CliRunner

    from pgval.campaigns.oir import OirResult, save_oir
    from pgval.cli import main
    from pgval.core.spec import ClusterSpec, RunSpec

    db = tmp_path / "r.db"
    save_oir(db, OirResult("sst", "a1", 8000.0, [], upper=9000.0,
                           shape=RunSpec(cluster=ClusterSpec(workers=3)).shape().oir()))
    res = CliRunner().invoke(main, [
        "matrix", "--topologies", "sst", "--pgs", "e1,a1", "--faults", "crash@during-sink-write",
        "--rate", "oir", "--workers", "2", "--repeat", "1", "--db", str(db),
        "--runs-dir", str(tmp_path / "runs")])
    out = " ".join(res.output.split())
    assert "sst e1 crash@during-sink-write: left out" in out
    # The a1 cell still needs its OIR, and the one stored is of another shape.
    assert res.exit_code == 2 and "measured with another run shape: workers 3" in out
    assert "for sst e1" not in out
    res = CliRunner().invoke(main, [
        "matrix", "--topologies", "sst", "--pgs", "e1", "--faults", "crash@during-sink-write",
        "--deploy", "compose", "--rate", "1000", "--db", str(db),
        "--runs-dir", str(tmp_path / "runs")])
    assert res.exit_code == 2
    assert "applies to --fault crash" in " ".join(res.output.split())
