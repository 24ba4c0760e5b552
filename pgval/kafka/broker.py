"""An embedded multi-broker Kafka (KRaft, combined mode) for local experiments, plus fast readers.

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

Experiment topics get an *explicit* replica assignment in which partition ``p`` of every
topic is led by broker ``p % B``: a fault injected on one broker then hits the same
partitions of the inputs, the output and the commit-marker topic, which the oracle relies on.
"""

from __future__ import annotations

import base64
import contextlib
import operator
import os
import secrets
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import numpy as np
import pyarrow as pa
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from pgval import schema
from pgval.errors import RuntimeErrorPlain
from pgval.files import write_private
from pgval.host.jars import Jars, check_java, ensure_jars, java_executable
from pgval.host.procs import Managed, free_port, spawn, wait_for_port

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


def _quiet_client_conf(bootstrap: str, config: Mapping[str, object] | None = None
                       ) -> dict[str, object]:
    """librdkafka logs every refused connection; those are expected while a broker starts.
    ``config``: more client settings (the cluster's credentials)."""
    return {"bootstrap.servers": bootstrap, "log_level": 0, "logger": _NullLogger(),
            **(config or {})}


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
    :func:`java_client_options` turns it into a Java client's (Spark's source and sink).
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
            raise RuntimeErrorPlain(f"{path} holds no sasl.password")
        return cls(password=conf["sasl.password"],
                   username=conf.get("sasl.username") or KAFKA_USER)


