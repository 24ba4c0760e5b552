"""`pgval oracle` and `pgval check`: recorded streams, no cluster: what a topology should
output, and whether recorded outputs of any stream processor keep a guarantee."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from pgval.checker.evaluate import Evaluation
    from pgval.checker.validity import Validity

#: What ``check`` and ``oracle`` judge: their files cannot say which topology made them.
topology_option = config_option("topology", required=True)
window_option = config_option("window_ms")


def readable(path: Path, flag: str) -> Path:
    """``path`` if it is a file pgval can read to its end: a regular file, a pipe
    (``<(zcat in.jsonl.gz)``, a FIFO: never waited on forever, see
    :func:`pgval.records.parse.open_stream`) or /dev/null; anything else (a terminal,
    /dev/zero, a socket, a disk) is refused in one sentence instead of hanging."""
    try:
        st, null = os.stat(path), os.stat(os.devnull).st_rdev
        mode, device = st.st_mode, st.st_rdev
    except OSError as exc:
        raise UserError(f"{flag} {path}: {exc.strerror or exc}") from exc
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or (stat.S_ISCHR(mode) and device == null):
        return path
    kind = ("a terminal or device" if stat.S_ISCHR(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a block device" if stat.S_ISBLK(mode) else "not a regular file")
    raise UserError(f"{flag} {path} is {kind}, not a file of records: pass a file or a pipe")


@click.command()
@topology_option
@click.option("--inputs", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="Input events, JSON lines.")
@window_option
def oracle(topology: str, inputs: Path, window_ms: int) -> None:
    """Print the expected outputs of TOPOLOGY over INPUTS as JSON lines."""
    from pgval.oracle import expected_outputs
    from pgval.records.parse import read_inputs

    events = read_inputs(readable(inputs, "--inputs"))
    if events.malformed:
        err_console.print(f"{events.malformed} malformed input records skipped")
    expected = expected_outputs(events, topology, window_ms)
    out = sys.stdout.buffer
    for row in expected.to_records():
        out.write(orjson.dumps(row) + b"\n")
    out.flush()


def judge(inputs: Path, outputs: Path, topology: str, window_ms: int, phases: Phases,
          allow_malformed: bool) -> tuple[Evaluation, Validity]:
    """The files' evaluation and validity; one sentence (exit 2) instead when a flag
    asks what they cannot answer, or when they raise a doubt (:mod:`pgval.checker.questions`)
    and ``--allow-malformed`` does not say to judge them anyway, as unknown."""
    from pgval.checker import questions
    from pgval.checker.evaluate import evaluate
    from pgval.checker.validity import Validity, doubt_reasons, evaluation_reasons
    from pgval.records.parse import read_streams

    events, produced = read_streams(readable(inputs, "--inputs"),
                                    readable(outputs, "--outputs"))
    wrong = questions.wrong_flags(events, produced, window_ms, phases)
    if wrong is not None:
        raise UserError(wrong)
    doubts = questions.doubts(events, produced, topology, window_ms)
    if doubts and not allow_malformed:
        raise UserError(questions.refusal(doubts[0]))
    ev = evaluate(events, produced, topology, window_ms, phases)
    doubts += questions.judged_doubts(ev, produced)
    if doubts and not allow_malformed:
        raise UserError(questions.refusal(doubts[0]))
    empty = questions.nothing_to_judge(produced, phases)
    return ev, Validity(evaluation_reasons(ev), [empty] if empty else [],
                        doubt_reasons(doubts))


def judge_job(job: str, inputs: Path, outputs: Path, window_ms: int, phases: Phases,
              allow_malformed: bool) -> tuple[Evaluation, Validity]:
    """A user's job's recorded outputs judged by its batch run over the recorded inputs
    (:mod:`pgval.run.job_files`); the job checked before Spark starts, one sentence."""
    from pgval.checker.validity import Validity, doubt_reasons, evaluation_reasons
    from pgval.core.extras import require
    from pgval.records.parse import read_inputs
    from pgval.run.job_files import judge_job_files
    from pgval.topologies.job import load_or_check

    require("spark")
    if load_or_check(job).reads_kafka:
        raise UserError(f"--job {job}: check --job judges a job over the web log's sources "
                        "(build(spark, sources)); a job that reads Kafka itself is judged "
                        "from a run's evidence (pgval recheck)")
    events = read_inputs(readable(inputs, "--inputs"))
    readable(outputs, "--outputs")
    if events.malformed and not allow_malformed:
        raise UserError(f"--inputs {inputs}: {events.malformed:,} malformed input records "
                        "(--allow-malformed judges the rest, as unknown)")
    ev = judge_job_files(job, events, inputs, outputs, window_ms, phases)
    bad = ev.validation.malformed
    if bad and not allow_malformed:
        raise UserError(f"--outputs {outputs}: {bad:,} output records lack their ids or "
                        "ingress_ts (--allow-malformed judges the rest, as unknown)")
    doubts = ([f"{bad:,} malformed output records left out"] if bad else []) + (
        [f"{events.malformed:,} malformed input records left out"] if events.malformed else [])
    return ev, Validity(evaluation_reasons(ev), doubt_reasons(doubts))


@click.command()
@config_option("topology")
@click.option("--job", metavar="PATH.py:FUNCTION",
              help="Judge the outputs of your own PySpark job instead of a topology's: its "
                   "build(spark, sources) run as a batch over --inputs (local Spark) is the "
                   "oracle; --outputs holds its rows as JSON lines (its columns, ids and "
                   "ingress_ts), values compared too (docs/your-job.md).")
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
              help="Judge the files even when they raise a doubt (malformed records, counted "
                   "and left out; another topology's outputs; windows or an output clock the "
                   "inputs contradict) instead of refusing them: the run is then unknown, "
                   "each doubt a reason.")
@click.option("--anomalies", "anomalies_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write every anomaly (unprocessed, duplicate, incorrect, output before "
                   "input), one JSON object per line, to this file.")
@click.option("--label", metavar="NAME",
              help="With --db: store the result under this name; `pgval report` groups runs "
                   "by it, so results of unrelated jobs never pool.")
@gate_options
def check(topology: str, job: str | None, inputs: Path, outputs: Path, window_ms: int,
          phases_text: str | None,
          as_json: bool, db: Path | None, allow_malformed: bool,
          anomalies_path: Path | None, label: str | None, expect: str | None,
          junit_path: Path | None) -> None:
    """Validate recorded input and output streams of any stream processor, or of your
    own PySpark job (--job)."""
    started = time.monotonic()
    given = click.get_current_context().get_parameter_source("topology")
    if job is not None and given is not click.core.ParameterSource.DEFAULT:
        raise UserError("--topology and --job exclude each other: --job names your own job "
                        "in place of a built-in topology")
    if job is None and given is click.core.ParameterSource.DEFAULT:
        raise UserError("give --topology sst|mst, or --job PATH.py:FUNCTION for your own job")
    topology = "job" if job is not None else topology
    try:
        phases = Phases.parse(phases_text) if phases_text is not None else Phases.unbounded()
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    from pgval.store.results import ResultsStore, label_problem

    if label is not None and (db is None or label_problem(label)):
        raise UserError(label_problem(label) or "--label names the result stored with --db; "
                        "give --db too")
    store = ResultsStore(db) if db is not None else None  # a bad --db: before the work
    ev, validity = (judge(inputs, outputs, topology, window_ms, phases, allow_malformed)
                    if job is None else
                    judge_job(job, inputs, outputs, window_ms, phases, allow_malformed))
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
                            "phases": phases_text}, label=label, validity=validity)
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

    case = Case.of_summary(f"{topology} {label or outputs.name}", f"pgval.check.{topology}",
                           summary, time.monotonic() - started)
    finish_gate([case], expect, junit_path, "pgval check", quiet=as_json)
