"""`pgval validate`: one experiment on Kafka + Spark, validated, stored, and said."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.markup import escape

from pgval.cli.common import (
    OIR_PENDING,
    check_db,
    console,
    finish_gate,
    gate_failed,
    gate_options,
    lint_job_first,
    lint_option,
    parse_rate,
    print_json,
    print_validity,
    print_views,
    require_spark,
    resolve_job,
    stored_oir_rate,
    why_not_finished,
)
from pgval.cli.errors import UserError, err_console
from pgval.cli.options import build_config, config_options, profile_option, with_profile
from pgval.config import resolve


@click.command()
@config_options("validate")
@profile_option()
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where logs, evidence, checkpoints and broker data go "
                   "(default: runs/<time>-<pid>).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("results.db"), show_default=True, help="SQLite results database.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end.")
@lint_option
@gate_options
def validate(run_dir: Path | None, db: Path, as_json: bool, lint: bool, expect: str | None,
             junit_path: Path | None, profile: str | None, **values: Any) -> None:
    """Run one experiment on Kafka + Spark (the embedded cluster unless --deploy) and
    validate its guarantee."""
    from pgval.checker.gate import Case
    from pgval.checker.render import render_evaluation
    from pgval.core.errors import PgvalError
    from pgval.run.experiment import Experiment, default_run_dir
    from pgval.run.live import LiveStatus

    _sabotage_spec(values["sabotage"])
    values = with_profile(values, profile)
    rate = parse_rate(values["rate"])
    cfg = build_config(values, rate=OIR_PENDING if rate is None else rate)
    name = cfg.case_name()
    gated = expect is not None or junit_path is not None
    started = time.monotonic()

    def not_finished(exc: BaseException) -> NoReturn:
        gate_failed(exc, Case.failed(name, "pgval.validate", why_not_finished(exc),
                                     time.monotonic() - started),
                    expect, junit_path, "pgval validate")

    try:
        require_spark(cfg.deploy)
    except PgvalError as exc:
        if not gated:
            raise
        not_finished(exc)
    cfg = resolve_job(cfg)
    check_db(db)
    if lint:
        lint_job_first(cfg, quiet=as_json)
    if rate is None:
        cfg = resolve(cfg, rate=stored_oir_rate(db, cfg))
    run_dir = run_dir or default_run_dir()
    if warning := cfg.output_row_warning():
        err_console.print(f"[yellow]warning:[/] {escape(warning)}")
    live = LiveStatus(err_console, enabled=not as_json)
    try:
        with live:
            result = Experiment(cfg, run_dir, db=db, on_status=live.update).run()
    except click.ClickException:
        raise
    except (Exception, KeyboardInterrupt) as exc:
        if not gated:
            raise
        not_finished(exc)
    summary = result.summary()
    case = Case.of_summary(name, "pgval.validate", summary, time.monotonic() - started)
    if as_json:
        print_json(summary)
        finish_gate([case], expect, junit_path, "pgval validate", quiet=True)
        return
    what = f"job {cfg.job}" if cfg.job else cfg.topology.upper()
    render_evaluation(result.evaluation, console,
                      title=f"{what} {cfg.pg} fault={cfg.fault} — per phase")
    print_validity(result.validity)
    print_views(summary)
    if line := result.warmup_line():
        console.print(f"  • {line}")
    t = result.timings
    for line in readback_lines(result.readback, result.judged_by, summary):
        console.print(f"  • {line}")
    console.print(f"  • run {result.run_id} stored in {db}; evidence and logs in {run_dir} "
                  f"(re-check: pgval recheck {result.run_id} --db {db})")
    console.print(f"  • overhead beyond the phases {t.get('overhead_s', 0):.1f} s: cluster "
                  f"{t.get('cluster_start_s', 0):.1f} s, driver {t.get('driver_start_s', 0):.1f}"
                  f" s, priming {t.get('prime_s', 0):.1f} s, drain {t.get('drain_s', 0):.1f} s, "
                  f"read-back {t.get('read_back_s', t.get('spark_checker_process_s', 0)):.1f} s, "
                  "validation "
                  f"{t.get('validate_s', 0):.1f} s, teardown {t.get('teardown_s', 0):.1f} s")
    gen = result.generator
    console.print(f"  • generator: {gen.get('delivered', 0):,} delivered at "
                  f"{gen.get('achieved_rate', 0):,.0f} ev/s, {gen.get('failed', 0)} failed")
    finish_gate([case], expect, junit_path, "pgval validate")



def readback_lines(readback: dict[str, Any], judged_by: dict[str, Any],
                   summary: dict[str, Any]) -> list[str]:
    """What was read back and who judged it, for people (``--checker``)."""
    spark = judged_by.get("spark") or {}
    said = [] if judged_by.get("checker") in (None, "numpy") else [
        f"judged by {judged_by['checker']}: {judged_by.get('why')}"]
    if judged_by.get("checker") == "spark":
        read = spark.get("read") or {}
        parts = read.get("partitions") or []
        seconds = spark.get("seconds") or {}
        said.append(f"read back on Spark ({spark.get('master')}): {read.get('inputs', 0):,} "
                    f"inputs and {read.get('outputs', 0):,} outputs, every one of "
                    f"{len(parts)} partitions to its end offset: "
                    f"{'yes' if read.get('complete') else 'NO'}; read-back "
                    f"{seconds.get('read_back_s', 0):.1f} s, oracle "
                    f"{seconds.get('oracle_s', 0):.1f} s, checker "
                    f"{seconds.get('checker_s', 0):.1f} s; anomaly sets (Parquet) in "
                    f"{spark.get('folder')}/sets")
        if spark.get("failure"):
            said.append(f"not judged: {spark['failure']}")
        said += [f"{kind} IDs, e.g. {', '.join(map(str, ids[:8]))}"
                 for kind, ids in (spark.get("examples") or {}).items() if ids]
        return said
    inputs = readback.get("inputs", {})
    said.append(f"read back {inputs.get('read', 0):,} input records (= end offsets, = "
                f"delivered + pgval's own events: {'yes' if inputs.get('ok') else 'NO'}) and "
                f"{readback.get('output', {}).get('records', 0):,} outputs")
    check = summary.get("spark_check")
    if check:
        said.append(f"the Spark checker ({check['master']}, read-back from Kafka, oracle, "
                    "checker) " + ("agrees with numpy's: every figure, phase row and set"
                                   if check["agrees"] else
                                   f"DISAGREES: {'; '.join(check['differences'][:3])}"))
    return said


def _sabotage_spec(text: str | None) -> str | None:
    """Check a --sabotage spec early (before anything starts) with the sink's own parser."""
    if text is None:
        return None
    from pgval.topologies.guarantee_sinks import parse_sabotage

    try:
        parse_sabotage(text)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    return text
