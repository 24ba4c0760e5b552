"""The experiment matrix: topology × pg × fault × repetition, resumable.

Each cell is one :class:`~pgval.experiment.Experiment`. A matrix is identified
by a key hashed from everything that defines its runs except the grid axes, so
re-running the same command skips cells already ``complete`` in the database
and redoes cells that failed, were interrupted, or were left ``running`` by a
pgval that was killed.

Two matrices may share a database: each cell is claimed atomically
(:func:`claim_cell`, one ``BEGIN IMMEDIATE`` transaction), so a cell that is complete,
or running in a pgval that is still alive (its :class:`~pgval.host.identity.Owner`),
is never run twice. Every attempt gets a new run directory named after its run id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgval.config import ExperimentConfig
from pgval.deploy.warm import WarmDeployments, daemon_key
from pgval.experiment import Experiment
from pgval.redact import digest_values, private_dir, redact_record
from pgval.store import ResultsStore, owner_alive

#: The error of a run whose pgval stopped (was killed) while it ran.
STOPPED = "pgval stopped during the run"


@dataclass(frozen=True)
class Cell:
    topology: str
    pg: str
    fault: str
    repeat: int
    crash_point: str = "timed"

    @property
    def fault_spec(self) -> str:
        """The fault as ``--faults`` names it: ``crash``, ``crash@during-sink-write``."""
        return self.fault if self.crash_point == "timed" else f"{self.fault}@{self.crash_point}"

    def label(self) -> str:
        return f"{self.topology} {self.pg} {self.fault_spec} #{self.repeat}"


def parse_fault_spec(spec: str) -> tuple[str, str]:
    """``FAULT[@CRASH_POINT]`` into (fault, crash point); a bare fault is ``timed``."""
    fault, _, point = spec.partition("@")
    return fault, point or "timed"


def matrix_key(base: ExperimentConfig, oir_fraction: float | None = None) -> str:
    """Hash of the run parameters that are not grid axes (so a changed rate is a new matrix).

    With ``--rate oir`` (``oir_fraction`` given) ``base.rate`` is only a placeholder: the
    fraction keys the matrix, and each cell's looked-up rate must also match for a stored
    run to count (:func:`completed`, :func:`claim_cell`), so a new stored OIR reruns it."""
    # Secret-named values never enter the key, other user settings only as hashes: the key
    # is stored (runs.params) and a short hash of a guessable secret could be tried.
    record = {**redact_record(dataclasses.asdict(base)),
              "kafka_config": digest_values(base.kafka_config),
              "spark_conf": digest_values(base.spark_conf)}
    fixed = {k: v for k, v in record.items()
             if k not in ("topology", "pg", "fault", "crash_point", "seed")}
    if oir_fraction is not None:
        fixed["rate"] = f"oir x {oir_fraction:g}"
    return hashlib.sha256(json.dumps(fixed, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cells(topologies: Sequence[str], pgs: Sequence[str], faults: Sequence[str],
          repeat: int) -> list[Cell]:
    """The grid; a fault may name its crash point (``driver-crash@after-sink-write``)."""
    specs = [parse_fault_spec(f) for f in faults]
    return [Cell(t, p, fault, r, point) for t in topologies for p in pgs
            for fault, point in specs for r in range(repeat)]


#: A run's crash point in SQL (rows stored before crash points existed are ``timed``).
_POINT = "coalesce(json_extract(params, '$.crash_point'), 'timed')"


def completed(store: ResultsStore, key: str) -> dict[Cell, set[float]]:
    """The complete cells of matrix ``key``, each with the rates it was run at."""
    rows = store.db.query(
        f"select topology, pg, fault, repeat, {_POINT} as crash_point, "
        "json_extract(params, '$.rate') as rate from runs where "
        "kind = 'validate' and status = 'complete' and "
        "json_extract(params, '$.matrix_key') = ?", [key])
    done: dict[Cell, set[float]] = {}
    for r in rows:
        cell = Cell(r["topology"], r["pg"], r["fault"], r["repeat"], r["crash_point"])
        done.setdefault(cell, set()).add(r["rate"])
    return done


def mark_stale(store: ResultsStore, key: str) -> int:
    """Runs of this matrix left 'running' by a pgval that is gone: mark them interrupted.

    A run whose owner still runs (another matrix on the same database) is left alone;
    rows without an owner (older stores) count as gone."""
    with store.transaction():
        rows = list(store.db.query(
            "select id, owner from runs where status = 'running' and "
            "json_extract(params, '$.matrix_key') = ?", [key]))
        stale = [r["id"] for r in rows if not owner_alive(r["owner"])]
        for run_id in stale:
            store.db.execute("update runs set status = 'interrupted', error = ? where id = ?",
                             [STOPPED, run_id])
    return len(stale)


def claim_cell(store: ResultsStore, key: str, cell: Cell, *, window_ms: int, seed: int,
               params: Mapping[str, Any], rate: float | None = None) -> int | None:
    """Atomically take ``cell`` of matrix ``key``: the id of a new 'running' row owned by
    this process, or None when the cell is complete or running in a live pgval.

    One ``BEGIN IMMEDIATE`` transaction from the look to the insert, so of several
    processes claiming the same cell exactly one gets it. A 'running' row of a dead
    owner is marked interrupted on the way."""
    with store.transaction():
        rows = list(store.db.query(
            "select id, status, owner, params from runs where kind = 'validate' and "
            "status in ('complete', 'running') and topology = ? and pg = ? and fault = ? "
            f"and repeat = ? and {_POINT} = ? and json_extract(params, '$.matrix_key') = ?",
            [cell.topology, cell.pg, cell.fault, cell.repeat, cell.crash_point, key]))
        running = [r for r in rows if r["status"] == "running"]
        for r in rows:
            if r["status"] == "complete" and (
                    rate is None or json.loads(r["params"] or "{}").get("rate") == rate):
                return None  # a complete run at another looked-up rate does not count
        if any(owner_alive(r["owner"]) for r in running):
            return None
        for r in running:
            store.db.execute("update runs set status = 'interrupted', error = ? where id = ?",
                             [STOPPED, r["id"]])
        return store.start_run("validate", cell.topology, window_ms, pg=cell.pg,
                               fault=cell.fault, seed=seed, repeat=cell.repeat,
                               params={**params, "crash_point": cell.crash_point,
                                       "matrix_key": key})


def new_run_dir(path: Path) -> Path:
    """Create ``path``, which must not exist: a retried cell or a re-run OIR trial must not
    inherit an earlier attempt's Kafka data, checkpoint or appended logs."""
    path = Path(path).resolve()
    private_dir(path.parent)
    path.mkdir(mode=0o700)  # nobody else's (pgval.redact); an existing one is an error
    os.chmod(path, 0o700)  # mkdir's mode went through the umask
    return path


