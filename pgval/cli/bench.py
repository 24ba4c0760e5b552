"""`pgval bench offline|generator|readback|report|spark-checker|spark-readback`: the numbers of
docs/performance.md, as tables or (``--json``) one JSON object each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from pgval.cli.common import console, print_json
from pgval.cli.errors import err_console
from pgval.core.errors import EnvironmentFailure, UserMistake


@click.group()
def bench() -> None:
    """Benchmarks (numbers for docs/performance.md)."""


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print the figures as one JSON object (progress on stderr).")


def _figures(result: Any, **derived: Any) -> dict[str, Any]:
    """A bench result as JSON: its fields and the rates derived from them."""
    import dataclasses

    return {**dataclasses.asdict(result), **derived}


def _print_figures(figures: dict[str, Any]) -> None:
    """The JSON of a benchmark, with the machine it measured (numbers from two machines do
    not compare: pgval.host.machine)."""
    from pgval.host.machine import describe_machine

    print_json({**figures, "machine": describe_machine()})


@bench.command("offline")
@click.option("--events", type=click.IntRange(min=1000), default=10_000_000, show_default=True,
              help="Input events in the synthetic files.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cache/bench"), show_default=True,
              help="Where the synthetic files are written (reused when the size matches).")
@json_option
def bench_offline(events: int, workdir: Path, as_json: bool) -> None:
    """Time read → oracle → validator → metrics over synthetic files of EVENTS inputs."""
    from rich.table import Table

    from pgval.checker.bench import run_offline_bench

    with err_console.status(f"preparing and timing {events:,} events…"):
        result = run_offline_bench(workdir, events)
    if as_json:
        _print_figures(_figures(result, total_s=result.total_s, events_per_s=result.events_per_s))
        return
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


@bench.command("spark-checker")
@click.option("--events", type=click.IntRange(min=1000), default=10_000_000, show_default=True,
              help="Input events of the synthetic SST run.")
@click.option("--master", default="local[2]", show_default=True,
              help="Where the Spark checker runs (local[N]: the tables are on this disk).")
@click.option("--heap-mb", type=click.IntRange(min=256), default=1024, show_default=True,
              help="The Spark driver's heap (MiB).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cache/bench-spark"), show_default=True,
              help="Where the Parquet tables and anomaly sets are written (removed after).")
@json_option
def bench_spark_checker(events: int, master: str, heap_mb: int, workdir: Path,
                        as_json: bool) -> None:
    """Time the numpy checker and the Spark checker on one synthetic run of EVENTS inputs,
    each process's peak memory, and whether the two agree."""

    from pgval.scale.bench import run_spark_checker_bench

    with err_console.status(f"judging {events:,} events with both checkers…"):
        result = run_spark_checker_bench(workdir, events, master, heap_mb)
    if as_json:
        _print_figures(_figures(result, agrees=result.agrees))
    else:
        _print_stages_and_memory(result, f"numpy and Spark checkers, {result.events:,} "
                                 f"events, {result.outputs:,} outputs, Spark on "
                                 f"{escape(master)}")
        console.print("the two checkers agree" if result.agrees else
                      f"the two checkers DISAGREE: {'; '.join(result.differences[:5])}")
    if not result.agrees:  # two implementations of one rule that differ: a bug in pgval
        raise EnvironmentFailure("the Spark checker disagreed with the numpy checker")


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


def _say_err(line: str) -> None:
    err_console.print(escape(line), highlight=False)


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
@json_option
def bench_generator(events: int, producers: int, partitions: int, repeat: int,
                    linger_ms: int | None, compression: str | None, batch_bytes: int | None,
                    runs: Path | None, as_json: bool) -> None:
    """Events/s from the generator into a Kafka broker the bench starts (1 broker, small
    heap, acks=all, idempotent), counted until every event is acknowledged."""
    from rich.table import Table

    from pgval.campaigns.kafka_bench import bench_generator as run_bench

    options = {k: v for k, v in (("linger_ms", linger_ms), ("compression", compression),
                                 ("batch_bytes", batch_bytes)) if v is not None}
    results = run_bench(_bench_run_dir(runs, "generator"), events, producers, partitions,
                        options, repeat, say=_say_err if as_json else _say)
    bad = [k for k, r in enumerate(results, 1) if not r.ok]
    if as_json:
        _print_figures({"runs": [_figures(r, acked_per_s=r.acked_per_s,
                                          handover_per_s=r.handover_per_s, ok=r.ok)
                                 for r in results]})
        if bad:
            raise EnvironmentFailure(f"run(s) {bad} did not deliver every event exactly once "
                                     "into Kafka")
        return
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
    if bad:
        raise EnvironmentFailure(f"run(s) {bad} did not deliver every event exactly once "
                                 "into Kafka")


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
@click.option("--reader", "readers", multiple=True,
              type=click.Choice(["auto", "jvm", "librdkafka"]),
              help="Who reads Kafka: the Java consumer (one process, columns without a "
                   "Python object per record), librdkafka (confluent-kafka, --workers "
                   "processes) or auto (as pgval validate: the Java one from 1M records "
                   "on) [default: auto]. Given twice or more, the later ones read the same "
                   "topics again, timed alone, in the same sitting.")
