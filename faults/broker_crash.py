"""``broker-crash``: SIGKILL of one Kafka broker at T2, started again at T3 (or at once).

The broker that dies is the one whose loss the run's sink feels: by default the leader of
the most partitions of the run's output topic (``--target leader``); with ``--target
coordinator`` the transaction coordinator of the e1 sink's ``transactional.id`` — the
leader of the ``__transaction_state`` partition Kafka maps that id to
(``TransactionStateManager.partitionFor``: ``Utils.abs(id.hashCode) % partitions``);
or broker ``K`` (``--target K``). On the embedded cluster the first three brokers are also
the KRaft controller voters, so a crash of one of them can move the active controller too.

What the fault log keeps, so a re-check judges it from the log alone: the leaders and
in-sync replicas of every partition of the run's topics (and the coordinator's partition)
before the kill, after the kill once the dead broker led nothing, and after the restart
once it was back in the in-sync set of every partition it holds. Each step logs
``effective_ms``: the kill once the process group is gone, the removal once the restarted
broker is registered again (the run's phases start there).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from confluent_kafka import KafkaException

from pgval.checker.result import Reason
from pgval.core.clock import now_ms
from pgval.core.schema import BROKER_TARGETS, Deploy, Fault, Restart
from pgval.faults.descriptor import BROKER, BROKER_PROCESSES, NEMESIS, FaultDescriptor
from pgval.faults.log import Entries, finding, first
from pgval.host import undo

#: The ``mechanism`` of a broker crash.
SIGKILL_BROKER = "SIGKILL of a Kafka broker's process group"
#: The ``mechanism`` of a broker crash through the user's nemesis commands.
NEMESIS_BROKER = "user nemesis (broker crash)"
#: The undo record of a broker down on a cluster that outlives the run (one per broker:
#: a schedule may have two down at once).
UNDO_PREFIX = "broker-crash-"
#: Kafka's internal topic of transaction state; its partition leaders are the coordinators.
TRANSACTION_STATE = "__transaction_state"
#: ``--target`` words of a broker crash (else a broker id).
LEADER, COORDINATOR = BROKER_TARGETS


class BrokerProcesses(Protocol):
    """Brokers pgval can signal and start: the embedded cluster's
    (``pgval.kafka.broker.KafkaCluster``) or a `cluster up` cluster's from its directory
    (``pgval.cluster.brokers.RecordedBrokers``)."""

    @property
    def node_ids(self) -> list[int]: ...

    @property
    def client_config(self) -> dict[str, str]: ...

    def node_pid(self, node_id: int) -> int | None: ...

    def kill_node(self, node_id: int) -> int | None: ...

    def restart_node(self, node_id: int, timeout_s: float = 90.0) -> int: ...


class KillableBrokers(Protocol):
    """How a broker crash reaches the brokers: each step returns what the fault log keeps
    of it (``killed``: the crash was carried out)."""

    mechanism: str

    @property
    def node_ids(self) -> list[int]: ...

    @property
    def client_config(self) -> dict[str, str]: ...

    def kill(self, node_id: int) -> dict[str, Any]: ...

    def restart(self, node_id: int) -> dict[str, Any]: ...

    def running(self, node_id: int) -> bool | None:
        """Whether the broker's process runs (None: pgval cannot see it)."""

    def undo_argv(self, node_id: int) -> list[str] | None:
        """The command that starts the broker again if the run dies before T3 (None:
        the run's own teardown does, or nothing can)."""


