"""Real Spark standalone cluster: start, run a job, crash one worker, restart it, clean up.

Why: fault injection later relies on each worker being individually addressable
(namespace, IP, process group, executor pids) and on nothing outliving a run.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.core.errors import PgvalError
from pgval.host import netns, procs
from pgval.spark.daemons import SparkCluster, WorkerHandle

pytestmark = pytest.mark.cluster

N = 200_000
EXPECTED_SUM = N * (N - 1) // 2


def _wait(cond, timeout_s: float, what: str, step: float = 0.25) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(step)


def _gone(pid: int) -> bool:
    """Gone or a zombie: pid 1 on this VM reaps orphans only every ~2 s."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _java_descendants(root: int) -> list[int]:
    """Live java processes below ``root`` (the PySpark driver gateway of this test)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,stat=,comm="], capture_output=True,
                         text=True, check=True).stdout
    rows = [line.split(None, 3) for line in out.splitlines() if line.strip()]
    children: dict[int, list[tuple[int, str, str]]] = {}
    for pid, ppid, stat, comm in rows:
        children.setdefault(int(ppid), []).append((int(pid), stat, comm))
    found, stack = [], [root]
    while stack:
        for pid, stat, comm in children.get(stack.pop(), []):
            stack.append(pid)
            if comm == "java" and not stat.startswith("Z"):
                found.append(pid)
    return found


def _rss_mb(pid: int | None) -> float:
    with contextlib.suppress(OSError, TypeError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _procs_mentioning(text: str) -> list[int]:
    hits = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in Path(f"/proc/{p}/cmdline").read_bytes() and not _gone(int(p)):
                hits.append(int(p))
    return hits


def listening_ports(pid: int) -> set[int]:
    """TCP ports process ``pid`` listens on."""
    return {port for _, port in listening(pid)}


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) process ``pid`` listens on: its sockets' inodes, looked up in the
    /proc/net/tcp{,6} of its own network namespace (an IPv4-mapped address as IPv4)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                addr, port = f[1].rsplit(":", 1)
                found.add((_proc_net_address(addr), int(port, 16)))
    return found


def _proc_net_address(text: str) -> str:
    """An address as /proc/net/tcp{,6} write it: 32-bit words in host (little) order."""
    raw = b"".join(bytes.fromhex(text[i:i + 8])[::-1] for i in range(0, len(text), 8))
    ip = ipaddress.ip_address(raw)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped or ip)


def _kill_requests_refused(cluster: SparkCluster, app_id: str) -> None:
    """The master's UI kill endpoints (``spark.ui.killEnabled``, on by default in Spark)
    answer no request: a local user cannot stop the run's application or a driver there.
    With them on, Spark answers the POST with a redirect to its front page (followed:
    200) and the application is gone."""
    for path, form in (("/app/kill/", {"id": app_id, "terminate": "true"}),
                       ("/driver/kill/", {"id": "driver-0", "terminate": "true"})):
        request = urllib.request.Request(f"{cluster.master_webui_url}{path}", method="POST",
                                         data=urllib.parse.urlencode(form).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert 400 <= refused.value.code < 500, (path, refused.value.code)
    apps = cluster.master_state()["activeapps"]
    assert app_id in [a["id"] for a in apps], apps  # type: ignore[attr-defined]


def _retire_gateway() -> None:
    """Stop this process's Spark session and context, if any, and kill its gateway JVM."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None:
        with contextlib.suppress(Exception):
            active.stop()
    if SparkContext._active_spark_context is not None:
        with contextlib.suppress(Exception):
            SparkContext._active_spark_context.stop()
    gw = SparkContext._gateway
    if gw is not None:
        with contextlib.suppress(Exception):
            gw.shutdown()
        proc = getattr(gw, "proc", None)
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()  # the gateway JVM exits on EOF
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait(timeout=10)
    SparkContext._gateway = None
    SparkContext._jvm = None