def prepared_experiment(store: ResultsStore, run_id: int, cfg: ExperimentConfig, db: Path,
                        run_dir: Path, **kwargs: Any) -> Experiment:
    """The Experiment for the already inserted row ``run_id``, in the new ``run_dir``.

    The row's params become what Experiment.run records when it starts its own row (the
    configuration as the experiment completed it, and the run directory). On any failure
    the row is marked failed: a claimed row must not stay 'running'."""
    try:
        exp = Experiment(cfg, new_run_dir(run_dir), db=db, run_id=run_id, **kwargs)
        store.set_params(run_id, {**exp.config.to_dict(), **exp.extra_params,
                                  "run_dir": str(exp.run_dir)})
    except Exception as exc:
        store.fail_run(run_id, cfg.scrubbed(str(exc) or type(exc).__name__))
        raise
    return exp


def run_matrix(base: ExperimentConfig, grid: list[Cell], db: Path, runs_root: Path,
               on_cell: Callable[[Cell, str, dict[str, Any] | None], None] | None = None,
               make_status: Callable[[Cell], Callable[[Any], None]] | None = None,
               keep_going: bool = True,
               rate_for: Callable[[Cell], float] | None = None,
               oir_fraction: float | None = None) -> dict[str, int]:
    """Run every cell not yet complete; returns counts of done / skipped / taken / failed
    cells (taken: claimed by another pgval that is running it now).

    The seed of repetition r is ``base.seed + r``, recorded with the run, so a cell
    can be reproduced alone with ``pgval validate --seed``. With ``--rate oir``,
    ``rate_for`` gives each cell's rate and ``oir_fraction`` keys the matrix.

    All cells share one warm cluster (:mod:`pgval.deploy.warm`); cells whose fault needs
    other daemon settings (``delay-gt-timeout``'s lowered time-outs) run last, on a
    second cluster, so at most two clusters start per matrix.
    """
    store = ResultsStore(db)
    key = matrix_key(base, oir_fraction)
    mark_stale(store, key)
    runs_root = Path(runs_root)
    private_dir(runs_root)  # 0700 when pgval creates it
    with WarmDeployments(runs_root, label=f"{key}-cluster-{os.getpid()}") as warm:
        return _run_cells(base, grid, db, runs_root, store, key, warm, on_cell, make_status,
                          keep_going, rate_for)


