"""`pgval oracle` and `pgval check`: recorded streams, no cluster: what a topology should
output, and whether recorded outputs of any stream processor keep a guarantee."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import click
import orjson
from rich.markup import escape

from pgval.cli.common import (
    console,
    finish_gate,
    gate_options,
    print_json,
    print_output_before_input,
    print_validity,
)
from pgval.cli.errors import UserError, err_console
from pgval.cli.options import config_option
from pgval.records.phases import Phases

#: What ``check`` and ``oracle`` judge: their files cannot say which topology made them.
topology_option = config_option("topology", required=True)
window_option = config_option("window_ms")


@click.command()
@topology_option
@click.option("--inputs", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="Input events, JSON lines.")
@window_option
def oracle(topology: str, inputs: Path, window_ms: int) -> None:
    """Print the expected outputs of TOPOLOGY over INPUTS as JSON lines."""
    from pgval.oracle import expected_outputs
    from pgval.records.parse import read_inputs

    events = read_inputs(inputs)
    if events.malformed:
        err_console.print(f"{events.malformed} malformed input records skipped")
    expected = expected_outputs(events, topology, window_ms)
    out = sys.stdout.buffer
    for row in expected.to_records():
        out.write(orjson.dumps(row) + b"\n")
    out.flush()


@click.command()
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
@click.option("--allow-malformed", is_flag=True,
              help="Judge what is left when records lack a required field (they are counted "
                   "as malformed) instead of refusing the files.")
@click.option("--anomalies", "anomalies_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every anomaly (unprocessed, duplicate, incorrect, output before "
                   "input), one JSON object per line, to this file.")
@gate_options
def check(topology: str, inputs: Path, outputs: Path, window_ms: int, phases_text: str | None,
          as_json: bool, db: Path | None, allow_malformed: bool,
          anomalies_path: Path | None, expect: str | None, junit_path: Path | None) -> None:
    """Validate recorded input and output streams of any stream processor."""
    from pgval.checker import questions
    from pgval.checker.evaluate import evaluate
    from pgval.records.parse import read_streams

    try:
        phases = Phases.parse(phases_text) if phases_text is not None else Phases.unbounded()
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    from pgval.checker.validity import Validity, evaluation_reasons
    from pgval.store.results import ResultsStore

    store = ResultsStore(db) if db is not None else None  # a bad --db: before the work
    events, produced = read_streams(inputs, outputs)
    for problem in (None if allow_malformed else questions.missing_fields(events, produced),
                    questions.window_mismatch(produced, window_ms),
                    questions.phases_off(phases, events, produced, window_ms)):
        if problem is not None:
            raise UserError(problem)
    ev = evaluate(events, produced, topology, window_ms, phases)
    validity = Validity(evaluation_reasons(ev), [r for r in (
        questions.nothing_to_judge(produced, phases),) if r is not None])
    if anomalies_path is not None:
        from pgval.evidence.export import write_anomalies

        try:
            write_anomalies(ev.anomalies(), anomalies_path)
        except OSError as exc:
            raise UserError(f"cannot write the anomalies to {anomalies_path}: "
                            f"{exc.strerror or exc}") from exc
    if store is not None:
        try:
            run_id = store.save_check(
                ev, params={"inputs": str(inputs), "outputs": str(outputs),
                            "phases": phases_text})
        except (sqlite3.Error, OSError) as exc:  # the disk filled, a file in the way, …
            raise UserError(f"cannot store the result in {db}: {exc}") from exc
        if not as_json:
            console.print(f"stored as run {run_id} in {escape(str(db))}")
    summary = {**ev.summary(), **validity.as_dict()}
    if as_json:
        print_json(summary)
    else:
        from pgval.checker.render import render_evaluation

        render_evaluation(ev, console)
        print_output_before_input(ev)
        print_validity(validity)
        if anomalies_path is not None:
            console.print(f"{len(ev.anomalies()):,} anomalies written to "
                          f"{escape(str(anomalies_path))}")
    from pgval.checker.gate import Case

    case = Case.of_summary(outputs.name, f"pgval.check.{topology}", summary)
    finish_gate([case], expect, junit_path, "pgval check", quiet=as_json)
