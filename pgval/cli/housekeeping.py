"""Housekeeping: `pgval cleanup` (what killed runs left behind), `pgval soak` (runs killed
on purpose, to prove cleanup), `pgval setup-jars` (the jars, once)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from pgval.cli.common import console, require_spark
from pgval.core.errors import EnvironmentFailure


@click.command()
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


@click.command()
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
    behind (exit 4 if anything was)."""
    from pgval.cli.soak_runs import KillResult
    from pgval.cli.soak_runs import soak as run_soak

    require_spark()

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
        raise EnvironmentFailure(f"the soak failed: {'; '.join(report.problems())}")


@click.command("setup-jars")
def setup_jars() -> None:
    """Resolve the Kafka broker and Spark's Kafka connector from Maven Central (once)."""
    from pgval.host.jars import check_java, ensure_jars

    check_java()
    jars = ensure_jars()
    console.print(f"jars ready: {len(jars.kafka_classpath)} for the broker, "
                  f"{len(jars.spark_kafka_jars)} for Spark")