@contextlib.contextmanager
def _driver(cluster: SparkCluster, cores_max: int) -> Iterator[object]:
    """A SparkSession in this process, its JVM started as pgval's driver starts it (the
    cluster's secret in memory, not on the command line); the JVM is killed afterwards."""
    from pyspark.sql import SparkSession

    from pgval.topologies.driver import start_jvm

    _retire_gateway()  # an earlier test's in-process Spark (local mode) must not serve us
    env = cluster.driver_env()
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    start_jvm({"spark.app.name": "pgval-spark-runtime-test", **cluster.driver_conf(),
               "spark.driver.memory": "512m", "spark.executor.memory": "512m",
               "spark.executor.cores": "1", "spark.cores.max": str(cores_max),
               "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4",
               "spark.executor.extraJavaOptions": "-XX:+UseSerialGC"})
    spark = SparkSession.builder.getOrCreate()
    assert spark.sparkContext.master == cluster.master_url, spark.sparkContext.master
    try:
        yield spark
    finally:
        _retire_gateway()
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _sum_job(spark) -> int:  # type: ignore[no-untyped-def]
    return int(spark.range(0, N, numPartitions=4).selectExpr("sum(id) AS s").collect()[0]["s"])


def _python_job(spark) -> int:  # type: ignore[no-untyped-def]
    """Runs Python on executors: fails if they got the wrong interpreter."""
    sc = spark.sparkContext
    return int(sc.parallelize(range(1000), 4).map(lambda x: x * 2).sum())


def _suffix(cluster: SparkCluster) -> str | None:
    return cluster.net.suffix if cluster.net is not None else None


@pytest.mark.parametrize("isolate", [True, False], ids=["netns", "loopback"])
def test_cluster_job_kill_restart(tmp_path: Path, isolate: bool) -> None:
    if isolate and not netns.namespaces_supported()[0]:
        pytest.skip(netns.namespaces_supported()[1])
    cluster = SparkCluster(tmp_path, workers=2, cores_per_worker=1, worker_memory="1g",
                           isolate=isolate)
    suffix = None
    timings: dict[str, float] = {}
    try:
        cluster.start()
        suffix = _suffix(cluster)
        timings["cluster_start_s"] = cluster.startup_seconds or 0.0
        assert cluster.isolated == isolate
        w0, w1 = cluster.workers
        for w in cluster.workers:
            assert w.alive() and w.worker_id
            assert b"deploy.worker.Worker" in Path(f"/proc/{w.pid}/cmdline").read_bytes()
            assert os.getpgid(w.pid) == w.pid  # the JVM leads its own group
            if isolate:
                assert w.netns is not None and w.pid in netns.netns_pids(w.netns)
            # `pgval cleanup` (procs.kill_recorded) must recognise the recorded group.
            assert w.managed is not None and w.managed.pid_file is not None
            rec = json.loads(w.managed.pid_file.read_text())
            assert rec["pgid"] == w.pid and procs.recorded_group_is_ours(rec)
        state = cluster.master_state()
        assert len([w for w in state["workers"] if w["state"] == "ALIVE"]) == 2  # type: ignore
        # No REST submission server (Spark 4.1+ would listen on 6066, unauthenticated).
        assert cluster.master is not None
        assert listening_ports(cluster.master.pid) == {cluster.master_port,
                                                       cluster.master_webui_port}
        # Every UI on its daemon's own address (the bridge's, a namespace's, or loopback).
        assert {a for a, _ in listening(cluster.master.pid)} == {cluster.master_host}
        for w in cluster.workers:
            assert w.pid is not None and {a for a, _ in listening(w.pid)} == {w.host}

        t = time.monotonic()
        with _driver(cluster, cores_max=2) as spark:
            timings["session_s"] = time.monotonic() - t
            t = time.monotonic()
            assert _sum_job(spark) == EXPECTED_SUM
            timings["first_job_s"] = time.monotonic() - t
            t = time.monotonic()
            assert _sum_job(spark) == EXPECTED_SUM
            timings["warm_job_s"] = time.monotonic() - t
            assert _python_job(spark) == 999_000
            _kill_requests_refused(cluster, spark.sparkContext.applicationId)
            _wait(lambda: all(w.executor_pids() for w in cluster.workers), 30,
                  "an executor on each worker")
            # Driver JVM, daemons and executors all up: the secret is on no command line.
            secret = cluster.secret_file.read_text().strip()
            assert len(secret) == 64 and _procs_mentioning(secret) == []
            from pyspark import SparkContext

            gw_proc = getattr(SparkContext._gateway, "proc", None)
            timings["rss_mb_driver"] = _rss_mb(gw_proc.pid if gw_proc else None)
            timings["rss_mb_master"] = _rss_mb(cluster.master.pid if cluster.master else None)
            timings["rss_mb_worker"] = _rss_mb(w1.pid)
            timings["rss_mb_executor"] = _rss_mb(w1.executor_pids()[0])
            for w in cluster.workers:
                (pid,) = w.executor_pids()
                if isolate:
                    assert pid in netns.netns_pids(w.netns)  # type: ignore[arg-type]

            # Crash fault: w0 and its executor vanish, w1 keeps serving the job.
            doomed = w0.executor_pids() + [w0.pid]
            t = time.monotonic()
            w0.kill()
            timings["kill_s"] = time.monotonic() - t
            _wait(lambda: all(_gone(p) for p in doomed), 10, "w0's JVMs to die")
            assert w0.executor_pids() == [] and not w0.alive()
            assert w1.alive() and w1.executor_pids()
            t = time.monotonic()
            assert _sum_job(spark) == EXPECTED_SUM
            timings["job_after_kill_s"] = time.monotonic() - t

            # Restart with the same identity; it re-registers and gets an executor again.
            old_id = w0.worker_id
            t = time.monotonic()
            w0.restart()
            timings["restart_s"] = time.monotonic() - t
            assert w0.alive() and w0.worker_id != old_id
            if isolate:
                assert w0.host.endswith(".10") and w0.pid in netns.netns_pids(w0.netns)  # type: ignore
            alive = {w["id"] for w in cluster.master_state()["workers"]  # type: ignore
                     if w["state"] == "ALIVE"}
            assert alive == {w0.worker_id, w1.worker_id}
            _wait(lambda: bool(w0.executor_pids()), 30, "a new executor on the restarted worker")
            assert _sum_job(spark) == EXPECTED_SUM
    finally:
        t = time.monotonic()
        cluster.stop()
        timings["stop_s"] = time.monotonic() - t
        print("\nspark runtime timings:", {k: round(v, 2) for k, v in timings.items()})
    cluster.stop()  # idempotent

    assert _procs_mentioning(str(tmp_path)) == []
    assert _java_descendants(os.getpid()) == []
    if suffix is not None:
        assert not [n for n in netns.list_namespaces() if suffix in n]
        assert not [n for n in netns.list_links() if suffix in n]
        assert not (netns.NETNS_ETC / netns.ns_name(suffix, 0)).exists()


