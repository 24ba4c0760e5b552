"""The experiment matrix: topology × pg × fault × repetition, resumable.

Each cell is one :class:`~pgval.experiment.Experiment`. A matrix is identified
by a key hashed from everything that defines its runs except the grid axes, so
re-running the same command skips cells already ``complete`` in the database
and redoes cells that failed, were interrupted, or were left ``running`` by a
pgval that was killed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgval.experiment import Experiment, ExperimentConfig
from pgval.store import ResultsStore


@dataclass(frozen=True)
class Cell:
    topology: str
    pg: str
    fault: str
    repeat: int

    def label(self) -> str:
        return f"{self.topology} {self.pg} {self.fault} #{self.repeat}"


def matrix_key(base: ExperimentConfig) -> str:
    """Hash of the run parameters that are not grid axes (so a changed rate is a new matrix)."""
    fixed = {k: v for k, v in dataclasses.asdict(base).items()
             if k not in ("topology", "pg", "fault", "seed")}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cells(topologies: Sequence[str], pgs: Sequence[str], faults: Sequence[str],
          repeat: int) -> list[Cell]:
    return [Cell(t, p, f, r) for t in topologies for p in pgs for f in faults
            for r in range(repeat)]


def completed(store: ResultsStore, key: str) -> set[Cell]:
    rows = store.db.query(
        "select topology, pg, fault, repeat from runs where kind = 'validate' and "
        "status = 'complete' and json_extract(params, '$.matrix_key') = ?", [key])
    return {Cell(r["topology"], r["pg"], r["fault"], r["repeat"]) for r in rows}


def mark_stale(store: ResultsStore, key: str) -> int:
    """Runs of this matrix still 'running' belong to a killed pgval: mark them interrupted."""
    with store.db.conn:
        cur = store.db.execute(
            "update runs set status = 'interrupted', error = 'pgval stopped during the run' "
            "where status = 'running' and json_extract(params, '$.matrix_key') = ?", [key])
    return cur.rowcount


def run_matrix(base: ExperimentConfig, grid: list[Cell], db: Path, runs_root: Path,
               on_cell: Callable[[Cell, str, dict[str, Any] | None], None] | None = None,
               make_status: Callable[[Cell], Callable[[Any], None]] | None = None,
               keep_going: bool = True,
               rate_for: Callable[[Cell], float] | None = None) -> dict[str, int]:
    """Run every cell not yet complete; returns counts of done / skipped / failed cells.

    The seed of repetition r is ``base.seed + r``, recorded with the run, so a cell
    can be reproduced alone with ``pgval validate --seed``.
    """
    store = ResultsStore(db)
    key = matrix_key(base)
    mark_stale(store, key)
    done = completed(store, key)
    counts = {"done": 0, "skipped": 0, "failed": 0}
    for cell in grid:
        if cell in done:
            counts["skipped"] += 1
            if on_cell:
                on_cell(cell, "skipped", None)
            continue
        cfg = dataclasses.replace(base, topology=cell.topology, pg=cell.pg, fault=cell.fault,
                                  seed=base.seed + cell.repeat,
                                  rate=rate_for(cell) if rate_for else base.rate,
                                  cluster=dataclasses.replace(base.cluster))
        run_dir = runs_root / f"{key}-{cell.topology}-{cell.pg}-{cell.fault}-{cell.repeat}"
        status_cb = make_status(cell) if make_status else None
        exp = Experiment(cfg, run_dir, db=db, on_status=status_cb,
                         extra_params={"matrix_key": key}, repeat=cell.repeat)
        if on_cell:
            on_cell(cell, "running", None)
        try:
            result = exp.run()
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            counts["failed"] += 1
            if on_cell:
                on_cell(cell, "failed", {"error": str(exc)})
            if not keep_going:
                raise
            continue
        counts["done"] += 1
        if on_cell:
            v = result.evaluation.validation
            on_cell(cell, "complete", {"reliability": v.reliability, "guarantee": v.guarantee,
                                       "run_id": result.run_id, **result.validity.as_dict()})
    return counts
