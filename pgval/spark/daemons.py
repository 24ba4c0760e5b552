"""A local Spark standalone cluster (master + N workers) run from pip's pyspark.

Why standalone and not ``local[*]``: faults must hit one worker JVM and its
executors while the driver and the other workers keep going, exactly as on a
real cluster.

pip's pyspark ships ``bin/spark-class`` but no ``sbin/start-master.sh`` or
``start-worker.sh``. We do what ``spark-class`` does, minus the bash: ask
``org.apache.spark.launcher.Main`` for the daemon's java command line, then start
that JVM through :func:`pgval.host.procs.spawn` (own process group, log, pid file).
Why not ``spark-class`` itself: its process-substitution subshell lives on as a
zombie child of the JVM; when the JVM dies it is reparented to pid 1, which on
this VM reaps orphans only every ~2 s, so every stop waited 2 s for the group.

Isolation: when ``isolate`` is on (default when root and namespaces work), each
worker runs in its own network namespace (see :mod:`pgval.host.netns`) via
``ip netns exec``, which execs, so the worker JVM is the spawned pid and leads the
process group; executors are forked by the worker JVM and stay in that group.
The master listens on the bridge IP (its web UI too: Spark binds a UI to
``SPARK_LOCAL_IP``, set for every daemon, never to every address; and every UI has its
kill endpoints off: :data:`UI_KILL_OFF`), and so must everything executors reach
(driver: ``spark.driver.host``/``bindAddress`` = :attr:`SparkCluster.driver_host`;
Kafka: ``host=cluster.driver_host``).

Drivers must run Python UDFs with the venv's interpreter: PySpark sends the
driver's ``PYSPARK_PYTHON`` (default ``python3``) to executors, so set it before
creating the SparkSession (:meth:`SparkCluster.driver_env`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pgval.core.errors import EnvironmentFailure
from pgval.core.files import write_private
from pgval.host import cds, netns
from pgval.host.procs import (
    Managed,
    free_port,
    spawn,
    wait_for_port,
    write_pid_file,
)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_MARKER = b"CoarseGrainedExecutorBackend"
DAEMON_MEMORY = "256m"
# Serial GC: 2 cores shared by ~6 JVMs; parallel GC threads only add contention.
DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k"
#: Spark's SecurityManager.ENV_AUTH_SECRET: daemons and executors read the secret here.
SECRET_ENV = "_SPARK_AUTH_SECRET"
#: Tells the pgval driver where the cluster's secret file is (it sets spark.authenticate*).
SECRET_FILE_ENV = "PGVAL_SPARK_SECRET_FILE"
NS_WORKER_WEBUI_PORT = 8081  # every namespace has its own port space
#: The master's REST submission server: off on every master pgval starts.
REST_ENABLED = "spark.master.rest.enabled"
#: Every web UI pgval starts (master, workers, a driver's if a user turns it on) is
#: read-only: Spark's UIs take no part in spark.authenticate, so with their kill endpoints
#: (the master's ``/app/kill``, ``/driver/kill``, an application's ``/jobs/job/kill``) any
#: local user who reaches the address could stop a run.
UI_KILL_OFF = {"spark.ui.killEnabled": "false"}
#: The daemons' also refuse the master's ``/workers/kill`` to everyone (Spark serves it
#: only with decommissioning on, and then by default to any address of this machine).
DAEMON_UI = {**UI_KILL_OFF, "spark.master.ui.decommission.allow.mode": "DENY"}


def spark_home() -> Path:
    """pyspark's install dir; it holds ``bin/spark-class`` and ``jars/``."""
    from pgval.core.extras import require

    require("spark")
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise EnvironmentFailure(f"pyspark at {home} has no bin/spark-class")
    return home


def scala_version() -> str:
    """Scala version of pyspark's jars (from ``spark-core_<v>-*.jar``), e.g. ``2.13``."""
    for jar in (spark_home() / "jars").glob("spark-core_*.jar"):
        m = re.match(r"spark-core_(\d+\.\d+)-", jar.name)
        if m:
            return m.group(1)
    return "2.13"


