"""``partition``: the link it names is cut (dropped, counted) and only that link; it heals at
removal and when its injector dies; bad options are one sentence.

Why: a partition that also cut what it should not (the driver in ``worker-kafka``), or
left a link cut after the run, would put its effect on the wrong cause; one that dropped
nothing would be a control run under a fault's name. The namespace tests need root and
run real sockets through a real bridge; the rest runs anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.config import resolve
from pgval.core.errors import PgvalError
from pgval.core.schema import Fault, Partition
from pgval.core.spec import RunSpec
from pgval.faults import delay
from pgval.faults.holder import Dropper
from pgval.faults.partition import PacketDrop
from pgval.faults.took_effect import fault_reasons
from pgval.host import netns
from tests.conftest import wait_until
from tests.test_delay import gone, rules_with_comment

BROKER, DRIVER, MASTER = 5911, 5912, 5913


class FakePacket:
    def __init__(self) -> None:
        self.verdict: str | None = None

    def accept(self) -> None:
        self.verdict = "accept"

    def drop(self) -> None:
        self.verdict = "drop"


def test_the_dropper_drops_every_packet_at_once_and_counts_it() -> None:
    d = Dropper()
    packets = [FakePacket() for _ in range(5)]
    for p in packets:
        d.push(p, 0.0)
    assert [p.verdict for p in packets] == ["drop"] * 5
    assert d.stats()["dropped"] == 5 and len(d) == 0 and d.next_due() is None
    assert d.release_all() == 0  # nothing held: nothing to let through at exit


def plan(scope: Partition, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    from pgval.faults import partition

    monkeypatch.setattr(partition, "_ipv4_of", lambda where, dev: "10.9.0.1")
    drop = PacketDrop("pgval-abc-w0", scope, (BROKER,), MASTER, Path("/nonexistent"), 60)
    drop.queue_num = 7
    return [(w, " ".join(spec)) for w, spec in
            drop._rule_plan("10.9.0.10", "pgval-br", ["pgval-abc-w1"])]


def test_each_scope_cuts_its_link_at_each_receiving_side(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    kafka = plan(Partition.WORKER_KAFKA, monkeypatch)
    assert [w for w, _ in kafka] == ["pgval-abc-w0", delay.HOST]  # both ways, no peers
    assert all(f"--ports {BROKER} " in r and "! --ports" not in r for _, r in kafka)
    assert "-s 10.9.0.1/32" in kafka[0][1]  # the host's packets only, not other workers'
    driver = plan(Partition.WORKER_DRIVER, monkeypatch)
    assert all(f"! --ports {BROKER},{MASTER} " in r for _, r in driver)
    whole = plan(Partition.WORKER_ALL, monkeypatch)
    assert [w for w, _ in whole] == ["pgval-abc-w0", delay.HOST, "pgval-abc-w1"]
    assert not any("--ports" in r for _, r in whole)
    one_way = plan(Partition.ONE_WAY, monkeypatch)
    assert [w for w, _ in one_way] == [delay.HOST, "pgval-abc-w1"]  # only what it sends
    assert all("-s 10.9.0.10/32" in r for _, r in one_way)
    assert all("--queue-bypass" in r and "-j NFQUEUE" in r for _, r in kafka + whole)


def test_partition_options_are_checked() -> None:
    resolve(RunSpec(fault="partition", partition="worker-driver"))
    with pytest.raises(PgvalError, match="does not apply to --fault crash"):
        resolve(RunSpec(fault="crash", partition="worker-kafka"))
    with pytest.raises(PgvalError, match="unknown partition 'sideways'"):
        RunSpec(fault="partition", partition="sideways")
    with pytest.raises(PgvalError, match="embedded cluster"):
        resolve(RunSpec(fault="partition", deploy="external", bootstrap="h:1",
                        master="spark://h:2"))


def test_the_rule_wants_dropped_packets_and_a_live_holder() -> None:
    def log(dropped: object, died: bool = False) -> list[dict]:
        entries = [{"step": "inject", "fault": "partition", "mechanism": "nfqueue-drop"},
                   {"step": "remove", "dropped": dropped}]
        return entries + ([{"step": "holder-died", "why": "x"}] if died else [])

    assert fault_reasons(Fault.PARTITION, log(120)) == []
    assert "dropped no packet" in str(fault_reasons(Fault.PARTITION, log(0)))
    assert "no count" in str(fault_reasons(Fault.PARTITION, log(None)))
    assert "died" in str(fault_reasons(Fault.PARTITION, log(5, died=True)))


# -- on real namespaces ----------------------------------------------------------------------
@pytest.fixture
def layout() -> Iterator[netns.NetLayout]:
    if os.geteuid() != 0:
        pytest.skip("a partition needs root (network namespaces, iptables)")
    ok, why = netns.namespaces_supported()
    if not ok:
        pytest.skip(f"network namespaces unusable here: {why}")
    lay = netns.NetLayout()
    try:
        lay.create()
        lay.add_namespace(0)
        lay.add_namespace(1)
        missing = delay._holder_importable()
        if missing:
            pytest.skip(missing)
        yield lay
    finally:
        with contextlib.suppress(PgvalError):
            delay.cleanup_delays(prefix=f"{netns.NS_PREFIX}{lay.suffix}-")
        lay.teardown()


@contextlib.contextmanager
def host_listeners(ip: str) -> Iterator[None]:
    """TCP servers on the host's bridge address: a 'broker', a 'driver' and a 'master'."""
    socks = []
    for port in (BROKER, DRIVER, MASTER):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
        s.listen(64)
        socks.append(s)
    try:
        yield
    finally:
        for s in socks:
            s.close()


