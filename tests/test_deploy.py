"""Deployments without a cluster: configuration checks, the nemesis commands, topic names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pgval.checker.explain import topic_code
from pgval.config import resolve
from pgval.core.errors import PgvalError, UserMistake
from pgval.core.schema import Topics
from pgval.core.spec import RunSpec
from pgval.deploy import make_deployment
from pgval.deploy.external import ExternalDeployment
from pgval.deploy.warm import daemon_key
from pgval.faults.nemesis import NemesisDelay, nemesis_argv
from pgval.kafka.admin import aligned_assignment


def test_external_needs_bootstrap_and_master() -> None:
    with pytest.raises(PgvalError, match="needs --bootstrap"):
        resolve({"deploy": "external", "bootstrap": "h:9092"})
    resolve({"deploy": "external", "bootstrap": "h:9092", "master": "local[2]"})


def test_external_flags_are_refused_elsewhere() -> None:
    with pytest.raises(PgvalError, match="only apply to --deploy external"):
        resolve({"bootstrap": "h:9092"})
    with pytest.raises(PgvalError, match="does not go with --deploy external"):
        resolve({"deploy": "external", "bootstrap": "h:1", "master": "local[1]",
                 "running_cluster": "runs/cluster"})


def test_external_delay_without_nemesis_is_refused_before_anything_starts() -> None:
    cfg = RunSpec(deploy="external", bootstrap="h:1", master="local[1]",
                  fault="delay-gt-timeout")
    with pytest.raises(PgvalError, match="needs your own nemesis"):
        resolve(cfg)
    cfg = cfg.replace(nemesis_inject="inject {worker}")
    with pytest.raises(PgvalError, match="go together"):
        resolve(cfg)
    resolve(cfg, nemesis_remove="remove {worker}")


def test_nemesis_placeholders_fill_single_arguments_without_a_shell() -> None:
    argv = nemesis_argv("tc-tool --host 'worker {worker}' --ms={delay_ms} ';rm -rf /'", 3, 750)
    assert argv == ["tc-tool", "--host", "worker 3", "--ms=750", ";rm -rf /"]
    with pytest.raises(PgvalError, match="placeholder"):
        nemesis_argv("x {host}", 0, 1)
    with pytest.raises(PgvalError, match="cannot split"):
        nemesis_argv("x 'unclosed", 0, 1)
    # A broker crash fills {broker} only: a delay's placeholder there is a mistake.
    assert nemesis_argv("stop-broker --id={broker}", broker=2) == ["stop-broker", "--id=2"]
    with pytest.raises(PgvalError, match=r"other than \{broker\} \("):
        nemesis_argv("stop-broker {worker}", broker=2)


@pytest.mark.parametrize("template", ["tc {worker.real}", "tc {worker:99999999999}",
                                      "tc {worker[0]}", "tc {delay_ms!r}", "tc {0}", "tc {}",
                                      "tc --ms={delay_ms:{worker}}"])
def test_a_nemesis_placeholder_is_a_plain_name_or_one_sentence(template: str) -> None:
    """str.format would evaluate an attribute (AttributeError), build a 100 GB width
    (MemoryError) or an index: each is the user's mistake, said in one sentence."""
    with pytest.raises(UserMistake, match=r"^the nemesis command 'tc' has a placeholder "
                                          r"other than \{worker\} and \{delay_ms\}"):
        NemesisDelay("delay-lt-timeout", template, "true", worker=1, delay_ms=500)
    for lone in ("tc {worker", "tc }"):
        with pytest.raises(UserMistake, match="lone brace"):
            nemesis_argv(lone, 1, 500)
    assert nemesis_argv("tc {{literal}} {worker}:{delay_ms}", 1, 500) == [
        "tc", "{literal}", "1:500"]


