"""An embedded multi-broker Kafka (KRaft, combined mode): the broker processes and their login.

Each broker is a plain ``java -cp <jars> kafka.Kafka server.properties`` started through
:func:`pgval.host.procs.spawn`, so it lives in its own process group, logs to
``run_dir/kafka/broker-<i>/broker.log`` and is always stopped by :meth:`KafkaCluster.stop`.

Closed to other local users: every listener asks for a password, a fresh random one per
cluster (:class:`KafkaCredentials`). Clients and brokers authenticate with SASL/SCRAM-SHA-256
on the client listener (which is also the inter-broker one); the KRaft controller listener,
whose own peers must authenticate before any SCRAM credential exists, uses SASL/PLAIN with
the same password. The password lives only in 0600 files of the cluster's directory
(``kafka/client.properties``, each broker's ``server.properties``), never on a command line:
even the storage format step that bootstraps the SCRAM credential reads its arguments from a
0600 file (``@file``).

Topics are not made here but by :mod:`pgval.kafka.admin` (one rule on every cluster), and
read back by :mod:`pgval.kafka.reader`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException

from pgval.core.errors import EnvironmentFailure, PgvalError, UserMistake
from pgval.core.files import copy_private, write_private, write_private_json
from pgval.host import cds
from pgval.host.jars import Jars, check_java, ensure_jars, java_executable
from pgval.host.procs import Managed, free_port, log_cause, spawn, wait_for_port
from pgval.kafka.admin import admin_client, min_insync, replication_for
from pgval.kafka.client import jaas_quote, read_client_properties

#: A broker's restart recipe (argv, host, port), beside its data: ``kafka/broker-N/``.
RESTART_FILE = "restart.json"


def broker_process_name(node_id: int) -> str:
    """The name of broker ``node_id``'s process (its pid file, its log lines)."""
    return f"kafka-broker-{node_id}"


#: Main class of ``kafka-storage.sh`` in Kafka 4.1 (lives in kafka_2.13, not in kafka-tools).
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
BROKER_MAIN = "kafka.Kafka"
#: At most this many brokers are also KRaft controller voters.
MAX_VOTERS = 3
#: How long stop() lets brokers without a controller majority try before killing them.
_QUORUM_LOST_WAIT_S = 1.0

_LOG4J2 = """\
status = warn
shutdownHook = disable
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
"""

#: SASL mechanism of the client and inter-broker listener; the controller listener's.
SCRAM_MECHANISM = "SCRAM-SHA-256"
CONTROLLER_MECHANISM = "PLAIN"
#: The one user of an embedded cluster, and where its client settings are (0600).
KAFKA_USER = "pgval"
CLIENT_PROPERTIES = "client.properties"


@dataclass(frozen=True)
class KafkaCredentials:
    """The SASL user and password of one embedded cluster.

    :meth:`client_config` is what a librdkafka client (pgval's own, the e1 sink) needs;
    :func:`pgval.kafka.client.java_client_options` turns it into a Java client's (Spark's
    source and sink).
    """

    password: str
    username: str = KAFKA_USER

    @classmethod
    def new(cls) -> KafkaCredentials:
        """A fresh random password (hex: nothing to quote in JAAS or Kafka's SCRAM syntax)."""
        return cls(password=secrets.token_hex(24))

    def client_config(self) -> dict[str, str]:
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SCRAM_MECHANISM,
                "sasl.username": self.username, "sasl.password": self.password}

    def write(self, path: Path) -> None:
        write_private(path, "".join(f"{k}={v}\n" for k, v in self.client_config().items()))

    @classmethod
    def read(cls, path: Path) -> KafkaCredentials | None:
        """The credentials in ``path`` (a :meth:`write`), None when there is no such file
        (a cluster from before Kafka was closed)."""
        try:
            conf = read_client_properties(path)
        except FileNotFoundError:
            return None
        if not conf.get("sasl.password"):
            raise EnvironmentFailure(f"{path} holds no sasl.password")
        return cls(password=conf["sasl.password"],
                   username=conf.get("sasl.username") or KAFKA_USER)


