"""The experiment matrix: topology × pg × fault × repetition, resumable.

Each cell is one :class:`~pgval.run.experiment.Experiment`. A matrix is identified
by a key hashed from everything that defines its runs except the grid axes, so
re-running the same command skips cells already ``complete`` in the database
and redoes cells that failed, were interrupted, or were left ``running`` by a
pgval that was killed.

Two matrices may share a database: each cell is claimed atomically
(:func:`claim_cell`, one ``BEGIN IMMEDIATE`` transaction), so a cell that is complete,
or running in a pgval that is still alive (its :class:`~pgval.host.identity.Owner`),
is never run twice. Every attempt gets a new run directory named after its run id.

Before any cell runs, the grid is planned (:func:`plan`: cells whose fault cannot be hit
for their pg left out, with the reason; any other bad combination refused) and, with
``--rate oir``, every cell's rate looked up (:func:`rates_at`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgval.checker.gate import Case
from pgval.config import not_applicable, resolve, restart_for
from pgval.core.errors import PgvalError, UserMistake
from pgval.core.redact import private_dir
from pgval.core.schema import FaultSpec, Guarantee, Topology
from pgval.core.spec import RunSpec
from pgval.deploy.shared_driver import needs_own_driver
from pgval.deploy.warm import WarmDeployments, daemon_key
from pgval.run.experiment import Experiment
from pgval.store.results import ResultsStore, owner_alive

#: The error of a run whose pgval stopped (was killed) while it ran.
STOPPED = "pgval stopped during the run"


@dataclass(frozen=True)
class Cell:
    """One cell of the grid and one repetition of it (repetition r runs with seed + r)."""

    topology: Topology
    pg: Guarantee
    fault: FaultSpec
    repeat: int

    def label(self) -> str:
        return f"{self.topology} {self.pg} {self.fault} #{self.repeat}"

    def config(self, base: RunSpec, rate: float | None = None) -> RunSpec:
        """``base`` for this cell (its own cluster config: cells never share one)."""
        return base.replace(topology=self.topology, pg=self.pg, fault=self.fault.kind,
                            crash_point=self.fault.point, **restart_for(base, self.fault.kind),
                            seed=base.seed + self.repeat,
                            rate=base.rate if rate is None else rate)


def matrix_key(base: RunSpec, oir_fraction: float | None = None,
               shared_driver: bool = False) -> str:
    """The hash of everything but the grid axes and the seed (:meth:`RunShape.key`), so a
    changed rate is a new matrix.

    With ``--rate oir`` (``oir_fraction`` given) ``base.rate`` is only a placeholder: the
    fraction keys the matrix, and each cell's looked-up rate must also match for a stored
    run to count (:func:`completed`, :func:`claim_cell`), so a new stored OIR reruns it."""
    key = base.shape().key(None if oir_fraction is None else f"oir x {oir_fraction:g}")
    if shared_driver:  # it changes what a run measures: its runs are a matrix of their own
        key = hashlib.sha256(f"{key}|shared driver".encode()).hexdigest()[:12]
    return key


def cells(topologies: Sequence[str], pgs: Sequence[str], faults: Sequence[str | FaultSpec],
          repeat: int) -> list[Cell]:
    """The grid; a fault may name its crash point (``driver-crash@after-sink-write``)."""
    specs = [f if isinstance(f, FaultSpec) else FaultSpec.parse(f) for f in faults]
    return [Cell(Topology.parse(t), Guarantee.parse(p), spec, r) for t in topologies
            for p in pgs for spec in specs for r in range(repeat)]


def plan(base: RunSpec, grid: Sequence[Cell],
         on_left_out: Callable[[Cell, str], None]) -> list[Cell]:
    """The cells that will run, every one checked before anything runs: a cell whose fault
    cannot be hit for its pg (:func:`~pgval.config.not_applicable`) is left out, said once
    per grid cell through ``on_left_out``; any other bad combination raises
    :class:`~pgval.core.errors.PgvalError` (:func:`~pgval.config.resolve`), and so does a
    ``--restart``/``--restart-delay-s`` that no cell takes (each cell gets them only where
    they mean something: :func:`~pgval.config.restart_for`)."""
    configs = [cell.config(base) for cell in grid]
    if (base.restart and not any(c.restart is base.restart for c in configs)) or (
            base.restart_delay_s and not any(c.restart_delay_s for c in configs)):
        raise UserMistake("--restart and --restart-delay-s apply to the crash and "
                                "driver-crash cells they fit; this grid has none")
    checked: set[tuple[Topology, Guarantee, FaultSpec]] = set()
    left_out: set[tuple[Topology, Guarantee, FaultSpec]] = set()
    for cell in grid:
        which = (cell.topology, cell.pg, cell.fault)
        if which in checked:
            continue
        checked.add(which)
        cfg = cell.config(base)
        if reason := not_applicable(cfg):
            left_out.add(which)
            on_left_out(cell, reason)
        else:
            resolve(cfg)
    return [c for c in grid if (c.topology, c.pg, c.fault) not in left_out]


def rates_at(grid: Sequence[Cell], base: RunSpec, fraction: float,
             oir_of: Callable[[RunSpec], float]) -> Callable[[Cell], float]:
    """With ``--rate oir``: each cell's rate, ``fraction`` × the OIR of its topology and pg
    (``oir_of``), every one looked up before anything runs or is created, and only for the
    pairs that will run."""
    pairs = dict.fromkeys((c.topology, c.pg) for c in grid)
    rates = {(t, p): fraction * oir_of(base.replace(topology=t, pg=p))
             for t, p in pairs}
    return lambda c: rates[(c.topology, c.pg)]


#: The rows of matrix ``key`` (``matrix_key`` is the campaign's own note in a run's params,
#: not a field of its spec; the spec's fields are read typed, :func:`_stored_spec`).
_OF_MATRIX = "json_extract(params, '$.matrix_key') = ?"


def _stored_spec(row: Mapping[str, Any]) -> RunSpec | None:
    """A stored run's spec, typed (:meth:`RunSpec.from_record`), its row's own columns
    (topology, pg, fault) taking precedence over its params; None for a row this pgval
    cannot read as one (names it does not know, damaged params)."""
    try:
        record = json.loads(row["params"] or "{}")
        if not isinstance(record, dict):
            return None
        columns = {k: row[k] for k in ("topology", "pg", "fault") if row.get(k) is not None}
        return RunSpec.from_record({**record, **columns})
    except (PgvalError, ValueError, TypeError):
        return None


def _complete_runs(store: ResultsStore, key: str) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """The complete runs of matrix ``key`` in id order, each with its cell and its rate; a
    row whose spec this pgval cannot read belongs to no cell of its grid and is skipped."""
    rows = store.db.query(
        "select id, topology, pg, fault, repeat, params, guarantee, valid, validity_reasons, "
        "expected, processed, "
        "duplicate, incorrect, unprocessed, reliability, failure_cost_s, created_at, "
        "finished_at from runs where kind = 'validate' and status = 'complete' and "
        f"{_OF_MATRIX} order by id", [key])
    for r in rows:
        spec = _stored_spec(r)
        del r["params"]
        if spec is None:
            continue
        cell = Cell(spec.topology, spec.pg, spec.fault_spec, r["repeat"])
        yield cell, {**r, "rate": spec.rate}


def completed(store: ResultsStore, key: str) -> dict[Cell, set[float]]:
    """The complete cells of matrix ``key``, each with the rates it was run at."""
    done: dict[Cell, set[float]] = {}
    for cell, r in _complete_runs(store, key):
        done.setdefault(cell, set()).add(r["rate"])
    return done


def cell_cases(db: Path, base: RunSpec, grid: Sequence[Cell],
               failed: Mapping[Cell, str], oir_fraction: float | None = None,
               rate_for: Callable[[Cell], float] | None = None,
               not_run: str = "no complete run of this repetition in the database (another "
                              "pgval is running it)", shared_driver: bool = False) -> list[Case]:
    """The grid's verdicts for the CI gate, one :class:`~pgval.checker.gate.Case` per cell
    (topology × pg × fault) with one run per repetition: the newest complete run of the
    matrix in ``db`` at the cell's rate (so a resumed matrix judges the cells it skipped
    too, as :func:`completed` counts them), else the error of a repetition that failed
    now, else ``not_run`` as a run that did not finish."""
    store = ResultsStore(db)
    newest = {cell: row for cell, row in _complete_runs(store, matrix_key(base, oir_fraction,
                                                                      shared_driver))
              if rate_for is None or row["rate"] == rate_for(cell)}
    groups: dict[tuple[Topology, Guarantee, FaultSpec], tuple[list[Cell], list[Case]]] = {}
    for cell in grid:
        run_name = f"#{cell.repeat}"
        row = newest.get(cell)
        if row is not None:
            summary = {**row, "run_id": row["id"],
                       "validity_reasons": json.loads(row["validity_reasons"] or "[]")}
            seconds = (row["finished_at"] or 0) - (row["created_at"] or 0)
            case = Case.of_summary(run_name, "", summary, max(seconds, 0.0))
        else:
            case = Case.failed(run_name, "", failed.get(cell, not_run))
        of, cases = groups.setdefault((cell.topology, cell.pg, cell.fault), ([], []))
        of.append(cell)
        cases.append(case)
    return [Case.cell(cell_case_name(base, runs_of[0]), f"pgval.campaigns.matrix.{t}.{pg}",
                      runs)
            for (t, pg, fault), (runs_of, runs) in groups.items()]


def cell_case_name(base: RunSpec, cell: Cell) -> str:
    """A cell's name in the gate and its JUnit file (:meth:`RunSpec.case_name`): the same
    from build to build; its repetitions are ``#0``, ``#1``, … and their run ids
    properties."""
    return cell.config(base).case_name()


def mark_stale(store: ResultsStore, key: str) -> int:
    """Runs of this matrix left 'running' by a pgval that is gone: mark them interrupted.

    A run whose owner still runs (another matrix on the same database) is left alone;
    rows without an owner (older stores) count as gone."""
    with store.transaction():
        rows = list(store.db.query(
            f"select id, owner from runs where status = 'running' and {_OF_MATRIX}", [key]))
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
        rows = [(r, spec) for r in store.db.query(
            "select id, topology, pg, fault, status, owner, params from runs where "
            "kind = 'validate' and status in ('complete', 'running') and repeat = ? and "
            f"{_OF_MATRIX}", [cell.repeat, key])
            if (spec := _stored_spec(r)) is not None
            and (spec.topology, spec.pg, spec.fault_spec) == (cell.topology, cell.pg,
                                                               cell.fault)]
        running = [r for r, _ in rows if r["status"] == "running"]
        for r, spec in rows:
            if r["status"] == "complete" and (rate is None or spec.rate == rate):
                return None  # a complete run at another looked-up rate does not count
        if any(owner_alive(r["owner"]) for r in running):
            return None
        for r in running:
            store.db.execute("update runs set status = 'interrupted', error = ? where id = ?",
                             [STOPPED, r["id"]])
        return store.start_run("validate", cell.topology, window_ms, pg=cell.pg,
                               fault=cell.fault.kind, seed=seed, repeat=cell.repeat,
                               params={**params, "crash_point": cell.fault.point,
                                       "matrix_key": key})


def new_run_dir(path: Path) -> Path:
    """Create ``path``, which must not exist: a retried cell or a re-run OIR trial must not
    inherit an earlier attempt's Kafka data, checkpoint or appended logs."""
    path = Path(path).resolve()
    private_dir(path.parent)
    path.mkdir(mode=0o700)  # nobody else's (pgval.core.redact); an existing one is an error
    os.chmod(path, 0o700)  # mkdir's mode went through the umask
    return path


