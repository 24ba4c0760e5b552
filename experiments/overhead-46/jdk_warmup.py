"""Does JDK 25's ahead-of-time cache (JEP 483/514/515: classes loaded and linked, method
profiles) warm Spark up sooner than JDK 17's class-data sharing? One local[2] streaming
query (rate source, 2,000 rows/s, 5 s windows with a list of IDs each, 500 ms trigger) for
45 s; printed: the session's start and the first micro-batches' durations.

    JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64 .venv/bin/python \\
        experiments/overhead-46/jdk_warmup.py aot-record /tmp/jdk-cache
    JAVA_HOME=... .venv/bin/python experiments/overhead-46/jdk_warmup.py aot /tmp/jdk-cache

Modes: ``none``; ``cds-record`` then ``cds`` (a dynamic archive written at exit, any JDK);
``aot-record``, ``aot-assemble`` then ``aot`` (JDK 25+: the training run's configuration,
written as its JVM exits, then the cache assembled from it with ``-XX:AOTMode=create``, as
JEP 514's one-step workflow does).
Results: docs/performance.md, "JDK 17 or JDK 25".
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def java_flags(mode: str, cache: Path) -> str:
    cache.mkdir(parents=True, exist_ok=True)
    return {"none": "",
            "cds-record": f"-XX:ArchiveClassesAtExit={cache}/session.jsa",
            "cds": f"-XX:SharedArchiveFile={cache}/session.jsa",
            "aot-record": f"-XX:AOTMode=record -XX:AOTConfiguration={cache}/session.aotconf",
            "aot": f"-XX:AOTCache={cache}/session.aot"}[mode]


def assemble_aot(cache: Path) -> None:
    """The cache from the training run's configuration, on the driver's own classpath."""
    from pyspark.find_spark_home import _find_spark_home

    home = Path(_find_spark_home())
    jars = sorted(str(j) for j in (home / "jars").glob("slf4j-api-*.jar"))
    classpath = ":".join([str(home / "conf"), *jars, str(home / "jars" / "*")])
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
    config, size = cache / "session.aotconf", -1
    while not config.is_file() or config.stat().st_size != size:  # its JVM may still write
        size = config.stat().st_size if config.is_file() else -1
        time.sleep(2)
    t0 = time.monotonic()
    subprocess.run([str(java), "-XX:AOTMode=create",
                    f"-XX:AOTConfiguration={cache}/session.aotconf",
                    f"-XX:AOTCache={cache}/session.aot", "-cp", classpath, "-Xmx1g",
                    "-XX:+IgnoreUnrecognizedVMOptions", "--add-modules=jdk.incubator.vector"],
                   check=True, capture_output=True)
    print(f"assembled {cache}/session.aot in {time.monotonic() - t0:.1f} s")


def main(mode: str, cache: Path) -> None:
    t0 = time.monotonic()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", java_flags(mode, cache))
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    t1 = time.monotonic()
    rows = (spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
            .withColumn("k", F.col("value") % 50).withWatermark("timestamp", "2 seconds")
            .groupBy(F.window("timestamp", "5 seconds"), "k")
            .agg(F.count("*").alias("n"), F.collect_list("value").alias("ids")))
    query = (rows.writeStream.format("memory").queryName("out").outputMode("append")
             .trigger(processingTime="500 milliseconds").start())
    time.sleep(45)
    durations = [p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress]
    query.stop()
    spark.stop()
    first = durations[:30]
    print(f"{mode}: session {t1 - t0:.2f} s, batches {len(durations)}, first 30 batches "
          f"{sum(first) / 1000:.2f} s, median of batches 20-39 "
          f"{sorted(durations[20:40])[len(durations[20:40]) // 2]} ms")


if __name__ == "__main__":
    mode_, cache_ = sys.argv[1], Path(sys.argv[2])
    if mode_ == "aot-assemble":  # after aot-record: its JVM wrote the file as it exited
        assemble_aot(cache_)
    else:
        main(mode_, cache_)
