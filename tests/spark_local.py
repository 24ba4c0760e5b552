"""One small local Spark session for the tests that compare pgval with Spark itself (the
oracle's differential test, the streaming plan): the same settings in both, so a difference
between them is never the session's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def local_session(app: str, cores: int = 1) -> Iterator[Any]:
    """A ``local[cores]`` session with UTC time, two shuffle partitions and no UI, and the
    jars a run's driver has (Kafka's connector, spark-avro: the JVM of a test process is
    started once, so every session of it has them); stopped after the ``yield`` (use as a
    fixture's body: ``yield from local_session(...)``)."""
    import os
    import sys

    from pyspark.sql import SparkSession

    from pgval.host.jars import ensure_jars

    # Python workers (a UDF, mapInArrow) run this Python, as pgval's own sessions' do.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    session = (SparkSession.builder.master(f"local[{cores}]")
               .appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "512m")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.jars", ensure_jars(spark=True).spark_jars_csv)
               .getOrCreate())
    try:
        yield session
    finally:
        session.stop()