def _cell_config(base: ExperimentConfig, cell: Cell,
                 rate_for: Callable[[Cell], float] | None) -> ExperimentConfig:
    return dataclasses.replace(base, topology=cell.topology, pg=cell.pg, fault=cell.fault,
                               crash_point=cell.crash_point, seed=base.seed + cell.repeat,
                               rate=rate_for(cell) if rate_for else base.rate,
                               cluster=dataclasses.replace(base.cluster))


def _run_cells(base: ExperimentConfig, grid: list[Cell], db: Path, runs_root: Path,
               store: ResultsStore, key: str, warm: WarmDeployments,
               on_cell: Callable[[Cell, str, dict[str, Any] | None], None] | None,
               make_status: Callable[[Cell], Callable[[Any], None]] | None,
               keep_going: bool, rate_for: Callable[[Cell], float] | None) -> dict[str, int]:
    done = completed(store, key)
    counts = {"done": 0, "skipped": 0, "taken": 0, "failed": 0}
    ordered = sorted(grid, key=lambda c: daemon_key(_cell_config(base, c, None)))
    for cell in ordered:
        cfg = _cell_config(base, cell, rate_for)
        if cell in done and (rate_for is None or cfg.rate in done[cell]):
            counts["skipped"] += 1
            if on_cell:
                on_cell(cell, "skipped", None)
            continue
        run_id = claim_cell(store, key, cell, window_ms=cfg.window_ms, seed=cfg.seed,
                            params=cfg.to_dict(),
                            rate=cfg.rate if rate_for is not None else None)
        if run_id is None:  # complete meanwhile, or running in another live pgval
            counts["taken"] += 1
            if on_cell:
                on_cell(cell, "taken", None)
            continue
        if on_cell:
            on_cell(cell, "running", None)
        try:
            try:
                deployment = warm.for_run(cfg)
            except Exception as exc:  # the claimed row must not stay 'running'
                store.fail_run(run_id, cfg.scrubbed(f"the cluster did not start: {exc}"))
                raise
            exp = prepared_experiment(
                store, run_id, cfg, db,
                runs_root / f"{key}-{cell.topology}-{cell.pg}-"
                f"{cell.fault_spec.replace('@', '-at-')}-{cell.repeat}-run{run_id}",
                on_status=make_status(cell) if make_status else None,
                extra_params={"matrix_key": key}, repeat=cell.repeat, deployment=deployment)
            result = exp.run()
        except Exception as exc:  # a failed cell; Ctrl-C (KeyboardInterrupt) goes through
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