def test_failed_start_cleans_up(tmp_path: Path) -> None:
    """A worker that cannot start: one plain error naming the log, nothing left behind."""
    cluster = SparkCluster(tmp_path, workers=1, worker_memory="not-a-size", isolate=False,
                           start_timeout_s=60)
    with pytest.raises(PgvalError, match=r"spark-worker-0.*see .*spark-worker-0\.log"):
        cluster.start()
    assert _procs_mentioning(str(tmp_path)) == []
    assert all(isinstance(w, WorkerHandle) and not w.alive() for w in cluster.workers)


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_cleanup_all_removes_leaked_namespace() -> None:
    ok, why = netns.namespaces_supported()
    if not ok:
        pytest.skip(why)
    layout = netns.NetLayout()
    layout.create()
    ns = layout.add_namespace(0)
    # A process left running inside the namespace, as after a SIGKILLed pgval.
    sleeper = subprocess.Popen(netns.exec_prefix(ns.name) + ["sleep", "300"],
                               start_new_session=True)
    try:
        _wait(lambda: sleeper.pid in netns.netns_pids(ns.name), 10, "sleeper in the namespace")
        # Forget the layout object: only names on the host remain, as after a crash.
        prefix = f"{netns.NS_PREFIX}{layout.suffix}-"
        removed = netns.cleanup_all(prefix=prefix)
        assert ns.name in removed and layout.bridge in removed
        assert sleeper.wait(timeout=10) == -9
        assert ns.name not in netns.list_namespaces()
        links = netns.list_links()
        assert layout.bridge not in links and ns.host_veth not in links
        assert netns.cleanup_all(prefix=prefix) == []  # idempotent
        layout.teardown()  # and teardown after cleanup is harmless
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sleeper.pid, 9)
        layout.teardown()


def test_namespaces_supported_reports_reason() -> None:
    ok, why = netns.namespaces_supported()
    assert isinstance(ok, bool) and why
    if os.geteuid() != 0:
        assert not ok
    assert sys.platform.startswith("linux") or not ok
