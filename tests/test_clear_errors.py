"""Environment mistakes end in one plain sentence, with everything started so far stopped."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pgval.core.errors import PgvalError
from pgval.spark import daemons as spark_mod


@pytest.mark.cluster
def test_a_busy_master_port_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark would silently move to port+1 and the user would later read "worker did not
    register"; with spark.port.maxRetries=0 and the log check it is one sentence."""
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    port = squatter.getsockname()[1]
    ports = iter([port])
    real = spark_mod.free_port
    monkeypatch.setattr(spark_mod, "free_port", lambda host="127.0.0.1": next(ports, None)
                        or real(host))
    cluster = spark_mod.SparkCluster(tmp_path, workers=1, isolate=False)
    try:
        with pytest.raises(PgvalError, match=f"port {port} .* is taken"):
            cluster.start()
    finally:
        squatter.close()
    assert cluster.master is not None and not cluster.master.alive()


def test_delay_without_root_fails_before_deploying(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Not at T2 after deploy and a whole control phase: before anything starts."""
    from pgval.core.spec import RunSpec
    from pgval.run import experiment
    from pgval.run.experiment import Experiment

    monkeypatch.setattr(experiment.os, "geteuid", lambda: 1000)
    exp = Experiment(RunSpec(topology="sst", fault="delay-lt-timeout"),
                     tmp_path / "run", db=tmp_path / "r.db")
    with pytest.raises(PgvalError, match="needs root"):
        exp.run()
    assert exp.deployment.cluster is None and not (tmp_path / "run" / "logs").exists()


def test_a_kafka_error_is_one_line() -> None:
    code = ("import pgval.cli.app as c\n"
            "from confluent_kafka import KafkaError, KafkaException\n"
            "def boom(**kw):\n"
            "    raise KafkaException(KafkaError(KafkaError._TRANSPORT, 'broker down'))\n"
            "c.main = boom\n"
            "c.run()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 4  # the environment
    assert "error: Kafka: broker down" in proc.stderr and "Traceback" not in proc.stderr
