"""The ``pgval`` command: a thin click layer over the library API.

Every command ends in one plain sentence and a non-zero exit on bad input or a
bad environment (:class:`UserError`), never a traceback.
"""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.console import Console
from rich.markup import escape

from pgval.cli.errors import UserError, err_console, print_error
from pgval.cli.options import (
    build_config,
    cluster_options,
    config_option,
    config_options,
    grid_options,
    validate_config,
)
from pgval.dbfile import StoreError, plain_error
from pgval.errors import RuntimeErrorPlain
from pgval.phases import Phases
from pgval.schema import FAULTS, PROCESSING_GUARANTEES, TOPOLOGIES

if TYPE_CHECKING:
    from pgval.config import ExperimentConfig

__all__ = ["UserError", "main", "print_error", "run"]

console = Console()
if not console.is_terminal:  # pipes and CI logs: wide enough for the phase table
    console = Console(width=140)

topology_option = config_option("topology")
window_option = config_option("window_ms")


class _Main(click.Group):
    """The command group; a results database that cannot be used is a :class:`UserError`
    wherever a command meets it (``--db`` of any command)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except StoreError as exc:
            raise UserError(str(exc)) from exc
        except sqlite3.Error as exc:  # a damaged database met past opening it
            raise UserError(f"the results database (--db) failed: {exc}") from exc


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pgval")
def main() -> None:
    """Validate processing guarantees of stream-processing jobs, with evidence."""


@main.command()
@topology_option
@click.option("--inputs", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="Input events, JSON lines.")
@window_option
def oracle(topology: str, inputs: Path, window_ms: int) -> None:
    """Print the expected outputs of TOPOLOGY over INPUTS as JSON lines."""
    from pgval.oracle import expected_outputs
    from pgval.records import read_inputs

    events = read_inputs(inputs)
    if events.malformed:
        err_console.print(f"{events.malformed} malformed input records skipped")
    expected = expected_outputs(events, topology, window_ms)
    out = sys.stdout.buffer
    for row in expected.to_records():
        out.write(orjson.dumps(row) + b"\n")
    out.flush()


@main.command()
@topology_option
@click.option("--inputs", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="Input events, JSON lines with ingress_ts.")
@click.option("--outputs", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="Produced outputs, JSON lines with ingress_ts.")
@window_option
@click.option("--phases", "phases_text", metavar="START,T2,T3[,T4]",
              help="Phase boundaries in ms (ingress time): control from START, failure from "
                   "T2, recovery from T3; T4 (optional) is when inputs stopped, after which "
                   "recovery metrics judge nothing. Without it everything is control.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
              help="Also store the result in this SQLite database.")
def check(topology: str, inputs: Path, outputs: Path, window_ms: int, phases_text: str | None,
          as_json: bool, db: Path | None) -> None:
    """Validate recorded input and output streams of any stream processor."""
    from pgval.checker.evaluate import evaluate_files

    try:
        phases = Phases.parse(phases_text) if phases_text is not None else Phases.unbounded()
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    from pgval.checker.validity import Validity, evaluation_reasons
    from pgval.store import ResultsStore

    store = ResultsStore(db) if db is not None else None  # a bad --db: before the work
    ev = evaluate_files(topology, inputs, outputs, window_ms, phases)
    validity = Validity(evaluation_reasons(ev))
    if store is not None:
        try:
            run_id = store.save_check(
                ev, params={"inputs": str(inputs), "outputs": str(outputs),
                            "phases": phases_text})
        except (sqlite3.Error, OSError) as exc:  # the disk filled, a file in the way, …
            raise UserError(f"cannot store the result in {db}: {exc}") from exc
        if not as_json:
            console.print(f"stored as run {run_id} in {escape(str(db))}")
    if as_json:
        _print_json({**ev.summary(), **validity.as_dict()})
    else:
        from pgval.checker.render import render_evaluation

        render_evaluation(ev, console)
        _print_validity(validity)


def _print_json(obj: object) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def _print_validity(validity: object) -> None:
    """One line: is the run evidence? With every reason when it is not."""
    reasons = getattr(validity, "reasons", [])
    if not reasons:
        console.print("[green]validity: valid[/]")
        return
    console.print(f"[bold yellow]validity: unknown[/] — the verdict above is not evidence "
                  f"({len(reasons)} reason{'s' if len(reasons) != 1 else ''}):")
    for r in reasons:
        console.print(f"  • {r}")


@main.command()
@config_options("validate")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where logs, evidence, checkpoints and broker data go "
                   "(default: runs/<time>-<pid>).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("results.db"), show_default=True, help="SQLite results database.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end.")
def validate(run_dir: Path | None, db: Path, as_json: bool, **values: Any) -> None:
    """Run one experiment on Kafka + Spark (the embedded cluster unless --deploy) and
    validate its guarantee."""
    from pgval.checker.render import render_evaluation
    from pgval.experiment import Experiment, default_run_dir
    from pgval.live import LiveStatus

    _sabotage_spec(values["sabotage"])
    rate = _rate(values["rate"])
    cfg = build_config(values, rate=_OIR_PENDING if rate is None else rate)
    _check_db(db)
    if rate is None:
        cfg = dataclasses.replace(cfg, rate=_stored_oir(db, cfg))
    run_dir = run_dir or default_run_dir()
    live = LiveStatus(err_console, enabled=not as_json)
    with live:
        result = Experiment(cfg, run_dir, db=db, on_status=live.update).run()
    if as_json:
        _print_json(result.summary())
        return
    render_evaluation(result.evaluation, console,
                      title=f"{cfg.topology.upper()} {cfg.pg} fault={cfg.fault} — per phase")
    _print_validity(result.validity)
    t = result.timings
    inputs = result.readback.get("inputs", {})
    console.print(f"  • read back {inputs.get('read', 0):,} input records (= end offsets, = "
                  f"delivered + pgval's own events: {'yes' if inputs.get('ok') else 'NO'}) and "
                  f"{result.readback.get('output', {}).get('records', 0):,} outputs")
    console.print(f"  • run {result.run_id} stored in {db}; evidence and logs in {run_dir} "
                  f"(re-check: pgval recheck {result.run_id} --db {db})")
    console.print(f"  • overhead beyond the phases {t.get('overhead_s', 0):.1f} s: cluster "
                  f"{t.get('cluster_start_s', 0):.1f} s, driver {t.get('driver_start_s', 0):.1f}"
                  f" s, priming {t.get('prime_s', 0):.1f} s, drain {t.get('drain_s', 0):.1f} s, "
                  f"read-back {t.get('read_back_s', 0):.1f} s, validation "
                  f"{t.get('validate_s', 0):.1f} s, teardown {t.get('teardown_s', 0):.1f} s")
    gen = result.generator
    console.print(f"  • generator: {gen.get('delivered', 0):,} delivered at "
                  f"{gen.get('achieved_rate', 0):,.0f} ev/s, {gen.get('failed', 0)} failed")


def _check_db(db: Path) -> None:
    """Open (create or migrate) the results database first: a bad --db is one line before
    a run directory exists or a cluster starts."""
    from pgval.store import ResultsStore

    ResultsStore(db).close()


def _sabotage_spec(text: str | None) -> str | None:
    """Check a --sabotage spec early (before anything starts) with the sink's own parser."""
    if text is None:
        return None
    from pgval.topologies.sinks import parse_sabotage

    try:
        parse_sabotage(text)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    return text


