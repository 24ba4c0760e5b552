"""``packet-loss``: its descriptor (where it runs, what it is), its rule (no dropped packet:
no effect), its rules' plan (the share picked at random, every packet counted). A real run
that drops packets and leaves nothing behind: tests/test_faults_cluster.py.

Why: a loss that dropped nothing would be a control run under a fault's name, and one that
left a rule behind would go on dropping another run's packets. The run needs root (network
namespaces, iptables); the rest runs anywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pgval.config import resolve
from pgval.core.errors import PgvalError
from pgval.core.schema import Deploy, Fault
from pgval.core.spec import RunSpec
from pgval.faults import delay
from pgval.faults.descriptor import WORKER_NETNS, descriptor
from pgval.faults.loss import NFQUEUE_LOSS, LossDrop, WorkerLoss
from pgval.faults.took_effect import fault_reasons, rule_for
from pgval.host import netns


def test_the_descriptor_says_what_packet_loss_is() -> None:
    d = descriptor("packet-loss")
    assert d.kind is Fault.PACKET_LOSS and d.network and not d.delay and not d.restarts
    assert d.deployments == {Deploy.LOCAL} and d.rules == (WorkerLoss,)
    assert [name for name, _ in d.makers] == [WORKER_NETNS]
    assert d.above_timeouts is None
    assert rule_for("packet-loss", NFQUEUE_LOSS) is WorkerLoss


def test_the_options_are_checked() -> None:
    resolve(RunSpec(fault="packet-loss", loss_share=0.5))
    with pytest.raises(PgvalError, match="embedded cluster"):
        resolve(RunSpec(fault="packet-loss", deploy="external", bootstrap="h:1",
                        master="local[1]"))
    with pytest.raises(PgvalError, match="--loss-share says how much"):
        resolve(RunSpec(fault="crash", loss_share=0.5))
    with pytest.raises(PgvalError, match=r"in \(0, 1\]"):
        resolve(RunSpec(fault="packet-loss", loss_share=0.0))


def test_the_share_is_picked_at_random_and_every_packet_is_counted() -> None:
    loss = LossDrop("pgval-abc-w0", 0.3, Path("/nonexistent"), 60)
    loss.queue_num = 7
    plan = [(w, " ".join(spec)) for w, spec in
            loss._rule_plan("10.9.0.10", "pgval-br", ["pgval-abc-w1"])]
    assert [w for w, _ in plan] == ["pgval-abc-w0"] * 2 + [delay.HOST] * 2 + ["pgval-abc-w1"] * 2
    lossy, counting = plan[0::2], plan[1::2]
    picked = f"-m statistic --mode random --probability 0.3 -m comment --comment {loss.comment}"
    assert all(picked in r and r.endswith("--queue-bypass") for _, r in lossy), lossy
    assert all(r.endswith(f"--comment {loss.comment}") for _, r in counting)  # no target
    assert loss._verdict_args() == ["--drop"] and loss.rtt_added_ms == 0


def test_the_rule_wants_dropped_packets_and_a_live_holder() -> None:
    def log(dropped: int | None, died: bool = False) -> list[dict]:
        entries = [{"step": "inject", "mechanism": NFQUEUE_LOSS},
                   {"step": "remove", "dropped": dropped, "seen": 900}]
        return entries + ([{"step": "holder-died", "error": "x"}] if died else [])

    assert fault_reasons(Fault.PACKET_LOSS, log(120)) == []
    assert "took no effect" in str(fault_reasons(Fault.PACKET_LOSS, log(0)))
    assert "no count" in str(fault_reasons(Fault.PACKET_LOSS, log(None)))
    assert "died" in str(fault_reasons(Fault.PACKET_LOSS, log(5, died=True)))


def our_rules() -> list[str]:
    """pgval's packet rules anywhere (root namespace and pgval's namespaces)."""
    places = [delay.HOST, *(n for n in netns.list_namespaces()
                            if n.startswith(netns.NS_PREFIX))]
    return [f"{w}: {c}" for w in places for t in delay.TABLES
            for _, c in delay._pgval_rules(w, t)]
