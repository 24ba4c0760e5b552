"""One small local Spark session for the tests that compare pgval with Spark itself (the
oracle's differential test, the streaming plan): the same settings in both, so a difference
between them is never the session's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def local_session(app: str, cores: int = 1) -> Iterator[Any]:
    """A ``local[cores]`` session with UTC time, two shuffle partitions and no UI; stopped
    after the ``yield`` (use as a fixture's body: ``yield from local_session(...)``)."""
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master(f"local[{cores}]")
               .appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "512m")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    try:
        yield session
    finally:
        session.stop()
