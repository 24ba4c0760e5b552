"""A run's batch oracle, as a process of its own: ``python -m pgval.topologies.batch_oracle
--job REF --run-dir RUN``. A ``local[1]`` Spark session runs the job's ``build`` as a batch
over the run's evidence (:mod:`pgval.topologies.batch`) and, where the run's stateful
operators dropped rows behind the watermark, replays the run's micro-batches through it
(:mod:`pgval.topologies.replay`). It writes ``evidence/expected.parquet`` (and
``evidence/replay.parquet``), sealed with the rest, so a re-check needs no Spark and gives
the same answer. Exit 0 with one JSON line, 2 when the job cannot be judged (one sentence
on stderr), 1 when Spark failed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from pgval.core.errors import UserMistake
from pgval.topologies.batch import (
    EXPECTED_SCHEMA,
    KAFKA_SOURCE_DDL,
    batch_meanings,
    batch_session,
    batch_sources,
    batch_table,
    carries_ids,
    evidence_records,
    job_columns,
    kafka_tables,
    recorded_inputs,
    rows_table,
    stop_batch_session,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pgval.topologies.job import Job


def replay_if_dropped(job: Job, spark: SparkSession, run_dir: Path,
                      topics: Mapping[str, str] | None, by_rows: bool, workdir: Path
                      ) -> tuple[pa.Table | None, dict[str, Any]]:
    """Where the run's stateful operators dropped rows behind the watermark, the run's
    micro-batches replayed (:mod:`pgval.topologies.replay`): its rows, or None, and what
    the replay found (``used``; ``why`` not). ``topics``: a job reading Kafka itself."""
    from pgval.evidence.bundle import load_progress
    from pgval.oracle.replay import NOTHING_DROPPED, dropped_by_run, topic_of
    from pgval.topologies.lint import RAW_DDL
    from pgval.topologies.replay import replay_run

    try:
        progress = load_progress(run_dir)
    except UserMistake as exc:  # the run's evaluation says the same of its evidence
        return None, {"used": False, "why": str(exc), "run_dropped": 0}
    dropped = dropped_by_run(progress)
    if not dropped:
        return None, {"used": False, "why": NOTHING_DROPPED, "run_dropped": 0}
    if by_rows:
        return None, {"used": False, "run_dropped": dropped,
                      "why": "a job judged by its rows: rows carry no inputs to set apart"}
    try:
        if topics is not None:
            tables = kafka_tables(run_dir, topics)
            ddl, named = KAFKA_SOURCE_DDL, dict(topics)
        else:
            tables = evidence_records(run_dir)
            ddl, named = RAW_DDL, {n: topic_of(n, progress) for n in tables}
        positions = {n: (named[n], t.column("partition").to_numpy(),
                         t.column("offset").to_numpy()) for n, t in tables.items()}
        rows, said = replay_run(spark, job, tables, positions, progress, ddl, workdir)
    except Exception as exc:  # the job failed in the replay: the drops are not told apart
        from pgval.topologies.lint import first_line

        return None, {"used": False, "run_dropped": dropped,
                      "why": f"the replay of the run's batches failed: {first_line(exc)}"}
    return rows, {**said, "run_dropped": dropped}


def main(argv: Sequence[str] | None = None) -> int:
    import os

    from pgval.evidence.bundle import save_expected, save_expected_rows, save_replay
    from pgval.oracle.values import DEFAULT_TOLERANCE
    from pgval.topologies.builtin import builtin_of
    from pgval.topologies.job_query import load_job_for_spark

    ap = argparse.ArgumentParser(prog="python -m pgval.topologies.batch_oracle",
                                 description="A run's batch oracle: its job run as a batch "
                                             "over its evidence.")
    ap.add_argument("--job", required=True, metavar="PATH.py:FUNCTION")
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--heap-mb", type=int, default=1024,
                    help="the session's heap (spark.driver.memory), MiB")
    ap.add_argument("--inputs", default="", metavar="NAME=TOPIC,...",
                    help="a job reading Kafka itself: its inputs' names and the run's topics")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        conf = json.loads(os.environ.get("PGVAL_SPARK_CONF") or "{}")
        # The session first: a job file may need one to load (as under spark-submit).
        spark = batch_session(conf, args.heap_mb)
        batch_meanings(spark)
        workdir = args.run_dir / "batch-oracle"
        try:
            spark.sparkContext.setLogLevel("ERROR")
            job = load_job_for_spark(args.job)
            topics = dict(p.split("=", 1) for p in args.inputs.split(",") if p)
            if job.reads_kafka:
                sources = recorded_inputs(spark, args.run_dir, topics, workdir)
            else:
                sources = batch_sources(spark, evidence_records(args.run_dir), workdir)
            by_rows = not carries_ids(job, spark, sources)
            table = (rows_table(job, spark, sources) if by_rows
                     else batch_table(job, spark, sources))
            replayed, replay = replay_if_dropped(job, spark, args.run_dir, topics if
                                                 job.reads_kafka else None, by_rows, workdir)
        finally:
            archive_note = stop_batch_session(spark)
            shutil.rmtree(workdir, ignore_errors=True)  # a copy of every input record
    except UserMistake as exc:  # the job (JobError) or its reads (an unknown input)
        print(f"pgval-batch: {exc}", file=sys.stderr)
        return 2
    if by_rows:
        path = save_expected_rows(args.run_dir, table)
        own = int(pc.sum(table.column("own")).as_py() or 0)
        said = {"rows": table.num_rows - own, "own_rows": own, "by_rows": True}
    else:
        path = save_expected(args.run_dir, table)
        said = {"rows": table.num_rows,
                "ids": int(pc.sum(pc.list_value_length(table.column("ids"))).as_py() or 0),
                "columns": job_columns(table)}
    said["tolerance"] = DEFAULT_TOLERANCE if job.tolerance is None else job.tolerance
    if replayed is not None:
        save_replay(args.run_dir, replayed.cast(EXPECTED_SCHEMA))
    said["replay"] = replay
    if archive_note is not None:
        said["class_archive"] = archive_note
    print(json.dumps({**said, "file": str(path), "seconds": round(time.monotonic() - t0, 3),
                      "builtin": builtin_of(job.build)}), flush=True)
    return 0



if __name__ == "__main__":
    sys.exit(main())
