"""Packet holder: delay every packet of one NFQUEUE by D ms, then accept it (or, with
``--drop``, drop every packet at once: the ``partition`` fault).

Why it exists: this kernel has no ``sch_netem``, so :mod:`pgval.faults.delay` sends the
delayed worker's packets to an NFQUEUE (``iptables-legacy -t mangle ... PREROUTING -j
NFQUEUE --queue-bypass``) and this program gives each one its ACCEPT verdict ``D`` ms
after it arrived::

    python -m pgval.faults.holder --queue N --delay-ms D [--jitter-ms J] \
        --netns self --netns pgval-s-w0 --netns pgval-s-w1 ...

NFQUEUE numbers are per network namespace, and the rules live in several (each
receiving side, see :mod:`pgval.faults.delay`), so one holder binds queue N in every
``--netns`` it is given: the netlink socket is created inside that namespace
(``setns``) and handed to NetfilterQueue, which supports exactly this. One process
means one thing to stop and one point of failure that fails open everywhere at once.

Design points:

* Packets are never serialised behind each other: packet i is released at
  ``arrival_i + D`` however many packets are held. Without jitter the release times
  are in arrival order, so a FIFO is the schedule; with jitter a heap is (and, as
  with netem, jitter reorders packets).
* One thread, one ``select`` loop: wait on the queues' netlink sockets with a
  timeout equal to the next release time. A second (scheduler) thread would have
  to win the GIL from the receiving thread, which costs up to the 5 ms switch
  interval per hand-over; a single loop releases within ~0.1 ms. Releases are also
  done from the receive callback, so a long burst cannot make them late.
* Verdicts outside the callback are legal with NetfilterQueue: ``Packet.accept()``
  only needs the queue handle and the packet id, both kept in the object.
* Only metadata is copied to userspace (``COPY_META``): the holder never reads
  payloads, and copying them would cost bandwidth per packet.
* SIGTERM/SIGINT/SIGHUP: accept everything still held (the delay is over), unbind,
  delete the rules carrying ``--comment``, print a summary line, exit 0. If the holder
  dies instead, ``--queue-bypass`` makes the kernel accept new packets unqueued (fail
  open); packets held at that moment are dropped by the kernel and retransmitted by TCP.
* ``--drop`` (a partition): every packet gets a DROP verdict the moment it arrives and is
  counted. Nothing is held, so nothing is flushed at exit. A partition fails safe the
  same way a delay does: when the holder dies, stalls or stops, ``--queue-bypass`` and the
  fail-open queue let packets through, so an instrument failure heals the partition (a
  weaker fault, which the run sees: ``holder-died``) and never leaves a link cut.
* Never outlives its owner or its phase: it stops as above when the pgval that started
  it dies (``PR_SET_PDEATHSIG`` plus a twice-a-second check of ``--owner-pid`` /
  ``--owner-start``, which also covers an owner that died before the holder started)
  or when ``--max-seconds`` have passed, whatever pgval does.
* Fail-open queues (``NFQA_CFG_F_FAIL_OPEN``): a holder that is alive but stalled fills
  its kernel queue (``--max-held``); the kernel then accepts the overflow unqueued
  instead of dropping it. Until then the link is cut, not delayed: a holder stopped
  outright (SIGSTOP) is therefore seen by its owner's once-a-second check
  (``PacketDelay.problem`` in :mod:`pgval.faults.delay`), which deletes the rules and
  sends SIGTERM and SIGCONT: the holder resumes, accepts what it holds and exits.
  NetfilterQueue has no call for this flag, so it is set with a raw
  ``NFQNL_MSG_CONFIG`` message on the queue's own netlink socket (the kernel only takes
  a queue's configuration from the socket bound to it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from pgval.core.files import write_private_json

SUMMARY_TAG = "pgval-holder-summary"
#: ``--netns`` value for the namespace the holder itself runs in.
SELF_NS = "self"
NETNS_RUN = "/run/netns"
CLONE_NEWNET = 0x40000000
NETLINK_NETFILTER = 12
#: Kernel-side queue length: every held packet waits in it for its verdict, so this
#: caps packets in flight (netem's default limit of 1000 is far too small for 500 ms).
DEFAULT_MAX_HELD = 65536
DEFAULT_RT_PRIORITY = 10
#: How often the loop checks that its owner lives and its time is not up.
OWNER_CHECK_S = 0.5
HOLDER_RC_OWNER_GONE = 5  # the owner was already dead when the holder started
PR_SET_PDEATHSIG = 1
# nfnetlink_queue configuration (linux/netfilter/nfnetlink_queue.h)
_NFNL_SUBSYS_QUEUE = 3
_NFQNL_MSG_CONFIG = 2
_NFQA_CFG_MASK = 4
_NFQA_CFG_FLAGS = 5
NFQA_CFG_F_FAIL_OPEN = 1
_NLM_F_REQUEST = 1
_NLM_F_ACK = 4
_NLMSG_ERROR = 2
#: Netlink receive buffer: absorbs bursts while the loop is busy releasing packets.
SOCK_RCVBUF = 32 * 1024 * 1024
_HIST_BIN_S = 0.0001  # lateness histogram: 0.1 ms bins ...
_HIST_BINS = 10_000  # ... up to 1 s, the last bin collects the rest


class Verdictable(Protocol):
    def accept(self) -> None: ...

    def drop(self) -> None: ...


class Schedule:
    """Held packets and their release times; releases everything due, nothing early."""

    def __init__(self, delay_ms: float, jitter_ms: float = 0.0,
                 rng: random.Random | None = None) -> None:
        self.delay_s = delay_ms / 1000.0
        self.jitter_s = jitter_ms / 1000.0
        self.rng = rng or random.Random()
        self._fifo: collections.deque[tuple[float, Verdictable]] = collections.deque()
        self._heap: list[tuple[float, int, Verdictable]] = []
        self._seq = 0
        self.received = 0
        self.released = 0
        self.max_held = 0
        self.errors = 0
        self.hist = [0] * _HIST_BINS
        self.late_max_s = 0.0

    def __len__(self) -> int:
        return len(self._heap) if self.jitter_s else len(self._fifo)

    def push(self, pkt: Verdictable, now: float) -> None:
        """Hold ``pkt``, which arrived at ``now``, until ``now + D (+/- J)``."""
        self.received += 1
        if self.jitter_s:
            due = now + max(0.0, self.delay_s + self.rng.uniform(-self.jitter_s, self.jitter_s))
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, pkt))
        else:
            self._fifo.append((now + self.delay_s, pkt))
        held = len(self)
        if held > self.max_held:
            self.max_held = held

    def next_due(self) -> float | None:
        if self.jitter_s:
            return self._heap[0][0] if self._heap else None
        return self._fifo[0][0] if self._fifo else None

    def release_due(self, now: float) -> int:
        """Accept every packet whose time has come; returns how many."""
        n = 0
        if self.jitter_s:
            heap = self._heap
            while heap and heap[0][0] <= now:
                due, _, pkt = heapq.heappop(heap)
                self._accept(pkt, now - due)
                n += 1
        else:
            fifo = self._fifo
            while fifo and fifo[0][0] <= now:
                due, pkt = fifo.popleft()
                self._accept(pkt, now - due)
                n += 1
        return n

    def release_all(self) -> int:
        """Accept everything still held (shutdown: the delay is over)."""
        n = 0
        items = [p for _, _, p in self._heap] if self.jitter_s else [p for _, p in self._fifo]
        self._heap.clear()
        self._fifo.clear()
        for pkt in items:
            self._accept(pkt, None)
            n += 1
        return n

    def _accept(self, pkt: Verdictable, late_s: float | None) -> None:
        try:
            pkt.accept()
        except (RuntimeError, OSError):
            self.errors += 1
            return
        self.released += 1
        if late_s is not None:
            self.hist[min(int(late_s / _HIST_BIN_S), _HIST_BINS - 1)] += 1
            if late_s > self.late_max_s:
                self.late_max_s = late_s

    def late_percentile_ms(self, q: float) -> float | None:
        """Upper edge of the histogram bin holding the q-quantile of release lateness."""
        total = sum(self.hist)
        if total == 0:
            return None
        rank, acc = q * total, 0
        for i, c in enumerate(self.hist):
            acc += c
            if acc >= rank and c:
                return round((i + 1) * _HIST_BIN_S * 1000, 2)
        return round(_HIST_BINS * _HIST_BIN_S * 1000, 2)

    def stats(self) -> dict[str, Any]:
        return {"received": self.received, "released": self.released, "held": len(self),
                "max_held": self.max_held, "verdict_errors": self.errors,
                "late_p50_ms": self.late_percentile_ms(0.5),
                "late_p99_ms": self.late_percentile_ms(0.99),
                "late_max_ms": round(self.late_max_s * 1000, 3)}


class Dropper:
    """``--drop``: every packet is dropped on arrival and counted; the same face as
    :class:`Schedule` so the loop does not care which verdict it gives."""

    def __init__(self) -> None:
        self.received = 0
        self.dropped = 0
        self.errors = 0

    def __len__(self) -> int:
        return 0

    def push(self, pkt: Verdictable, now: float) -> None:
        self.received += 1
        try:
            pkt.drop()
        except (RuntimeError, OSError):
            self.errors += 1
            return
        self.dropped += 1

    def next_due(self) -> float | None:
        return None

    def release_due(self, now: float) -> int:
        return 0

    def release_all(self) -> int:
        return 0

    def stats(self) -> dict[str, Any]:
        return {"received": self.received, "dropped": self.dropped, "held": 0,
                "verdict_errors": self.errors}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pgval.faults.holder",
                                description="Hold NFQUEUE packets D ms, then accept them.")
    p.add_argument("--queue", type=int, required=True, help="NFQUEUE number (0..65535)")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--drop", action="store_true",
                   help="drop every packet instead of delaying it (a network partition)")
    p.add_argument("--jitter-ms", type=float, default=0.0,
                   help="uniform +/- jitter; reorders packets, as netem's does")
    p.add_argument("--netns", action="append", default=[], metavar="NAME",
                   help=f"bind the queue in named network namespace NAME (repeatable); "
                        f"{SELF_NS!r} = the holder's own namespace (the default)")
    p.add_argument("--target", default="",
                   help="the namespace being delayed; only a label for `cleanup_delays`")
    p.add_argument("--max-held", type=int, default=DEFAULT_MAX_HELD,
                   help="kernel queue length per namespace; packets beyond it are dropped")
    p.add_argument("--ready-file", type=Path, default=None,
                   help="written once every queue is bound (the injector waits for it)")
    p.add_argument("--stats-every-s", type=float, default=10.0)
    p.add_argument("--rt-priority", type=int, default=DEFAULT_RT_PRIORITY,
                   help="SCHED_RR priority (1..99); 0 = normal scheduling with --nice")
    p.add_argument("--nice", type=int, default=-10,
                   help="niceness when SCHED_RR is off or not permitted")
    p.add_argument("--owner-pid", type=int, default=0,
                   help="stop when this process dies (with --owner-start: its start time in "
                        "clock ticks, so a reused pid does not count as the owner)")
    p.add_argument("--owner-start", type=int, default=None)
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop after this long whatever happens (0 = no cap)")
    p.add_argument("--comment", default="",
                   help="iptables comment of the rules feeding this queue: deleted on exit")
    p.add_argument("--no-fail-open", dest="fail_open", action="store_false",
                   help="let the kernel drop packets when a queue is full (default: accept)")
    args = p.parse_args(argv)
    if not 0 <= args.queue <= 65535:
        p.error("--queue must be in 0..65535")
    if args.delay_ms < 0 or args.jitter_ms < 0:
        p.error("--delay-ms and --jitter-ms must be >= 0")
    if any("/" in n or not n for n in args.netns):
        p.error("--netns takes a name from `ip netns list`")
    args.netns = list(dict.fromkeys(args.netns or [SELF_NS]))
    return args


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python >= 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the block in network namespace ``name`` (this thread only), then come back."""
    if name == SELF_NS:
        yield
        return
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"{NETNS_RUN}/{name}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


