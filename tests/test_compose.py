"""The Docker deployment without Docker: compose file, Dockerfiles, pumba argv, fault flow.

No engine is needed (CI has none): the compose file is checked against the vendored Compose
Specification schema (tests/data/compose-spec.SOURCE.md), `docker compose config` runs only
where the compose plugin exists, and PumbaFault runs against a fake engine and a fake pumba.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from docker.errors import NotFound

from pgval.core.errors import PgvalError
from pgval.deploy.compose import pumba
from pgval.deploy.compose import stack as docker_stack

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "compose" / "docker-compose.yml"
SCHEMA = Path(__file__).parent / "data" / "compose-spec.json"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML (a test extra) reads the compose file")
    return yaml.safe_load(COMPOSE.read_text())


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


# ---- compose file --------------------------------------------------------------------------


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    errors = sorted(cls(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_schema_rejects_a_broken_file(compose: dict[str, Any]) -> None:
    """Guards the test above: a misspelt key must fail, or the schema checks nothing."""
    schema = json.loads(SCHEMA.read_text())
    broken = json.loads(json.dumps(compose))
    broken["services"]["kafka-0"]["helthcheck"] = broken["services"]["kafka-0"].pop("healthcheck")
    assert list(jsonschema.validators.validator_for(schema)(schema).iter_errors(broken))


def _published(port: Any) -> tuple[str | None, str]:
    """(host ip, text) of one `ports` entry, short or long syntax."""
    if isinstance(port, dict):
        return port.get("host_ip"), json.dumps(port)
    text = str(port).split("/", 1)[0]
    parts = text.split(":")
    return (parts[0] if len(parts) == 3 else None), str(port)


def test_every_published_port_binds_loopback_only(compose: dict[str, Any]) -> None:
    seen = 0
    for name, svc in _services(compose).items():
        assert svc.get("network_mode") != "host", name
        for port in svc.get("ports", []):
            host_ip, text = _published(port)
            assert host_ip == "127.0.0.1", f"{name} publishes {text} beyond 127.0.0.1"
            seen += 1
    assert seen >= 6  # 3 brokers, master RPC + UI, worker UIs


def test_containers_are_named_labelled_and_bounded(compose: dict[str, Any]) -> None:
    svcs = _services(compose)
    by_role: dict[str, list[tuple[int, str]]] = {}
    for name, svc in svcs.items():
        labels = svc["labels"]
        role, index = labels[docker_stack.ROLE_LABEL], int(labels[docker_stack.INDEX_LABEL])
        assert role in docker_stack.ROLES, name
        by_role.setdefault(role, []).append((index, svc["container_name"]))
        assert svc["restart"] == "no", f"{name}: a killed container must stay down until T3"
        assert "healthcheck" in svc and "mem_limit" in svc, name
        assert svc["networks"] == ["pgval"], name
    assert sorted(by_role["kafka"]) == [(i, docker_stack.broker_container(i)) for i in range(3)]
    assert sorted(by_role["spark-worker"]) == [(i, docker_stack.worker_container(i))
                                               for i in range(2)]
    assert by_role["runner"] == [(0, docker_stack.RUNNER_CONTAINER)]
    assert len(by_role["spark-master"]) == 1


def test_kafka_is_a_three_voter_kraft_quorum(compose: dict[str, Any]) -> None:
    svcs = _services(compose)
    brokers = [svcs[f"kafka-{i}"] for i in range(3)]
    voters = {b["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"] for b in brokers}
    assert voters == {"0@kafka-0:9093,1@kafka-1:9093,2@kafka-2:9093"}
    host_ports = []
    for i, b in enumerate(brokers):
        env = b["environment"]
        assert b["image"] == "apache/kafka:4.1.1"
        assert env["KAFKA_NODE_ID"] == i and env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["CLUSTER_ID"] == brokers[0]["environment"]["CLUSTER_ID"]
        listeners = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
        advertised = dict(item.split("://") for item in listeners)
        assert advertised["INTERNAL"] == f"kafka-{i}:19092"
        host, port = advertised["HOST"].rsplit(":", 1)
        assert host == "127.0.0.1" and b["ports"] == [f"127.0.0.1:{port}:{port}"]
        host_ports.append(f"127.0.0.1:{port}")
    assert ",".join(host_ports) == docker_stack.HOST_BOOTSTRAP
    environment = compose["services"]["pgval"]["environment"]
    assert environment["PGVAL_BOOTSTRAP"] == docker_stack.NETWORK_BOOTSTRAP


def test_workers_join_the_master(compose: dict[str, Any]) -> None:
    svcs = _services(compose)
    for i in range(2):
        w = svcs[f"spark-worker-{i}"]
        assert w["command"] == ["spark-class", "org.apache.spark.deploy.worker.Worker",
                                docker_stack.SPARK_MASTER_URL]
        assert w["environment"]["SPARK_LOCAL_HOSTNAME"] == f"spark-worker-{i}" == w["hostname"]
        assert w["build"]["dockerfile"] == "spark.Dockerfile"


def test_pyspark_in_the_images_matches_pyproject() -> None:
    pin = re.search(r'"pyspark==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin is not None
    spark_df = (ROOT / "compose" / "spark.Dockerfile").read_text()
    assert re.findall(r"^ARG PYSPARK_VERSION=(\S+)$", spark_df, re.M) == [pin.group(1)]
    assert '"pyspark==${PYSPARK_VERSION}"' in spark_df
    from pgval.host.jars import SPARK_VERSION

    assert pin.group(1) == SPARK_VERSION
    runner_df = (ROOT / "compose" / "pgval.Dockerfile").read_text()
    assert "pip install --no-cache-dir ." in runner_df  # pyspark comes from pyproject's pin
    assert "pyspark==" not in runner_df


def test_docker_compose_config_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the docker CLI has no compose plugin here")
    done = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# ---- pumba argv ----------------------------------------------------------------------------


def test_kill_argv() -> None:
    assert pumba.kill_args("pgval-spark-worker-1") == [
        "pumba", "--log-level", "info", "kill", "--signal", "SIGKILL", "pgval-spark-worker-1"]
    assert pumba.kill_args("c", "SIGTERM")[-2:] == ["SIGTERM", "c"]


def test_delay_argv() -> None:
    assert pumba.delay_args("pgval-spark-worker-0", 15000, 95) == [
        "pumba", "--log-level", "info", "netem", "--duration", "95s", "--interface", "eth0",
        "--tc-image", "ghcr.io/alexei-led/pumba-alpine-nettools:latest", "--pull-image=false",
        "delay", "--time", "15000", "--jitter", "0", "--correlation", "0",
        "pgval-spark-worker-0"]
    argv = pumba.delay_args("w", 500, 2.5, jitter_ms=50, interface="eth1", tc_image="img:1",
                            pull_image=True)
    assert argv == ["pumba", "--log-level", "info", "netem", "--duration", "2500ms",
                    "--interface", "eth1", "--tc-image", "img:1", "delay", "--time", "500",
                    "--jitter", "50", "--correlation", "0", "w"]


@pytest.mark.parametrize("call", [
    lambda: pumba.kill_args("re2:^pgval"),
    lambda: pumba.kill_args(""),
    lambda: pumba.kill_args("w", "SIGNOPE"),
    lambda: pumba.delay_args("w", 0, 10),
    lambda: pumba.delay_args("w", 100, 0),
    lambda: pumba.delay_args("w", 100, 10, jitter_ms=101),
    lambda: pumba.delay_args("w", 100, 10, interface="eth0; reboot"),
])
def test_bad_fault_parameters_are_refused(call: Any) -> None:
    with pytest.raises(ValueError):
        call()


def test_spark_daemon_opts_reach_master_and_workers(compose: dict[str, Any]) -> None:
    from pgval.faults.timeouts import profile_for

    conf = profile_for("delay-gt-timeout", 90).daemon_conf
    opts = docker_stack.spark_daemon_opts(conf)
    assert opts.startswith("-Dspark.") and len(opts.split()) == len(conf)
    for name in ("spark-master", "spark-worker-0", "spark-worker-1"):
        env = _services(compose)[name]["environment"]
        assert env["SPARK_DAEMON_JAVA_OPTS"] == "${PGVAL_SPARK_DAEMON_OPTS:-}", name


def test_netem_lines() -> None:
    plain = "qdisc noqueue 0: root refcnt 2 \n"
    old = "qdisc netem 8001: root refcnt 2 limit 1000 delay 500ms\n"
    owned = ("qdisc prio 504d: root refcnt 2 bands 3\n"
             "qdisc netem 504d3: parent 504d:3 limit 1000 delay 500ms\n")
    assert pumba.netem_lines(plain) == []
    assert pumba.netem_lines(old) == [old.strip()]
    assert len(pumba.netem_lines(owned)) == 2


# ---- missing engine / pumba: one plain sentence ---------------------------------------------


def _one_sentence(text: str) -> None:
    assert "\n" not in text and "Traceback" not in text and "(<" not in text
    assert "--deploy compose" in text


def test_require_engine_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(PgvalError) as err:
        docker_stack.require_engine(base_url=f"unix://{tmp_path}/docker.sock", timeout_s=2)
    _one_sentence(str(err.value))
    assert str(err.value).startswith("the Docker engine is not reachable at unix://")


def test_require_engine_default_socket() -> None:
    try:
        docker_stack.require_engine(timeout_s=2)
    except PgvalError as exc:
        _one_sentence(str(exc))
    else:
        pytest.skip("a Docker engine is reachable here")


def test_require_pumba_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(PgvalError) as err:
        pumba.require_pumba(path=str(tmp_path))
    _one_sentence(str(err.value))
    assert "pumba was not found on PATH" in str(err.value)


# ---- PumbaFault against a fake engine and a fake pumba ---------------------------------------

FAKE_PUMBA = """#!/bin/sh
# Records its argv; "kill" marks the target exited, "netem" adds a qdisc until SIGTERM.
state="$(dirname "$0")"
echo "$@" >> "$state/argv"
case "$*" in
  *" kill "*) echo exited > "$state/status" ;;
  *" netem "*)
    trap 'rm -f "$state/qdisc"; exit 0' TERM
    echo "qdisc netem 8001: root refcnt 2 limit 1000 delay 500ms" > "$state/qdisc"
    while :; do sleep 0.05; done ;;
