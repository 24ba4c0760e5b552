"""`pgval matrix` and `pgval oir`: the campaigns. Argument handling and what is said;
how a grid is planned, resumed and run is :mod:`pgval.campaigns.matrix`, how the search steps
:mod:`pgval.campaigns.oir`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pgval.checker.gate import Case
from pgval.cli.common import (
    OIR_PENDING,
    RunDidNotFinish,
    check_db,
    console,
    finish_gate,
    gate_failed,
    gate_options,
    lint_job_first,
    lint_option,
    parse_rate,
    print_json,
    require_spark,
    resolve_job,
    stored_oir_rate,
    why_not_finished,
)
from pgval.cli.errors import UserError, err_console
from pgval.cli.options import (
    build_config,
    config_options,
    grid_options,
    left_at_default,
    profile_option,
    with_profile,
)
from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.core.schema import Topology

#: A matrix's repetitions and driver under ``--profile`` (unless --repeat or --driver is
#: given): a CI gate runs each cell once, on a shared driver where the cell's fault allows.
PROFILE_REPEAT = {"ci": 1}
PROFILE_DRIVER = {"ci": "shared"}


def _runs_and_db(f):  # noqa: ANN001, ANN202 - click decorator
    """`matrix` and `oir`: where the run directories and the results go, and their driver."""
    f = click.option("--driver", type=click.Choice(["fresh", "shared"]), default="fresh",
                     show_default=True,
                     help="shared: one Spark driver runs the runs' queries one after another "
                          "(warm JVMs from its second run on: less overhead, and a run "
                          "measures a warm driver); runs whose fault kills or pauses the "
                          "driver, or with a sink other than Kafka, still get their own "
                          "(docs/deploy.md, \"A shared driver\").")(f)
    f = click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
                     default=Path("results.db"), show_default=True,
                     help="SQLite results database (a matrix resumes from it).")(f)
    return click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path),
                        default=Path("runs"), show_default=True,
                        help="Folder for the run directories, one per run.")(f)


@click.command()
@grid_options()
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs of each cell; repetition r runs with seed --seed + r.")
@click.option("--rate-fraction", type=click.FloatRange(min=0.01, max=10.0), default=None,
              help="With --rate oir: run at this fraction of the stored OIR (the paper ran "
                   "at the OIR, 1.0) [default: 1.0].")
@config_options("matrix")
@profile_option()
@_runs_and_db
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object a cell at the end (JSON lines): its name, outcome, "
                   "verdict and each repetition's guarantee, validity and numbers; the "
                   "progress and the summary line go to stderr.")
@lint_option
@gate_options
def matrix(topologies: list[str], pgs: list[str], faults: list[str], repeat: int,
           rate_fraction: float | None, runs_dir: Path, db: Path, driver: str,
           as_json: bool, lint: bool, expect: str | None, junit_path: Path | None,
           profile: str | None, **values: Any) -> None:
    """Run the grid topologies × pgs × faults × repeat; skips cells already complete."""
    from pgval.campaigns.matrix import cell_cases, cells, plan, rates_at, run_matrix

    values = with_profile(values, profile)
    repeat = _profiled(profile, "repeat", repeat, PROFILE_REPEAT)
    driver = _profiled(profile, "driver", driver, PROFILE_DRIVER)
    rate = parse_rate(values["rate"])
    base = _matrix_base(values, rate, rate_fraction)
    if values.get("job") is not None:
        topologies = [Topology.JOB.value]
    gated = expect is not None or junit_path is not None
    try:
        require_spark(base.deploy)
    except PgvalError as exc:
        if not gated:
            raise
        gate_failed(exc, Case.failed("matrix", "pgval.campaigns.matrix", why_not_finished(exc)),
                    expect, junit_path, "pgval matrix")
    base = resolve_job(base)
    if lint:
        lint_job_first(base, quiet=as_json)

    def left_out(cell, reason):  # noqa: ANN001, ANN202
        err_console.print(f"{cell.topology} {cell.pg} {cell.fault}: left out — {reason}")

    # every cell checked before any runs
    grid = plan(base, cells(topologies, pgs, faults, repeat), on_left_out=left_out)
    fraction = 1.0 if rate_fraction is None else rate_fraction
    rate_for = (None if rate is not None
                else rates_at(grid, base, fraction, lambda cfg: stored_oir_rate(db, cfg)))
    oir_fraction = None if rate is not None else fraction
    shared = driver == "shared"
    check_db(db)
    failed: dict[Any, str] = {}

    def judged(not_run: str | None = None) -> list[Case]:
        kw = {} if not_run is None else {"not_run": not_run}
        return cell_cases(db, base, grid, failed, oir_fraction, rate_for, **kw,
                          shared_driver=shared)

    with _CellProgress(len(grid), failed) as on_cell:
        try:
            counts = run_matrix(base, grid, db, runs_dir, on_cell=on_cell, rate_for=rate_for,
                                oir_fraction=oir_fraction, shared_driver=shared)
        except click.ClickException:
            raise
        except (Exception, KeyboardInterrupt) as exc:  # the cells not run have no verdict
            if not gated:
                raise
            why = why_not_finished(exc)
            finish_gate(judged(f"not run: {why}"), expect, junit_path, "pgval matrix")
            if expect is not None and not isinstance(exc, PgvalError):
                raise RunDidNotFinish(why) from exc  # a bug's exception: still 4
            raise  # the error's own status (2, 3, 4), as without the gate
    taken = (f", {counts['taken']} being run by another pgval" if counts["taken"] else "")
    (err_console if as_json else console).print(
        f"matrix: {counts['done']} run, {counts['skipped']} already complete{taken}, "
        f"{counts['failed']} failed — results in {db}")
    cases = judged() if gated or as_json else []
    if as_json:
        for case in cases:
            print_json(case.as_json(expect))
    if gated:
        finish_gate(cases, expect, junit_path, "pgval matrix", quiet=as_json)
    if counts["failed"]:
        raise EnvironmentFailure(f"{counts['failed']} of the matrix's runs failed (their "
                                 "errors are above)")


def _profiled(profile: str | None, name: str, value: Any, by_profile: dict[str, Any]) -> Any:
    """A matrix option's value: ``profile``'s where the user left it at its default."""
    if profile is None or not left_at_default(name):
        return value
    return by_profile.get(profile, value)


def _matrix_base(values: dict[str, Any], rate: float | None,
                 rate_fraction: float | None) -> Any:
    """The grid's base spec from the options (the fault is an axis, checked per cell);
    ``--rate-fraction`` only with ``--rate oir``, ``--job`` only without ``--topologies``."""
    if rate is not None and rate_fraction is not None:
        raise UserError("--rate-fraction applies to --rate oir only")
    if values.get("job") is not None and click.get_current_context().get_parameter_source(
            "topologies") is not click.core.ParameterSource.DEFAULT:
        raise UserError("--topologies and --job exclude each other: with --job the grid "
                        "runs your job alone")
    return build_config(values, rate=OIR_PENDING if rate is None else rate,
                        **({"topology": Topology.JOB} if values.get("job") else {}))


class _CellProgress:
    """The matrix's progress bar and one line per cell as it starts and ends; failed cells
    and their errors into ``failed``. Used as a context manager giving the ``on_cell``
    callback of :func:`pgval.campaigns.matrix.run_matrix`."""

    def __init__(self, total: int, failed: dict[Any, str]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), console=err_console)
        self.total, self.failed = total, failed

    def __enter__(self) -> Any:
        self.progress.__enter__()
        self.task = self.progress.add_task("matrix", total=self.total)
        return self.on_cell

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)  # type: ignore[arg-type]

    def on_cell(self, cell: Any, state: str, info: dict[str, Any] | None) -> None:
        if state in ("complete", "skipped", "taken", "failed"):
            self.progress.advance(self.task)
        extra = ""
        if info and "reliability" in info:
            rel = info["reliability"]
            extra = f" reliability {'n/a' if rel is None else f'{rel:.2%}'} {info['guarantee']}"
            if not info.get("valid", True):
                extra += f" [unknown: {'; '.join(info.get('validity_reasons', []))}]"
        elif info and "error" in info:
            extra = f" error: {info['error']}"
            self.failed[cell] = str(info["error"])
        if state == "taken":
            state, extra = "skipped", " (being run by another pgval on this database)"
        self.progress.console.print(f"{cell.label():32} {state}{extra}")


@click.command()
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
        db: Path, driver: str, **values: Any) -> None:
    """Find the optimum ingestion rate by doubling, then bisecting between the highest
    passing and the lowest failing control run, and store it for this machine."""
    from pgval.campaigns.oir import search_oir

    if start_rate > max_rate:
        raise UserError(f"--start-rate {start_rate:,.0f} is above --max-rate {max_rate:,.0f}")
    base = build_config(values, fault="none")
    require_spark(base.deploy)
    base = resolve_job(base)
    check_db(db)

    def on_trial(t):  # noqa: ANN001, ANN202
        mark = "[green]pass[/]" if t.passed else "[red]fail[/]"
        console.print(f"{t.rate:>10,.0f} ev/s  {mark}  {t.reason}")

    res = search_oir(base, db, runs_dir, start=start_rate, max_rate=max_rate,
                     max_trials=max_trials, precision=precision, on_trial=on_trial,
                     shared_driver=driver == "shared")
    if res.oir is None:
        raise UserError(f"the OIR of {base.topology} {base.pg} is {res.describe()}; try a "
                        "lower --start-rate")
    console.print(f"OIR of {base.topology} {base.pg} on {res.machine}: {res.describe()} "
                  f"(stored in {db})")
