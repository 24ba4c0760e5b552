"""Packet delay on one worker namespace: it delays, it is removed, and nothing leaks.

Why: the delay faults are only meaningful if the added round-trip time is what the
run claims (2 x D), if it ends at T3, and if a killed pgval leaves no rule or
holder behind that would slow down the next run. The namespace tests need root;
the schedule tests run anywhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pgval.core.errors import PgvalError
from pgval.faults import delay
from pgval.faults.holder import Schedule
from pgval.host import netns
from tests.conftest import wait_until

# They time packets to the millisecond: nothing else may load the machine meanwhile.
pytestmark = pytest.mark.alone

D_MS = 100


# -- helpers -----------------------------------------------------------------------------
def _csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(ip: str, count: int = 30, interval_s: float = 0.02, wait_s: float = 3.0) -> list[float]:
    """ICMP echo RTTs in ms (raw socket, needs root; the image has no `ping`).

    Requests go out every ``interval_s`` without waiting for replies, so a 200 ms RTT
    does not make the probe take count x 200 ms. Lost probes are left out.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.settimeout(0.1)
    ident = (os.getpid() ^ threading.get_ident()) & 0xFFFF
    sent: dict[int, float] = {}
    rtt: dict[int, float] = {}
    done = threading.Event()

    def receive() -> None:
        while not done.is_set():
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            t = time.perf_counter()
            ihl = (data[0] & 15) * 4
            typ, _, _, i, seq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if typ == 0 and i == ident and seq in sent:
                rtt.setdefault(seq, (t - sent[seq]) * 1000)

    rx = threading.Thread(target=receive, daemon=True)
    rx.start()
    payload = b"pgval-ping" * 4
    try:
        for seq in range(count):
            hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            packet = struct.pack("!BBHHH", 8, 0, _csum(hdr + payload), ident, seq) + payload
            sent[seq] = time.perf_counter()
            sock.sendto(packet, (ip, 0))
            time.sleep(interval_s)
        deadline = time.monotonic() + wait_s
        while len(rtt) < count and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        done.set()
        rx.join()
        sock.close()
    return sorted(rtt.values())


