"""A job whose result pgval cannot judge is found when Spark builds its plan, in the driver:
the driver says so in one sentence and exits with JOB_REFUSED, and pgval raises it as bad
input (exit 2), never as an environment failure. A real driver process on a local Spark
(the plan is built, no query starts: no Kafka is needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgval.core.errors import UserMistake
from pgval.deploy.driver_process import DriverProcess, DriverSpec


@pytest.mark.parametrize(("body", "said"), [
    ("return sources['get'].select('id', 'resource')", "has no 'ids' column"),
    ("return sources['get'].select('id', F.rand().cast('string').alias('r'), "
     "F.array('id').alias('ids'))",
     r"calls rand\(\), whose value a re-run does not repeat"),
])
def test_a_job_the_driver_refuses_is_bad_input(tmp_path: Path, body: str, said: str) -> None:
    job = tmp_path / "job.py"
    job.write_text("from pyspark.sql import functions as F\n\n"
                   f"def build(spark, sources):\n    {body}\n")
    spec = DriverSpec(topology="job", pg="a1", bootstrap="127.0.0.1:9", master="local[1]",
                      checkpoint=tmp_path / "checkpoint", progress_file=tmp_path / "p.jsonl",
                      window_ms=1000, watermark_ms=0, trigger_ms=0, shuffle_partitions=1,
                      job=f"{job}:build")
    driver = DriverProcess(spec, tmp_path / "logs", tmp_path / "pids")
    try:
        with pytest.raises(UserMistake, match=said):
            driver.start(timeout_s=180)
    finally:
        driver.stop(grace_s=5)