def kernel_queue_counters(queue: int, namespaces: list[str]) -> dict[str, int]:
    """The kernel's counters for ``queue``, summed over ``namespaces`` (evidence of overload).

    ``queue_dropped``: a queue was full (``--max-held``); ``user_dropped``: the netlink
    socket buffer was full because the holder could not keep up.
    """
    out = {"kernel_queue_len": 0, "queue_dropped": 0, "user_dropped": 0}
    for name in namespaces:
        try:
            with in_netns(name):
                lines = Path("/proc/thread-self/net/netfilter/nfnetlink_queue").read_text()
        except OSError:
            continue
        for line in lines.splitlines():
            f = line.split()
            if len(f) >= 7 and f[0] == str(queue):
                out["kernel_queue_len"] += int(f[2])
                out["queue_dropped"] += int(f[5])
                out["user_dropped"] += int(f[6])
    return out


def _set_priority(nice: int, rt_priority: int) -> str:
    """Run ahead of the JVMs sharing the CPU: a late wake-up is a longer delay.

    Measured at load average ~10 on 2 cores with D=50 ms: release lateness p99 0.3 ms
    (max 2 ms) under SCHED_RR, 10-50 ms (max 80 ms) at nice -10. netem does this work
    in softirq context, ahead of every task, so a real-time holder is the closer model;
    the kernel's RT throttling still leaves other tasks 5% of each CPU.
    """
    if rt_priority > 0:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(rt_priority))
            return f"SCHED_RR {rt_priority}"
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
            return f"nice {nice}"
    return "default"


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent (the injecting pgval) exits."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _owner_check(args: argparse.Namespace) -> Any:
    """A function telling whether the owner still lives (always True without --owner-pid)."""
    if args.owner_pid <= 0:
        return lambda: True
    from pgval.host.identity import Owner, boot_id, start_ticks

    start = args.owner_start if args.owner_start is not None else start_ticks(args.owner_pid)
    if start is None:
        return lambda: False
    owner = Owner(args.owner_pid, start, boot_id())
    return owner.alive