def test_nemesis_runs_the_users_commands_and_logs_them(tmp_path: Path) -> None:
    log = tmp_path / "log"
    py = sys.executable
    cmd = f"{py} -c \"import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + chr(10))\""
    fault = NemesisDelay("delay-lt-timeout", f"{cmd} {log} on {{worker}} {{delay_ms}}",
                         f"{cmd} {log} off {{worker}}", worker=1, delay_ms=500)
    assert fault.remove() == {}  # nothing injected: nothing to undo
    injected = fault.inject()
    # Logged with the program only: a command line may carry a token (pgval.core.redact).
    assert injected["exit_code"] == 0 and injected["argv"] == [py, *["<redacted>"] * 6]
    removed = fault.remove()
    assert removed["exit_code"] == 0
    assert log.read_text().splitlines() == ["on 1 500", "off 1"]
    assert fault.remove() == {}  # idempotent


def test_a_failing_nemesis_is_a_plain_error(tmp_path: Path) -> None:
    fault = NemesisDelay("delay-lt-timeout", f"{sys.executable} -c 'raise SystemExit(3)'",
                         "true", worker=0, delay_ms=500)
    with pytest.raises(PgvalError, match="exit 3"):
        fault.inject()
    missing = NemesisDelay("delay-lt-timeout", "/no/such/nemesis", "true", 0, 500)
    with pytest.raises(PgvalError, match="was not found"):
        missing.inject()


def test_topics_carry_their_role_in_their_name() -> None:
    t = Topics.with_prefix("pgval-1a2b-")
    assert t.all() == ("pgval-1a2b-get", "pgval-1a2b-post", "pgval-1a2b-output",
                       "pgval-1a2b-pgval-commits")
    assert (topic_code(t.get), topic_code(t.post), topic_code("get"), topic_code(t.output)) == (
        0, 1, 0, None)
    assert Topics.with_prefix("") == Topics()
    with pytest.raises(ValueError):
        Topics.with_prefix("nodash")


def test_aligned_assignment_puts_partition_p_on_one_broker_in_every_topic() -> None:
    assert aligned_assignment([4, 7, 9], 4, 2) == [[4, 7], [7, 9], [9, 4], [4, 7]]


def test_external_deployment_never_puts_secrets_in_its_description() -> None:
    dep = ExternalDeployment("h:9092", "spark://m:7077", 3,
                             kafka_config={"sasl.password": "hunter2"},
                             spark_conf={"spark.authenticate.secret": "s3"})
    text = repr(dep.describe())
    assert "hunter2" not in text and "s3'" not in text
    assert dep.client_config()["sasl.password"] == "hunter2"
    placement = dep.driver_placement()
    assert placement.kafka_options == {"sasl.password": "hunter2"}


def test_driver_gets_user_settings_in_its_environment_not_its_argv(tmp_path: Path) -> None:
    from pgval.deploy.driver_process import DriverSpec

    spec = DriverSpec(topology="sst", pg="a1", bootstrap="h:1", master="local[1]",
                      checkpoint=tmp_path / "c", progress_file=tmp_path / "p", window_ms=1000,
                      watermark_ms=0, trigger_ms=0, shuffle_partitions=1,
                      topic_prefix="pgval-ab-", kafka_options={"sasl.password": "hunter2"},
                      user_conf={"spark.authenticate.secret": "s3cret"})
    written = spec.write(tmp_path / "driver-spec.json")
    argv = spec.argv(written)
    assert not any("hunter2" in a or "s3cret" in a for a in argv)
    assert b"hunter2" not in written.read_bytes() and b"s3cret" not in written.read_bytes()
    assert "hunter2" in spec.env()["PGVAL_KAFKA_OPTIONS"]
    assert json.loads(written.read_text())["topic_prefix"] == "pgval-ab-"