class SignalledBrokers:
    """A broker crash by SIGKILL of the broker's process group (:data:`SIGKILL_BROKER`)."""

    mechanism = SIGKILL_BROKER

    def __init__(self, brokers: BrokerProcesses, undo: list[str] | None = None) -> None:
        self.brokers = brokers
        #: The restart command of a cluster that outlives the run (``{broker}`` filled in).
        self.undo = undo

    @property
    def node_ids(self) -> list[int]:
        return self.brokers.node_ids

    @property
    def client_config(self) -> dict[str, str]:
        return self.brokers.client_config

    def kill(self, node_id: int) -> dict[str, Any]:
        pid = self.brokers.kill_node(node_id)
        return {"killed": pid is not None, "broker_pid": pid}

    def restart(self, node_id: int) -> dict[str, Any]:
        return {"restarted_pid": self.brokers.restart_node(node_id)}

    def running(self, node_id: int) -> bool | None:
        return self.brokers.node_pid(node_id) is not None

    def undo_argv(self, node_id: int) -> list[str] | None:
        return [a.replace("{broker}", str(node_id)) for a in self.undo] if self.undo else None


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (Kafka's
    ``Utils.abs(id.hashCode) % partitions``; ``Utils.abs(MIN_VALUE)`` is 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


PartitionState = dict[str, Any]  # {"leader": id, "replicas": [...], "isr": [...]}
#: Leader, replicas and in-sync replicas by topic and partition, and under
#: :data:`REGISTERED` the ids of the brokers the cluster lists (a fenced broker is not).
ClusterView = dict[str, Any]
REGISTERED = "registered_brokers"


def partition_states(admin: Any, topics: Sequence[str], timeout_s: float = 5.0) -> ClusterView:
    """Leader, replicas and in-sync replicas of every partition of ``topics`` that the
    cluster reports (a topic it does not know is left out), and the registered brokers."""
    md = admin.list_topics(timeout=timeout_s)
    out: ClusterView = {REGISTERED: sorted(md.brokers)}
    for name in topics:
        topic = md.topics.get(name)
        if topic is None or topic.error is not None:
            continue
        out[name] = {p.id: {"leader": p.leader, "replicas": list(p.replicas),
                            "isr": list(p.isrs)} for p in topic.partitions.values()}
    return out


def _topics(view: Mapping[str, Any]) -> dict[str, Mapping[int, PartitionState]]:
    return {t: parts for t, parts in view.items() if t != REGISTERED}


def led_by(states: Mapping[str, Any], broker: int) -> list[str]:
    """``topic/partition`` of every partition ``broker`` leads in ``states``."""
    return [f"{t}/{p}" for t, parts in _topics(states).items()
            for p, s in sorted(parts.items()) if s["leader"] == broker]


def out_of_isr(states: Mapping[str, Any], broker: int) -> list[str]:
    """``topic/partition`` of every partition ``broker`` replicates but is not in sync for."""
    return [f"{t}/{p}" for t, parts in _topics(states).items()
            for p, s in sorted(parts.items()) if broker in s["replicas"] and broker not in s["isr"]]


def registered(states: Mapping[str, Any], broker: int) -> bool | None:
    """Whether the cluster listed ``broker`` (None: a log written before this was kept)."""
    brokers = states.get(REGISTERED)
    return None if brokers is None else broker in brokers


def choose_broker(states: Mapping[str, Any], target: str | int,
                  output_topic: str, transactional_id: str | None,
                  brokers: Sequence[int]) -> tuple[int, str]:
    """The broker a crash hits and why (one phrase for the log)."""
    if isinstance(target, int):
        return target, f"broker {target}, as --target said"
    if target == COORDINATOR:
        if transactional_id is None:
            raise ValueError("--target coordinator needs the e1 sink's transactional.id")
        txn = states.get(TRANSACTION_STATE)
        if not txn:
            raise ValueError(f"{TRANSACTION_STATE} does not exist yet: no transactional "
                             "producer has started")
        partition = coordinator_partition(transactional_id, len(txn))
        leader = txn[partition]["leader"]
        return leader, (f"the transaction coordinator of {transactional_id!r} (leader of "
                        f"{TRANSACTION_STATE}/{partition})")
    counts = {b: 0 for b in brokers}
    for state in states.get(output_topic, {}).values():
        if state["leader"] in counts:
            counts[state["leader"]] += 1
    # The most output partitions; ties to the lowest id (a seeded choice needs no more).
    broker = max(sorted(counts), key=lambda b: counts[b])
    return broker, f"the leader of {counts[broker]} of the output topic's partitions"


class BrokerCrash:
    """Kill one broker at T2 (see the module docstring); start it again in ``remove``."""

    name = "broker-crash"
    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.BROKER_CRASH})
    mechanisms: ClassVar[tuple[str, ...]] = (SIGKILL_BROKER, NEMESIS_BROKER)

    def __init__(self, kafka: KillableBrokers, topics: Sequence[str], output_topic: str,
                 target: str | int = LEADER, transactional_id: str | None = None,
                 settle_timeout_s: float = 45.0, poll_s: float = 0.5,
                 run_dir: Path | None = None) -> None:
        self.kafka = kafka
        self.topics = [*topics, TRANSACTION_STATE]
        self.output_topic = output_topic
        self.target = target
        self.transactional_id = transactional_id
        self.settle_timeout_s = settle_timeout_s
        self.poll_s = poll_s
        #: Where the restart is recorded while the broker is down (an undo record), on a
        #: cluster that outlives the run: its reaper restarts the broker if pgval dies.
        self.run_dir = run_dir
        self.broker: int | None = None
        self._admin: Any = None

    def _states(self) -> ClusterView:
        if self._admin is None:
            from pgval.kafka.admin import admin_client

            self._admin = admin_client(self.kafka.client_config)
        return partition_states(self._admin, self.topics)

    def _wait(self, done: Any) -> tuple[ClusterView, bool]:
        """Poll the metadata until ``done(states)`` or the settle time-out; the last
        states read and whether ``done`` held."""
        deadline = time.monotonic() + self.settle_timeout_s
        states: ClusterView = {}
        while True:
            try:
                states = self._states()
                if done(states):
                    return states, True
            except KafkaException:
                pass  # a metadata request to the dead broker: ask again
            if time.monotonic() > deadline:
                return states, False
            time.sleep(self.poll_s)

    def inject(self) -> dict[str, Any]:
        before = self._states()
        broker, why = choose_broker(before, self.target, self.output_topic,
                                    self.transactional_id, self.kafka.node_ids)
        self.broker = broker
        led = led_by(before, broker)
        undo_argv = self.kafka.undo_argv(broker)
        if self.run_dir is not None and undo_argv:
            undo.record(self.run_dir, f"{UNDO_PREFIX}{broker}", {
                "argv": undo_argv, "what": f"start Kafka broker {broker} again"})
        killed = self.kafka.kill(broker)
        entry: dict[str, Any] = {
            "mechanism": self.kafka.mechanism, "target": f"kafka-broker-{broker}",
            "broker": broker, "chosen": why, **killed, "effective_ms": now_ms(),
            "led_before": led, "before": before}
        if not killed["killed"]:
            entry["error"] = f"Kafka broker {broker} was not running at T2"
            return entry
        # Kafka moves leadership once the controller fences the broker (its session ends);
        # a fenced broker is no longer in the metadata's broker list.
        after, moved = self._wait(lambda s: not led_by(s, broker) and not registered(s, broker))
        if REGISTERED not in after:  # not one metadata answer since the kill
            entry.update(after={}, no_metadata=True, leadership_moved=None,
                         deregistered=None, moved_ms=None, led_after=[])
            return entry
        entry.update(after=after, leadership_moved=not led_by(after, broker),
                     deregistered=registered(after, broker) is False,
                     moved_ms=now_ms() if moved else None, led_after=led_by(after, broker))
        return entry

    def remove(self, restore: bool = True) -> dict[str, Any]:
        if self.broker is None:
            return {"skipped": "no broker was killed"}
        if not restore and self.kafka.undo_argv(self.broker) is None:
            return {"skipped": "teardown stops the cluster"}
        broker = self.broker
        restarted = self.kafka.restart(broker)
        back_ms = now_ms()
        if self.run_dir is not None and restarted.get("registered") is not False:
            # Not registered again: the record stays, so cleanup tries the restart again.
            undo.done(self.run_dir, f"{UNDO_PREFIX}{broker}")
        states, in_sync = self._wait(lambda s: not out_of_isr(s, broker))
        self.broker = None  # safe to call twice: the teardown's remove does nothing more
        return {"broker": broker, **restarted, "effective_ms": back_ms,
                "in_sync": in_sync, "in_sync_ms": now_ms() if in_sync else None,
                "out_of_isr": out_of_isr(states, broker), "after_restart": states}

    def problem(self) -> str | None:
        """Why the fault stopped acting before T3: the killed broker came back by itself."""
        if self.broker is not None and self.kafka.running(self.broker):
            return f"Kafka broker {self.broker} is running again before T3"
        return None

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """A broker was killed and left the cluster's broker list; the partitions it led
        got other leaders; restarted, it came back into the in-sync set of every
        partition it holds."""
        inject, remove = first(entries, "inject"), first(entries, "remove")
        found = []
        if not (inject.get("killed") or inject.get("broker_pid")):
            found.append(finding("no Kafka broker was killed"))
        elif inject.get("no_metadata"):
            found.append(finding("Kafka answered no metadata request after the kill: no "
                                 "evidence that leadership moved"))
        elif inject.get("led_before") and not inject.get("leadership_moved"):
            found.append(finding("the partitions the killed broker led got no other leader: "
                                 + ", ".join(inject.get("led_after") or [])))
        elif inject.get("deregistered") is False:
            found.append(finding(f"Kafka broker {inject.get('broker')} stayed in the "
                                 "cluster's broker list: no evidence it went down"))
        if remove and remove.get("registered") is False:
            found.append(finding(f"Kafka broker {remove.get('broker')} did not register with "
                                 "the cluster again after the remove command"))
        elif remove and "skipped" not in remove and not remove.get("in_sync"):
            found.append(finding("the restarted broker did not catch up: out of the in-sync "
                                 "replicas of " + ", ".join(remove.get("out_of_isr") or [])))
        return found