def _check_java() -> str:
    """Path of a Java >= 17 (Spark 4 needs it), or a plain error."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise EnvironmentFailure("Java 17 or newer is needed for Spark but `java` was not found")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentFailure(f"`{java} -version` failed: {exc}") from exc
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):
        major = int(m.group(2))
    if major < 17:
        raise EnvironmentFailure(f"Spark 4 needs Java 17 or newer but {java} is Java {major}")
    return java


def _launcher_command(java: str, main_class: str, args: list[str],
                      env: Mapping[str, str]) -> list[str]:
    """The java argv ``spark-class main_class args`` would exec (same launcher, no bash)."""
    home = spark_home()
    full_env = {**os.environ, **env}
    cmd = [java, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-cp", f"{home / 'jars'}/*", "org.apache.spark.launcher.Main", main_class, *args]
    try:
        res = subprocess.run(cmd, capture_output=True, env=full_env, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentFailure(f"the Spark launcher failed for {main_class}: {exc}") from exc
    # Output: optional message lines, then "\0\n", then the command, NUL-separated.
    _, sep, tail = res.stdout.partition(b"\0\n")
    argv = [a.decode() for a in tail.split(b"\0") if a] if sep else []
    if res.returncode != 0 or not argv:
        msg = res.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentFailure(f"the Spark launcher failed for {main_class}: {msg[0]}")
    return argv


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) of ``pid`` from /proc, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _live_group_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies."""
    out = []
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st is not None and st[2] == pgid and st[0] not in ("Z", "X"):
            out.append(pid)
    return sorted(out)