def _is_run_dir(run: str) -> bool:
    try:
        return Path(run, "evidence").is_dir()
    except (OSError, ValueError):
        return False


@main.command()
@click.argument("run")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Results database: where a run id is looked up, and whose hashes of the "
                   "run's evidence it must match (without it nothing is verified).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the `pgval check --json` object (plus validity).")
@click.option("--store", "store_derived", is_flag=True,
              help="With a run id and --db: store the recomputed recovery metrics and "
                   "unprocessed causes (after a definition improved), only if the verdict "
                   "and counts equal the stored ones. With a run directory and --db: store "
                   "a run whose storing failed (its evidence unedited since).")
def recheck(run: str, db: Path | None, as_json: bool, store_derived: bool) -> None:
    """Recompute a stored run's results from its kept evidence (RUN: directory or run id)."""
    from pgval.evidence import EvidenceError
    from pgval.recheck import locate_run, parse_run_id
    from pgval.recheck import recheck as do_recheck
    from pgval.recheck import store_derived as do_store

    if store_derived and db is not None and _is_run_dir(run):
        from pgval.recheck import import_run

        try:
            run_id = import_run(Path(run), db)
        except EvidenceError as exc:
            raise UserError(str(exc)) from exc
        except sqlite3.Error as exc:  # still full, locked, read-only: try again later
            raise UserError(str(plain_error(db, exc))) from exc
        console.print(f"stored {escape(run)} as run {run_id} in {escape(str(db))}")
        return
    if store_derived and (db is None or parse_run_id(run) is None):
        raise UserError("--store needs a run id and --db (the row it updates), or a run "
                        "directory and --db (a run whose storing failed, imported)")
    try:
        run_dir = locate_run(run, db)
        result = do_recheck(run_dir, db, None if run_dir == Path(run) else parse_run_id(run))
        if store_derived:
            assert db is not None
            do_store(db, parse_run_id(run) or 0, result)
    except EvidenceError as exc:
        raise UserError(str(exc)) from exc
    except sqlite3.Error as exc:  # the row or hashes of a damaged database
        raise UserError(str(plain_error(db or "--db", exc))) from exc
    if as_json:
        _print_json(result.summary())
        return
    from pgval.checker.render import render_evaluation

    m = result.manifest
    render_evaluation(result.evaluation, console,
                      title=f"re-check of {m.topology.upper()} run {m.run_id} — per phase")
    _print_validity(result.validity)
    if result.validity_changes:
        console.print(f"  stored validity differs by kind: {result.validity_changes}")
    console.print(result.evidence.note)


