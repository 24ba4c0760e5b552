"""A run judged on Spark, as a process of its own: ``python -m pgval.topologies.spark_checker
--spec FILE --out FILE``. Its Spark session reads the run's topics to their end offsets,
computes the expected outputs and classifies every ID (:func:`pgval.scale.judge.
judge_on_spark`), writing the tables and anomaly sets into the run's evidence, then writes
the judgement as JSON to ``--out``.

A process of its own, as the streaming driver and the batch oracle are: its JVM goes with it
(a run's JVM never outlives the run, nor carries one run's settings into the next run of a
matrix), a time-out stops it whole, and the reaper and ``pgval cleanup`` find it by its pid
file. The session's settings hold the cluster's secret and the Kafka login: they come in
the environment (``PGVAL_CHECKER_SECRETS``, JSON, with the run's ``--spark-conf``, which
pgval's own settings override) and reach the JVM in memory
(:func:`pgval.topologies.driver.start_jvm`), never on a command line or on disk. Exit 0 with
the judgement written, 1 when Spark failed (the log says why).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.core.errors import UserMistake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pgval.records.phases import Phases
    from pgval.scale.judge import SparkJudgement

#: The environment variable holding the session's secret settings: ``{"user": {...},
#: "conf": {...}, "kafka": {...}}`` (the run's ``--spark-conf``, the cluster's secret, the
#: Kafka client's login).
SECRETS_ENV = "PGVAL_CHECKER_SECRETS"
#: What a refusal of the user's job (exit 2) starts its one sentence with.
REFUSED = "pgval-spark-checker: "


def main(argv: Sequence[str] | None = None) -> int:
    from pgval.core.files import write_private
    from pgval.records.phases import Phases
    from pgval.scale.agreement import checker_conf
    from pgval.scale.judge import judge_on_spark
    from pgval.topologies.driver import start_jvm

    ap = argparse.ArgumentParser(prog="python -m pgval.topologies.spark_checker",
                                 description="A run read back and judged on Spark.")
    ap.add_argument("--spec", required=True, type=Path, help="the run's settings (JSON)")
    ap.add_argument("--out", required=True, type=Path, help="where the judgement goes")
    args = ap.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    secrets = json.loads(os.environ.pop(SECRETS_ENV, "") or "{}")
    os.environ.setdefault("SPARK_LOCAL_IP", spec.get("driver_host") or "127.0.0.1")
    # Python workers run this Python (a job's UDFs, the value comparison), as the run's
    # driver's do: else ``python3`` from PATH, which may lack pgval and the job's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    user = dict(secrets.get("user") or {})  # the run's --spark-conf, then pgval's own
    conf = checker_conf(spec["master"], int(spec["heap_mb"]), kafka=True,
                        conf={**spec["conf"], **secrets.get("conf", {})})
    jars = ",".join(filter(None, (user.get("spark.jars"), conf.get("spark.jars"))))
    start_jvm({**user, **conf, **({"spark.jars": jars} if jars else {})})
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    start, t2, t3, t4, removal = spec["phases"]
    phases = Phases(start, t2, t3, t4, removal_scheduled=removal)
    try:
        if spec.get("job"):
            judged = _judge_job(spark, spec, phases, user, secrets.get("kafka") or {})
        else:
            judged = judge_on_spark(
                spark, spec["bootstrap"], spec["inputs"], spec["output"], spec["topology"],
                int(spec["window_ms"]), Path(spec["folder"]), phases, int(spec["resources"]),
                spec["control_ids"], secrets.get("kafka") or {})
    except UserMistake as exc:  # the user's job, in its batch run: one sentence
        print(f"{REFUSED}{exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        spark.stop()
    problem = (judged.job or {}).get("problem")
    if problem:  # rows the validator cannot use: the job's, as on the numpy path
        print(f"{REFUSED}{problem}", file=sys.stderr, flush=True)
        return 2
    write_private(args.out, json.dumps(judged.to_record()) + "\n")
    return 0


def _judge_job(spark: SparkSession, spec: dict[str, Any], phases: Phases,
               user: dict[str, str], kafka: dict[str, Any]) -> SparkJudgement:
    """A user's job's run judged on Spark: its batch run in this session is the oracle
    (:func:`pgval.topologies.batch.batch_rows_on_spark`). Where the run's operators dropped
    rows behind the watermark, nothing is judged: telling those from losses replays the
    run's batches, which only the numpy path does."""
    from pgval.evidence.bundle import load_progress
    from pgval.oracle.replay import dropped_by_run
    from pgval.oracle.values import DEFAULT_TOLERANCE
    from pgval.scale.judge import SparkJudgement, judge_job_on_spark
    from pgval.scale.kafka_read import SparkReadBack
    from pgval.topologies.batch import batch_meanings, batch_rows_on_spark
    from pgval.topologies.job_query import load_job_for_spark

    try:
        dropped = dropped_by_run(load_progress(Path(spec["run_dir"])))
    except UserMistake:  # no progress kept: the run's evaluation says so; nothing to replay
        dropped = 0
    if dropped:
        return SparkJudgement(
            SparkReadBack({}, [], 0, 0, 0, 0, 0, 0, []), None, {},
            unjudged=f"Spark dropped {dropped:,} rows behind the watermark in the run, and "
                     "only --checker numpy replays the run's batches to tell them from "
                     "losses")
    # The key texts are the streaming query's only in its session time zone (the user's).
    spark.conf.set("spark.sql.session.timeZone",
                   user.get("spark.sql.session.timeZone") or "UTC")
    batch_meanings(spark)
    job = load_job_for_spark(spec["job"])
    tolerance = DEFAULT_TOLERANCE if job.tolerance is None else job.tolerance
    return judge_job_on_spark(
        spark, spec["bootstrap"], spec["inputs"], spec["output"], Path(spec["folder"]),
        lambda staged, folder: batch_rows_on_spark(job, spark, staged, spec["inputs"],
                                                   folder),
        tolerance, phases, spec["control_ids"], kafka)


if __name__ == "__main__":
    sys.exit(main())
