"""``partition``: every packet of one link dropped from T2 to T3 (not delayed: dropped).

A partition fails differently from a slow link: nothing arrives, so connections hang until
a time-out notices (Kafka's ``request.timeout.ms``, Spark's heartbeats), and what the two
sides then do — Kafka fences, Spark re-registers or gives an executor up — is what the run
measures. ``--partition`` says which link of worker ``--target N`` is cut:

* ``worker-kafka`` (default): the worker and the Kafka brokers, both ways (TCP to or
  from the brokers' ports);
* ``worker-driver``: the worker and the driver, both ways (TCP between the worker and the
  host's address on any port but the brokers' and the Spark master's: the driver's RPC
  and block-manager ports are random, the others are known);
* ``worker-all``: everything to and from the worker (brokers, driver, master, the other
  workers): the worker is cut off;
* ``one-way``: everything the worker SENDS is dropped, what it receives arrives (an
  asymmetric partition: it hears the cluster and cannot answer).

The mechanism is the delay's (:mod:`pgval.faults.delay`): ``iptables-legacy`` rules at
each receiving side send the link's packets to an NFQUEUE, and the packet holder
(:mod:`pgval.faults.holder`, ``--drop``) gives each a DROP verdict and counts it. The
guarantees are the delay's: the holder dies with its owner, stops at its time cap and
removes its own rules; and a drop through a holder **fails safe towards no partition**:
``--queue-bypass`` and the fail-open queue accept packets whenever the holder is gone or
stalled, so a failure of the instrument heals the link (the run sees ``holder-died``, a
reason), and a link is never left cut — a plain ``-j DROP`` rule would stay when pgval
is SIGKILLed. ``pgval cleanup`` removes rules and holders of a killed run like a delay's.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import Deploy, Fault, Partition
from pgval.faults.delay import HOST, PacketDelay, _in, _run
from pgval.faults.descriptor import WORKER_NETNS, FaultDescriptor
from pgval.faults.log import Entries, finding, first

#: The ``mechanism`` of a partition.
NFQUEUE_DROP = "nfqueue-drop"
_NS_IF = "eth0"


@dataclass(frozen=True)
class PartitionLink:
    """What one partition cuts: the worker's namespace and the ports that tell the
    brokers and the master (all in the root namespace, on the host's bridge address)."""

    worker: str
    netns: str | None
    scope: Partition
    broker_ports: tuple[int, ...]
    master_port: int | None


class PacketDrop(PacketDelay):
    """Drop the packets of one link of namespace ``ns`` (a :class:`PartitionLink`)."""

    holder_label = "partition-holder"

    def __init__(self, ns: str, scope: Partition, broker_ports: tuple[int, ...],
                 master_port: int | None, run_dir: Path, max_seconds: float) -> None:
        super().__init__(ns, 0, run_dir, mechanism="nfqueue", max_seconds=max_seconds)
        self.scope = Partition.parse(scope)
        self.broker_ports = tuple(broker_ports)
        self.master_port = master_port
        if self.scope in (Partition.WORKER_KAFKA, Partition.WORKER_DRIVER) and not broker_ports:
            raise EnvironmentFailure(f"--partition {self.scope} needs the brokers' ports")

    @property
    def rtt_added_ms(self) -> int:
        return 0

    def _verdict_args(self) -> list[str]:
        return ["--drop"]

    def _port_match(self) -> list[str]:
        """The iptables match of the link's TCP ports (``--ports``: source or destination,
        so one rule serves both directions), or nothing (every packet)."""
        if self.scope is Partition.WORKER_KAFKA:
            return ["-p", "tcp", "-m", "multiport", "--ports",
                    ",".join(map(str, self.broker_ports))]
        if self.scope is Partition.WORKER_DRIVER:
            known = [*self.broker_ports, *([self.master_port] if self.master_port else [])]
            return ["-p", "tcp", "-m", "multiport", "!", "--ports", ",".join(map(str, known))]
        return []

    def _rule_plan(self, ip: str, bridge: str, peers: list[str]) -> list[tuple[str, list[str]]]:
        """(where, PREROUTING rule) for each receiving side of the cut link. The worker's
        namespace sees what the host (brokers, driver, master) sends it; the root
        namespace what the worker sends the host; the other workers' namespaces what it
        sends them (``worker-all`` and ``one-way`` only)."""
        tail = ["-m", "comment", "--comment", self.comment, "-j", "NFQUEUE", "--queue-num",
                str(self.queue_num), "--queue-bypass"]
        ports = self._port_match()
        to_host = (HOST, ["PREROUTING", "-i", bridge, "-s", f"{ip}/32", "-m", "addrtype",
                          "--dst-type", "LOCAL", *ports, *tail])
        to_peers = [(p, ["PREROUTING", "-i", _NS_IF, "-s", f"{ip}/32", *tail]) for p in peers]
        if self.scope is Partition.ONE_WAY:
            return [to_host, *to_peers]
        if self.scope is Partition.WORKER_ALL:
            return [(self.ns, ["PREROUTING", "-i", _NS_IF, *tail]), to_host, *to_peers]
        host_ip = _ipv4_of(HOST, bridge)
        from_host = (self.ns, ["PREROUTING", "-i", _NS_IF, "-s", f"{host_ip}/32", *ports, *tail])
        return [from_host, to_host]

    def _describe(self) -> dict[str, Any]:
        described = super()._describe()
        for key in ("delay_ms", "jitter_ms", "rtt_added_ms"):
            described.pop(key, None)
        return {**described, "mechanism": NFQUEUE_DROP, "partition": str(self.scope),
                "broker_ports": list(self.broker_ports), "master_port": self.master_port}


def _ipv4_of(where: str, dev: str) -> str:
    """The IPv4 address of ``dev`` in ``where`` (the host's address on the run's bridge:
    where the brokers, the driver and the master listen)."""
    res = _run(_in(where, "ip", "-j", "-4", "addr", "show", "dev", dev))
    with contextlib.suppress(ValueError, IndexError, KeyError, TypeError):
        return str(json.loads(res.stdout)[0]["addr_info"][0]["local"])
    raise EnvironmentFailure(f"{dev} has no IPv4 address: cannot tell the host's packets "
                            "from the other workers'")


class WorkerPartition:
    """One link of one worker cut from T2 to T3; the evidence is the holder's count of
    dropped packets and the time-out scan (what noticed the silence)."""

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.PARTITION})
    mechanisms: ClassVar[tuple[str, ...]] = (NFQUEUE_DROP,)

    def __init__(self, link: PartitionLink, run_dir: Path, max_seconds: float) -> None:
        self.name = str(Fault.PARTITION)
        self.link = link
        self.run_dir = run_dir
        self.max_seconds = max_seconds
        self._drop: PacketDrop | None = None

    def inject(self) -> dict[str, Any]:
        link = self.link
        if link.netns is None:
            raise EnvironmentFailure(
                "a partition needs the workers in their own network namespaces "
                "(run as root, without --no-isolate)")
        self._drop = PacketDrop(link.netns, link.scope, link.broker_ports, link.master_port,
                                self.run_dir, self.max_seconds)
        detail = self._drop.inject()
        return {"target": link.worker, "fault": self.name, **detail,
                "effective_ms": detail.get("injected_ms")}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """Heal the link (teardown too: a partition is never left in place)."""
        if self._drop is None:
            return {}
        detail = self._drop.remove()
        self._drop = None
        holder = detail.get("holder") or {}
        return {**detail, "dropped": holder.get("dropped"),
                "effective_ms": detail.get("removed_ms")}

    def problem(self) -> str | None:
        """Why the partition stopped acting before T3 (its holder died: the link healed)."""
        return self._drop.problem() if self._drop is not None else None

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """The holder dropped packets of the link, and lived until T3. What timed out is
        reported (the ``timeouts`` entry), not required: which time-out a partition trips
        depends on what the link carried, and that is the finding."""
        remove = first(entries, "remove")
        found = []
        dropped = remove.get("dropped")
        if not isinstance(dropped, int):
            found.append(finding("no count of dropped packets: nothing shows the partition "
                                 "acted"))
        elif dropped == 0:
            found.append(finding("the partition dropped no packet: the link carried nothing "
                                 "while it was cut"))
        if any(e.get("step") == "holder-died" for e in entries):
            found.append(finding("the packet holder died during the partition (the link "
                                 "healed early)"))
        return found


#: Where a partition can run (the config's check and the deployments say it alike).
PARTITION_WHERE = (
    "--fault partition needs the embedded cluster pgval starts (--deploy local, no "
    "--cluster): pgval drops the worker's packets in its network namespace; on your own "
    "cluster, cut the link with your own tooling and judge the run with `pgval check`")

DESCRIPTORS = (
    FaultDescriptor(
        Fault.PARTITION, "every packet of one link of a worker dropped (--partition)",
        deployments=frozenset({Deploy.LOCAL}), where=PARTITION_WHERE, network=True,
        loses_executors=True, drawn=True, rules=(WorkerPartition,),
        makers=((WORKER_NETNS,
                 lambda dep, cfg, t, p, ctx: dep.worker_partition(cfg, t, p, ctx)),)),
)