@main.command()
@click.argument("run")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Results database: where a run id is looked up, and whose hashes of the "
                   "run's evidence it must match (without it nothing is verified).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="Folder for inputs.jsonl, outputs.jsonl and run.json.")
def export(run: str, db: Path | None, out_dir: Path) -> None:
    """Write a stored run's streams in the `pgval check` format (RUN: directory or run id)."""
    from pgval.evidence import EvidenceError
    from pgval.recheck import export as do_export
    from pgval.recheck import locate_run, parse_run_id

    try:
        run_dir = locate_run(run, db)
        info = do_export(run_dir, out_dir, db,
                         None if run_dir == Path(run) else parse_run_id(run))
    except EvidenceError as exc:
        raise UserError(str(exc)) from exc
    except sqlite3.Error as exc:
        raise UserError(str(plain_error(db or "--db", exc))) from exc
    start, t2, t3 = info["phases"]
    console.print(f"wrote {info['inputs']:,} inputs and {info['outputs']:,} outputs to "
                  f"{out_dir}; check them with:\n  pgval check --topology {info['topology']} "
                  f"--inputs {out_dir / 'inputs.jsonl'} --outputs {out_dir / 'outputs.jsonl'} "
                  f"--window-ms {info['window_ms']} --phases {start},{t2},{t3} --json")
    console.print(info["evidence"]["note"])


#: The rate a config holds until ``--rate oir`` is looked up (the config is checked, and
#: a matrix keyed, before the database is opened).
_OIR_PENDING = 1.0


def _rate(text: str) -> float | None:
    """``--rate`` in events/s, or None for ``oir`` (read from the database later)."""
    if text.strip().lower() == "oir":
        return None
    try:
        value = float(text)
    except ValueError as exc:
        raise UserError(f"--rate must be a number of events/s or 'oir', not {text!r}") from exc
    if not 0 < value < float("inf"):
        raise UserError("--rate must be positive")
    return value