def reach_from(ns: str, ip: str, ports: tuple[int, ...], timeout_s: float = 1.5
               ) -> dict[int, bool]:
    """Which of ``ip:ports`` a TCP handshake from namespace ``ns`` completes."""
    code = ("import socket,json,sys\nout={}\n"
            f"for p in {list(ports)!r}:\n"
            "    try:\n"
            f"        socket.create_connection(({ip!r},p),timeout={timeout_s}).close(); out[p]=1\n"
            "    except OSError:\n        out[p]=0\n"
            "print(json.dumps(out))\n")
    res = subprocess.run(netns.exec_prefix(ns) + [sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, check=True)
    return {int(k): bool(v) for k, v in json.loads(res.stdout).items()}


def udp_arrives(src_ns: str | None, dst_ns: str | None, dst_ip: str) -> bool:
    """One UDP datagram from ``src_ns`` (None: the host) to ``dst_ip`` in ``dst_ns``."""
    listen = ("import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
              f"s.bind(({dst_ip!r},5920)); s.settimeout(2); print('up',flush=True)\n"
              "try:\n    print(s.recv(64).decode(),flush=True)\n"
              "except OSError:\n    print('none',flush=True)\n")
    send = ("import socket,time\n"
            "for _ in range(5):\n"
            "    socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto("
            f"b'hello',({dst_ip!r},5920)); time.sleep(0.05)\n")

    def prefix(ns: str | None) -> list[str]:
        return netns.exec_prefix(ns) if ns else []

    rx = subprocess.Popen(prefix(dst_ns) + [sys.executable, "-c", listen],
                          stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None and rx.stdout.readline().strip() == "up"
    subprocess.run(prefix(src_ns) + [sys.executable, "-c", send], check=True, timeout=30)
    out, _ = rx.communicate(timeout=10)
    return out.strip() == "hello"


ALL = (BROKER, DRIVER, MASTER)


@pytest.mark.cluster
def test_each_scope_cuts_only_its_link_and_heals(layout: netns.NetLayout, tmp_path: Path
                                                 ) -> None:
    w0, w1 = layout.namespaces[0], layout.namespaces[1]
    host = layout.bridge_ip
    with host_listeners(host):
        assert reach_from(w0.name, host, ALL) == dict.fromkeys(ALL, True)
        expect = {Partition.WORKER_KAFKA: {BROKER: False, DRIVER: True, MASTER: True},
                  Partition.WORKER_DRIVER: {BROKER: True, DRIVER: False, MASTER: True},
                  Partition.WORKER_ALL: dict.fromkeys(ALL, False),
                  Partition.ONE_WAY: dict.fromkeys(ALL, False)}
        for scope, reach in expect.items():
            drop = PacketDrop(w0.name, scope, (BROKER,), MASTER, tmp_path, 60)
            try:
                info = drop.inject()
                assert info["mechanism"] == "nfqueue-drop" and info["partition"] == scope
                assert reach_from(w0.name, host, ALL) == reach, scope
                assert reach_from(w1.name, host, ALL) == dict.fromkeys(ALL, True)  # untouched
                if scope is Partition.ONE_WAY:  # it hears, it cannot answer
                    assert udp_arrives(None, w0.name, w0.ip)
                    assert not udp_arrives(w0.name, None, host)
                if scope is Partition.WORKER_ALL:
                    assert not udp_arrives(w1.name, w0.name, w0.ip)
            finally:
                removed = drop.remove()
            assert removed["holder"]["dropped"] > 0, (scope, removed["holder"])
            assert rules_with_comment(delay.HOST, w0.name, w1.name) == []
            assert reach_from(w0.name, host, ALL) == dict.fromkeys(ALL, True), scope


INJECTOR = """
import json, sys, time
from pathlib import Path
from pgval.faults.partition import PacketDrop
info = PacketDrop(sys.argv[1], "worker-all", (1,), None, Path(sys.argv[2]), 600).inject()
print(json.dumps(info), flush=True)
time.sleep(600)
"""


@pytest.mark.cluster
def test_a_partition_heals_when_its_injector_is_killed(layout: netns.NetLayout,
                                                       tmp_path: Path) -> None:
    """SIGKILL of the injecting pgval: within 5 s the link works again, no rule and no
    holder left, with nobody running `pgval cleanup` (a drop fails towards no partition)."""
    w0 = layout.namespaces[0]
    host = layout.bridge_ip
    with host_listeners(host):
        inj = subprocess.Popen([sys.executable, "-c", INJECTOR, w0.name, str(tmp_path)],
                               stdout=subprocess.PIPE, start_new_session=True)
        try:
            assert inj.stdout is not None
            info = json.loads(inj.stdout.readline())
            assert reach_from(w0.name, host, (DRIVER,)) == {DRIVER: False}
        finally:
            os.kill(inj.pid, signal.SIGKILL)
            inj.wait(timeout=10)
        killed = time.monotonic()
        wait_until(lambda: gone(info["holder_pid"]), 5, "the holder to follow its owner")
        wait_until(lambda: rules_with_comment(delay.HOST, w0.name) == [], 5,
                   "the holder to delete its rules")
        assert time.monotonic() - killed < 5.5
        assert reach_from(w0.name, host, (DRIVER,)) == {DRIVER: True}
    assert delay.cleanup_delays(prefix=f"{netns.NS_PREFIX}{layout.suffix}-") == []