@bench_runs_option
@json_option
def bench_readback(events: int, partitions: int, workers: int, window_ms: int,
                   readers: tuple[str, ...], runs: Path | None, as_json: bool) -> None:
    """Write EVENTS inputs with the generator and their SST outputs into a Kafka broker the
    bench starts, then time read-back (read_committed), records → columns and validation."""
    from rich.table import Table

    from pgval.campaigns.kafka_bench import bench_readback as run_bench
    from pgval.kafka.reader import default_workers

    workers = workers or default_workers()
    result = run_bench(_bench_run_dir(runs, "readback"), events, window_ms=window_ms,
                       partitions=partitions, workers=workers, say=_say_err if as_json else _say,
                       readers=readers or ("auto",))
    if as_json:
        _print_figures(_figures(result, workers=workers, total_s=result.total_s,
                                per_s={stage: result.per_s(stage) for stage in result.stages_s},
                                total_per_s=result.per_s()))
        return
    gen = result.generator
    console.print(f"generator: {gen.delivered:,} events acknowledged at "
                  f"{gen.acked_per_s:,.0f} ev/s (one producer process)")
    read_by = result.readers[(readers or ("auto",))[0]]
    table = Table(title=f"read-back and validation, {result.events:,} inputs, "
                        f"{result.outputs:,} outputs, {partitions} partitions, read by "
                        f"{read_by}"
                        + (f" ({workers} reader process(es))" if read_by == "librdkafka"
                           else ""))
    for col in ("stage", "seconds", "events/s", "CPU s (all threads)"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    for stage, secs in result.stages_s.items():
        table.add_row(stage, f"{secs:.2f}", f"{result.per_s(stage):,.0f}",
                      f"{result.cpu_s[stage]:.2f}")
    table.add_section()
    table.add_row("read-back + validation", f"{result.total_s:.2f}", f"{result.per_s():,.0f}",
                  f"{sum(result.cpu_s.values()):.2f}")
    console.print(table)
    for other, secs in result.other_reads_s.items():
        console.print(f"the same read by {result.readers[other]}: {secs:.2f} s = "
                      f"{result.events / secs:,.0f} ev/s")
    console.print(f"validation: {result.verdict}")


@bench.command("spark-readback")
@click.option("--events", type=click.IntRange(min=1000), default=10_000_000, show_default=True,
              help="Input events written, then read back and judged on Spark.")
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of the bench's topics.")
@click.option("--window-ms", type=click.IntRange(min=1), default=1000, show_default=True,
              help="SST window of the outputs (event time runs at 100k ev/s).")
@click.option("--master", default="local[2]", show_default=True,
              help="Where Spark runs (local[N]: its tables are on this disk).")
@click.option("--heap-mb", type=click.IntRange(min=256), default=1024, show_default=True,
              help="The Spark driver's heap (MiB).")
@click.option("--compare/--no-compare", default=True, show_default=True,
              help="Also judge the same topics the numpy way (read-back, columns, "
                   "validation in this process) and name every difference; off for runs "
                   "this process cannot hold (~240 bytes an input).")
@click.option("--job", "job_ref", metavar="FILE.py:FUNCTION", default=None,
              help="A user's job over the web log instead of SST: its batch run's rows are "
                   "written as its outputs (planted anomalies), then the run is judged as "
                   "--checker spark judges a job (its batch run again as the oracle). The "
                   "numpy side is not run (pgval validate --job … --checker both holds the "
                   "two to each other).")
@bench_runs_option
@json_option
def bench_spark_readback(events: int, partitions: int, window_ms: int, master: str,
                         heap_mb: int, compare: bool, job_ref: str | None, runs: Path | None,
                         as_json: bool) -> None:
    """Write EVENTS inputs with the generator and their SST outputs (planted anomalies) into a
    Kafka broker the bench starts, then judge them on Spark: read-back to the end offsets
    (Kafka's batch source), oracle and checker, each a Spark job; the peak memory of this
    process and of Spark's JVM."""
    from pgval.campaigns.kafka_bench import bench_spark_job
    from pgval.campaigns.kafka_bench import bench_spark_readback as run_bench
    from pgval.scale.agreement import is_local

    if not is_local(master):
        raise UserMistake(f"the bench writes its tables on this machine's disk: use "
                          f"--master local[N], not {master}")
    say = _say_err if as_json else _say
    if job_ref is not None:
        from pgval.topologies.job import load_or_check

        load_or_check(job_ref)  # a missing file or function: one sentence, before the broker
        result = bench_spark_job(_bench_run_dir(runs, "spark-readback"), events, job_ref,
                                 partitions=partitions, master=master, heap_mb=heap_mb,
                                 say=say)
    else:
        result = run_bench(_bench_run_dir(runs, "spark-readback"), events, window_ms=window_ms,
                           partitions=partitions, master=master, heap_mb=heap_mb,
                           compare=compare, say=say)
    if as_json:
        _print_figures(_figures(result, agrees=result.agrees))
    else:
        _print_spark_readback(result)
    if result.unknown:
        raise EnvironmentFailure(f"the Spark path could not judge: {result.unknown}")
    if not result.agrees:  # two implementations of one rule that differ: a bug in pgval
        raise EnvironmentFailure("the Spark path disagreed with the numpy path: "
                                 + "; ".join(result.differences[:3]))


def _print_stages_and_memory(result: Any, title: str) -> None:
    """A Spark bench's stages (seconds, inputs a second) and each process's peak memory."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    table.add_column("inputs/s", justify="right")
    for stage, secs in result.stages_s.items():
        table.add_row(stage, f"{secs:.2f}", f"{result.events / secs:,.0f}")
    console.print(table)
    for process, mb in result.peak_mb.items():
        console.print(f"peak memory, {process}: {'unknown' if mb is None else f'{mb:,.0f} MiB'}")


def _print_spark_readback(result: Any) -> None:
    _print_stages_and_memory(result, f"judged on Spark ({escape(result.master)}), "
                                     f"{result.events:,} inputs, {result.outputs:,} outputs")
    judged = result.judgement
    console.print(f"verdict: {judged.get('guarantee')}; read complete: "
                  f"{judged.get('read', {}).get('complete')}")
    if result.compared:
        console.print("the numpy path and the Spark path agree" if result.agrees else
                      f"they DISAGREE: {'; '.join(result.differences[:5])}")


@bench.command("report")
@click.option("--db", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=Path("experiments/grid-23/results.db"), show_default=True,
              help="The results database to report on.")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              default=Path(".cache/bench-report"), show_default=True,
              help="Where the page and its plots go (emptied first).")
@json_option
def bench_report(db: Path, workdir: Path, as_json: bool) -> None:
    """Time `pgval report --format html --plots` on DB: every plot drawn (cold), then again
    with every plot kept (warm); the page's size."""
    from pgval.report.bench import run_report_bench

    with err_console.status("drawing the report's plots, cold then warm…") as status:
        result = run_report_bench(db, workdir, progress=lambda line: status.update(line))
    if as_json:
        _print_figures(result)
        return
    from rich.table import Table

    table = Table(title=f"pgval report --format html --plots, {result['runs']} runs "
                        f"({result['workers']} drawing processes)")
    for col in ("", "wall s", "CPU s", "plots drawn"):
        table.add_column(col, justify="right" if col else "left")
    for name in ("cold", "warm"):
        r = result[name]
        table.add_row(name, f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}", str(r["drawn"]))
    console.print(table)
    console.print(f"page {result['page_bytes'] / 1e3:,.0f} kB, plots "
                  f"{result['plots_bytes'] / 1e6:,.1f} MB in {workdir}")