def _stored_oir(db: Path, cfg: ExperimentConfig) -> float:
    """The optimum ingestion rate stored for the config's topology, pg and run shape, or one
    line saying how to measure it."""
    from pgval.oir import machine_id, oir_shape, stored_elsewhere, stored_oir

    topology, pg, shape = cfg.topology, cfg.pg, oir_shape(cfg)
    stored = stored_oir(db, topology, pg, shape=shape)
    if stored is None:
        how = (f"run `pgval oir --topology {topology} --pg {pg} --db {db}` with this run's "
               "cluster and query options first")
        if differs := stored_elsewhere(db, topology, pg, shape):
            raise UserError(f"the optimum ingestion rate stored for {topology} {pg} in {db} "
                            f"was measured with another run shape: {differs}; {how}")
        raise UserError(f"no optimum ingestion rate is stored for {topology} {pg} on this "
                        f"machine ({machine_id()}) in {db}; {how}")
    console.print(f"{topology} {pg}: using the stored OIR, {stored.describe()}")
    return stored.rate


def _runs_and_db(f):  # noqa: ANN001, ANN202 - click decorator
    """`matrix` and `oir`: where the run directories and the results go."""
    f = click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
                     default=Path("results.db"), show_default=True,
                     help="SQLite results database (a matrix resumes from it).")(f)
    return click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path),
                        default=Path("runs"), show_default=True,
                        help="Folder for the run directories, one per run.")(f)


@main.command()
@grid_options()
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs of each cell; repetition r runs with seed --seed + r.")
@click.option("--rate-fraction", type=click.FloatRange(min=0.01, max=10.0), default=None,
              help="With --rate oir: run at this fraction of the stored OIR (the paper ran "
                   "at the OIR, 1.0) [default: 1.0].")