def set_fail_open(fd: int, queue: int) -> None:
    """Make ``queue`` fail open: when full, the kernel accepts packets instead of dropping.

    Sent on the bound socket ``fd`` itself (same netlink port id, which the kernel
    requires); waits for the kernel's acknowledgement and raises OSError on refusal.
    """
    attrs = b"".join(struct.pack("=HH", 8, kind) + struct.pack(">I", NFQA_CFG_F_FAIL_OPEN)
                     for kind in (_NFQA_CFG_MASK, _NFQA_CFG_FLAGS))
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    seq = int(time.time()) & 0x7FFFFFFF
    msg = struct.pack("=IHHII", 16 + len(body), (_NFNL_SUBSYS_QUEUE << 8) | _NFQNL_MSG_CONFIG,
                      _NLM_F_REQUEST | _NLM_F_ACK, seq, 0) + body
    sock = socket.socket(fileno=os.dup(fd))
    blocking = sock.getblocking()
    try:
        sock.settimeout(5.0)
        sock.sendto(msg, (0, 0))
        while True:  # no rule feeds the queue yet, so only our acknowledgement can arrive
            data = sock.recv(65536)
            length, kind, _, got_seq, _ = struct.unpack_from("=IHHII", data)
            if kind == _NLMSG_ERROR and got_seq == seq:
                err = -struct.unpack_from("=i", data, 16)[0]
                if err:
                    raise OSError(err, f"fail-open refused: {os.strerror(err)}")
                return
    finally:
        sock.setblocking(blocking)
        sock.close()