def test_the_driver_reads_the_user_settings_back(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    from pgval.core.errors import UserMistake
    from pgval.deploy.driver_process import DriverSpec
    from pgval.topologies import driver

    secret = tmp_path / "secret"
    secret.write_text("abc\n")
    monkeypatch.setenv("PGVAL_KAFKA_OPTIONS", '{"security.protocol": "SASL_SSL"}')
    monkeypatch.setenv("PGVAL_SPARK_CONF",
                       json.dumps({"spark.authenticate.secret.file": str(secret)}))
    monkeypatch.delenv("PGVAL_SPARK_SECRET_FILE", raising=False)
    spec = DriverSpec(topology="sst", pg="a1", bootstrap="h:1", master="spark://m:7077",
                      checkpoint=tmp_path / "c", progress_file=tmp_path / "p", window_ms=1000,
                      watermark_ms=0, trigger_ms=0, shuffle_partitions=1,
                      topic_prefix="pgval-x-")
    doc, settings = driver.load(["--spec", str(spec.write(tmp_path / "driver-spec.json"))])
    assert settings.kafka == {"security.protocol": "SASL_SSL"}
    assert doc.topics.get == "pgval-x-get" and doc.output == "pgval-x-output"
    conf = driver.spark_conf(doc, "", settings.spark)
    assert conf["spark.authenticate.secret"] == "abc" and conf["spark.authenticate"] == "true"
    assert "spark.authenticate.secret.file" not in conf
    monkeypatch.setenv("PGVAL_KAFKA_OPTIONS", "[1]")
    with pytest.raises(UserMistake, match="PGVAL_KAFKA_OPTIONS must be a JSON object"):
        driver.Settings.from_env()
    monkeypatch.setenv("PGVAL_KAFKA_OPTIONS", "{not json")
    with pytest.raises(UserMistake, match="PGVAL_KAFKA_OPTIONS must be a JSON object"):
        driver.Settings.from_env()


def test_delay_gt_cells_need_their_own_cluster_and_sort_last() -> None:
    plain = RunSpec(fault="crash", phase_seconds=30)
    gt = RunSpec(fault="delay-gt-timeout", phase_seconds=30)
    assert daemon_key(plain) == daemon_key(RunSpec(fault="none", phase_seconds=30))
    assert daemon_key(plain) == "" < daemon_key(gt)


def test_a_warm_cluster_serves_only_runs_of_its_size() -> None:
    """A run asking for 3 brokers (a broker crash) never gets a warm cluster of 1; the
    partitions are the run's own topics', not the cluster's."""
    from pgval.core.spec import ClusterSpec
    from pgval.deploy.warm import cluster_size_key

    def key(**cluster: object) -> str:
        return cluster_size_key(RunSpec(cluster=ClusterSpec(**cluster)))  # type: ignore[arg-type]

    assert key(brokers=1) != key(brokers=3)
    assert key(workers=1) != key(workers=2) and key(isolate=False) != key(isolate=True)
    assert key(partitions=2) == key(partitions=5)


def test_make_deployment_picks_by_config(tmp_path: Path) -> None:
    from pgval.deploy.embedded import AttachedDeployment, EmbeddedDeployment

    assert isinstance(make_deployment(RunSpec(), tmp_path), EmbeddedDeployment)
    attached = make_deployment(RunSpec(running_cluster=str(tmp_path)), tmp_path)
    assert isinstance(attached, AttachedDeployment)
    with pytest.raises(PgvalError, match="no running cluster"):
        attached.start()
    ext = make_deployment(RunSpec(deploy="external", bootstrap="h:1", master="local[1]"),
                          tmp_path)
    assert isinstance(ext, ExternalDeployment)


def test_every_deployment_makes_every_fault(tmp_path: Path) -> None:
    """One table per deployment says how it injects each fault: none may miss one."""
    from pgval.core.schema import Fault
    from pgval.core.spec import ClusterSpec
    from pgval.deploy.compose.deployment import ComposeDeployment
    from pgval.deploy.embedded import AttachedDeployment, EmbeddedDeployment

    deployments = [EmbeddedDeployment(tmp_path, ClusterSpec()), AttachedDeployment(tmp_path),
                   ExternalDeployment("h:1", "local[1]", 3),
                   ComposeDeployment(tmp_path / "runs" / "r", runs_root=tmp_path / "runs")]
    faults = {f for f in Fault if f not in (Fault.NONE, Fault.SCHEDULE)}  # parts: made alone
    for dep in deployments:
        assert set(dep.fault_makers()) == faults, type(dep).__name__
    assert deployments[0].make_fault(RunSpec(), 0, None, None) is None  # type: ignore[arg-type]