def prepared_experiment(store: ResultsStore, run_id: int, cfg: RunSpec, db: Path,
                        run_dir: Path, **kwargs: Any) -> Experiment:
    """The Experiment for the already inserted row ``run_id``, in the new ``run_dir``.

    The row's params become what Experiment.run records when it starts its own row (the
    configuration as the experiment completed it, and the run directory). On any failure
    the row is marked failed: a claimed row must not stay 'running'."""
    try:
        exp = Experiment(cfg, new_run_dir(run_dir), db=db, run_id=run_id, **kwargs)
        store.set_params(run_id, {**exp.config.to_record(), **exp.extra_params,
                                  "run_dir": str(exp.run_dir)})
    except Exception as exc:
        store.fail_run(run_id, cfg.scrubbed(str(exc) or type(exc).__name__))
        raise
    return exp


def run_matrix(base: RunSpec, grid: list[Cell], db: Path, runs_root: Path,
               on_cell: Callable[[Cell, str, dict[str, Any] | None], None] | None = None,
               make_status: Callable[[Cell], Callable[[Any], None]] | None = None,
               keep_going: bool = True,
               rate_for: Callable[[Cell], float] | None = None,
               oir_fraction: float | None = None,
               shared_driver: bool = False) -> dict[str, int]:
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
    key = matrix_key(base, oir_fraction, shared_driver)
    mark_stale(store, key)
    runs_root = Path(runs_root)
    private_dir(runs_root)  # 0700 when pgval creates it
    with WarmDeployments(runs_root, label=f"{key}-cluster-{os.getpid()}",
                         shared_driver=shared_driver) as warm:
        return _run_cells(base, grid, db, runs_root, store, key, warm, on_cell, make_status,
                          keep_going, rate_for)