def remove_rules(comment: str, namespaces: list[str]) -> list[str]:
    """Delete the iptables rules carrying ``comment`` in ``namespaces``; returns them.

    The holder does this itself on every exit, so that a holder stopped by its owner's
    death or its time cap leaves no rule behind (its owner, alive, removes them first).
    """
    if not comment:
        return []
    removed = []
    for name in namespaces:
        prefix = [] if name == SELF_NS else ["ip", "netns", "exec", name]
        try:
            listing = subprocess.run([*prefix, "iptables-legacy", "-w", "10", "-t", "mangle",
                                      "-S"], capture_output=True, text=True, timeout=15).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in listing.splitlines():
            words = line.split()
            if words[:1] != ["-A"] or comment not in words:
                continue
            res = subprocess.run([*prefix, "iptables-legacy", "-w", "10", "-t", "mangle",
                                  "-D", *words[1:]], capture_output=True, timeout=15)
            if res.returncode == 0:
                removed.append(f"{name}: {' '.join(words)}")
    return removed


def _log(obj: dict[str, Any], tag: str = "pgval-holder") -> None:
    print(f"{tag} {json.dumps(obj, sort_keys=True)}", flush=True)


def _open_queues(args: argparse.Namespace, on_packet: Any) -> list[Any]:
    """One bound NetfilterQueue per namespace; the netlink socket is opened in that namespace.

    NetfilterQueue's ``sockfd`` argument exists for exactly this: a socket created in
    another namespace, used from here. Raises OSError naming the namespace that failed.
    """
    from netfilterqueue import COPY_META, NetfilterQueue

    queues = []
    for name in args.netns:
        try:
            if name == SELF_NS:
                nfq = NetfilterQueue()
            else:
                with in_netns(name):
                    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
                try:
                    nfq = NetfilterQueue(sockfd=sock.fileno())  # dup2()s it into its handle
                finally:
                    sock.close()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # rcvbuf smaller than asked
                nfq.bind(args.queue, on_packet, max_len=args.max_held, mode=COPY_META,
                         sock_len=SOCK_RCVBUF // 2)
        except OSError as exc:
            for q in queues:
                q.unbind()
            raise OSError(f"namespace {name}: {exc.strerror or exc}") from exc
        queues.append(nfq)
    return queues


def _netfilterqueue_missing() -> bool:
    """True, after telling the user how to install it, when NetfilterQueue cannot be
    imported: checked before anything is bound so the holder fails with a fix, not a trace."""
    try:
        import netfilterqueue  # noqa: F401
    except ImportError as exc:
        print(f"pgval-holder: the Python package NetfilterQueue is not usable here ({exc}); "
              f"install it with `{sys.executable} -m pip install NetfilterQueue` "
              "(building needs the Debian package libnetfilter-queue-dev)", file=sys.stderr)
        return True
    return False


class _StopRequest:
    """Set by SIGTERM/SIGINT/SIGHUP; the signal also writes to a pipe the select loop
    waits on, so a stop wakes it at once instead of at the next release time."""

    def __init__(self) -> None:
        self.requested = False
        self.wake_fd, wake_w = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.requested = True

    def drain(self) -> None:
        """Empty the wake-up pipe so the next select waits again."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_fd, 512):
                pass


def _bind_queues(args: argparse.Namespace, sched: Schedule | Dropper) -> list[Any] | None:
    """The bound (and, with ``--fail-open``, fail-open) queues whose packets go to
    ``sched``; None, after saying why, when they cannot be set up (nothing stays bound)."""
    clock = time.monotonic
    push, release_due = sched.push, sched.release_due

    def on_packet(pkt: Verdictable) -> None:
        now = clock()
        push(pkt, now)
        release_due(now)

    try:
        queues = _open_queues(args, on_packet)
    except OSError as exc:
        print(f"pgval-holder: cannot bind NFQUEUE {args.queue}: {exc} "
              "(another holder bound to it there? not root?)", file=sys.stderr)
        return None
    if args.fail_open:
        try:
            for q in queues:
                set_fail_open(q.get_fd(), args.queue)
        except OSError as exc:
            for q in queues:
                q.unbind()
            print(f"pgval-holder: cannot make NFQUEUE {args.queue} fail open: {exc}",
                  file=sys.stderr)
            return None
    return queues


def _announce_ready(args: argparse.Namespace, policy: str) -> None:
    """Log the settings in force and write ``--ready-file`` (atomically): the owner waits
    for it before it puts the rules that send packets here in place."""
    _log({"event": "ready", "pid": os.getpid(), "queue": args.queue, "netns": args.netns,
          "target": args.target, "drop": args.drop, "delay_ms": args.delay_ms,
          "jitter_ms": args.jitter_ms, "max_held": args.max_held, "scheduling": policy,
          "fail_open": args.fail_open, "owner_pid": args.owner_pid,
          "max_seconds": args.max_seconds})
    if args.ready_file is not None:
        write_private_json(args.ready_file, {"pid": os.getpid(), "queue": args.queue})


def _serve(args: argparse.Namespace, sched: Schedule | Dropper, queues: list[Any],
           stop: _StopRequest, owner_alive: Any) -> str:
    """The select loop: receive, release what is due, log stats, until a stop signal, the
    owner's death or ``--max-seconds``; returns why it stopped. Netlink errors are raised."""
    clock = time.monotonic
    release_due = sched.release_due
    by_fd = {q.get_fd(): q for q in queues}
    fds = [*by_fd, stop.wake_fd]
    next_stats = clock() + args.stats_every_s if args.stats_every_s > 0 else float("inf")
    deadline = clock() + args.max_seconds if args.max_seconds > 0 else float("inf")
    next_owner_check = clock() + OWNER_CHECK_S
    while not stop.requested:
        now = clock()
        release_due(now)
        if now >= next_stats:
            _log({"event": "stats", **sched.stats(),
                  **kernel_queue_counters(args.queue, args.netns)})
            next_stats = now + args.stats_every_s
        if now >= next_owner_check:
            next_owner_check = now + OWNER_CHECK_S
            if not owner_alive():
                return "owner died"
            if now >= deadline:
                return f"max {args.max_seconds:g} s reached"
        nxt = sched.next_due()
        due = min(next_stats, next_owner_check) if nxt is None else min(
            nxt, next_stats, next_owner_check)
        timeout = None if due == float("inf") else max(0.0, due - now)
        readable, _, _ = select.select(fds, [], [], timeout)
        for fd in readable:
            if fd == stop.wake_fd:
                stop.drain()
            else:
                by_fd[fd].run(block=False)  # drains; on_packet releases what is due
    return "signal"


def _shut_down(args: argparse.Namespace, sched: Schedule | Dropper, queues: list[Any],
               why: str, owner_alive: Any) -> None:
    """Leave nothing behind: take what the kernel already handed over, accept every held
    packet, unbind, delete the rules, and print the summary line the owner reads."""
    for q in queues:  # whatever the kernel already handed over: do not strand it
        with contextlib.suppress(OSError):
            q.run(block=False)
    counters = kernel_queue_counters(args.queue, args.netns)
    flushed = sched.release_all()
    for q in queues:
        q.unbind()
    if why == "signal" and not owner_alive():
        why = "owner died"  # PR_SET_PDEATHSIG's SIGTERM
    rules = remove_rules(args.comment, args.netns)
    _log({"event": "exit", "why": why, "flushed_at_exit": flushed,
          "rules_removed_by_holder": rules, **sched.stats(), **counters}, tag=SUMMARY_TAG)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if _netfilterqueue_missing():
        return 2
    _die_with_parent()
    owner_alive = _owner_check(args)
    if not owner_alive():
        print(f"pgval-holder: owner pid {args.owner_pid} is gone; not starting", file=sys.stderr)
        return HOLDER_RC_OWNER_GONE
    policy = _set_priority(args.nice, args.rt_priority)
    sched: Schedule | Dropper = Dropper() if args.drop else Schedule(args.delay_ms,
                                                                     args.jitter_ms)
    stop = _StopRequest()
    queues = _bind_queues(args, sched)
    if queues is None:
        return 3
    _announce_ready(args, policy)
    rc = 0
    why = "signal"
    try:
        why = _serve(args, sched, queues, stop, owner_alive)
    except OSError as exc:
        print(f"pgval-holder: netlink receive failed: {exc}", file=sys.stderr)
        rc = 4
    finally:
        _shut_down(args, sched, queues, why, owner_alive)
    return rc


if __name__ == "__main__":
    sys.exit(main())