@config_options("matrix")
@_runs_and_db
def matrix(topologies: list[str], pgs: list[str], faults: list[str], repeat: int,
           rate_fraction: float | None, runs_dir: Path, db: Path, **values: Any) -> None:
    """Run the grid topologies × pgs × faults × repeat; skips cells already complete."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from pgval.config import not_applicable
    from pgval.matrix import cells, parse_fault_spec, run_matrix

    rate = _rate(values["rate"])
    if rate is not None and rate_fraction is not None:
        raise UserError("--rate-fraction applies to --rate oir only")
    base = build_config(values, rate=_OIR_PENDING if rate is None else rate)
    left_out: set[tuple[str, str, str, str]] = set()
    for t, p, f in itertools.product(topologies, pgs, faults):  # every cell, before any runs
        fault, point = parse_fault_spec(f)
        cell_cfg = dataclasses.replace(base, topology=t, pg=p, fault=fault, crash_point=point)
        if reason := not_applicable(cell_cfg):
            left_out.add((t, p, fault, point))
            err_console.print(f"{t} {p} {f}: left out — {reason}")
            continue
        validate_config(cell_cfg)
    grid = [c for c in cells(topologies, pgs, faults, repeat)
            if (c.topology, c.pg, c.fault, c.crash_point) not in left_out]
    rate_for = None
    if rate is None:  # every cell's rate known before anything runs or is created
        fraction = 1.0 if rate_fraction is None else rate_fraction
        pairs = dict.fromkeys((c.topology, c.pg) for c in grid)  # only pairs that will run
        rates = {(t, p): fraction * _stored_oir(db, dataclasses.replace(base, topology=t, pg=p))
                 for t, p in pairs}
        rate_for = (lambda c: rates[(c.topology, c.pg)])  # noqa: E731
    _check_db(db)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=err_console) as progress:
        task = progress.add_task("matrix", total=len(grid))

        def on_cell(cell, state, info):  # noqa: ANN001, ANN202
            if state in ("complete", "skipped", "taken", "failed"):
                progress.advance(task)
            extra = ""
            if info and "reliability" in info:
                rel = info["reliability"]
                extra = f" reliability {'n/a' if rel is None else f'{rel:.2%}'} {info['guarantee']}"
                if not info.get("valid", True):
                    extra += f" [unknown: {'; '.join(info.get('validity_reasons', []))}]"
            elif info and "error" in info:
                extra = f" error: {info['error']}"
            if state == "taken":
                state, extra = "skipped", " (being run by another pgval on this database)"
            progress.console.print(f"{cell.label():32} {state}{extra}")

        counts = run_matrix(base, grid, db, runs_dir, on_cell=on_cell, rate_for=rate_for,
                            oir_fraction=None if rate is not None else (rate_fraction or 1.0))
    taken = (f", {counts['taken']} being run by another pgval" if counts["taken"] else "")
    console.print(f"matrix: {counts['done']} run, {counts['skipped']} already complete{taken}, "
                  f"{counts['failed']} failed — results in {db}")
    if counts["failed"]:
        sys.exit(1)


@main.command()
@config_options("oir")
@click.option("--start-rate", type=click.FloatRange(min=1), default=1000, show_default=True,
              help="Rate of the first trial (events/s); doubled while trials pass.")
@click.option("--max-trials", type=click.IntRange(min=1), default=10, show_default=True,
              help="At most this many control-only trial runs.")
@click.option("--precision", type=click.FloatRange(min=0.01, max=0.5), default=0.1,
              show_default=True,
              help="Stop when the highest pass and the lowest failure are this close (their "
                   "gap over the failing rate).")
@click.option("--max-rate", type=click.FloatRange(min=1), default=200_000, show_default=True,
              help="Stop doubling here if nothing failed (the OIR is then a lower bound).")
@_runs_and_db
def oir(start_rate: float, max_trials: int, precision: float, max_rate: float, runs_dir: Path,
        db: Path, **values: Any) -> None:
    """Find the optimum ingestion rate by doubling, then bisecting between the highest
    passing and the lowest failing control run, and store it for this machine."""
    from pgval.oir import search_oir

    if start_rate > max_rate:
        raise UserError(f"--start-rate {start_rate:,.0f} is above --max-rate {max_rate:,.0f}")
    base = build_config(values, fault="none")
    _check_db(db)

    def on_trial(t):  # noqa: ANN001, ANN202
        mark = "[green]pass[/]" if t.passed else "[red]fail[/]"
        console.print(f"{t.rate:>10,.0f} ev/s  {mark}  {t.reason}")

    res = search_oir(base, db, runs_dir, start=start_rate, max_rate=max_rate,
                     max_trials=max_trials, precision=precision, on_trial=on_trial)
    if res.oir is None:
        raise UserError(f"the OIR of {base.topology} {base.pg} is {res.describe()}; try a "
                        "lower --start-rate")
    console.print(f"OIR of {base.topology} {base.pg} on {res.machine}: {res.describe()} "
                  f"(stored in {db})")


@main.command()
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("results.db"), show_default=True,
              help="SQLite results database to report on.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "csv", "html"]),
              default="terminal", show_default=True,
              help="Tables in the terminal, Markdown, CSV, or one self-contained HTML page.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here instead of printing it.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write PNG plots (per run, and per matrix) into this folder.")
@click.option("--topology", type=click.Choice(TOPOLOGIES), default=None,
              help="Only runs of this topology.")
@click.option("--pg", type=click.Choice(PROCESSING_GUARANTEES), default=None,
              help="Only runs with this processing guarantee.")
@click.option("--fault", type=click.Choice(FAULTS), default=None,
              help="Only runs with this fault.")
@click.option("--kind", type=click.Choice(["validate", "check"]), default=None,
              help="Only runs of `pgval validate` (experiments) or `pgval check` (recorded "
                   "streams).")
@click.option("--include-unknown", is_flag=True,
              help="Also aggregate runs whose validity is unknown (not evidence); by default "
                   "they are only listed.")
def report(db: Path, fmt: str, out: Path | None, plots_dir: Path | None,
           topology: str | None, pg: str | None, fault: str | None, kind: str | None,
           include_unknown: bool) -> None:
    """Tables (and plots) of the runs in a results database, grouped by topology × pg × fault
    and run shape (rate, phases, window, crash point, deployment); OIR trials apart."""
    from pgval.report import ReportError, Selection, build_report

    try:
        result = build_report(db, runs=Selection(topology=topology, pg=pg, fault=fault,
                                                 kind=kind, include_unknown=include_unknown),
                              fmt=fmt, out=out, plots_dir=plots_dir,
                              console=console if fmt == "terminal" and out is None else None)
    except ReportError as exc:
        raise UserError(str(exc)) from exc
    if out is not None:
        console.print(f"report written to {result}")
    elif fmt != "terminal":
        sys.stdout.write(str(result))


@main.group()
def cluster() -> None:
    """Start, inspect and stop the embedded Kafka + Spark cluster by hand."""


def _cluster_dir(f):  # noqa: ANN001, ANN202 - click decorator
    return click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
                        default=Path("runs/cluster"), show_default=True,
                        help="The cluster's directory: state, logs, broker data.")(f)


@cluster.command("up")
@_cluster_dir
@cluster_options()
def cluster_up(run_dir: Path, **values: Any) -> None:
    """Start the cluster and leave it running (stop it with `pgval cluster down`)."""
    from pgval.cluster.local import ClusterConfig, LocalCluster, read_state

    if (read_state(run_dir) or {}).get("complete"):
        raise UserError(f"a cluster is already up in {run_dir}; run `pgval cluster down` first")
    c = LocalCluster(run_dir, ClusterConfig(**values), held=True)
    with console.status("starting Kafka and Spark…"):
        c.start()
    info = c.describe()
    console.print(f"Kafka {info['bootstrap']}  Spark {info['master']}  "
                  f"(up in {info['timings']['cluster_start_s']:.1f} s, state in {run_dir})")


@cluster.command("status")
@_cluster_dir
@click.option("--json", "as_json", is_flag=True,
              help="Print bootstrap, master, the Spark settings a driver on this machine "
                   "needs and the processes, for `pgval validate --deploy external`.")
def cluster_status(run_dir: Path, as_json: bool) -> None:
    """Show what the cluster in RUN_DIR is and whether its processes are alive."""
    from pgval.cluster.local import cluster_processes, read_state
    from pgval.deploy.embedded import handoff

    state = read_state(run_dir)
    if as_json:
        if state is None:
            raise UserError(f"no cluster in {run_dir}")
        _print_json(handoff(run_dir, state))
        return
    if state is None:
        console.print(f"no cluster in {run_dir}")
        return
    console.print(f"Kafka {state.get('bootstrap')}  Spark {state.get('master')}  "
                  f"isolated={state.get('isolated')}")
    for name, alive in cluster_processes(run_dir):
        console.print(f"  {name:24} {'[green]up[/]' if alive else '[red]down[/]'}")


@cluster.command("down")
@_cluster_dir
def cluster_down(run_dir: Path) -> None:
    """Stop the cluster in RUN_DIR (safe to run twice)."""
    from pgval.cluster.local import force_down

    stopped = force_down(run_dir)
    console.print(f"stopped {len(stopped)} process groups/namespaces" if stopped
                  else "nothing was running")


@main.command()
@click.option("--runs", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder holding run directories [default: $PGVAL_RUNS or runs].")
@click.option("--force", is_flag=True,
              help="Also stop live runs and clusters held by `pgval cluster up`.")
def cleanup(runs: Path | None, force: bool) -> None:
    """Remove what killed pgval runs left behind (processes, delays, namespaces); live
    runs and held clusters are spared unless --force."""
    import os

    from pgval.cluster.cleanup import cleanup as do_cleanup

    root = runs or Path(os.environ.get("PGVAL_RUNS", "runs"))
    report = do_cleanup(root, force=force)
    for line in report.removed:
        console.print(f"removed {line}")
    for line in report.spared:
        console.print(f"left alone: {line}")
    if not report.removed:
        console.print("nothing left behind by dead runs")


@main.command()
@click.option("--runs", "n_runs", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many runs to kill.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path),
              default=Path("runs/soak"), show_default=True,
              help="Folder for the killed runs' directories.")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Seeds the kill moments, signals and faults.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end.")
def soak(n_runs: int, root: Path, seed: int, as_json: bool) -> None:
    """Kill short runs at random moments with INT/TERM/HUP/KILL, SIGKILL a matrix and an
    external run mid-fault, run `pgval cleanup` beside a live run, and count what was left
    behind (exit 1 if anything was)."""
    from pgval.soak import KillResult
    from pgval.soak import soak as run_soak

    def show(k: KillResult) -> None:
        if not as_json:
            console.print(f"#{k.index:<2} {k.stage:7} {k.signal:8} {k.fault:17} "
                          f"exit {k.exit_code} after {k.exit_s} s, clean after {k.clean_s} s"
                          f"{'' if k.reached else ' (stage not reached)'}"
                          f"{'  LEFT: ' + str(k.left) if k.left else ''}")

    report = run_soak(root.resolve(), runs=n_runs, seed=seed, on_kill=show)
    if as_json:
        sys.stdout.write(orjson.dumps(report.as_dict()).decode() + "\n")
    else:
        console.print(f"live run beside {report.cleanups_during_live_run} cleanups: exit "
                      f"{report.live_run_exit}, valid={report.live_run_valid}; complete runs "
                      f"intact {report.intact_runs}/{report.complete_runs}; final cleanup removed "
                      f"{len(report.cleanup_removed_at_end)}; left at end: "
                      f"{report.left_at_end or 'nothing'}")
    if not report.ok():
        sys.exit(1)


@main.command("setup-jars")
def setup_jars() -> None:
    """Resolve the Kafka broker and Spark's Kafka connector from Maven Central (once)."""
    from pgval.host.jars import check_java, ensure_jars

    check_java()
    jars = ensure_jars()
    console.print(f"jars ready: {len(jars.kafka_classpath)} for the broker, "
                  f"{len(jars.spark_kafka_jars)} for Spark")