esac
"""


class FakeContainer:
    """The few Container methods PumbaFault uses, backed by files the fake pumba writes."""

    def __init__(self, state: Path, has_tc: bool = True) -> None:
        self.state, self.has_tc = state, has_tc
        self.name, self.id, self.labels = "pgval-spark-worker-0", "c0ffee", {
            "pgval.role": "spark-worker", "pgval.index": "0"}
        self.attrs: dict[str, Any] = {"State": {"ExitCode": 137}}
        self.execs: list[tuple[list[str], bool]] = []
        (state / "status").write_text("running\n")

    @property
    def status(self) -> str:
        return (self.state / "status").read_text().strip()

    def reload(self) -> None:
        pass

    def start(self) -> None:
        (self.state / "status").write_text("running\n")

    def exec_run(self, cmd: list[str], privileged: bool = False) -> tuple[int, bytes]:
        self.execs.append((cmd, privileged))
        if not self.has_tc:
            return 126, b'exec: "tc": executable file not found in $PATH'
        return self.tc(cmd, privileged)

    def tc(self, cmd: list[str], privileged: bool) -> tuple[int, bytes]:
        qdisc = self.state / "qdisc"
        if cmd[:3] == ["tc", "qdisc", "show"]:
            text = qdisc.read_text() if qdisc.exists() else "qdisc noqueue 0: root refcnt 2\n"
            return 0, text.encode()
        if cmd[:3] == ["tc", "qdisc", "del"] and privileged:
            qdisc.unlink(missing_ok=True)
            return 0, b""
        return 2, b"RTNETLINK answers: Operation not permitted"


class FakeClient:
    def __init__(self, container: FakeContainer) -> None:
        self.container = container
        self.sidecars: list[dict[str, Any]] = []
        outer = self

        class Containers:
            def get(self, name: str) -> FakeContainer:
                if name != container.name:
                    raise NotFound(name)
                return container

            def list(self, all: bool = False, filters: Any = None) -> list[FakeContainer]:  # noqa: A002
                return [container]

            def run(self, image: str, **kw: Any) -> bytes:
                outer.sidecars.append({"image": image, **kw})
                # The sidecar has tc and NET_ADMIN whatever the target image lacks.
                _code, out = container.tc([*kw["entrypoint"], *kw["command"]], privileged=True)
                return out

        class Images:
            def get(self, image: str) -> object:
                return object()

        self.containers, self.images = Containers(), Images()


@pytest.fixture()
def fake(tmp_path: Path) -> tuple[Path, FakeContainer, FakeClient]:
    exe = tmp_path / "pumba"
    exe.write_text(FAKE_PUMBA)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    container = FakeContainer(tmp_path)
    return exe, container, FakeClient(container)


def test_kill_fault_kills_then_restarts(fake: tuple[Path, FakeContainer, FakeClient],
                                        tmp_path: Path) -> None:
    exe, container, client = fake
    run_dir = tmp_path / "run"
    fault = pumba.PumbaFault("crash", "kill", container.name, client=client, pumba=str(exe),
                             log_dir=run_dir / "faults", pid_dir=run_dir / "pids")
    injected = fault.inject()
    assert injected["mechanism"] == "pumba" and injected["status"] == "exited"
    assert injected["argv"] == pumba.kill_args(container.name)
    assert (tmp_path / "argv").read_text().split() == injected["argv"][1:]
    assert container.status == "exited"
    assert not list((run_dir / "pids").glob("*.json"))  # one-shot: no pid file left
    removed = fault.remove()
    assert container.status == "running" and removed["running_ms"] >= removed["restart_ms"]
    assert fault.remove() == {}


def test_delay_fault_applies_terminates_and_verifies(
        fake: tuple[Path, FakeContainer, FakeClient], tmp_path: Path) -> None:
    exe, container, client = fake
    (tmp_path / "qdisc").write_text("qdisc netem 1: root refcnt 2 delay 9ms\n")  # stale (#168)
    fault = pumba.PumbaFault("delay-gt-timeout", "delay", container.name, delay_ms=500,
                             duration_s=60, client=client, pumba=str(exe),
                             log_dir=tmp_path / "run" / "faults")
    injected = fault.inject()
    assert injected["stale_netem_deleted"] is True
    assert injected["qdisc"].startswith("qdisc netem 8001:")
    assert injected["applied_ms"] >= injected["started_ms"]
    removed = fault.remove()
    assert removed["pumba_exit"] == 0 and removed["ended_before_remove"] is False
    assert removed["netem_deleted"] is False  # pumba removed it on SIGTERM
    assert not (tmp_path / "qdisc").exists()


def test_delay_fault_deletes_what_pumba_left(
        fake: tuple[Path, FakeContainer, FakeClient], tmp_path: Path) -> None:
    """pumba killed with SIGKILL leaves its qdisc (#147); remove() must delete it."""
    exe, container, client = fake
    exe.write_text(FAKE_PUMBA.replace("trap 'rm -f \"$state/qdisc\"; exit 0' TERM",
                                      "trap '' TERM"))
    fault = pumba.PumbaFault("delay", "delay", container.name, delay_ms=500, duration_s=60,
                             client=client, pumba=str(exe))
    fault.inject()
    assert fault._proc is not None
    fault._proc.kill()  # as if pumba died
    removed = fault.remove()
    assert removed["netem_deleted"] is True and not (tmp_path / "qdisc").exists()
    assert ["tc", "qdisc", "del", "dev", "eth0", "root"] in [c for c, _ in container.execs]


def test_tc_falls_back_to_a_sidecar_without_tc_in_the_image(
        fake: tuple[Path, FakeContainer, FakeClient], tmp_path: Path) -> None:
    _, container, client = fake
    container.has_tc = False
    (tmp_path / "qdisc").write_text("qdisc netem 8001: root refcnt 2 delay 500ms\n")
    assert pumba.clear_netem(container.name, client=client) is True  # type: ignore[arg-type]
    assert client.sidecars and client.sidecars[0]["network_mode"] == "container:c0ffee"
    assert client.sidecars[0]["cap_add"] == ["NET_ADMIN"]
    assert not (tmp_path / "qdisc").exists()


def test_a_missing_target_is_a_plain_error(fake: tuple[Path, FakeContainer, FakeClient]) -> None:
    exe, _, client = fake
    fault = pumba.PumbaFault("crash", "kill", "pgval-spark-worker-9", client=client,
                             pumba=str(exe))
    with pytest.raises(PgvalError, match="does not exist"):
        fault.inject()
    assert fault.remove() == {}


def test_find_containers_orders_by_index(fake: tuple[Path, FakeContainer, FakeClient]) -> None:
    _, _, client = fake
    refs = docker_stack.find_containers("spark-worker", client=client)  # type: ignore[arg-type]
    assert [(r.name, r.role, r.index, r.running) for r in refs] == [
        ("pgval-spark-worker-0", "spark-worker", 0, True)]


# --- `pgval validate --deploy compose` wiring -------------------------------------------------


def test_compose_driver_runs_inside_the_runner_with_mapped_paths(tmp_path: Path) -> None:
    from pgval.deploy.compose.deployment import ComposeDeployment
    from pgval.deploy.driver_process import DriverSpec

    runs = tmp_path / "runs"
    run_dir = runs / "r1"
    dep = ComposeDeployment(run_dir, runs_root=runs)
    spec = DriverSpec(topology="mst", pg="e1", bootstrap=dep.driver_bootstrap,
                      master=dep.master_url, checkpoint=run_dir / "checkpoint",
                      progress_file=run_dir / "progress.jsonl", window_ms=10_000,
                      watermark_ms=2000, trigger_ms=1000, shuffle_partitions=3,
                      driver_host=dep.driver_host, launcher=dep.driver_launcher(),
                      python="python", path_map=dep.container_path,
                      signal_argv=dep.driver_signal_argv)
    argv = spec.argv(run_dir / "driver-spec.json")
    assert argv == ["docker", "exec", "-e", "PGVAL_KAFKA_OPTIONS", "-e", "PGVAL_SPARK_CONF",
                    "pgval-runner", "python", "-m", "pgval.topologies.driver",
                    "--spec", "/work/runs/r1/driver-spec.json"]
    doc = spec.for_driver()  # what the driver in the runner reads: its own paths
    assert doc.checkpoint == Path("/work/runs/r1/checkpoint")
    assert doc.progress_file == Path("/work/runs/r1/progress.jsonl")
    assert doc.bootstrap == "kafka-0:19092,kafka-1:19092,kafka-2:19092"
    assert doc.driver_host == "pgval-runner"
    assert dep.driver_signal_argv("KILL") == ["docker", "exec", "pgval-runner", "pkill",
                                              "-KILL", "-f", "pgval.topologies.driver"]


def test_compose_driver_gets_the_spark_conf_by_name(tmp_path: Path) -> None:
    """--spark-conf reaches a compose run's driver: `docker exec -e NAME` hands the docker
    client's value of NAME (the driver spec's environment) into the runner, so the value
    itself is on no command line."""
    from pgval.deploy.compose.deployment import ComposeDeployment
    from pgval.deploy.driver_process import DriverSpec

    runs = tmp_path / "runs"
    dep = ComposeDeployment(runs / "r1", runs_root=runs)
    where = dep.driver_placement()
    spec = DriverSpec(topology="sst", pg="a1", bootstrap=where.bootstrap, master=where.master,
                      checkpoint=runs / "r1" / "c", progress_file=runs / "r1" / "p",
                      window_ms=1000, watermark_ms=0, trigger_ms=0, shuffle_partitions=1,
                      launcher=where.launcher, python=where.python, path_map=where.path_map,
                      user_conf={"spark.sql.streaming.stateStore.providerClass": "Rocks",
                                 "spark.pgval.password": "hunter2"})
    written = spec.write(runs / "r1" / "driver-spec.json")
    argv = spec.argv(written)
    runner = argv.index("pgval-runner")
    assert ["-e", "PGVAL_SPARK_CONF"] in [argv[i:i + 2] for i in range(runner)]
    assert not any("hunter2" in a or "Rocks" in a for a in argv)
    assert b"hunter2" not in written.read_bytes() and b"Rocks" not in written.read_bytes()
    assert json.loads(spec.env()["PGVAL_SPARK_CONF"]) == spec.user_conf


def test_compose_master_has_no_rest_server(compose: dict[str, Any]) -> None:
    env = _services(compose)["spark-master"]["environment"]
    assert "-Dspark.master.rest.enabled=false" in env["SPARK_MASTER_OPTS"].split()


def test_compose_faults_go_through_pumba(tmp_path: Path) -> None:
    from pgval.core.spec import RunSpec
    from pgval.deploy.base import FaultContext
    from pgval.deploy.compose.deployment import ComposeDeployment
    from pgval.faults import profile_for
    from pgval.faults.process import DriverCrash

    dep = ComposeDeployment(tmp_path / "runs" / "r1", runs_root=tmp_path / "runs")
    ctx = FaultContext(tmp_path / "runs" / "r1", 90, driver=object(),  # type: ignore[arg-type]
                       checkpoint=tmp_path / "runs" / "r1" / "checkpoint")
    cfg = RunSpec(deploy="compose", fault="crash", phase_seconds=90)
    crash = dep.make_fault(cfg, 1, profile_for("crash", 90), ctx)
    assert crash.argv[-1] == "pgval-spark-worker-1" and "kill" in crash.argv
    gt = profile_for("delay-gt-timeout", 90)
    cfg = cfg.replace(fault="delay-gt-timeout")
    delay = dep.make_fault(cfg, 0, gt, ctx)
    assert delay.argv[delay.argv.index("--time") + 1] == str(gt.delay_ms)
    assert delay.argv[delay.argv.index("--duration") + 1] == "120s"
    cfg = cfg.replace(fault="driver-crash")
    driver_crash = dep.make_fault(cfg, 0, gt, ctx)
    assert isinstance(driver_crash, DriverCrash)
    # The driver's JVM in the container outlives the signal: no in-flight read after it.
    assert driver_crash.checkpoint is None


def test_validate_deploy_compose_without_engine_is_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    if Path("/var/run/docker.sock").exists():
        pytest.skip("a Docker engine socket exists here")
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "validate", "--deploy", "compose",
                           "--topology", "sst", "--db", str(tmp_path / "r.db"), "--json"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 4  # the environment
    assert "Docker engine is not reachable" in proc.stderr and "Traceback" not in proc.stderr


def test_a_pumba_delay_leaves_an_undo_for_the_reaper(
        fake: tuple[Path, FakeContainer, FakeClient], tmp_path: Path) -> None:
    """While pumba's delay acts, the run holds an undo record (0600) that clears its netem;
    the reaper (force_down) stops pumba through its pid file and runs the undo, which keeps
    its record when Docker cannot be reached (here: no engine), for the next cleanup."""
    from pgval.cluster.guard import force_down
    from pgval.host import undo

    exe, container, client = fake
    run_dir = tmp_path / "run"
    fault = pumba.PumbaFault("delay", "delay", container.name, delay_ms=500, duration_s=60,
                             client=client, pumba=str(exe), log_dir=run_dir / "faults",
                             pid_dir=run_dir / "pids", run_dir=run_dir)
    fault.inject()
    [record] = undo.pending(run_dir)
    assert record["argv"] == pumba.clear_netem_argv(container.name)
    assert (run_dir / "undo" / f"netem-{container.name}.json").stat().st_mode & 0o777 == 0o600
    fault.remove()
    assert undo.pending(run_dir) == []
    fault = pumba.PumbaFault("delay", "delay", container.name, delay_ms=500, duration_s=60,
                             client=client, pumba=str(exe), log_dir=run_dir / "faults",
                             pid_dir=run_dir / "pids", run_dir=run_dir)
    fault.inject()
    assert fault._proc is not None
    pumba_pid = fault._proc.pid
    removed = force_down(run_dir)  # what the reaper does once pgval is gone
    assert f"pumba-delay-{container.name}" in removed
    assert fault._proc.popen.poll() is not None, f"pumba {pumba_pid} still runs"
    assert any(r.startswith(f"undo netem-{container.name}: clear pumba's netem") and
               "(exit 1)" in r for r in removed), removed
    assert [e["name"] for e in undo.pending(run_dir)] == [f"netem-{container.name}"]


def test_a_compose_crash_is_stored_valid_only_when_docker_saw_it_stop(
        fake: tuple[Path, FakeContainer, FakeClient], tmp_path: Path) -> None:
    """End to end: pumba's kill logged through the run's schedule and stored as JSON is
    judged by the container fault's rule in pgval.faults (what a re-check runs, without
    Docker): valid when Docker said the container exited; unknown when it did not."""
    from pgval.faults.took_effect import fault_reasons
    from pgval.run.schedule import FaultSchedule

    exe, container, client = fake
    schedule = FaultSchedule(pumba.PumbaFault("crash", "kill", container.name, client=client,
                                              pumba=str(exe)))
    schedule.step("inject", 0)
    schedule.step("remove", 1)
    stored = json.loads(json.dumps(schedule.log))
    assert stored[0]["status"] == "exited" and fault_reasons("crash", stored) == []
    seen_running = [{**stored[0], "status": "running"}, stored[1]]
    assert [r.text for r in fault_reasons("crash", seen_running)] == [
        f"crash: container {container.name} was not seen stopped (status 'running')"]



def test_a_compose_delay_is_judged_by_the_netem_qdisc_docker_showed(
        fake: tuple[Path, FakeContainer, FakeClient], tmp_path: Path) -> None:
    """The probe of the embedded delay does not exist here: the netem qdisc seen in the
    container is the evidence (a stored entry without one is unknown)."""
    from pgval.faults.took_effect import fault_reasons
    from pgval.run.schedule import FaultSchedule

    exe, container, client = fake
    schedule = FaultSchedule(pumba.PumbaFault("delay-lt-timeout", "delay", container.name,
                                              delay_ms=500, duration_s=60, client=client,
                                              pumba=str(exe)))
    schedule.step("inject", 0)
    schedule.step("remove", 1)
    # The experiment adds the scan of the logs for time-outs after the run (none fired).
    stored = [*json.loads(json.dumps(schedule.log)), {"step": "timeouts", "fired": {}}]
    assert stored[0]["qdisc"] and fault_reasons("delay-lt-timeout", stored) == []
    no_qdisc = [{**stored[0], "qdisc": ""}, *stored[1:]]
    assert [r.text for r in fault_reasons("delay-lt-timeout", no_qdisc)] == [
        f"delay-lt-timeout: no netem qdisc was seen on container {container.name}"]
    died_early = [stored[0], {**stored[1], "ended_before_remove": True}, stored[2]]
    assert [r.text for r in fault_reasons("delay-lt-timeout", died_early)] == [
        f"delay-lt-timeout: pumba ended before the delay on {container.name} was removed: "
        "the delay may have stopped early"]
