"""The ``pgval`` command: a thin click layer over the library API.

Every command ends in one plain sentence and a non-zero exit on bad input or a
bad environment (:class:`UserError`), never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson
from rich.console import Console

from pgval.phases import Phases
from pgval.runtime.procs import RuntimeErrorPlain
from pgval.schema import TOPOLOGIES

console = Console()
if not console.is_terminal:  # pipes and CI logs: wide enough for the phase table
    console = Console(width=140)
err_console = Console(stderr=True)

topology_option = click.option("--topology", type=click.Choice(TOPOLOGIES), required=True,
                               help="SST (windowed GET count) or MST (GET ⋈ POST, then count).")
window_option = click.option("--window-ms", type=click.IntRange(min=1), default=10_000,
                             show_default=True, help="Tumbling event-time window length (ms).")


class UserError(click.ClickException):
    """A plain one-sentence error for the user; exit code 2 like click's usage errors."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        err_console.print(f"[bold red]error:[/] {self.format_message()}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--phases", "phases_text", metavar="START,T2,T3",
              help="Phase boundaries in ms (ingress time): control from START, failure from "
                   "T2, recovery from T3. Without it everything is control.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
              help="Also store the result in this SQLite database.")
def check(topology: str, inputs: Path, outputs: Path, window_ms: int, phases_text: str | None,
          as_json: bool, db: Path | None) -> None:
    """Validate recorded input and output streams of any stream processor."""
    from pgval.evaluate import evaluate_files

    try:
        phases = Phases.parse(phases_text) if phases_text else Phases.unbounded()
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    ev = evaluate_files(topology, inputs, outputs, window_ms, phases)
    if db is not None:
        from pgval.store import ResultsStore

        run_id = ResultsStore(db).save_check(
            ev, params={"inputs": str(inputs), "outputs": str(outputs), "phases": phases_text})
        if not as_json:
            console.print(f"stored as run {run_id} in {db}")
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(ev.summary(), option=orjson.OPT_SERIALIZE_NUMPY)
                                + b"\n")
    else:
        from pgval.render import render_evaluation

        render_evaluation(ev, console)


@main.command("setup-jars")
def setup_jars() -> None:
    """Resolve the Kafka broker and Spark's Kafka connector from Maven Central (once)."""
    from pgval.runtime.jars import check_java, ensure_jars

    check_java()
    jars = ensure_jars()
    console.print(f"jars ready: {len(jars.kafka_classpath)} for the broker, "
                  f"{len(jars.spark_kafka_jars)} for Spark")


@main.group()
def bench() -> None:
    """Benchmarks (numbers for docs/performance.md)."""


@bench.command("offline")
@click.option("--events", type=click.IntRange(min=1000), default=10_000_000, show_default=True)
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
    for stage, secs in result.stages_s.items():
        table.add_row(stage, f"{secs:.2f}", f"{result.events / secs:,.0f}")
    table.add_section()
    table.add_row("end to end", f"{result.total_s:.2f}", f"{result.events_per_s:,.0f}")
    console.print(table)


def run() -> None:
    """Entry point that turns plain runtime errors into one line and exit code 1."""
    try:
        main(standalone_mode=True)
    except RuntimeErrorPlain as exc:
        err_console.print(f"[bold red]error:[/] {exc}")
        sys.exit(1)


if __name__ == "__main__":
    run()