#: Where ``broker-crash`` can run (the config's check and the deployments say it alike).
BROKER_CRASH_WHERE = (
    "--fault broker-crash runs on the embedded cluster (started by the run, or --cluster DIR) "
    "and on --deploy external through your nemesis, not on --deploy compose: there, crash a "
    "broker container with your own tooling and judge the run with `pgval check`")
#: What ``broker-crash`` needs on an external cluster.
BROKER_CRASH_NEMESIS = (
    "--fault broker-crash on an external cluster needs your own nemesis: --nemesis-inject "
    "ARGV that stops broker {broker} and --nemesis-remove ARGV that starts it again "
    "(see docs/deploy.md)")


def _broker_check(cfg: Any) -> str | None:
    """A broker to crash that exists, and a cluster that keeps Kafka while it is down."""
    target = cfg.target
    if cfg.deploy is Deploy.EXTERNAL and not cfg.nemesis_inject:
        return BROKER_CRASH_NEMESIS
    if isinstance(target, int) and target < 0:
        return "--target must be a broker id (0 or more)"
    if cfg.deploy is not Deploy.LOCAL or cfg.running_cluster:
        return None  # the cluster's own brokers are counted when the run starts
    if cfg.cluster.brokers < 2:
        return ("--fault broker-crash needs --brokers 2 or more (3 to keep writing "
                "with min.insync.replicas 2 while one is down): with one, Kafka "
                "itself is gone")
    if isinstance(target, int) and not 0 <= target < cfg.cluster.brokers:
        return f"--target must be a broker id from 0 to {cfg.cluster.brokers - 1}"
    return None


def _crash_broker(dep: Any, cfg: Any, target: Any, profile: Any, ctx: Any) -> Any:
    return dep.broker_crash(cfg, target, profile, ctx)


DESCRIPTORS = (
    FaultDescriptor(
        Fault.BROKER_CRASH, "SIGKILL of one Kafka broker (the output's leader by default)",
        deployments=frozenset({Deploy.LOCAL, Deploy.EXTERNAL}), where=BROKER_CRASH_WHERE,
        restart=Restart.AT_REMOVE, targets=BROKER, target_words=BROKER_TARGETS, drawn=True,
        rules=(BrokerCrash,), check=_broker_check,
        makers=((BROKER_PROCESSES, _crash_broker), (NEMESIS, _crash_broker))),
)