@dataclass
class _Broker:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    proc: Managed | None = None
    #: How its JVM shares classes (pgval.host.cds); None: class sharing off.
    archive: cds.ClassArchive | None = None


@dataclass
class KafkaCluster:
    """B KRaft brokers on one host; the first min(B, 3) are also controller voters.

    Use as a context manager, or call :meth:`start` and (always, e.g. in ``finally``)
    :meth:`stop`.
    """

    run_dir: Path
    brokers: int = 1
    #: Partitions of the internal topics (consumer offsets, transaction state) and the
    #: brokers' default; pgval's own topics get theirs from :mod:`pgval.kafka.admin`.
    partitions: int = 3
    host: str = "127.0.0.1"
    heap: str = "384m"
    jars: Jars | None = None
    start_timeout_s: float = 120.0
    cluster_id: str = field(default_factory=lambda: _new_cluster_id())
    #: Every listener asks for the cluster's password (see the module docstring). Off only
    #: for component tests and the cost measurement (``pgval bench ... --no-sasl``).
    sasl: bool = True
    credentials: KafkaCredentials | None = field(default=None, repr=False)
    startup_seconds: float | None = field(default=None, init=False)
    _nodes: list[_Broker] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        if self.partitions < 1:
            raise ValueError("topics need at least one partition")
        self.run_dir = Path(self.run_dir)
        if not self.sasl:
            self.credentials = None
        elif self.credentials is None:
            self.credentials = KafkaCredentials.new()

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def replication(self) -> int:
        """Replication factor of the internal topics: what pgval.kafka.admin gives every
        topic, min(3, B)."""
        return replication_for(self.brokers)

    @property
    def bootstrap(self) -> str:
        if not self._nodes:
            raise EnvironmentFailure("the Kafka cluster has not been started")
        return ",".join(f"{self.host}:{b.port}" for b in self._nodes)

    @property
    def credentials_file(self) -> Path:
        """The cluster's client settings (0600): where ``pgval cluster up``'s users read it."""
        return self.run_dir / "kafka" / CLIENT_PROPERTIES

    @property
    def auth_config(self) -> dict[str, str]:
        """Client settings that authenticate to this cluster (empty without SASL)."""
        return self.credentials.client_config() if self.credentials is not None else {}

    @property
    def client_config(self) -> dict[str, str]:
        """Everything a librdkafka client needs to reach the cluster: bootstrap + login."""
        return {"bootstrap.servers": self.bootstrap, **self.auth_config}

    @property
    def procs(self) -> list[Managed]:
        """The running broker processes (for fault injection and pid checks)."""
        return [b.proc for b in self._nodes if b.proc is not None]

    def start(self) -> KafkaCluster:
        """Format storage, start every broker and wait until all are registered.

        A new cluster whose broker found its port taken after all (another process bound it
        between the choice and the broker's bind) is planned again on new ports, once; the
        failed attempt's logs are kept as ``kafka/port-taken-broker-N.log``."""
        if self.procs:
            return self
        t0 = time.monotonic()
        check_java()
        self.jars = self.jars or ensure_jars()
        for attempt in (1, 2):
            new = not self._nodes  # a restart after stop() keeps ports, cluster id and data
            try:
                self._start_nodes(new, deadline=time.monotonic() + self.start_timeout_s)
                break
            except BaseException as exc:
                self.stop(grace_s=2.0)
                if attempt == 1 and new and isinstance(exc, PgvalError) \
                        and self._keep_logs_if_port_taken():
                    self._nodes = []
                    continue
                raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _keep_logs_if_port_taken(self) -> bool:
        """Whether a broker exited because its port was taken; if so its log is kept beside
        the storage the next attempt clears."""
        # Each attempt starts on cleared broker folders: the whole log is this attempt's.
        taken = [n for n in self._nodes
                 if "Address already in use" in log_cause(n.dir / "broker.log")]
        for n in taken:
            copy_private(n.dir / "broker.log",
                         self.run_dir / "kafka" / f"port-taken-broker-{n.node_id}.log")
        return bool(taken)

    def _start_nodes(self, new: bool, deadline: float) -> None:
        if new:
            # A new cluster never starts on an old one's storage (a warm cluster started
            # again whole, `cluster up` after a forced `down`): the metadata log holds
            # the old cluster id and SCRAM login, so the brokers could not log in, and
            # its topics would still be there.
            _clear_storage(self.run_dir / "kafka")
            nodes = self._plan()
            if self.credentials is not None:
                self.credentials.write(self.credentials_file)
            for node in nodes:
                self._write_config(node, nodes)
            with ThreadPoolExecutor(max_workers=min(self.brokers, 4)) as pool:
                list(pool.map(self._format, nodes))
            self._nodes = nodes
        for node in self._nodes:
            self._spawn(node)
        for node in self._nodes:
            assert node.proc is not None
            wait_for_port(self.host, node.port, max(1.0, deadline - time.monotonic()), node.proc)
        self._wait_registered(deadline)

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop every broker (SIGTERM, SIGKILL after ``grace_s``); safe to call repeatedly.

        All brokers get SIGTERM at once. A broker's controlled shutdown needs a controller
        majority, so once only a minority of voters is left the rest can never finish
        cleanly; they get SIGKILL after a short pause instead of the full grace period.
        """
        nodes = [n for n in self._nodes if n.proc is not None]
        if not nodes:
            return
        n_voters = min(self.brokers, MAX_VOTERS)
        for node in nodes:
            assert node.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        quorum_lost_at: float | None = None
        while time.monotonic() < deadline:
            alive = [n for n in nodes if n.proc is not None and n.proc.alive()]
            if not alive:
                break
            voters_alive = sum(1 for n in alive if n.node_id < n_voters)
            if 2 * voters_alive <= n_voters:
                quorum_lost_at = quorum_lost_at or time.monotonic()
                if time.monotonic() - quorum_lost_at > _QUORUM_LOST_WAIT_S:
                    break
            time.sleep(0.05)
        for node in nodes:
            assert node.proc is not None
            node.proc.stop(grace_s=0.0)
            node.proc = None

    # ---- one broker (the broker-crash fault) -------------------------------------------

    def class_dumps(self) -> list[tuple[cds.ClassArchive, int]]:
        """The running brokers that record their classes for an archive (pgval.host.cds)."""
        return [(b.archive, b.proc.pid) for b in self._nodes
                if b.archive is not None and b.archive.recording and b.proc is not None
                and b.proc.alive()]

    @property
    def node_ids(self) -> list[int]:
        """The brokers' node ids (also their ids in Kafka's metadata)."""
        return [n.node_id for n in self._nodes]

    def node_pid(self, node_id: int) -> int | None:
        """The running process of broker ``node_id``, or None when it is down."""
        node = self._node(node_id)
        return node.proc.pid if node.proc is not None and node.proc.alive() else None

    def kill_node(self, node_id: int) -> int | None:
        """SIGKILL broker ``node_id``'s process group (a crash, no controlled shutdown);
        returns the pid killed, None if it was not running."""
        node = self._node(node_id)
        if node.proc is None or not node.proc.alive():
            return None
        pid = node.proc.pid
        node.proc.kill()
        node.proc = None
        return pid

    def restart_node(self, node_id: int, timeout_s: float = 90.0) -> int:
        """Start broker ``node_id`` again on its ports, storage and config (it recovers its
        logs and rejoins); returns once it listens and the cluster lists every broker."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.alive():
            return node.proc.pid
        deadline = time.monotonic() + timeout_s
        proc = self._spawn(node)
        wait_for_port(self.host, node.port, timeout_s, proc)
        self._wait_registered(deadline)
        return proc.pid

    def _node(self, node_id: int) -> _Broker:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise UserMistake(f"no Kafka broker {node_id} in this cluster (brokers "
                          f"{self.node_ids})")

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- internals -------------------------------------------------------------------------

    def _spawn(self, node: _Broker) -> Managed:
        argv = self._broker_argv(node)
        # How to start this broker again from its directory alone: `pgval cluster broker
        # start` on a `cluster up` cluster (a broker-crash on --cluster, or its undo by a
        # killed run's reaper). No secret in it: the login is in server.properties.
        write_private_json(node.dir / RESTART_FILE, {
            "node_id": node.node_id, "argv": argv, "host": self.host, "port": node.port})
        node.proc = spawn(
            broker_process_name(node.node_id),
            argv,
            node.dir / "broker.log",
            cwd=node.dir,
            pid_dir=self.run_dir / "pids",
        )
        return node.proc

    def _plan(self) -> list[_Broker]:
        base = self.run_dir / "kafka"
        nodes = []
        for i in range(self.brokers):
            port, cport = free_port(self.host), free_port(self.host)
            nodes.append(_Broker(node_id=i, port=port, controller_port=cport,
                                 dir=base / f"broker-{i}"))
        return nodes

    def _write_config(self, node: _Broker, nodes: list[_Broker]) -> None:
        voters = nodes[: min(self.brokers, MAX_VOTERS)]
        is_voter = node.node_id < len(voters)
        rf = self.replication
        internal_partitions = max(self.partitions, 1)
        client = "CLIENT" if self.sasl else "PLAINTEXT"
        listeners = [f"{client}://{self.host}:{node.port}"]
        if is_voter:
            listeners.append(f"CONTROLLER://{self.host}:{node.controller_port}")
        props: dict[str, object] = {
            "process.roles": "broker,controller" if is_voter else "broker",
            "node.id": node.node_id,
            "controller.quorum.voters": ",".join(
                f"{v.node_id}@{self.host}:{v.controller_port}" for v in voters
            ),
            "listeners": ",".join(listeners),
            "advertised.listeners": f"{client}://{self.host}:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": client,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": node.dir / "data",
            # A tiny machine: few threads, few internal partitions.
            "num.network.threads": 2,
            "num.io.threads": 2,
            "num.replica.fetchers": 1,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 2,
            "num.partitions": self.partitions,
            "default.replication.factor": rf,
            # As pgval.kafka.admin's topics: one broker may fail without a lost write.
            "min.insync.replicas": min_insync(rf),
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": internal_partitions,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_insync(rf),
            "transaction.state.log.num.partitions": internal_partitions,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_insync(rf),
            "group.initial.rebalance.delay.ms": 0,
            # Keep everything an experiment wrote; runs are short-lived.
            "log.retention.ms": -1,
            "log.retention.bytes": -1,
            "log.retention.check.interval.ms": 3_600_000,
            "delete.topic.enable": "true",
            "unclean.leader.election.enable": "false",
        }
        if self.credentials is not None:
            props.update(_sasl_props(self.credentials))
        node.dir.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        # 0600: with SASL the file holds the cluster's password (the JAAS settings).
        write_private(node.dir / "server.properties", text)
        write_private(node.dir / "log4j2.properties", _LOG4J2)

    def _jvm_base(self, node: _Broker) -> list[str]:
        java = java_executable()
        if java is None:  # check_java() ran already; this is a race with PATH changes
            raise EnvironmentFailure("Java 17 or newer is required but `java` was not found "
                                     "on PATH")
        assert self.jars is not None
        return [
            java,
            "-Djava.net.preferIPv4Stack=true",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node.dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.dir}",
            "-cp",
            self.jars.kafka_classpath_str,
        ]

    def _broker_argv(self, node: _Broker) -> list[str]:
        base = self._jvm_base(node)
        assert self.jars is not None
        node.archive = cds.archive("kafka-broker", base[0], self.jars.kafka_classpath)
        return [
            base[0],
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            *(node.archive.flags() if node.archive is not None else []),
            *base[1:],
            BROKER_MAIN,
            str(node.dir / "server.properties"),
        ]

    def _format(self, node: _Broker) -> None:
        """``kafka-storage format``; a short JVM with a small heap and C1 only (starts faster).

        With SASL it also bootstraps the SCRAM credential (``--add-scram``) into the
        metadata log, so the brokers can log in to each other from their first start. Its
        arguments then come from a 0600 file (the tool's ``@file``), never the command line,
        and the file is gone once the format ran."""
        base = self._jvm_base(node)
        args = ["format", "--ignore-formatted", "--config", str(node.dir / "server.properties"),
                "--cluster-id", self.cluster_id]
        args_file = node.dir / "format.args"
        tool_args = args
        if self.credentials is not None:
            c = self.credentials
            args += ["--add-scram",
                     f'{SCRAM_MECHANISM}=[name={c.username},password="{c.password}"]']
            write_private(args_file, "".join(f"{a}\n" for a in args))
            tool_args = [f"@{args_file}"]
        argv = [base[0], "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *base[1:],
                STORAGE_TOOL_MAIN, *tool_args]
        log_path = node.dir / "format.log"
        proc = spawn(f"kafka-format-{node.node_id}", argv, log_path, cwd=node.dir)
        try:
            code = proc.popen.wait(timeout=120)
        finally:
            proc.stop(grace_s=2.0)
            args_file.unlink(missing_ok=True)
        if code != 0:
            raise EnvironmentFailure(
                f"formatting storage of broker {node.node_id} failed (exit {code}); see {log_path}"
            )

    def _wait_registered(self, deadline: float) -> None:
        admin = admin_client(self.client_config)
        seen = 0
        while time.monotonic() < deadline:
            for node in self._nodes:
                if node.proc is not None and not node.proc.alive():
                    cause = log_cause(node.proc.log_path, start=node.proc.log_start)
                    raise EnvironmentFailure(
                        f"Kafka broker {node.node_id} exited during startup"
                        + (f" ({cause})" if cause else "") + f"; see {node.proc.log_path}"
                    )
            with contextlib.suppress(KafkaException):
                md = admin.list_topics(timeout=2.0)
                seen = len(md.brokers)
                if seen >= self.brokers:
                    return
            time.sleep(0.2)
        raise EnvironmentFailure(
            f"only {seen} of {self.brokers} Kafka brokers registered within "
            f"{self.start_timeout_s:.0f} s; see the logs under {self.run_dir / 'kafka'}"
        )


