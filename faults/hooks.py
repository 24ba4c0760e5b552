"""pgval's JVM hooks (``faults/jvm_hooks/*.java``), compiled once into a jar in the jar cache.

Why Java: the crash points that matter lie inside Spark's JVMs, where no Python code runs.
After a batch's sink wrote and before the batch is in the checkpoint's commit log: Spark
chooses its checkpoint file manager by class name
(``spark.sql.streaming.checkpointFileManagerClass``, the way Spark's own tests inject
failures), so a small subclass can stop the driver exactly there. While a sink task
writes: only the executor knows that one of the task's records is in Kafka and the task
has not finished, so a producer interceptor in the Kafka sink halts the executor there.
They are compiled here with the JDK's ``javac`` against pyspark's own jars and the
connector's kafka-clients (so they always match what runs them), keyed by the sources' and
Spark's versions, and shipped like the connector jars.
"""

from __future__ import annotations

import os
from pathlib import Path

from pgval.core.errors import EnvironmentFailure
from pgval.host.jars import default_cache_dir
from pgval.host.javac import build_jar, jar_path

HOOKS_DIR = Path(__file__).with_name("jvm_hooks")
#: The checkpoint file manager that halts the driver before a batch's commit is written.
CRASH_BEFORE_COMMIT = "pgval.hooks.CrashBeforeCommit"
#: Hadoop setting naming the file whose existence arms it (``spark.hadoop.`` + this).
TRIGGER_KEY = "pgval.crash.trigger"
#: The Kafka sink's producer interceptor that halts its executor after a written record.
HALT_ON_SINK_WRITE = "pgval.hooks.HaltOnSinkWrite"
#: Producer setting naming the file whose existence arms it (``kafka.`` + this on the sink).
SINK_TRIGGER_KEY = "pgval.sink.trigger"


def crash_trigger(run_dir: Path) -> Path:
    """The file that arms a run's commit hook (pgval writes it at T2, removes it after)."""
    return run_dir / "control" / "crash-before-commit"


def sink_trigger(run_dir: Path) -> Path:
    """The file that arms a run's sink-write hook (pgval writes it at T2, removes it after)."""
    return run_dir / "control" / "halt-on-sink-write"


def _spark_jars() -> Path:
    from pgval.spark.daemons import spark_home

    return spark_home() / "jars"


def _kafka_clients() -> tuple[str, str, str]:
    """The kafka-clients artifact Spark's Kafka connector runs with (per Spark line)."""
    from pgval.host.jars import installed_spark

    return installed_spark().kafka_clients


#: Where Spark keeps its checkpoint file managers: moved to a package of their own in 4.x.
CHECKPOINTING_4 = "org.apache.spark.sql.execution.streaming.checkpointing."
CHECKPOINTING_3 = "org.apache.spark.sql.execution.streaming."


def _source_for(text: str, spark_version: str) -> str:
    """A hook's source for the installed Spark: written against 4.x, the checkpoint file
    manager's package renamed for 3.5."""
    return text if not spark_version.startswith("3.") else text.replace(CHECKPOINTING_4,
                                                                        CHECKPOINTING_3)


def _compile_classpath(cache_dir: Path | None) -> str:
    """pyspark's jars and kafka-clients (the sink hook is a Kafka producer interceptor)."""
    from pgval.host.jars import ensure_jars

    name = "-".join(_kafka_clients()[1:])
    kafka = [str(p) for p in ensure_jars(cache_dir, spark=True).spark_kafka_jars
             if p.stem == name]
    if not kafka:
        raise EnvironmentFailure(f"pgval's Spark hooks need {name}.jar, which is not among "
                                "the connector's jars; remove the jar cache and try again")
    return os.pathsep.join([f"{_spark_jars()}/*", *kafka])


def ensure_hooks_jar(cache_dir: Path | None = None) -> Path:
    """The hooks jar, compiled on first use; a missing ``javac`` is one plain sentence."""
    import pyspark

    sources = {src.name: _source_for(src.read_text(), pyspark.__version__)
               for src in sorted(HOOKS_DIR.glob("*.java"))}
    cache = (cache_dir or default_cache_dir()).expanduser()
    salt = pyspark.__version__.encode() + ":".join(_kafka_clients()).encode()
    jar = jar_path(cache, "pgval-hooks", sources, salt)
    if jar.is_file():
        return jar
    return build_jar(cache, "pgval-hooks", sources, _compile_classpath(cache_dir),
                     "the crash points", salt)