@main.group()
def bench() -> None:
    """Benchmarks (numbers for docs/performance.md)."""


@bench.command("offline")
@click.option("--events", type=click.IntRange(min=1000), default=10_000_000, show_default=True,
              help="Input events in the synthetic files.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cache/bench"), show_default=True,
              help="Where the synthetic files are written (reused when the size matches).")
def bench_offline(events: int, workdir: Path) -> None:
    """Time read → oracle → validator → metrics over synthetic files of EVENTS inputs."""
    from rich.table import Table

    from pgval.bench import run_offline_bench

    with console.status(f"preparing and timing {events:,} events…"):
        result = run_offline_bench(workdir, events)
    table = Table(title=f"offline path, {result.events:,} events, {result.outputs:,} outputs, "
                        f"{result.file_mb:,.0f} MB of JSON lines")
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    table.add_column("events/s", justify="right")
    table.add_column("CPU s (all threads)", justify="right")
    for stage, secs in result.stages_s.items():
        table.add_row(stage, f"{secs:.2f}", f"{result.events / secs:,.0f}",
                      f"{result.cpu_s[stage]:.2f}")
    table.add_section()
    table.add_row("end to end", f"{result.total_s:.2f}", f"{result.events_per_s:,.0f}",
                  f"{sum(result.cpu_s.values()):.2f}")
    console.print(table)