def _sasl_props(c: KafkaCredentials) -> dict[str, object]:
    """Broker settings of a closed cluster: SCRAM on the client (and inter-broker) listener,
    PLAIN on the controller listener (a controller quorum must log in before the metadata
    log, where SCRAM credentials live, is readable); one user, one password. No authorizer:
    the only user that can log in is pgval's."""
    user, pw = jaas_quote(c.username), jaas_quote(c.password)
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    return {
        "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
        "sasl.mechanism.controller.protocol": CONTROLLER_MECHANISM,
        "listener.name.client.sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"listener.name.client.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            f"{scram} required username={user} password={pw};",
        "listener.name.controller.sasl.enabled.mechanisms": CONTROLLER_MECHANISM,
        f"listener.name.controller.{CONTROLLER_MECHANISM.lower()}.sasl.jaas.config":
            f"{plain} required username={user} password={pw} user_{c.username}={pw};",
    }


def _new_cluster_id() -> str:
    """What ``kafka-storage random-uuid`` prints: 16 random bytes, URL-safe base64, no padding.

    Like Kafka's ``Uuid.randomUuid`` it never starts with "-", which the CLI would take for an
    option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _clear_storage(kafka_dir: Path) -> None:
    """Remove the broker directories a previous cluster left in ``kafka_dir``."""
    if kafka_dir.is_symlink():
        raise EnvironmentFailure(f"{kafka_dir} is a symbolic link; pgval will not start "
                                "Kafka there")
    for old in kafka_dir.glob("broker-*"):
        shutil.rmtree(old)