def read_client_properties(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (``#`` comments and blank lines skipped) into a dict."""
    out = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise RuntimeErrorPlain(f"{path}: a line without KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def java_client_options(config: Mapping[str, str]) -> dict[str, str]:
    """librdkafka client settings as a Java Kafka client's (Spark's source and sink): the
    user name and password become ``sasl.jaas.config`` for a SCRAM or PLAIN mechanism
    (unless one is given); everything else passes unchanged. The password stays in memory
    and the JVM's config (which Kafka logs as ``[hidden]``)."""
    out = dict(config)
    mechanism = str(out.get("sasl.mechanism", out.get("sasl.mechanisms", "PLAIN"))).upper()
    if mechanism != "PLAIN" and not mechanism.startswith("SCRAM-"):
        return out  # GSSAPI, OAUTHBEARER: no user name and password to translate
    user, password = out.pop("sasl.username", None), out.pop("sasl.password", None)
    if user is None and password is None:
        return out
    out.pop("sasl.mechanisms", None)
    out["sasl.mechanism"] = mechanism
    module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
              if mechanism.startswith("SCRAM-")
              else "org.apache.kafka.common.security.plain.PlainLoginModule")
    out.setdefault("sasl.jaas.config", f"{module} required username={_jaas_quote(user or '')} "
                                       f"password={_jaas_quote(password or '')};")
    return out


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _NullLogger:
    """Swallows librdkafka log lines (a ``logging.Logger``-like sink)."""

    def log(self, *_args: object, **_kwargs: object) -> None:
        return None


def is_reachable(bootstrap: str, timeout_s: float = 5.0,
                 config: Mapping[str, object] | None = None) -> bool:
    """True when some broker at ``bootstrap`` answers a metadata request within ``timeout_s``."""
    admin = AdminClient(_quiet_client_conf(bootstrap, config))
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return True


@dataclass
class _Broker:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    proc: Managed | None = None


@dataclass
class KafkaCluster:
    """B KRaft brokers on one host; the first min(B, 3) are also controller voters.

    Use as a context manager, or call :meth:`start` and (always, e.g. in ``finally``)
    :meth:`stop`.
    """

    run_dir: Path
    brokers: int = 1
    partitions: int = 3
    host: str = "127.0.0.1"
    heap: str = "384m"
    jars: Jars | None = None
    start_timeout_s: float = 120.0
    #: Use brokers someone else runs (the compose deployment): only topic admin is done here.
    external_bootstrap: str | None = None
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
        if not self.sasl or self.external_bootstrap:
            self.credentials = None
        elif self.credentials is None:
            self.credentials = KafkaCredentials.new()

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def replication(self) -> int:
        """Replication factor of every topic: min(3, B)."""
        return min(3, self.brokers)

    @property
    def bootstrap(self) -> str:
        if self.external_bootstrap:
            return self.external_bootstrap
        if not self._nodes:
            raise RuntimeErrorPlain("the Kafka cluster has not been started")
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
        """Format storage, start every broker and wait until all are registered."""
        if self.procs:
            return self
        t0 = time.monotonic()
        check_java()
        jars = self.jars or ensure_jars()
        self.jars = jars
        try:
            if not self._nodes:  # a restart after stop() keeps ports, cluster id and data
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
            deadline = t0 + self.start_timeout_s
            for node in self._nodes:
                assert node.proc is not None
                wait_for_port(
                    self.host, node.port, max(1.0, deadline - time.monotonic()), node.proc
                )
            self._wait_registered(deadline)
        except BaseException:
            self.stop(grace_s=2.0)
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

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

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- topics ----------------------------------------------------------------------------

    def replica_assignment(self, partitions: int | None = None) -> list[list[int]]:
        """Partition p -> [p % B, p+1 % B, ...]; the first replica is the preferred leader."""
        n = self.partitions if partitions is None else partitions
        return [[(p + k) % self.brokers for k in range(self.replication)] for p in range(n)]

    def create_topics(
        self,
        names: Iterable[str],
        partitions: int | None = None,
        compacted: Iterable[str] = (),
        timeout_s: float = 60.0,
    ) -> None:
        """Create topics (existing ones are left alone) with LogAppendTime and aligned leaders."""
        names = list(dict.fromkeys(names))
        compacted_set = set(compacted)
        assignment = self.replica_assignment(partitions)
        new = []
        for name in names:
            config = {
                "message.timestamp.type": "LogAppendTime",
                "min.insync.replicas": "1",
                "retention.ms": "-1",
            }
            if name in compacted_set:
                config["cleanup.policy"] = "compact"
            # librdkafka wants the partition count *with* an assignment (not -1 as documented).
            new.append(NewTopic(name, num_partitions=len(assignment),
                                replica_assignment=assignment, config=config))
        admin = AdminClient(_quiet_client_conf(self.bootstrap, self.auth_config))
        futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
        for name, fut in futures.items():
            try:
                fut.result()
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RuntimeErrorPlain(f"could not create topic {name}: {err.str()}") from exc
        self._wait_leaders(admin, names, assignment, time.monotonic() + timeout_s)

    def ensure_experiment_topics(
        self, output_topics: str | Sequence[str] = (schema.OUTPUT_TOPIC,)
    ) -> list[str]:
        """Inputs, output(s) and the compacted marker topic, P partitions each; returns names."""
        outputs = [output_topics] if isinstance(output_topics, str) else list(output_topics)
        names = [schema.GET_TOPIC, schema.POST_TOPIC, *outputs, schema.MARKER_TOPIC]
        self.create_topics(names, compacted=[schema.MARKER_TOPIC])
        return names

    def leaders(self, topic: str, timeout_s: float = 10.0) -> dict[int, int]:
        """Current leader broker id of each partition of ``topic``."""
        admin = AdminClient(_quiet_client_conf(self.bootstrap, self.auth_config))
        md = admin.list_topics(topic=topic, timeout=timeout_s)
        tmd = md.topics[topic]
        if tmd.error is not None:
            raise RuntimeErrorPlain(f"no metadata for topic {topic}: {tmd.error.str()}")
        return {p: pmd.leader for p, pmd in tmd.partitions.items()}

    # ---- internals -------------------------------------------------------------------------

    def _spawn(self, node: _Broker) -> Managed:
        node.proc = spawn(
            f"kafka-broker-{node.node_id}",
            self._broker_argv(node),
            node.dir / "broker.log",
            cwd=node.dir,
            pid_dir=self.run_dir / "pids",
        )
        return node.proc

    def _plan(self) -> list[_Broker]:
        base = self.run_dir / "kafka"
        used: set[int] = set()
        nodes = []
        for i in range(self.brokers):
            port, cport = _distinct_port(self.host, used), _distinct_port(self.host, used)
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
            "min.insync.replicas": 1,
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": internal_partitions,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": internal_partitions,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": 1,
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
        (node.dir / "log4j2.properties").write_text(_LOG4J2)

    def _jvm_base(self, node: _Broker) -> list[str]:
        java = java_executable()
        if java is None:  # check_java() ran already; this is a race with PATH changes
            raise RuntimeErrorPlain("Java 17 or newer is required but `java` was not found on PATH")
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
        return [
            base[0],
            f"-Xmx{self.heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
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
            raise RuntimeErrorPlain(
                f"formatting storage of broker {node.node_id} failed (exit {code}); see {log_path}"
            )

    def _wait_registered(self, deadline: float) -> None:
        admin = AdminClient(_quiet_client_conf(self.bootstrap, self.auth_config))
        seen = 0
        while time.monotonic() < deadline:
            for node in self._nodes:
                if node.proc is not None and not node.proc.alive():
                    raise RuntimeErrorPlain(
                        f"Kafka broker {node.node_id} exited during startup; "
                        f"see {node.proc.log_path}"
                    )
            with contextlib.suppress(KafkaException):
                md = admin.list_topics(timeout=2.0)
                seen = len(md.brokers)
                if seen >= self.brokers:
                    return
            time.sleep(0.2)
        raise RuntimeErrorPlain(
            f"only {seen} of {self.brokers} Kafka brokers registered within "
            f"{self.start_timeout_s:.0f} s; see the logs under {self.run_dir / 'kafka'}"
        )

    def _wait_leaders(
        self, admin: AdminClient, names: list[str], assignment: list[list[int]], deadline: float
    ) -> None:
        """Block until EVERY broker's metadata has every partition with its preferred leader.

        Asking one broker is not enough: in KRaft each broker applies the controller's
        records on its own, so a client that next talks to another broker can find the topic
        missing (CI failed once with ``KeyError: 'get'`` right after topic creation). Each
        broker is asked through a fresh client bootstrapped on it alone, whose first
        metadata request goes to that broker.
        """
        wanted = {p: replicas[0] for p, replicas in enumerate(assignment)}
        targets = ([f"{self.host}:{n.port}" for n in self._nodes] if self._nodes
                   and not self.external_bootstrap else [self.bootstrap])
        pending = {(t, name) for t in targets for name in names}
        while True:
            for target in sorted({t for t, _ in pending}):
                client = admin if target == self.bootstrap else AdminClient(
                    _quiet_client_conf(target, self.auth_config))
                md = None
                with contextlib.suppress(KafkaException):
                    md = client.list_topics(timeout=5.0)
                for name in [n for t, n in pending if t == target]:
                    tmd = md.topics.get(name) if md is not None else None
                    if (tmd is not None and tmd.error is None
                            and len(tmd.partitions) >= len(wanted)
                            and all(p in tmd.partitions and tmd.partitions[p].leader == lead
                                    for p, lead in wanted.items())):
                        pending.discard((target, name))
            if not pending:
                return
            if time.monotonic() > deadline:
                late = sorted({n for _, n in pending})
                raise RuntimeErrorPlain(
                    f"topics {', '.join(late)} did not get their assigned leaders on every "
                    f"broker in time"
                )
            time.sleep(0.2)


def _sasl_props(c: KafkaCredentials) -> dict[str, object]:
    """Broker settings of a closed cluster: SCRAM on the client (and inter-broker) listener,
    PLAIN on the controller listener (a controller quorum must log in before the metadata
    log, where SCRAM credentials live, is readable); one user, one password. No authorizer:
    the only user that can log in is pgval's."""
    user, pw = _jaas_quote(c.username), _jaas_quote(c.password)
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


def _distinct_port(host: str, used: set[int]) -> int:
    while True:
        port = free_port(host)
        if port not in used:
            used.add(port)
            return port


# ---- reading topics ------------------------------------------------------------------------


def binary_column(values: pa.ChunkedArray | pa.Array | Iterable[bytes | None]
                  ) -> pa.ChunkedArray:
    """Keys or values as one chunked Arrow binary column (lists are converted)."""
    if isinstance(values, pa.ChunkedArray):
        return values if values.type == pa.binary() else values.cast(pa.binary())
    if isinstance(values, pa.Array):
        arr = values if values.type == pa.binary() else values.cast(pa.binary())
        return pa.chunked_array([arr], type=pa.binary())
    return pa.chunked_array([pa.array(list(values), type=pa.binary())], type=pa.binary())


@dataclass
class TopicRecords:
    """A topic's records, column by column (arrival order; offset order within a partition).

    ``keys`` and ``values`` are Arrow binary columns (null: no key or value), built by Arrow
    from each fetched batch, so millions of records cost no Python object per field; lists
    given to the constructor are converted. ``rows()`` gives Python tuples for small checks.

    Also the proof of what was read: ``end_offsets`` are the per-partition ends the read
    aimed for (the last stable offset for read_committed), ``reached`` the position each
    partition actually got to, and ``problems`` why the read stopped short (empty when
    :attr:`complete`). A short read is never silent: callers decide what it means.
    """

    keys: pa.ChunkedArray
    values: pa.ChunkedArray
    timestamps: np.ndarray  # int64, ms
    partitions: np.ndarray  # int32
    offsets: np.ndarray  # int64
    topic: str = ""
    end_offsets: dict[int, int] = field(default_factory=dict)
    reached: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.keys = binary_column(self.keys)
        self.values = binary_column(self.values)
        self.timestamps = np.asarray(self.timestamps, dtype=np.int64)
        self.partitions = np.asarray(self.partitions, dtype=np.int32)
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        n = len(self.values)
        if not (len(self.keys) == len(self.timestamps) == len(self.partitions)
                == len(self.offsets) == n):
            raise ValueError("the columns of a TopicRecords differ in length")

    def __len__(self) -> int:
        return len(self.values)

    @property
    def complete(self) -> bool:
        """Every partition was read up to its end offset and nothing went wrong."""
        return not self.problems and all(
            self.reached.get(p, 0) >= end for p, end in self.end_offsets.items())

    def rows(self) -> list[tuple[bytes | None, bytes | None, int, int, int]]:
        """(key, value, timestamp_ms, partition, offset) tuples, for small checks and tests."""
        return list(
            zip(
                self.keys.to_pylist(),
                self.values.to_pylist(),
                self.timestamps.tolist(),
                self.partitions.tolist(),
                self.offsets.tolist(),
                strict=True,
            )
        )

    def describe(self) -> dict[str, object]:
        """What the read proves, for run.json and the store (JSON-ready)."""
        return {"topic": self.topic, "records": len(self), "complete": self.complete,
                "end_offsets": {str(p): o for p, o in sorted(self.end_offsets.items())},
                "reached": {str(p): o for p, o in sorted(self.reached.items())},
                "problems": list(self.problems)}


#: Records asked of librdkafka per consume() call; each batch becomes one Arrow chunk.
#: Measured: 10k batches consume ~2x faster than 100k (the message objects of a batch stay
#: in cache), and smaller ones gain nothing.
READ_BATCH = 10_000
_timestamp_ms = operator.itemgetter(1)


class _Columns:
    """Column chunks of a read, one per consumed batch."""

    def __init__(self) -> None:
        self.keys: list[pa.Array] = []
        self.values: list[pa.Array] = []
        self.ts: list[np.ndarray] = []
        self.parts: list[np.ndarray] = []
        self.offs: list[np.ndarray] = []
        self.count = 0

    def add(self, msgs: list[Message], end: np.ndarray, reached: dict[int, int],
            todo: set[int]) -> None:
        """Take a batch of data messages: one C-driven pass per field, no loop per record.

        Records at or past their partition's end offset were written after the read looked
        at the ends: not part of this snapshot, dropped. ``reached`` and ``todo`` are
        updated per partition exactly as a record-by-record read would.
        """
        n = len(msgs)
        parts = np.fromiter(map(Message.partition, msgs), dtype=np.int32, count=n)
        offs = np.fromiter(map(Message.offset, msgs), dtype=np.int64, count=n)
        ts = np.fromiter(map(_timestamp_ms, map(Message.timestamp, msgs)), dtype=np.int64,
                         count=n)
        keys = pa.array(list(map(Message.key, msgs)), type=pa.binary())
        values = pa.array(list(map(Message.value, msgs)), type=pa.binary())
        ends = end[parts]
        for p in np.flatnonzero(np.bincount(parts)).tolist():
            # Offsets only grow within a partition: the batch's last record of p tells how
            # far p got; past the end means p is at its end.
            top = int(offs[parts == p].max())
            reached[p] = max(reached[p], min(top + 1, int(end[p])))
            if reached[p] >= end[p]:
                todo.discard(p)
        keep = offs < ends
        if not keep.all():
            mask = pa.array(keep)
            keys, values = keys.filter(mask), values.filter(mask)
            parts, offs, ts = parts[keep], offs[keep], ts[keep]
        self.keys.append(keys)
        self.values.append(values)
        self.ts.append(ts)
        self.parts.append(parts)
        self.offs.append(offs)
        self.count += len(offs)

    def records(self) -> TopicRecords:
        def cat(chunks: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)

        return TopicRecords(keys=pa.chunked_array(self.keys, type=pa.binary()),
                            values=pa.chunked_array(self.values, type=pa.binary()),
                            timestamps=cat(self.ts, np.int64),
                            partitions=cat(self.parts, np.int32),
                            offsets=cat(self.offs, np.int64))


def kafka_problem(exc: Exception) -> str:
    """A read's problem line for a Kafka client error or a plain runtime error."""
    text = exc.args[0].str() if isinstance(exc, KafkaException) else exc
    return f"Kafka error: {text}"


def reader_conf(bootstrap: str, isolation: str,
                config: Mapping[str, object] | None = None) -> dict[str, object]:
    """Consumer settings of every read-back (no group offsets, partition ends reported);
    ``config`` adds client settings (the user's SASL/SSL for an external cluster)."""
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"unknown isolation level {isolation!r}")
    return {
        **_quiet_client_conf(bootstrap),
        "group.id": f"pgval-read-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "queued.min.messages": 1_000_000,
        "queued.max.messages.kbytes": 256 * 1024,
        "fetch.wait.max.ms": 50,
        **(config or {}),
    }


def end_snapshot(consumer: Consumer, bootstrap: str, topic: str, timeout_s: float
                 ) -> tuple[dict[int, int], dict[int, int], list[str]]:
    """(end, start, problems) per partition of ``topic``: what a read must reach.

    With isolation.level=read_committed the "high" offset librdkafka queries is the last
    stable offset. A log that no longer starts at 0 lost records: a problem.
    """
    md = consumer.list_topics(topic=topic, timeout=min(timeout_s, 30.0))
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        why = tmd.error.str() if tmd is not None and tmd.error is not None else "no metadata"
        raise RuntimeErrorPlain(f"cannot read topic {topic} at {bootstrap}: {why}")
    end: dict[int, int] = {}
    starts: dict[int, int] = {}
    problems: list[str] = []
    for p in sorted(tmd.partitions):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=min(timeout_s, 30.0), cached=False
        )
        end[p], starts[p] = high, low
        if low > 0:
            problems.append(f"partition {p} starts at offset {low}: earlier records "
                            f"were deleted")
    return end, starts, problems


def read_partitions(consumer: Consumer, topic: str, end: dict[int, int], reached: dict[int, int],
                    problems: list[str], timeout_s: float, idle_timeout_s: float,
                    batch_size: int = READ_BATCH,
                    on_progress: Callable[[int], None] | None = None) -> _Columns:
    """Read the partitions of ``topic`` in ``end`` from ``reached`` (their log starts, or
    any offset: parallel readers split a partition) up to ``end``, updating ``reached`` as
    it goes and adding to ``problems`` why it stopped short (a time-out, nothing
    arriving); a Kafka error is raised (``reached`` shows how far it got).
    """
    columns = _Columns()
    end_by_partition = np.zeros(max(end, default=-1) + 1, dtype=np.int64)
    for p, e in end.items():
        end_by_partition[p] = e
    todo = {p for p, e in end.items() if e > reached[p]}
    if todo:
        consumer.assign([TopicPartition(topic, p, reached[p]) for p in sorted(todo)])
    deadline = time.monotonic() + timeout_s
    last_data = time.monotonic()
    while todo:
        now = time.monotonic()
        if now > deadline:
            problems.append(f"read time-out after {timeout_s:.0f} s")
            break
        if now - last_data > idle_timeout_s:
            problems.append(f"nothing arrived for {idle_timeout_s:.0f} s")
            break
        batch = consumer.consume(num_messages=batch_size, timeout=0.1)
        if not batch:
            continue
        last_data = time.monotonic()
        errors = list(map(Message.error, batch))
        # any(), not errors.count(None): KafkaError's == against None leaves a TypeError
        # pending in confluent-kafka 2.x; an error object is always true, None false.
        if any(errors):
            # Partition ends (and errors) are rare: a few per read, looked at one by one.
            for msg, err in zip(batch, errors, strict=True):
                if err is None:
                    continue
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeErrorPlain(f"reading {topic}: {err.str()}")
                p = msg.partition()
                if p in todo:
                    reached[p] = max(reached[p], msg.offset())
                    if msg.offset() >= end[p]:
                        todo.discard(p)
            batch = [m for m, err in zip(batch, errors, strict=True) if err is None]
        if batch:
            columns.add(batch, end_by_partition, reached, todo)
            if on_progress is not None:
                on_progress(columns.count)
    return columns


def short_read_problems(end: dict[int, int], reached: dict[int, int], problems: list[str]
                        ) -> list[str]:
    """``problems`` plus a line naming every partition that did not reach its end."""
    short = {p: (reached.get(p, 0), e) for p, e in end.items() if reached.get(p, 0) < e}
    if not short:
        return problems
    head = [] if problems else ["stopped early"]
    return [*problems, *head, "short partitions: " + ", ".join(
        f"{p} at {r} of {e}" for p, (r, e) in sorted(short.items()))]


def read_topic(
    bootstrap: str,
    topic: str,
    isolation: str = "read_committed",
    timeout_s: float = 120.0,
    idle_timeout_s: float = 10.0,
    strict: bool = True,
    batch_size: int = READ_BATCH,
    on_progress: Callable[[int], None] | None = None,
    config: Mapping[str, object] | None = None,
) -> TopicRecords:
    """Read all of ``topic`` from the beginning up to its current end, as columns.

    The end is the last stable offset for ``read_committed`` (aborted and open transactions
    are skipped) and the high watermark for ``read_uncommitted``. Reading stops when every
    partition has reached it, when nothing arrived for ``idle_timeout_s``, at ``timeout_s``,
    or on a Kafka error. With ``strict`` (the default) a read that stopped short raises
    :class:`RuntimeErrorPlain`; with ``strict=False`` it returns what it read, with the
    reasons in ``problems`` (``complete`` is then False) — the experiment stores that and
    marks the run unknown rather than guessing. ``config``: more client settings (the
    user's SASL/SSL for an external cluster).

    Speed: librdkafka fetches and decompresses in its own thread; here each batch of up to
    ``batch_size`` records is turned into columns with one C-driven pass per field (the
    only per-record cost is the client's message object). ``on_progress`` gets the number
    of records read so far after each batch. :func:`pgval.kafka.reader.read_topics`
    reads several topics with parallel reader processes.
    """
    conf = reader_conf(bootstrap, isolation, config)
    columns = _Columns()
    end: dict[int, int] = {}
    reached: dict[int, int] = {}
    problems: list[str] = []
    consumer = None
    try:
        consumer = Consumer(conf)
        end, starts, problems = end_snapshot(consumer, bootstrap, topic, timeout_s)
        reached.update(starts)  # nothing before the log start exists any more
        columns = read_partitions(consumer, topic, end, reached, problems, timeout_s,
                                  idle_timeout_s, batch_size, on_progress)
    except (KafkaException, RuntimeErrorPlain) as exc:
        problems.append(kafka_problem(exc))
    finally:
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()
    records = columns.records()
    records.topic, records.end_offsets, records.reached = topic, end, reached
    records.problems = short_read_problems(end, reached, problems)
    if strict and not records.complete:
        raise RuntimeErrorPlain(f"could not read all of topic {topic} at {bootstrap}: "
                                + "; ".join(records.problems or ["partitions missing"]))
    return records