def _bench_run_dir(runs: Path | None, kind: str) -> Path:
    """A fresh directory for a bench's broker under the runs folder (`pgval cleanup` looks
    there if the bench is killed)."""
    import os
    import time

    root = runs or Path(os.environ.get("PGVAL_RUNS", "runs"))
    return root / f"bench-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


bench_runs_option = click.option(
    "--runs", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Folder for the bench broker's directory [default: $PGVAL_RUNS or runs].")


def _say(line: str) -> None:
    console.print(escape(line), highlight=False)


@bench.command("generator")
@click.option("--events", type=click.IntRange(min=1000), default=5_000_000, show_default=True,
              help="Events to produce per run.")
@click.option("--producers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Producer processes (the target is set for one).")
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of the bench's topics.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs, each timed on its own.")
@click.option("--linger-ms", type=click.IntRange(min=0), default=None,
              help="librdkafka linger.ms [default: the sink's].")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default=None, help="compression.type [default: the sink's].")
@click.option("--batch-bytes", type=click.IntRange(min=1000), default=None,
              help="librdkafka batch.size [default: the sink's].")
@bench_runs_option
def bench_generator(events: int, producers: int, partitions: int, repeat: int,
                    linger_ms: int | None, compression: str | None, batch_bytes: int | None,
                    runs: Path | None) -> None:
    """Events/s from the generator into a Kafka broker the bench starts (1 broker, small
    heap, acks=all, idempotent), counted until every event is acknowledged."""
    from rich.table import Table

    from pgval.bench_kafka import bench_generator as run_bench

    options = {k: v for k, v in (("linger_ms", linger_ms), ("compression", compression),
                                 ("batch_bytes", batch_bytes)) if v is not None}
    results = run_bench(_bench_run_dir(runs, "generator"), events, producers, partitions,
                        options, repeat, say=_say)
    table = Table(title=f"generator → Kafka, {producers} producer process(es), "
                        f"{partitions} partitions, sink {results[0].sink}")
    for col in ("run", "acknowledged ev/s", "handed over ev/s", "delivered", "failed",
                "undelivered", "in Kafka"):
        table.add_column(col, justify="right")
    for k, r in enumerate(results, 1):
        table.add_row(str(k), f"{r.acked_per_s:,.0f}", f"{r.handover_per_s:,.0f}",
                      f"{r.delivered:,}", f"{r.failed:,}", f"{r.undelivered:,}",
                      f"{r.in_kafka:,}")
    console.print(table)
    bad = [k for k, r in enumerate(results, 1) if not r.ok]
    if bad:
        raise UserError(f"run(s) {bad} did not deliver every event exactly once into Kafka")


