"""`pgval report`: the paper's tables (and plots) of a results database."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pgval.cli.common import console
from pgval.cli.errors import UserError
from pgval.core.schema import FAULTS, PROCESSING_GUARANTEES, TOPOLOGIES


@click.command()
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("results.db"), show_default=True,
              help="SQLite results database to report on.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "csv", "html",
                                                   "json"]),
              default="terminal", show_default=True,
              help="Tables in the terminal, Markdown, CSV, one HTML page, or one JSON object "
                   "(every table, each row's keys and values).")
@click.option("--json", "as_json", is_flag=True,
              help="The same as --format json.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here instead of printing it.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write PNG plots (per run, and per matrix) into this folder, drawn in "
                   "parallel; a run's plot already there and unchanged is kept. Markdown and "
                   "HTML link them (HTML without --plots inlines them).")
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
@click.option("--include-unsealed", is_flag=True,
              help="Also aggregate imported runs (`pgval recheck RUN_DIR --store`: unsealed, "
                   "or sealed only with the run's own SHA256SUMS); by default they are held "
                   "apart in a table of their own, with why.")
def report(db: Path, fmt: str, as_json: bool, out: Path | None, plots_dir: Path | None,
           topology: str | None, pg: str | None, fault: str | None, kind: str | None,
           include_unknown: bool, include_unsealed: bool) -> None:
    """Tables (and plots) of the runs in a results database, grouped by topology × pg × fault,
    label (`check --label`) and run shape (rate, phases, window, crash point, deployment);
    OIR trials and imported runs apart."""
    from pgval.report import Selection, build_report

    if as_json:
        source = click.get_current_context().get_parameter_source("fmt")
        if source is not click.core.ParameterSource.DEFAULT and fmt != "json":
            raise UserError(f"--json and --format {fmt} ask for two formats: give one")
        fmt = "json"
    result = build_report(db, runs=Selection(topology=topology, pg=pg, fault=fault, kind=kind,
                                             include_unknown=include_unknown,
                                             include_unsealed=include_unsealed),
                          fmt=fmt, out=out, plots_dir=plots_dir,
                          console=console if fmt == "terminal" and out is None else None,
                          progress=lambda line: click.echo(line, err=True))
    if out is not None:
        console.print(f"report written to {result}")
    elif fmt != "terminal":
        sys.stdout.write(str(result))