def _run_cells(base: RunSpec, grid: list[Cell], db: Path, runs_root: Path,
               store: ResultsStore, key: str, warm: WarmDeployments,
               on_cell: Callable[[Cell, str, dict[str, Any] | None], None] | None,
               make_status: Callable[[Cell], Callable[[Any], None]] | None,
               keep_going: bool, rate_for: Callable[[Cell], float] | None) -> dict[str, int]:
    done = completed(store, key)
    counts = {"done": 0, "skipped": 0, "taken": 0, "failed": 0}
    # Cells that need a driver of their own after those that can share one (a fresh
    # driver ends the shared one: their applications would compete for the executors).
    ordered = sorted(grid, key=lambda c: (daemon_key(c.config(base)),
                                          warm.drivers is not None and needs_own_driver(
                                              c.config(base))))
    for cell in ordered:
        cfg = resolve(cell.config(base, rate_for(cell) if rate_for else None))
        if cell in done and (rate_for is None or cfg.rate in done[cell]):
            counts["skipped"] += 1
            if on_cell:
                on_cell(cell, "skipped", None)
            continue
        run_id = claim_cell(store, key, cell, window_ms=cfg.window_ms, seed=cfg.seed,
                            params=cfg.to_record(),
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
                f"{str(cell.fault).replace('@', '-at-')}-{cell.repeat}-run{run_id}",
                on_status=make_status(cell) if make_status else None,
                extra_params={"matrix_key": key}, repeat=cell.repeat, deployment=deployment,
                drivers=warm.drivers)
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
