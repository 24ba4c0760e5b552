"""``packet-loss``: a share of one worker's packets dropped from T2 to T3 (``--loss-share``,
default 0.3), both ways, at random.

A lossy link is neither a slow one (every packet arrives, late) nor a cut one (nothing
arrives): TCP retransmits what is lost, so the link stays up at a fraction of its speed
and with jittered round trips. Whether Spark and Kafka ride it out, time out, or re-send
what was already written is what the run measures.

The mechanism is the delay's (:mod:`pgval.faults.delay`) with the partition's verdict:
``iptables-legacy`` rules at each receiving side of the worker's traffic (its namespace,
the root namespace, the other workers' namespaces) send the share of its packets that
``-m statistic --mode random --probability P`` picks to an NFQUEUE, and the packet holder
(:mod:`pgval.faults.holder`, ``--drop``) drops each and counts it. A counting rule above
each of them (same comment, no target) counts every packet of the link, so the log says
how many packets were seen and how many dropped. The guarantees are the delay's: the
holder dies with its owner, stops at its time cap and removes its rules; a dead holder
fails open (``--queue-bypass``: no loss, and the run sees ``holder-died``); ``pgval
cleanup`` removes what a killed run left.

Its rule (:meth:`WorkerLoss.reasons`): the holder counted dropped packets (none dropped:
the fault took no effect) and lived until T3.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import Deploy, Fault
from pgval.faults.delay import PacketDelay, _iptables, _run
from pgval.faults.descriptor import WORKER_NETNS, FaultDescriptor
from pgval.faults.log import Entries, finding, first

#: The ``mechanism`` of a packet loss.
NFQUEUE_LOSS = "nfqueue-loss"
#: The share of packets dropped when ``--loss-share`` is not given.
DEFAULT_SHARE = 0.3
#: Where packet loss can run.
LOSS_WHERE = (
    "--fault packet-loss needs the embedded cluster (--deploy local): pgval drops the "
    "worker's packets in its network namespace; on your own cluster, drop them with your "
    "own tooling and judge the run with `pgval check`")
_COUNTER = re.compile(r" -c (\d+) \d+")


def share_of(cfg: Any) -> float:
    """The run's ``--loss-share``, or the default."""
    share = getattr(cfg, "loss_share", None)
    return DEFAULT_SHARE if share is None else float(share)


class LossDrop(PacketDelay):
    """Drop ``share`` of the packets to and from namespace ``ns``, at random."""

    holder_label = "loss-holder"

    def __init__(self, ns: str, share: float, run_dir: Path, max_seconds: float) -> None:
        if not 0 < share <= 1:
            raise EnvironmentFailure(f"a packet loss drops a share in (0, 1], not {share}")
        super().__init__(ns, 0, run_dir, mechanism="nfqueue", max_seconds=max_seconds)
        self.share = share

    @property
    def rtt_added_ms(self) -> int:
        return 0

    def _verdict_args(self) -> list[str]:
        return ["--drop"]

    def _rule_plan(self, ip: str, bridge: str, peers: list[str]) -> list[tuple[str, list[str]]]:
        """The delay's receiving sides, each twice: the share picked at random to the
        queue, and above it (inserted after it, at the top) a rule that only counts."""
        plan = []
        for where, spec in super()._rule_plan(ip, bridge, peers):
            cut = spec.index("--comment") - 2  # "-m comment --comment C -j NFQUEUE ..."
            lossy = [*spec[:cut], "-m", "statistic", "--mode", "random", "--probability",
                     f"{self.share:g}", *spec[cut:]]
            plan += [(where, lossy), (where, spec[:cut + 4])]  # the count: no target
        return plan

    def counted(self) -> dict[str, int]:
        """Packets the link carried (``seen``) and sent to the holder (``queued``), from
        the kernel's counters of this loss's rules; read before they are removed. The
        kernel counts a packet as it arrives, a GRO-merged one once; the queue hands the
        holder each of its segments, so the holder's ``dropped`` may exceed ``queued``."""
        seen = queued = 0
        for where in dict.fromkeys(w for w, _ in self._rules):
            res = _run(_iptables(where, "-t", "mangle", "-S", "PREROUTING", "-v"))
            for line in res.stdout.splitlines() if res.returncode == 0 else []:
                m = _COUNTER.search(line)
                if self.comment not in line.split() or m is None:
                    continue
                if "NFQUEUE" in line:
                    queued += int(m.group(1))
                else:
                    seen += int(m.group(1))
        return {"seen": seen, "queued": queued}

    def _describe(self) -> dict[str, Any]:
        described = super()._describe()
        for key in ("delay_ms", "jitter_ms", "rtt_added_ms"):
            described.pop(key, None)
        return {**described, "mechanism": NFQUEUE_LOSS, "share": self.share}