@dataclass
class WorkerHandle:
    """One Spark worker: what a fault injector needs to address and crash it."""

    index: int
    host: str
    netns: str | None
    webui_port: int
    cluster: SparkCluster = field(repr=False)
    managed: Managed | None = None
    worker_id: str | None = None  # id the master gave the current incarnation

    @property
    def name(self) -> str:
        return f"spark-worker-{self.index}"

    @property
    def pid(self) -> int | None:
        """Worker JVM pid (``ip netns exec`` execs the JVM); also its process group id."""
        return self.managed.pid if self.managed else None

    def alive(self) -> bool:
        return self.managed is not None and self.managed.alive()

    def group_pids(self) -> list[int]:
        """Live (non-zombie) processes of this worker's group: the JVM and its executors."""
        return _live_group_members(self.managed.pid) if self.managed else []

    def executor_pids(self) -> list[int]:
        """Live executor JVMs (CoarseGrainedExecutorBackend) launched by this worker."""
        return [p for p in self.group_pids() if EXECUTOR_MARKER in _cmdline(p)]

    def kill(self, wait_s: float = 5.0) -> None:
        """Crash fault: SIGKILL the worker's whole process group, executors included.

        Returns once no live member is left (up to ``wait_s``). Orphaned executors stay
        zombies until pid 1 reaps them (~2 s on this VM); they count as dead here.
        """
        m = self.managed
        if m is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(m.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            m.popen.wait(timeout=wait_s)
        deadline = time.monotonic() + wait_s
        while _live_group_members(m.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if m.pid_file is not None:
            m.pid_file.unlink(missing_ok=True)

    def stop(self, grace_s: float = 5.0) -> None:
        """Orderly stop (SIGTERM, then SIGKILL); idempotent."""
        if self.managed is not None:
            self.managed.stop(grace_s=grace_s)

    def restart(self, timeout_s: float = 90.0) -> None:
        """Start this worker again with the same namespace, IP and index; wait for registration."""
        self.kill()
        previous = {self.worker_id} if self.worker_id else set()
        self.cluster._start_worker(self)
        self.cluster._wait_registered([self], timeout_s, exclude_ids=previous)


def _stop_quietly(h: WorkerHandle, grace_s: float = 5.0) -> None:
    with contextlib.suppress(Exception):
        h.stop(grace_s=grace_s)


def write_secret(path: Path) -> str:
    """A fresh random secret in ``path`` (mode 0600, never following a planted link)."""
    secret = secrets.token_hex(32)
    write_private(path, secret)
    return secret


class SparkCluster:
    """Spark standalone master + workers for one run; use as a context manager."""

    def __init__(
        self,
        run_dir: Path,
        workers: int = 2,
        cores_per_worker: int = 1,
        worker_memory: str = "1g",
        isolate: bool | None = None,
        extra_conf: Mapping[str, str] | None = None,
        start_timeout_s: float = 120.0,
        netns_suffix: str | None = None,
        authenticate: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.n_workers = workers
        self.cores_per_worker = cores_per_worker
        self.worker_memory = worker_memory
        self.extra_conf = dict(extra_conf or {})
        self.start_timeout_s = start_timeout_s
        self._isolate_req = isolate
        self.netns_suffix = netns_suffix or netns.new_suffix()
        #: spark.authenticate with a fresh secret per cluster: without it any local user
        #: could submit an application to a master running as root.
        self.authenticate = authenticate
        self.secret_file = self.run_dir / "spark" / "auth-secret"
        self._secret = ""
        self.isolated = False
        self.net: netns.NetLayout | None = None
        self.master: Managed | None = None
        self.master_host = "127.0.0.1"
        self.master_port = 0
        self.master_webui_port = 0
        self.workers: list[WorkerHandle] = []
        self.startup_seconds: float | None = None
        self.spark_dir = self.run_dir / "spark"
        self.log_dir = self.run_dir / "logs"
        self.pid_dir = self.run_dir / "pids"
        self._java = "java"
        self._prepared = False
        #: How each kind of this cluster's JVMs shares classes (pgval.host.cds), as last
        #: started; the executors' is the one :meth:`executor_java_flags` handed out.
        self._archives: dict[str, cds.ClassArchive] = {}

    # ---- addresses -------------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        return f"spark://{self.master_host}:{self.master_port}"

    @property
    def master_webui_url(self) -> str:
        return f"http://{self.master_host}:{self.master_webui_port}"

    @property
    def driver_host(self) -> str:
        """Address a root-namespace driver advertises and binds (bridge IP when isolated)."""
        return self.master_host

    def driver_env(self) -> dict[str, str]:
        """Env for a PySpark driver process: venv Python on executors, IP-only addressing.

        PySpark ships the driver's ``PYSPARK_PYTHON`` (default ``python3``) to executors.
        """
        env = {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": self.driver_host,
            "SPARK_LOCAL_HOSTNAME": self.driver_host,
        }
        if self._secret:
            env[SECRET_FILE_ENV] = str(self.secret_file)  # the path; the driver reads it
        return env

    def driver_conf(self) -> dict[str, str]:
        """Spark conf a driver needs to join this cluster (add spark.cores.max etc. yourself)."""
        conf = {
            "spark.master": self.master_url,
            "spark.driver.host": self.driver_host,
            "spark.driver.bindAddress": self.driver_host,
            **UI_KILL_OFF,
        }
        if self._secret:  # for a driver in this process (tests); never put on a command line
            conf["spark.authenticate"] = "true"
            conf["spark.authenticate.secret"] = self._secret
        return conf

    # ---- lifecycle -------------------------------------------------------------------------

    def prepare(self) -> SparkCluster:
        """Everything but the JVMs: Java checked, the secret, the namespaces and the
        addresses (:attr:`driver_host` is final once this returns), so the caller can start
        Kafka on that address while the daemons start. Cleans up on failure."""
        if self._prepared:
            return self
        try:
            self._prepare()
        except BaseException:
            self.stop()
            raise
        self._prepared = True
        return self

    def start(self) -> SparkCluster:
        """Start master and workers, wait until all workers are registered; clean up on failure."""
        if self.master is not None:
            raise EnvironmentFailure("this SparkCluster was already started; make a new one")
        t0 = time.monotonic()
        self.prepare()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _prepare(self) -> None:
        self._java = _check_java()
        spark_home()
        self.isolated = self._decide_isolation()
        for d in (self.spark_dir / "conf", self.spark_dir / "logs", self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        if self.authenticate:
            self._secret = write_secret(self.secret_file)
        if self.isolated:
            self.net = netns.NetLayout(self.netns_suffix, run_dir=self.run_dir).create()
            self.master_host = self.net.bridge_ip
        self.master_port = free_port(self.master_host)
        self.master_webui_port = free_port(self.master_host)
        for i in range(self.n_workers):
            if self.net is not None:
                ns = self.net.add_namespace(i)
                self.workers.append(WorkerHandle(i, ns.ip, ns.name, NS_WORKER_WEBUI_PORT, self))
            else:
                self.workers.append(WorkerHandle(i, "127.0.0.1", None, 0, self))

    def _start(self) -> None:
        env = self._env(self.master_host, opts_var="SPARK_MASTER_OPTS")
        master_args = ["--host", self.master_host, "--port", str(self.master_port),
                       "--webui-port", str(self.master_webui_port)]
        # Each launcher run is a JVM start (~0.5-1 s): do them all at once.
        with ThreadPoolExecutor(max_workers=1 + len(self.workers)) as pool:
            master_fut = pool.submit(_launcher_command, self._java, MASTER_CLASS, master_args, env)
            worker_futs = [pool.submit(self._worker_launch, h) for h in self.workers]
            argv = master_fut.result()
            launches = [f.result() for f in worker_futs]
        self.master = spawn("spark-master", argv, self.log_dir / "spark-master.log",
                            env=env, cwd=self.spark_dir, pid_dir=self.pid_dir)
        # Workers that miss the master back off 5-15 s before retrying: wait for it first.
        # Confirm from the master's own log first: an open port may be someone else's.
        self._check_master_port(self.start_timeout_s)
        wait_for_port(self.master_host, self.master_port, self.start_timeout_s, self.master)
        wait_for_port(self.master_host, self.master_webui_port, 30.0, self.master)
        for h, (wargv, wenv) in zip(self.workers, launches, strict=True):
            self._spawn_worker(h, wargv, wenv)
        self._wait_registered(self.workers, self.start_timeout_s)

    def _check_master_port(self, timeout_s: float = 30.0) -> None:
        """The master really listens on the port we gave it (spark.port.maxRetries=0 makes
        it fail instead of moving to port+1; the port being open may be someone else's)."""
        assert self.master is not None
        deadline = time.monotonic() + timeout_s
        pattern = re.compile(r"Successfully started service 'sparkMaster' on port (\d+)")
        while time.monotonic() < deadline:
            m = pattern.search(self.master.log_tail(200))
            if m:
                if int(m.group(1)) != self.master_port:  # only with maxRetries overridden
                    raise EnvironmentFailure(f"the Spark master took port {m.group(1)} instead of "
                                            f"{self.master_port}")
                return
            if not self.master.alive():
                bound = "BindException" in self.master.log_tail(200)
                raise EnvironmentFailure(
                    f"port {self.master_port} on {self.master_host} is taken by another "
                    "process; the Spark master cannot listen there" if bound else
                    f"the Spark master exited at start; see {self.master.log_path}")
            time.sleep(0.1)
        raise EnvironmentFailure(f"the Spark master did not confirm its port within "
                                f"{timeout_s:.0f} s; see {self.master.log_path}")

    def _decide_isolation(self) -> bool:
        if self._isolate_req is False:
            return False
        ok, why = netns.namespaces_supported()
        if self._isolate_req and not ok:
            raise EnvironmentFailure(f"isolated Spark workers were requested but {why}")
        return ok

    def _env(self, local_ip: str, opts_var: str, work_dir: Path | None = None) -> dict[str, str]:
        """Env for a daemon; SPARK_LOCAL_HOSTNAME=IP so nothing ever advertises a hostname."""
        # The read-only UI last: no other setting turns the kill endpoints back on.
        daemon_conf = {"spark.port.maxRetries": "0", **self.extra_conf, **DAEMON_UI}
        if opts_var == "SPARK_MASTER_OPTS":
            # Spark 4.1+ starts the REST submission server (port 6066) by default; it takes
            # no part in spark.authenticate, so any local user could submit a driver there.
            daemon_conf[REST_ENABLED] = "false"
        if self._secret:
            daemon_conf["spark.authenticate"] = "true"
        conf = " ".join(f"-D{k}={v}" for k, v in daemon_conf.items())
        conf = f"{self._owner_mark()} {conf}".strip()
        kind = "spark-master" if opts_var == "SPARK_MASTER_OPTS" else "spark-worker"
        found = self._archive(kind)
        if found is not None:
            self._archives[kind] = found
        env = {
            "SPARK_HOME": str(spark_home()),
            # load-spark-env.sh exports these; the worker's own launcher (building executor
            # command lines) fails with "Cannot find any build directories" without them.
            "SPARK_SCALA_VERSION": scala_version(),
            "SPARK_ENV_LOADED": "1",
            "SPARK_CONF_DIR": str(self._conf_dir()),
            "SPARK_LOG_DIR": str(self.spark_dir / "logs"),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_DAEMON_JAVA_OPTS": f"{DAEMON_JAVA_OPTS} {cds.flags_text(found)}".strip(),
            "SPARK_LOCAL_IP": local_ip,
            "SPARK_LOCAL_HOSTNAME": local_ip,
            "SPARK_PUBLIC_DNS": local_ip,
            opts_var: conf,
            "PYSPARK_PYTHON": sys.executable,
        }
        if self._secret:
            # In the environment, not on the command line: /proc/<pid>/environ is readable
            # by the owner only. The worker hands it on to executors the same way.
            env[SECRET_ENV] = self._secret
        if work_dir is not None:
            env["SPARK_WORKER_DIR"] = str(work_dir)
        return env

    def _worker_launch(self, h: WorkerHandle) -> tuple[list[str], dict[str, str]]:
        """argv (with the ``ip netns exec`` prefix when isolated) and env for worker ``h``."""
        work_dir = self.spark_dir / "work" / f"w{h.index}"
        work_dir.mkdir(parents=True, exist_ok=True)
        if h.netns is None:
            h.webui_port = free_port(h.host)
        env = self._env(h.host, opts_var="SPARK_WORKER_OPTS", work_dir=work_dir)
        argv = _launcher_command(self._java, WORKER_CLASS, [
            "--host", h.host, "--cores", str(self.cores_per_worker),
            "--memory", self.worker_memory, "--webui-port", str(h.webui_port),
            "--work-dir", str(work_dir), self.master_url], env)
        if h.netns is not None:
            argv = netns.exec_prefix(h.netns) + argv
        return argv, env

    def _spawn_worker(self, h: WorkerHandle, argv: list[str], env: dict[str, str]) -> None:
        h.managed = spawn(h.name, argv, self.log_dir / f"{h.name}.log", env=env,
                          cwd=self.spark_dir / "work" / f"w{h.index}", pid_dir=self.pid_dir)
        if h.netns is not None and h.managed.pid_file is not None:
            # `ip netns exec` execs java (same pid, same start ticks): note the namespace.
            write_pid_file(h.managed.pid_file, h.name, h.managed.pid, netns=h.netns)

    def _start_worker(self, h: WorkerHandle) -> None:
        if self.master is None or not self.master.alive():
            raise EnvironmentFailure("the Spark master is not running")
        self._spawn_worker(h, *self._worker_launch(h))

    def _conf_dir(self) -> Path:
        """``SPARK_CONF_DIR``: an empty folder (Spark's defaults), first on every daemon's
        and executor's classpath. With class sharing one folder for every cluster: a class
        archive holds its JVM's classpath, and one made with another cluster's folder
        there would be refused (it was, until this: docs/performance.md)."""
        shared = cds.empty_dir("spark-conf")
        return shared if shared is not None else self.spark_dir / "conf"

    def _archive(self, kind: str) -> cds.ClassArchive | None:
        """The class archive of this cluster's JVMs of ``kind``: none without the shared
        conf folder (each cluster's own would make every run record one never used)."""
        conf = self._conf_dir()
        if conf == self.spark_dir / "conf":
            return None
        return cds.archive(kind, self._java, [conf, spark_home() / "jars"])

    def executor_java_flags(self) -> str:
        """The executors' class-sharing flags (``spark.executor.extraJavaOptions``, set by
        the driver): they run this cluster's Spark jars with its Java."""
        found = self._archive("spark-executor")
        if found is None:
            return self._owner_mark()
        self._archives[found.kind] = found
        return f"{self._owner_mark()} {found.flags_text()}".strip()

    def _owner_mark(self) -> str:
        """A system property naming the cluster's folder on its JVMs' command lines (its
        conf folder there no longer does): a leftover is found by it (``pgval cleanup``,
        the tests' processes_mentioning)."""
        text = str(self.spark_dir)
        return "" if any(c.isspace() or c in "\"'\\" for c in text) else f"-Dpgval.cluster={text}"

    def class_dumps(self) -> list[tuple[cds.ClassArchive, int]]:
        """This cluster's running JVMs that record their classes (one per kind)."""
        pids: dict[str, int | None] = {
            "spark-master": self.master.pid if self.master and self.master.alive() else None,
            "spark-worker": next((h.pid for h in self.workers if h.alive()), None),
            "spark-executor": next((p for h in self.workers for p in h.executor_pids()),
                                   None)}
        return [(found, pid) for kind, found in self._archives.items()
                if found.recording and (pid := pids.get(kind)) is not None]

    def master_state(self, timeout_s: float = 5.0) -> dict[str, object]:
        """The master's JSON status (``/json/``): workers, aliveworkers, activeapps, ..."""
        with urllib.request.urlopen(f"{self.master_webui_url}/json/", timeout=timeout_s) as r:
            return dict(json.loads(r.read()))

    def _wait_registered(self, handles: list[WorkerHandle], timeout_s: float,
                         exclude_ids: set[str] | None = None) -> None:
        """Poll the master until each handle's worker shows up ALIVE with an id not excluded."""
        exclude = exclude_ids or set()
        deadline = time.monotonic() + timeout_s
        pending = list(handles)
        while pending:
            for h in pending:
                if not h.alive():
                    raise EnvironmentFailure(
                        f"{h.name} exited before registering with the master; "
                        f"see {h.managed.log_path if h.managed else self.log_dir}")
            if self.master is None or not self.master.alive():
                log = self.master.log_path if self.master else self.log_dir
                raise EnvironmentFailure(f"the Spark master exited; see {log}")
            try:
                entries = self._workers_json()
            except (OSError, ValueError):
                entries = []
            for h in list(pending):
                for w in entries:
                    wid = str(w.get("id"))
                    if w.get("state") == "ALIVE" and wid not in exclude and self._matches(h, w):
                        h.worker_id = wid
                        pending.remove(h)
                        break
            if not pending:
                return
            if time.monotonic() > deadline:
                h = pending[0]
                where = h.managed.log_path if h.managed else self.log_dir
                raise EnvironmentFailure(
                    f"{h.name} did not register with the master at {self.master_url} within "
                    f"{timeout_s:.0f} s; see {where}")
            time.sleep(0.25)

    def _workers_json(self) -> list[dict[str, object]]:
        workers = self.master_state().get("workers", [])
        return [dict(w) for w in workers] if isinstance(workers, list) else []

    def _matches(self, h: WorkerHandle, w: Mapping[str, object]) -> bool:
        """Namespaced workers are told apart by IP, loopback ones by web UI port."""
        if w.get("host") != h.host:
            return False
        return h.netns is not None or str(w.get("webuiaddress", "")).endswith(f":{h.webui_port}")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop workers (with their executors), then the master, then the namespaces;
        idempotent. ``grace_s`` 0: SIGKILL at once (a cluster whose state nobody needs)."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.workers))) as pool:
            list(pool.map(lambda h: _stop_quietly(h, grace_s), self.workers))
        if self.master is not None:
            with contextlib.suppress(Exception):
                self.master.stop(grace_s=grace_s)
        if self.net is not None:
            self.net.teardown()
        # A JVM that escaped its group (should not happen) is still ours if it runs our dirs.
        for pid in self._stray_jvms():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _stray_jvms(self) -> list[int]:
        marker = str(self.spark_dir).encode()
        me = os.getpid()
        return [p for p in _all_pids()
                if p != me and marker in _cmdline(p) and b"java" in _cmdline(p).split(b"\0")[0]]

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