@bench.command("readback")
@click.option("--events", type=click.IntRange(min=1000), default=10_000_000, show_default=True,
              help="Input events written, read back and validated.")
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of the bench's topics.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Reader processes, partitions split between them [default: half the "
                   "cores, as pgval validate].")
@click.option("--window-ms", type=click.IntRange(min=1), default=1000, show_default=True,
              help="SST window of the outputs (event time runs at 100k ev/s).")
@bench_runs_option
def bench_readback(events: int, partitions: int, workers: int, window_ms: int,
                   runs: Path | None) -> None:
    """Write EVENTS inputs with the generator and their SST outputs into a Kafka broker the
    bench starts, then time read-back (read_committed), records → columns and validation."""
    from rich.table import Table

    from pgval.bench_kafka import bench_readback as run_bench
    from pgval.kafka.reader import default_workers

    workers = workers or default_workers()
    result = run_bench(_bench_run_dir(runs, "readback"), events, window_ms=window_ms,
                       partitions=partitions, workers=workers, say=_say)
    gen = result.generator
    console.print(f"generator: {gen.delivered:,} events acknowledged at "
                  f"{gen.acked_per_s:,.0f} ev/s (one producer process)")
    table = Table(title=f"read-back and validation, {result.events:,} inputs, "
                        f"{result.outputs:,} outputs, {partitions} partitions, "
                        f"{workers} reader process(es)")
    for col in ("stage", "seconds", "events/s", "CPU s (all threads)"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    for stage, secs in result.stages_s.items():
        table.add_row(stage, f"{secs:.2f}", f"{result.per_s(stage):,.0f}",
                      f"{result.cpu_s[stage]:.2f}")
    table.add_section()
    table.add_row("read-back + validation", f"{result.total_s:.2f}", f"{result.per_s():,.0f}",
                  f"{sum(result.cpu_s.values()):.2f}")
    console.print(table)
    console.print(f"validation: {result.verdict}")


def run() -> None:
    """Entry point: plain runtime and Kafka errors become one line and exit code 1; INT,
    TERM and HUP stop the command through its teardown (pgval.host.signals)."""
    from confluent_kafka import KafkaException

    from pgval.host import signals

    try:
        with signals.handled():
            main(standalone_mode=True)
    except RuntimeErrorPlain as exc:
        print_error(str(exc))
        sys.exit(1)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        why = err.str() if hasattr(err, "str") else str(err)
        err_console.print(f"[bold red]error:[/] Kafka: {why}")
        sys.exit(1)


if __name__ == "__main__":
    run()