class WorkerLoss:
    """``--loss-share`` of one worker's packets dropped from T2 to T3; the evidence is the
    holder's count of dropped packets beside the kernel's count of the link's packets."""

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.PACKET_LOSS})
    mechanisms: ClassVar[tuple[str, ...]] = (NFQUEUE_LOSS,)

    def __init__(self, worker: str, netns: str | None, share: float, run_dir: Path,
                 max_seconds: float) -> None:
        self.name = str(Fault.PACKET_LOSS)
        self.worker = worker
        self.netns = netns
        self.share = share
        self.run_dir = run_dir
        self.max_seconds = max_seconds
        self._drop: LossDrop | None = None

    def inject(self) -> dict[str, Any]:
        if self.netns is None:
            raise EnvironmentFailure("packet loss needs the workers in their own network "
                                    "namespaces (run as root, without --no-isolate)")
        self._drop = LossDrop(self.netns, self.share, self.run_dir, self.max_seconds)
        detail = self._drop.inject()
        return {"target": self.worker, "fault": self.name, **detail,
                "effective_ms": detail.get("injected_ms")}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """End the loss (teardown too: a loss is never left in place)."""
        if self._drop is None:
            return {}
        counts = self._drop.counted()
        detail = self._drop.remove()
        self._drop = None
        holder = detail.get("holder") or {}
        dropped, seen = holder.get("dropped"), counts["seen"]
        return {**detail, **counts, "dropped": dropped,
                "dropped_share": round(dropped / seen, 4)
                if isinstance(dropped, int) and seen else None,
                "effective_ms": detail.get("removed_ms")}

    def problem(self) -> str | None:
        """Why the loss stopped before T3 (its holder died: the link is whole again)."""
        return self._drop.problem() if self._drop is not None else None

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """The holder dropped packets of the worker's link, and lived until T3."""
        remove = first(entries, "remove")
        found = []
        dropped = remove.get("dropped")
        if not isinstance(dropped, int):
            found.append(finding("no count of dropped packets: nothing shows the loss acted"))
        elif dropped == 0:
            found.append(finding(f"the loss dropped no packet (of {remove.get('seen')} "
                                 "seen): it took no effect"))
        if any(e.get("step") == "holder-died" for e in entries):
            found.append(finding("the packet holder died during the loss (the link was "
                                 "whole again early)"))
        return found


def _make(dep: Any, cfg: Any, target: Any, profile: Any, ctx: Any) -> WorkerLoss:
    """On the worker's namespace, capped like a delay (the phase and a margin)."""
    path = dep.worker_path(target)
    return WorkerLoss(path.name, path.netns, share_of(cfg), ctx.run_dir,
                      max_seconds=1.5 * ctx.phase_seconds + 60)


def _check(cfg: Any) -> str | None:
    share = share_of(cfg)
    if not 0 < share <= 1:
        return f"--loss-share is the share of packets dropped, in (0, 1], not {share:g}"
    return None


DESCRIPTORS = (
    FaultDescriptor(
        Fault.PACKET_LOSS, "a share of one worker's packets dropped at random (--loss-share)",
        deployments=frozenset({Deploy.LOCAL}), where=LOSS_WHERE, network=True,
        rules=(WorkerLoss,), makers=((WORKER_NETNS, _make),), check=_check),
)
