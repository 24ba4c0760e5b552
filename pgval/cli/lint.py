"""`pgval lint`: a job tried on a small sample of its input, no Kafka, no cluster
(:mod:`pgval.run.lint`): every problem that would keep pgval from judging it, in one
sentence each, within a minute."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from pgval.cli.common import console, print_json, require_spark
from pgval.cli.errors import UserError, err_console
from pgval.cli.options import config_option

#: The input model's options, as `validate` names them.
MODEL_OPTIONS = ("replay", "input_makers", "event_time_field", "avro_schema", "skew",
                 "disorder", "late", "inputs_spec")


def _options(f: Any) -> Any:
    for name in reversed((*MODEL_OPTIONS, "spark_conf")):
        f = config_option(name)(f)
    return f


@click.command()
@click.argument("job", metavar="PATH.py:FUNCTION")
@_options
@click.option("--records", type=click.IntRange(10, 200_000), default=2_000,
              show_default=True, help="Records in the sample (the web log's, or the input "
                                      "model's with its skew, disorder and late records).")
@click.option("--batches", type=click.IntRange(1, 50), default=6, show_default=True,
              help="Micro-batches the stream reads the sample in (10 s of event time each), "
                   "then two of pgval's closing events.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="The sample's seed (the same seed, the same sample).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end.")
def lint(job: str, records: int, batches: int, seed: int, as_json: bool, spark_conf: Any,
         **model: Any) -> None:
    """Try the job PATH.py:FUNCTION on a small sample of its input, as a stream and as a
    batch, with no Kafka and no cluster, and say every problem that keeps pgval from
    judging it: an operator it cannot judge, a key that does not identify an output, a
    missing package, a stream whose rows differ from the batch's. Exit 0: none
    found; 2: each problem in one sentence."""
    from pgval.datasets.models import model_from_options
    from pgval.run.lint import lint_job
    from pgval.topologies.job import load_or_check

    require_spark()
    loaded = load_or_check(job)  # a job that cannot load: one sentence before Spark starts
    input_model = model_from_options(model["replay"], model["input_makers"],
                                     model["event_time_field"], model["skew"],
                                     model["disorder"], model["late"], model["inputs_spec"],
                                     model["avro_schema"])
    if loaded.reads_kafka and input_model is None:
        raise UserError(f"{job} reads Kafka itself: give its input model (--replay, --input "
                        "or --inputs-spec), which lint samples")
    if not loaded.reads_kafka and input_model is not None:
        raise UserError(f"{job} takes the web log's sources (build(spark, sources)): an "
                        "input model is for a job that reads Kafka itself")
    if not as_json:
        err_console.print(f"lint: trying {escape(job)} on {records:,} records in "
                          f"{batches} micro-batches (a local Spark, no Kafka) …")
    report = lint_job(job, input_model, dict(spark_conf or {}), records, batches, seed)
    if as_json:
        print_json(report.to_dict())
    else:
        console.print(f"{escape(job)}: {report.expected_rows:,} batch rows, "
                      f"{report.stream_rows:,} stream rows, {report.seconds:.1f} s")
    if report.fan_out and not as_json:
        console.print(escape(report.fan_out))
    for warning in report.warnings:
        err_console.print(f"warning: {escape(warning)}", highlight=False)
    if report.problems:
        for problem in report.problems[:-1]:
            err_console.print(f"error: {escape(problem)}", highlight=False)
        raise UserError(report.problems[-1])
    if not as_json:
        console.print("no problem found: pgval can judge this job over this sample")
