"""`pgval generate` and `pgval record`: the generator's events for another engine's job, and
its topics read back into the files `pgval check` judges (:mod:`pgval.streams`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from pgval.cli.common import console, print_json
from pgval.cli.errors import UserError, err_console
from pgval.cli.options import config_option, key_values
from pgval.core.errors import EnvironmentFailure


@click.command()
@click.option("--out", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write JSON lines to this file (ingress_ts: the wall clock at writing).")
@click.option("--bootstrap", metavar="HOST:PORT",
              help="Write to Kafka: the topics PREFIXget and PREFIXpost, created here with "
                   "LogAppendTime (they must not exist yet).")
@click.option("--topic-prefix", default="", show_default=True,
              help="Prefix of the two topics, e.g. 'run7-' for run7-get and run7-post.")
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of each topic created.")
@click.option("--rate", type=click.FloatRange(min=0), default=2000.0, show_default=True,
              help="Events/s over all producers; 0: as fast as the target takes them.")
@click.option("--events", type=click.IntRange(min=1), help="Stop after this many events.")
@click.option("--duration-s", type=click.FloatRange(min=0, min_open=True),
              help="Stop after this many seconds (with a rate: rate × seconds events).")
@click.option("--close-after-ms", type=click.IntRange(min=0), default=600_000,
              show_default=True,
              help="With --bootstrap: end with closing events (one per resource on every "
                   "partition of both topics, IDs that `record` sets aside) this far past "
                   "the wall clock in event time, so an event-time job closes its last "
                   "windows; 0: none.")
@config_option("producers")
@config_option("resources")
@config_option("get_share")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Which event is which (type and resource of every ID).")
@click.option("--kafka-config", "kafka_config", multiple=True, metavar="KEY=VALUE",
              callback=key_values,
              help="librdkafka settings for the brokers (login: sasl.*, ssl.*).")
@click.option("--json", "as_json", is_flag=True, help="Print the generator's report as JSON.")
def generate(path: Path | None, bootstrap: str | None, topic_prefix: str, partitions: int,
             rate: float, events: int | None, duration_s: float | None, close_after_ms: int,
             producers: int, resources: int, get_share: float, seed: int,
             kafka_config: dict[str, str], as_json: bool) -> None:
    """Write the synthetic web log (GET/POST per resource) to Kafka or a file, for a job
    of any engine that `pgval record` and `pgval check` then judge."""
    from pgval.core.schema import Topics
    from pgval.datasets.generator import GeneratorConfig, GeneratorError
    from pgval.streams import Target
    from pgval.streams import generate as run

    if (path is None) == (bootstrap is None):
        raise UserError("say where the events go: --out FILE or --bootstrap HOST:PORT")
    if events is None and duration_s is None:
        raise UserError("say when to stop: --events N or --duration-s SECONDS")
    if path is not None and (topic_prefix or kafka_config):
        raise UserError("--topic-prefix and --kafka-config are for --bootstrap")
    cfg = GeneratorConfig(resources=resources, get_share=get_share, producers=producers,
                          rate=rate or None, duration_s=duration_s, events=events, seed=seed)
    try:
        topics = Topics.with_prefix(topic_prefix)
    except ValueError as exc:
        raise UserError(f"--topic-prefix: {exc}") from exc
    target = Target(path=path, bootstrap=bootstrap, topics=topics, partitions=partitions,
                    config=kafka_config)
    from rich.progress import Progress, TextColumn

    try:
        with Progress(TextColumn("generate: {task.completed:,.0f} events delivered"),
                      console=err_console, disable=as_json, transient=True) as progress:
            task = progress.add_task("generate", total=None)
            done = run(cfg, target, close_after_ms,
                       on_progress=lambda n: progress.update(task, completed=n))
    except GeneratorError as exc:  # a file that cannot be written is the --out given
        if path is None:
            raise
        raise UserError(f"cannot write the events to {path}: {exc}") from exc
    report = done.report
    info: dict[str, Any] = {**done.as_dict(), "target": target.describe()}
    if as_json:
        print_json(info)
    else:
        console.print(escape(report.summary()))
        if done.closing_events:
            console.print(f"then {done.closing_events} closing events (event time "
                          f"{close_after_ms / 1000:g} s past the wall clock; `pgval record` "
                          "sets them aside)")
    if not report.ok:
        raise EnvironmentFailure(f"the generator did not deliver everything: "
                                 f"{'; '.join(report.errors) or 'see the counts above'}")


@click.command()
@click.option("--bootstrap", metavar="HOST:PORT", required=True, help="A broker to read from.")
@click.option("--inputs", "input_topics", metavar="TOPIC[,TOPIC]", required=True,
              help="The input topics (the generator's GETs and POSTs), comma-separated.")
@click.option("--outputs", "output_topic", metavar="TOPIC", required=True,
              help="The job's output topic.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="Folder for inputs.jsonl, outputs.jsonl and record.json.")
@click.option("--isolation", type=click.Choice(["read_committed", "read_uncommitted"]),
              default="read_committed", show_default=True,
              help="read_committed skips aborted transactions' records, as a transactional "
                   "sink's consumers do.")
@click.option("--timeout-s", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="Give up (and say what was short) after this long.")
@click.option("--kafka-config", "kafka_config", multiple=True, metavar="KEY=VALUE",
              callback=key_values,
              help="librdkafka settings for the brokers (login: sasl.*, ssl.*).")
def record(bootstrap: str, input_topics: str, output_topic: str, out_dir: Path,
           isolation: str, timeout_s: float, kafka_config: dict[str, str]) -> None:
    """Read topics from their beginning up to their current end (all of it, or an error
    saying what was short) into the files `pgval check` judges."""
    from pgval.streams import record as run
    from pgval.streams import topics_problem

    inputs = [t.strip() for t in input_topics.split(",") if t.strip()]
    if problem := topics_problem(inputs, output_topic):
        raise UserError(problem)
    info = run(bootstrap, inputs, output_topic, out_dir, config=kafka_config,
               isolation=isolation, timeout_s=timeout_s)
    console.print(f"recorded {info['inputs']:,} inputs and {info['outputs']:,} outputs "
                  f"(every record up to the end offsets) into {escape(str(out_dir))}")
    if info["create_time_topics"]:
        err_console.print(
            f"warning: {', '.join(info['create_time_topics'])} stamp CreateTime: ingress "
            "times are the producers' clocks, not the broker's (latency and phases then "
            "measure those clocks; create topics with message.timestamp.type=LogAppendTime)",
            soft_wrap=True)
    console.print(f"check them with:\n  pgval check --topology sst|mst --inputs "
                  f"{escape(str(out_dir / 'inputs.jsonl'))} --outputs "
                  f"{escape(str(out_dir / 'outputs.jsonl'))} --window-ms W [--phases ...]")
