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

#: The environment variable holding the session's secret settings: ``{"user": {...},
#: "conf": {...}, "kafka": {...}}`` (the run's ``--spark-conf``, the cluster's secret, the
#: Kafka client's login).
SECRETS_ENV = "PGVAL_CHECKER_SECRETS"


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
    user = dict(secrets.get("user") or {})  # the run's --spark-conf, then pgval's own
    conf = checker_conf(spec["master"], int(spec["heap_mb"]), kafka=True,
                        conf={**spec["conf"], **secrets.get("conf", {})})
    jars = ",".join(filter(None, (user.get("spark.jars"), conf.get("spark.jars"))))
    start_jvm({**user, **conf, **({"spark.jars": jars} if jars else {})})
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        start, t2, t3, t4, removal = spec["phases"]
        judged = judge_on_spark(
            spark, spec["bootstrap"], spec["inputs"], spec["output"], spec["topology"],
            int(spec["window_ms"]), Path(spec["folder"]),
            Phases(start, t2, t3, t4, removal_scheduled=removal), int(spec["resources"]),
            spec["control_ids"], secrets.get("kafka") or {})
    finally:
        spark.stop()
    write_private(args.out, json.dumps(judged.to_record()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
