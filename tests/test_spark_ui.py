"""Every Spark web UI pgval starts is read-only and bound to the run's own address.

Why: Spark's web UIs take no part in ``spark.authenticate``; with ``spark.ui.killEnabled``
left at its default the master's UI serves ``/app/kill`` and ``/driver/kill`` (and an
application's UI ``/jobs/job/kill``) to any local user who reaches its address. Here the
settings pgval passes, read back from the java command line Spark's own launcher builds
from them (fast, no cluster); tests/test_spark_runtime.py sends the kill request to a
running master and sees it refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pgval.deploy.driver_process import DriverSpec
from pgval.spark.daemons import (
    MASTER_CLASS,
    WORKER_CLASS,
    SparkCluster,
    _check_java,
    _launcher_command,
)

ROOT = Path(__file__).resolve().parent.parent
KILL_OFF = "-Dspark.ui.killEnabled=false"


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SparkCluster:
    """A cluster not started, whose faults' settings try to turn the kill links back on."""
    monkeypatch.setenv("PGVAL_CLASS_SHARING", "0")  # no class archive recorded by a test
    return SparkCluster(tmp_path, workers=1, isolate=False,
                        extra_conf={"spark.ui.killEnabled": "true",
                                    "spark.master.ui.decommission.allow.mode": "ALLOW"})


def _java_props(argv: list[str]) -> dict[str, str]:
    """The last ``-Dkey=value`` of each key on a java command line (the JVM's own rule)."""
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("-D") and "=" in a)


def test_master_and_worker_uis_have_no_kill_endpoints(cluster: SparkCluster) -> None:
    java = _check_java()
    master_env = cluster._env("10.99.0.1", opts_var="SPARK_MASTER_OPTS")
    master = _launcher_command(java, MASTER_CLASS, ["--host", "10.99.0.1"], master_env)
    worker_env = cluster._env("10.99.0.2", opts_var="SPARK_WORKER_OPTS")
    worker = _launcher_command(java, WORKER_CLASS, ["spark://10.99.0.1:1"], worker_env)
    for argv in (master, worker):
        props = _java_props(argv)
        assert props["spark.ui.killEnabled"] == "false", argv
        assert props["spark.master.ui.decommission.allow.mode"] == "DENY", argv
    # A UI binds SPARK_LOCAL_IP (every address without it): the daemon's own address.
    assert master_env["SPARK_LOCAL_IP"] == "10.99.0.1"
    assert worker_env["SPARK_LOCAL_IP"] == "10.99.0.2"


def test_a_driver_in_this_process_gets_the_kill_endpoints_off(cluster: SparkCluster) -> None:
    assert cluster.driver_conf()["spark.ui.killEnabled"] == "false"


def test_a_users_driver_ui_stays_read_only(tmp_path: Path) -> None:
    """``--spark-conf`` may turn the driver's UI on, never its kill endpoints: the document
    the driver reads carries the setting, and the driver's conf puts it after the user's."""
    from pgval.core.driver_spec import DriverDocument
    from pgval.topologies.driver import spark_conf

    user = {"spark.ui.enabled": "true", "spark.ui.killEnabled": "true"}
    spec = DriverSpec(topology="sst", pg="a1", bootstrap="h:1", master="spark://h:2",
                      checkpoint=tmp_path / "c", progress_file=tmp_path / "p", window_ms=1000,
                      watermark_ms=0, trigger_ms=0, shuffle_partitions=1, user_conf=user,
                      conf={"spark.network.timeout": "20s"})
    written = spec.write(tmp_path / "driver-spec.json")
    doc = DriverDocument.from_json(json.loads(written.read_text()))
    conf = spark_conf(doc, "", user)
    assert conf["spark.ui.enabled"] == "true" and conf["spark.ui.killEnabled"] == "false"
    assert conf["spark.network.timeout"] == "20s"


def test_compose_uis_have_no_kill_endpoints() -> None:
    services = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())["services"]
    master = services["spark-master"]["environment"]["SPARK_MASTER_OPTS"].split()
    assert KILL_OFF in master and "-Dspark.master.ui.decommission.allow.mode=DENY" in master
    for name in ("spark-worker-0", "spark-worker-1"):
        assert KILL_OFF in services[name]["environment"]["SPARK_WORKER_OPTS"].split()