def p50(xs: list[float]) -> float:
    assert xs, "no ping reply at all"
    return xs[len(xs) // 2]


def rules_with_comment(*places: str) -> list[str]:
    """pgval delay rules in the given namespaces (``delay.HOST`` = root), all tables."""
    found = []
    for where in places:
        prefix = [] if where == delay.HOST else netns.exec_prefix(where)
        for table in delay.TABLES:
            out = subprocess.run([*prefix, "iptables-legacy", "-w", "10", "-t", table, "-S"],
                                 capture_output=True, text=True, check=True).stdout
            found += [f"{where}: {line}" for line in out.splitlines()
                      if delay.COMMENT_PREFIX in line]
    return found


def gone(pid: int) -> bool:
    """Gone or a zombie: pid 1 on this VM reaps orphans only every ~2 s."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


# -- the schedule (no root needed) ---------------------------------------------------------
class FakePacket:
    def __init__(self, log: list[int], i: int) -> None:
        self.log, self.i = log, i

    def accept(self) -> None:
        self.log.append(self.i)


def test_schedule_does_not_serialise_packets() -> None:
    """1000 packets arriving within 10 ms are all out by arrival + D, none before."""
    log: list[int] = []
    s = Schedule(delay_ms=50)
    t0 = 1000.0
    for i in range(1000):
        s.push(FakePacket(log, i), t0 + i * 1e-5)
    assert s.release_due(t0 + 0.0499) == 0
    assert s.release_due(t0 + 0.050 + 500e-5) == 501  # exactly those whose time has come
    assert s.release_due(t0 + 0.061) == 499
    assert log == list(range(1000))
    assert s.stats()["max_held"] == 1000 and len(s) == 0


def test_schedule_jitter_bounds_and_flush() -> None:
    log: list[int] = []
    s = Schedule(delay_ms=100, jitter_ms=20)
    for i in range(500):
        s.push(FakePacket(log, i), 0.0)
    assert s.release_due(0.0799) == 0
    released = s.release_due(0.1)
    assert 0 < released < 500
    assert s.release_all() == 500 - released and len(s) == 0
    assert sorted(log) == list(range(500))


def test_only_pgval_rules_are_ours() -> None:
    comment = "pgval-delay-0a1b2c3d-pgval-s1-w0"
    listing = "\n".join([
        "-P PREROUTING ACCEPT",
        f"-A PREROUTING -i eth0 -m comment --comment {comment} -j NFQUEUE --queue-num 7 "
        "--queue-bypass",
        "-A PREROUTING -i eth0 -m comment --comment \"someone else\" -j DROP",
        "-A PREROUTING -i eth0 -j NFQUEUE --queue-num 9",
    ])
    assert delay._ours_in_listing(listing, "mangle") == [
        (["-t", "mangle", "-D", "PREROUTING", "-i", "eth0", "-m", "comment", "--comment",
          comment, "-j", "NFQUEUE", "--queue-num", "7", "--queue-bypass"], comment)]
    assert delay._comment_target(comment) == "pgval-s1-w0"
    assert delay._comment_target("pgval-delay-probe") is None


def test_bad_arguments_are_plain_errors(tmp_path: Path) -> None:
    with pytest.raises(PgvalError):
        delay.PacketDelay("pgval-x-w0", -1, tmp_path)
    with pytest.raises(PgvalError):
        delay.PacketDelay("pgval-x-w0", 10, tmp_path, mechanism="tbf")
    assert delay.PacketDelay("pgval-x-w0", 10, tmp_path).rtt_added_ms == 20


class _StandInHolder(delay.PacketDelay):
    """An injected nfqueue delay whose holder is a process that only waits: what
    :meth:`PacketDelay.problem` judges of a holder (alive, dead, stopped) without root."""

    def inject(self) -> dict[str, Any]:
        from pgval.host.procs import spawn

        self.mechanism = "nfqueue"
        self.holder = spawn("stand-in-holder", [sys.executable, "-c",
                                                "import time; time.sleep(120)"],
                            self.run_dir / "logs" / "stand-in-holder.log",
                            pid_dir=self.run_dir / "pids")
        self._injected_ms = int(time.time() * 1000)
        return self._describe()


def test_a_stopped_holder_is_seen_at_once_and_let_go(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGSTOP, not a death: the holder still binds its queues, so packets wait in the
    kernel until 65,536 are queued. The first check sees the stopped state, lets the holder
    go (it is gone) and says so, every time it is asked."""
    from pgval.host import registry

    monkeypatch.setattr(registry, "RUN_ROOT", tmp_path / "run-root")
    pd = _StandInHolder("pgval-x-w0", D_MS, tmp_path)
    pd.inject()
    assert pd.holder is not None
    try:
        assert pd.problem() is None  # running: the delay is in force
        os.kill(pd.holder.pid, signal.SIGSTOP)
        wait_until(lambda: Path(f"/proc/{pd.holder.pid}/stat").read_text()  # type: ignore[union-attr]
                   .rsplit(")", 1)[1].split()[0] == "T", 5, "the stop")
        t = time.monotonic()
        why = pd.problem()
        assert time.monotonic() - t < 5
        assert why is not None and "was stopped (state T), not dead" in why, why
        assert "fail open" in why
        assert not pd.holder.alive()
        assert pd.problem() == why  # said again: the run records it once
    finally:
        pd.holder.stop(grace_s=0)
    removed = pd.remove()
    assert removed["failed_open"]["why"] == why


# -- real namespaces (root) ------------------------------------------------------------------
def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "packet delay needs root (network namespaces, iptables)"
    ok, why = netns.namespaces_supported()
    return None if ok else f"network namespaces unusable here: {why}"


@pytest.fixture
def worker_ns() -> Iterator[tuple[netns.NetLayout, netns.WorkerNs]]:
    """A bridge and two worker namespaces; the tests delay w0."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    layout = netns.NetLayout()
    try:
        layout.create()
        ns = layout.add_namespace(0)
        layout.add_namespace(1)
        try:
            delay.detect_mechanism(ns.name)
        except PgvalError as exc:
            pytest.skip(str(exc))
        yield layout, ns
    finally:
        with contextlib.suppress(PgvalError):
            delay.cleanup_delays(prefix=f"{netns.NS_PREFIX}{layout.suffix}-")
        layout.teardown()


def _places(layout: netns.NetLayout) -> list[str]:
    return [delay.HOST, *(w.name for w in layout.namespaces.values())]


def _in_ns_python(ns: str, code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(netns.exec_prefix(ns) + [sys.executable, "-c", code],
                            stdout=subprocess.PIPE)


def _sender_in_ns(ns: netns.WorkerNs, port: int, nbytes: int) -> subprocess.Popen[bytes]:
    """A one-shot server inside the namespace that SENDS ``nbytes`` and closes."""
    proc = _in_ns_python(ns.name, (
        "import socket\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(({ns.ip!r},{port})); s.listen(1); print('up', flush=True)\n"
        f"c,_=s.accept(); c.sendall(b'x'*{nbytes}); c.close()\n"))
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    return proc


def _fetch(ip: str, port: int) -> tuple[int, float]:
    t0 = time.monotonic()
    got = 0
    with socket.create_connection((ip, port), timeout=20) as c:
        while chunk := c.recv(1 << 16):
            got += len(chunk)
    return got, time.monotonic() - t0


def _connect_ms_from(src: str, ip: str, port: int, count: int = 5) -> float:
    """Median TCP handshake time from namespace ``src`` to ``ip:port`` (one round trip)."""
    proc = _in_ns_python(src, (
        "import socket,time,statistics\n"
        "xs=[]\n"
        f"for _ in range({count}):\n"
        "    t=time.perf_counter()\n"
        f"    c=socket.create_connection(({ip!r},{port}),timeout=10)\n"
        "    xs.append((time.perf_counter()-t)*1000); c.close()\n"
        "print(statistics.median(xs), flush=True)\n"))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return float(out)


@pytest.mark.cluster
def test_delay_adds_two_d_and_is_removed(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layout, ns = worker_ns
    other = layout.namespaces[1]
    before = ping(ns.ip)
    assert p50(before) < 5.0, f"baseline RTT already high: {before}"

    nbytes, port = 4 << 20, 5901
    sender = _sender_in_ns(ns, port, nbytes)
    listener = _in_ns_python(ns.name, (  # accepts handshakes for the worker-to-worker check
        "import socket,time\ns=socket.socket()\n"
        f"s.bind(({ns.ip!r},5902)); s.listen(64); print('up', flush=True); time.sleep(120)\n"))
    assert listener.stdout is not None and listener.stdout.readline().strip() == b"up"
    pd = delay.PacketDelay(ns.name, D_MS, tmp_path)
    try:
        info = pd.inject()
        assert info["mechanism"] in ("netem", "nfqueue") and info["rtt_added_ms"] == 2 * D_MS
        during = ping(ns.ip)
        assert len(during) >= 25
        assert min(during) >= 2 * D_MS - 1, during
        assert p50(during) < 2 * D_MS + 30, during
        # Worker to worker is delayed too (both directions: RTT grows by 2 x D).
        assert 2 * D_MS - 1 <= _connect_ms_from(other.name, ns.ip, 5902) < 2 * D_MS + 50
        # TCP still works, and a bulk upload FROM the worker is not throttled to a few
        # packets per D (what holding packets in the sender's own stack did: 146 s).
        got, took_s = _fetch(ns.ip, port)
        assert got == nbytes
        assert 2 * 2 * D_MS / 1000 <= took_s < 20, took_s
        if info["mechanism"] == "nfqueue":
            assert len(rules_with_comment(*_places(layout))) == 3  # w0, root, w1
            assert pd.holder is not None and pd.holder.alive()
    finally:
        removed = pd.remove()
        sender.kill()
        sender.wait()
    assert removed["removed_ms"] >= removed["injected_ms"]
    assert pd.remove() is removed  # idempotent
    after = ping(ns.ip)
    assert p50(after) < 5.0, after
    assert _connect_ms_from(other.name, ns.ip, 5902) < 5.0
    listener.kill()  # (if an assert fails first, the namespace teardown kills it)
    listener.wait()
    assert rules_with_comment(*_places(layout)) == []
    assert [p for p, t in delay.holder_processes() if t == ns.name] == []
    if removed["mechanism"] == "nfqueue":
        assert removed["holder"]["received"] > 1000  # the holder really saw the traffic
        assert removed["holder"]["user_dropped"] == 0


INJECTOR = """
import json, sys, time
from pathlib import Path
from pgval.faults.delay import PacketDelay
info = PacketDelay(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])).inject()
print(json.dumps(info), flush=True)
time.sleep(600)
"""


@pytest.mark.cluster
def test_delay_dies_with_its_injector(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL of the injecting pgval: within 5 s no holder, no rule, no delay is left
    (PR_SET_PDEATHSIG + the owner check), with nobody running `pgval cleanup`."""
    layout, ns = worker_ns
    inj = subprocess.Popen([sys.executable, "-c", INJECTOR, ns.name, str(D_MS), str(tmp_path)],
                           stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert inj.stdout is not None
        info = json.loads(inj.stdout.readline())
        assert p50(ping(ns.ip, count=10)) >= 2 * D_MS - 1  # in force while its owner lives
    finally:
        os.kill(inj.pid, signal.SIGKILL)
        inj.wait(timeout=10)
    killed = time.monotonic()
    if info["mechanism"] == "nfqueue":
        wait_until(lambda: gone(info["holder_pid"]), 5, "the holder to follow its owner")
        wait_until(lambda: rules_with_comment(*_places(layout)) == [], 5,
                   "the holder to delete its rules")
    assert time.monotonic() - killed < 5.5
    assert [p for p, t in delay.holder_processes() if t == ns.name] == []
    assert p50(ping(ns.ip)) < 5.0
    assert delay.cleanup_delays(prefix=f"{netns.NS_PREFIX}{layout.suffix}-") == []


@pytest.mark.cluster
def test_holder_ends_the_delay_at_its_time_cap(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layout, ns = worker_ns
    pd = delay.PacketDelay(ns.name, D_MS, tmp_path, mechanism="nfqueue", max_seconds=2)
    pd.inject()
    assert pd.problem() is None
    assert p50(ping(ns.ip, count=10)) >= 2 * D_MS - 1
    assert pd.holder is not None
    wait_until(lambda: not pd.holder.alive(), 6, "the holder to stop at its cap")  # type: ignore[union-attr]
    assert rules_with_comment(*_places(layout)) == []
    assert p50(ping(ns.ip)) < 5.0
    assert "max 2 s reached" in (pd.problem() or "")  # the run would be recorded unknown
    pd.remove()


@pytest.mark.cluster
def test_a_full_queue_fails_open(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A holder alive but stalled (SIGSTOP) with an 8-packet queue: the kernel accepts the
    overflow unqueued (NFQA_CFG_F_FAIL_OPEN) instead of dropping everything."""
    layout, ns = worker_ns
    pd = delay.PacketDelay(ns.name, D_MS, tmp_path, mechanism="nfqueue", max_held=8)
    pd.inject()
    assert pd.holder is not None
    try:
        os.kill(pd.holder.pid, signal.SIGSTOP)
        replies = ping(ns.ip, count=40)
        assert len([r for r in replies if r < D_MS]) >= 10, replies
    finally:
        os.kill(pd.holder.pid, signal.SIGCONT)
        pd.remove()
    assert rules_with_comment(*_places(layout)) == []


@pytest.mark.cluster
def test_a_stopped_holder_fails_open_within_seconds(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SIGSTOP with the default queue (65,536 packets): the worker is cut off, not delayed,
    until pgval's check (once a second in a run) sees it; then the rules are gone, the
    holder has released what it held and exited, and traffic flows undelayed."""
    layout, ns = worker_ns
    pd = delay.PacketDelay(ns.name, D_MS, tmp_path, mechanism="nfqueue")
    pd.inject()
    assert pd.holder is not None
    try:
        assert p50(ping(ns.ip, count=10)) >= 2 * D_MS - 1
        os.kill(pd.holder.pid, signal.SIGSTOP)
        assert ping(ns.ip, count=10, wait_s=1.0) == []  # held: a cut link, not a delay
        t = time.monotonic()
        why = pd.problem()
        assert why is not None and "was stopped" in why and time.monotonic() - t < 5, why
        assert not pd.holder.alive()
        assert rules_with_comment(*_places(layout)) == []
        assert p50(ping(ns.ip)) < 5.0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pd.holder.pid, signal.SIGCONT)
        removed = pd.remove()
    assert removed["failed_open"]["why"] == why and removed["holder"]["why"] == "signal"
    assert [p for p, t in delay.holder_processes() if t == ns.name] == []


@pytest.mark.cluster
def test_cleanup_after_namespaces_are_gone(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`pgval cleanup` may remove the namespaces first: the root rule and holder remain."""
    layout, ns = worker_ns
    pd = delay.PacketDelay(ns.name, D_MS, tmp_path, mechanism="nfqueue")
    info = pd.inject()
    layout.teardown()
    assert len(rules_with_comment(delay.HOST)) >= 1
    removed = delay.cleanup_delays(prefix=f"{netns.NS_PREFIX}{layout.suffix}-")
    assert any(r.startswith(f"{delay.HOST}: iptables") for r in removed), removed
    assert not any(info["comment"] in r for r in rules_with_comment(delay.HOST))
    wait_until(lambda: gone(info["holder_pid"]), 5, "the holder to exit")
    pd.remove()  # nothing left to do, and no error


@pytest.mark.cluster
def test_dead_holder_fails_open(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layout, ns = worker_ns
    pd = delay.PacketDelay(ns.name, D_MS, tmp_path, mechanism="nfqueue")
    pd.inject()
    try:
        assert p50(ping(ns.ip, count=10)) >= 2 * D_MS - 1
        assert pd.holder is not None
        os.kill(pd.holder.pid, signal.SIGKILL)
        wait_until(lambda: not pd.holder.alive(), 5, "the holder to die")  # type: ignore[union-attr]
        assert "exited early" in (pd.problem() or "")  # seen, so the run becomes unknown
        assert len(rules_with_comment(*_places(layout))) == 3  # rules still there ...
        assert p50(ping(ns.ip)) < 5.0  # ... but traffic flows undelayed
        # A new delay on the same namespace clears the stale rules instead of being bypassed.
        again = delay.PacketDelay(ns.name, D_MS, tmp_path, mechanism="nfqueue")
        info = again.inject()
        assert len(info["stale_removed"]) == 3
        assert p50(ping(ns.ip, count=10)) >= 2 * D_MS - 1
        with pytest.raises(PgvalError, match="already delayed"):
            delay.PacketDelay(ns.name, D_MS, tmp_path, mechanism="nfqueue").inject()
        again.remove()
    finally:
        removed = pd.remove()  # must not raise although its rules and holder are gone
    assert removed["rules_removed"] == []
    assert rules_with_comment(*_places(layout)) == []


class _TbfStandIn(delay.PacketDelay):
    """The netem code path with a qdisc this kernel has (it lacks sch_netem)."""

    def _netem_args(self) -> list[str]:
        return ["tbf", "rate", "10gbit", "burst", "1mb", "latency", "5ms"]


def _qdisc_handles(tc: list[str], dev: str) -> list[str]:
    out = subprocess.run([*tc, "-j", "qdisc", "show"], capture_output=True, text=True,
                         check=True).stdout
    return [f"{dev}:{q['kind']}" for q in json.loads(out)
            if q.get("dev") == dev and q.get("handle") == delay.NETEM_HANDLE]


@pytest.mark.cluster
def test_qdisc_path_covers_both_ends_and_cleans_up(worker_ns, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layout, ns = worker_ns
    in_ns = netns.exec_prefix(ns.name) + ["tc"]
    pd = _TbfStandIn(ns.name, D_MS, tmp_path, mechanism="netem")
    pd.inject()
    assert _qdisc_handles(in_ns, "eth0") == ["eth0:tbf"]
    assert _qdisc_handles(["tc"], ns.host_veth) == [f"{ns.host_veth}:tbf"]
    removed = delay.cleanup_delays(prefix=f"{netns.NS_PREFIX}{layout.suffix}-")
    assert len(removed) == 2
    assert _qdisc_handles(in_ns, "eth0") == [] == _qdisc_handles(["tc"], ns.host_veth)
    pd.remove()  # idempotent after an external cleanup
    pd2 = _TbfStandIn(ns.name, D_MS, tmp_path, mechanism="netem")
    pd2.inject()
    assert len(pd2.remove()["rules_removed"]) == 2
    assert _qdisc_handles(in_ns, "eth0") == [] == _qdisc_handles(["tc"], ns.host_veth)
