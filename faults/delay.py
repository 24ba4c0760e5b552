"""Packet delay on ONE worker's network namespace, and its reliable removal.

Two mechanisms, same effect (every IPv4 packet to and from the worker is held D ms):

* ``netem`` when the kernel has ``sch_netem``: ``tc qdisc ... root handle 504d: netem``
  on the namespace's ``eth0`` (packets leaving the worker) AND on the host-side veth
  (packets going to the worker: netem only shapes egress, so the peer's egress is the
  worker's ingress). Only qdiscs with handle ``504d:`` are ever deleted.
* ``nfqueue`` otherwise (this project's VM kernel has no netem): ``iptables-legacy``
  rules send the worker's packets to NFQUEUE N, and :mod:`pgval.faults.holder`
  accepts each packet D ms after it arrived. ``--queue-bypass`` makes the kernel
  accept packets unqueued when no holder is bound, so a dead holder fails open (no
  delay), never closed.

Where the nfqueue rules go, and why not simply OUTPUT/INPUT in the worker namespace:
a packet held in the SENDER's stack (OUTPUT) still belongs to its socket, and TCP Small
Queues lets a socket have only ~2 packets below TCP at a time, so a 4 MB upload from
the worker took 146 s with D=100 ms instead of ~3 s. Packets are therefore held where
they are RECEIVED, after ``ip_rcv`` has detached them from the sending socket:
``-t mangle -I PREROUTING``

* in the worker namespace, ``-i eth0``: everything sent to the worker;
* in the root namespace, ``-i <bridge> -s <worker ip> -m addrtype --dst-type LOCAL``:
  the worker to the driver, Kafka brokers and Spark master (they listen on the bridge
  IP); LOCAL keeps out bridged worker-to-worker packets, which ``br_netfilter`` also
  shows to the root's PREROUTING;
* in every other namespace of the run (``pgval-<suffix>-w*``), ``-i eth0 -s <worker
  ip>``: the worker to other workers' executors (shuffle, block transfers).

One holder process, in the root namespace, binds queue N in all of them. ``mangle``
``PREROUTING`` runs before ``filter``, and an accepted packet goes on to the later
tables, so other faults' ``filter`` rules still apply to delayed packets. Namespaces
created after :meth:`PacketDelay.inject` get no rule (the delay is set per run phase,
while the workers' namespaces exist).

Both directions are delayed, so a round trip grows by ``2 * D``
(:attr:`PacketDelay.rtt_added_ms`), as with ``netem delay D`` applied to both ends.
Traffic inside the namespace (worker <-> its own executors) is not delayed: the fault
is on the worker's link, not inside the machine it models. Only IPv4 is delayed.

Everything pgval adds is marked — iptables comments ``pgval-delay-<id>-<target ns>``,
qdisc handle ``504d:``, holders registered in ``/run/pgval/holders`` (pid + start
ticks, owner, target namespace) — so
:func:`cleanup_delays` can undo it after the injecting pgval was SIGKILLed, touching
nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgval.core.clock import now_ms
from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.faults.pause import process_state
from pgval.host import netns, registry
from pgval.host.identity import Owner, start_ticks
from pgval.host.procs import Managed, kill_group, spawn

#: How a delay is made (its fault log's ``mechanism``): netem where the kernel has it, else
#: NFQUEUE and the packet holder.
MECHANISMS = ("netem", "nfqueue")
COMMENT_PREFIX = "pgval-delay-"
NETEM_HANDLE = "504d:"
HOLDER_MODULE = "pgval.faults.holder"
IPTABLES = "iptables-legacy"
HOLDER_RC_BIND = 3  # the holder's exit status when a queue number is taken
HOST = "host"  # the root network namespace, where a `where` names a namespace
#: Tables scanned by cleanup (pgval adds to mangle; filter is scanned for older rules).
TABLES = ("mangle", "filter")
#: First NFQUEUE number tried (numbers are per namespace; N must be free in all involved).
QUEUE_BASE = 0x504D
_CMD_TIMEOUT_S = 15.0
_READY_TIMEOUT_S = 20.0
#: Hard cap of a holder's life when the caller gives none (a phase is minutes long).
DEFAULT_MAX_SECONDS = 3600.0
_REMOVE_ATTEMPTS = 3
_NS_IF = "eth0"
#: /proc states of a process that runs no code until it is continued: ``T`` stopped
#: (SIGSTOP, SIGTSTP), ``t`` stopped by a debugger.
STOPPED_STATES = ("T", "t")
_COMMENT_RE = re.compile(rf"{re.escape(COMMENT_PREFIX)}[0-9a-f]{{8}}-(\S+)")



def _run(argv: list[str], timeout_s: float = _CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run a command, never raising for its exit status (callers decide what failure means)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout_s:.0f} s")


def _msg(res: subprocess.CompletedProcess[str]) -> str:
    return (res.stderr or res.stdout).strip().replace("\n", " ") or f"exit status {res.returncode}"


def _checked(argv: list[str]) -> subprocess.CompletedProcess[str]:
    res = _run(argv)
    if res.returncode != 0:
        raise EnvironmentFailure(f"`{shlex.join(argv)}` failed: {_msg(res)}")
    return res


def _in(where: str, *argv: str) -> list[str]:
    """``argv`` run in namespace ``where`` (:data:`HOST` = the root namespace)."""
    return list(argv) if where == HOST else netns.exec_prefix(where) + list(argv)


def _iptables(where: str, *args: str) -> list[str]:
    # -w: the xtables lock file is shared by all namespaces, wait for it instead of failing.
    return _in(where, IPTABLES, "-w", "10", *args)


def _holder_importable() -> str | None:
    """None if the holder can run with this interpreter, else what is missing."""
    try:
        import netfilterqueue  # noqa: F401
    except ImportError as exc:
        return (f"the Python package NetfilterQueue in {sys.executable} ({exc}; "
                "`pip install 'pgval[netdelay]'`, which builds against the Debian package "
                "libnetfilter-queue-dev)")
    return None


def _require_ns(ns: str) -> None:
    if os.geteuid() != 0:
        raise EnvironmentFailure("packet delay needs root (it changes qdiscs or iptables rules)")
    if ns not in netns.list_namespaces():
        raise EnvironmentFailure(f"network namespace {ns} does not exist")


def detect_mechanism(ns: str) -> str:
    """``"netem"`` if the kernel has netem, else ``"nfqueue"`` if it works, else a plain error.

    Both are probed for real inside ``ns`` (a 1 ms netem on its ``lo``; a never-matching
    NFQUEUE rule), because a present binary says nothing about kernel modules.
    """
    _require_ns(ns)
    if shutil.which("tc") is not None:
        probe = _run(_in(ns, "tc", "qdisc", "add", "dev", "lo", "root", "handle",
                         NETEM_HANDLE, "netem", "delay", "1ms"))
        if probe.returncode == 0:
            _run(_in(ns, "tc", "qdisc", "del", "dev", "lo", "root", "handle", NETEM_HANDLE))
            return "netem"
        netem_why = f"netem is unavailable ({_msg(probe)})"
    else:
        netem_why = "netem is unavailable (the `tc` command, Debian package iproute2, is missing)"
    missing = []
    if shutil.which(IPTABLES) is None:
        missing.append(f"the `{IPTABLES}` command (Debian package iptables)")
    holder_missing = _holder_importable()
    if holder_missing:
        missing.append(holder_missing)
    if missing:
        raise EnvironmentFailure(f"packet delay cannot work here: {netem_why}, and the NFQUEUE "
                                f"fallback lacks {' and '.join(missing)}")
    rule = ["PREROUTING", "-i", "lo", "-p", "udp", "--dport", "9", "-m", "comment",
            "--comment", f"{COMMENT_PREFIX}probe", "-j", "NFQUEUE", "--queue-num", "0",
            "--queue-bypass"]
    res = _run(_iptables(ns, "-t", "mangle", "-A", *rule))
    if res.returncode != 0:
        raise EnvironmentFailure(f"packet delay cannot work here: {netem_why}, and "
                                f"{IPTABLES} cannot add an NFQUEUE rule ({_msg(res)})")
    _run(_iptables(ns, "-t", "mangle", "-D", *rule))
    return "nfqueue"


def _bound_queues(where: str) -> set[int]:
    """NFQUEUE numbers with a listener in ``where`` (/proc/net is per network namespace)."""
    res = _run(_in(where, "cat", "/proc/net/netfilter/nfnetlink_queue"))
    out: set[int] = set()
    for line in res.stdout.splitlines() if res.returncode == 0 else []:
        with contextlib.suppress(ValueError, IndexError):
            out.add(int(line.split()[0]))
    return out


def _queues_in_rules(where: str) -> set[int]:
    out: set[int] = set()
    for table in TABLES:
        res = _run(_iptables(where, "-t", table, "-S"))
        out |= {int(m) for m in re.findall(r"--queue-num (\d+)", res.stdout)}
    return out


def _link(where: str, dev: str) -> dict[str, Any]:
    res = _run(_in(where, "ip", "-j", "link", "show", dev))
    with contextlib.suppress(ValueError, IndexError, TypeError):
        return dict(json.loads(res.stdout)[0])
    return {}


def _host_peer(ns: str) -> str:
    """Root-namespace name of the veth whose peer is ``eth0`` in ``ns``."""
    with contextlib.suppress(KeyError, ValueError, TypeError):
        peer_index = int(_link(ns, _NS_IF)["link_index"])
        for link in json.loads(_run(["ip", "-j", "link", "show"]).stdout or "[]"):
            if int(link.get("ifindex", -1)) == peer_index:
                return str(link["ifname"])
    m = _parse_ns(ns)
    if m:
        return netns.host_veth_name(*m)
    raise EnvironmentFailure(f"cannot find the host-side veth of {ns}'s {_NS_IF}")


def _parse_ns(ns: str) -> tuple[str, int] | None:
    m = re.fullmatch(rf"{re.escape(netns.NS_PREFIX)}([a-z0-9]+)-w(\d+)", ns)
    return (m.group(1), int(m.group(2))) if m else None


def _ns_ipv4(ns: str) -> str:
    res = _run(_in(ns, "ip", "-j", "-4", "addr", "show", "dev", _NS_IF))
    with contextlib.suppress(ValueError, IndexError, KeyError, TypeError):
        return str(json.loads(res.stdout)[0]["addr_info"][0]["local"])
    raise EnvironmentFailure(f"{ns} has no IPv4 address on {_NS_IF}")


def _pgval_rules(where: str, table: str) -> list[tuple[list[str], str]]:
    """(``-D`` arguments, comment) of every rule in ``where``/``table`` that pgval added."""
    res = _run(_iptables(where, "-t", table, "-S"))
    return _ours_in_listing(res.stdout if res.returncode == 0 else "", table)


def _ours_in_listing(listing: str, table: str = "filter") -> list[tuple[list[str], str]]:
    out = []
    for line in listing.splitlines():
        if not line.startswith("-A "):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        comments = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--comment"]
        if comments and comments[0].startswith(COMMENT_PREFIX):
            out.append((["-t", table, "-D", *words[1:]], comments[0]))
    return out


def _comment_target(comment: str) -> str | None:
    """The delayed namespace a rule's comment names (None for probes or foreign formats)."""
    m = _COMMENT_RE.fullmatch(comment)
    return m.group(1) if m else None


def _holder_summary(log_path: Path) -> dict[str, Any] | None:
    """The holder's exit summary (packets held, release lateness), if it printed one."""
    from pgval.faults.holder import SUMMARY_TAG

    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith(SUMMARY_TAG + " "):
            with contextlib.suppress(ValueError):
                return dict(json.loads(line[len(SUMMARY_TAG) + 1:]))
    return None


class _BindFailed(Exception):
    """The holder could not bind its queue number (taken meanwhile)."""


class PacketDelay:
    """Delay every packet to and from namespace ``ns`` by ``delay_ms`` (+/- ``jitter_ms``).

    :meth:`inject` then :meth:`remove`; ``remove`` is idempotent and never raises because
    the namespace or the holder already went away (a crashed or torn-down worker).
    """

    #: The holder's process name (and log file): ``<label>-<namespace>``.
    holder_label = "delay-holder"

    def __init__(self, ns: str, delay_ms: int, run_dir: Path, jitter_ms: int = 0,
                 mechanism: str | None = None, queue_num: int | None = None,
                 max_seconds: float = DEFAULT_MAX_SECONDS,
                 max_held: int | None = None) -> None:
        if delay_ms < 0 or jitter_ms < 0:
            raise EnvironmentFailure("packet delay and jitter must be >= 0 ms")
        if mechanism is not None and mechanism not in MECHANISMS:
            raise EnvironmentFailure(f"unknown delay mechanism {mechanism!r}: netem or nfqueue")
        if queue_num is not None and not 0 <= queue_num <= 65535:
            raise EnvironmentFailure(f"NFQUEUE number {queue_num} is outside 0..65535")
        self.ns = ns
        self.delay_ms = int(delay_ms)
        self.jitter_ms = int(jitter_ms)
        self.run_dir = Path(run_dir)
        self.mechanism = mechanism
        self.queue_num = queue_num
        #: The holder stops by itself after this long, whatever happens to pgval.
        self.max_seconds = float(max_seconds)
        self.max_held = max_held  # kernel queue length (the holder's default if None)
        self.id = secrets.token_hex(4)
        self.comment = f"{COMMENT_PREFIX}{self.id}-{ns}"
        self.holder: Managed | None = None
        self.stale_removed: list[str] = []
        # (where, spec): nfqueue = iptables rule without -t/-I; netem = [dev]
        self._rules: list[tuple[str, list[str]]] = []
        self._injected_ms: int | None = None
        self._removed: dict[str, Any] | None = None
        #: Set when a stopped holder was let go (:meth:`_fail_open`): why, when, what.
        self._failed_open: dict[str, Any] | None = None

    @property
    def rtt_added_ms(self) -> int:
        """Round-trip time added: each direction is held ``delay_ms``."""
        return 2 * self.delay_ms

    @property
    def active(self) -> bool:
        return self._injected_ms is not None and self._removed is None

    def problem(self) -> str | None:
        """Why the delay is no longer in force while it should be (None: it is, or netem).

        A dead holder means packets pass undelayed (fail open): the run must not be
        recorded as delayed from then on. A stopped one (SIGSTOP, a debugger's stop) is
        worse: alive, it keeps its queues bound, so every packet waits in the kernel until
        the queue is full (65,536 packets; only then does it fail open): a cut link, not a
        delay. Seen here (a run asks every second), it is let go at once
        (:meth:`_fail_open`) and said so from then on.
        """
        if not self.active or self.holder is None:
            return None
        if self._failed_open is not None:
            return str(self._failed_open["why"])
        if self.holder.alive():
            state = process_state(self.holder.pid)
            return self._fail_open(state) if state in STOPPED_STATES else None
        summary = _holder_summary(self.holder.log_path) or {}
        why = summary.get("why") or f"exit status {self.holder.popen.returncode}"
        return f"the packet holder for {self.ns} (pid {self.holder.pid}) exited early ({why})"

    def _fail_open(self, state: str) -> str:
        """End the delay of a stopped holder: its rules first (no packet is queued any
        more), then SIGTERM and SIGCONT, so it resumes, accepts what it holds and exits (a
        SIGKILL after 2 s: the kernel then drops what it held, and TCP sends it again)."""
        assert self.holder is not None
        pid = self.holder.pid
        removed = self._remove_nfqueue_rules() if self.mechanism == "nfqueue" else {}
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        self.holder.stop(grace_s=2.0)
        registry.unregister_holder(pid)
        why = (f"the packet holder for {self.ns} (pid {pid}) was stopped (state {state}), not "
               "dead, and held every packet; pgval removed its rules and let it go, so "
               "packets pass undelayed (fail open)")
        self._failed_open = {"why": why, "at_ms": now_ms(), **removed}
        return why

    def _describe(self) -> dict[str, Any]:
        if self.mechanism == "netem":
            rules = [f"{where}: tc qdisc add dev {spec[0]} root handle {NETEM_HANDLE} "
                     f"{' '.join(self._netem_args())}" for where, spec in self._rules]
        else:
            rules = [f"{where}: {shlex.join(['-t', 'mangle', '-I', *spec])}"
                     for where, spec in self._rules]
        nfq = self.mechanism == "nfqueue"
        return {"mechanism": self.mechanism, "ns": self.ns, "delay_ms": self.delay_ms,
                "jitter_ms": self.jitter_ms, "rtt_added_ms": self.rtt_added_ms,
                "queue_num": self.queue_num if nfq else None,
                "comment": self.comment if nfq else None,
                "holder_pid": self.holder.pid if self.holder is not None else None,
                "rules": rules, "stale_removed": self.stale_removed,
                "injected_ms": self._injected_ms}

    def inject(self) -> dict[str, Any]:
        """Start delaying; returns what was installed and when (wall-clock ms)."""
        if self._injected_ms is not None:
            raise EnvironmentFailure(f"packet delay on {self.ns} was already injected")
        _require_ns(self.ns)
        if self.mechanism is None:
            self.mechanism = detect_mechanism(self.ns)
        try:
            if self.mechanism == "netem":
                self._inject_netem()
            else:
                self._inject_nfqueue()
        except BaseException:
            with contextlib.suppress(PgvalError):
                self._undo()
            self._rules = []
            raise
        self._injected_ms = now_ms()
        return self._describe()

    def remove(self) -> dict[str, Any]:
        """Stop delaying (idempotent); returns what was removed and when (wall-clock ms)."""
        if self._removed is not None:
            return self._removed
        described = self._describe()
        removed = self._undo()
        failed_open = {"failed_open": self._failed_open} if self._failed_open else {}
        self._removed = {**described, "removed_ms": now_ms(), **removed, **failed_open}
        return self._removed

    # -- netem ---------------------------------------------------------------------------
    def _netem_args(self) -> list[str]:
        args = ["netem", "delay", f"{self.delay_ms}ms"]
        if self.jitter_ms:
            args.append(f"{self.jitter_ms}ms")
        # netem's default limit (1000 packets) drops traffic at D=500 ms and a few k pkt/s.
        return [*args, "limit", "100000"]

    def _inject_netem(self) -> None:
        for where, dev in ((self.ns, _NS_IF), (HOST, _host_peer(self.ns))):
            _checked(_in(where, "tc", "qdisc", "add", "dev", dev, "root", "handle",
                         NETEM_HANDLE, *self._netem_args()))
            self._rules.append((where, [dev]))

    # -- nfqueue -------------------------------------------------------------------------
    def _receivers(self) -> tuple[str, str, list[str]]:
        """The worker's IPv4, its bridge, and the run's other worker namespaces."""
        ip = _ns_ipv4(self.ns)
        bridge = str(_link(HOST, _host_peer(self.ns)).get("master") or "")
        if not bridge:
            raise EnvironmentFailure(f"{self.ns}'s veth is on no bridge; cannot delay its egress")
        run = _parse_ns(self.ns)
        peers = []
        for name in netns.list_namespaces():
            other = _parse_ns(name)
            if run and other and name != self.ns and other[0] == run[0]:
                peers.append(name)
        return ip, bridge, peers

    def _rule_plan(self, ip: str, bridge: str, peers: list[str]) -> list[tuple[str, list[str]]]:
        """(where, PREROUTING rule) for each receiving side of the worker's traffic."""
        tail = ["-m", "comment", "--comment", self.comment, "-j", "NFQUEUE", "--queue-num",
                str(self.queue_num), "--queue-bypass"]
        plan = [(self.ns, ["PREROUTING", "-i", _NS_IF, *tail]),
                # LOCAL: with br_netfilter (bridge-nf-call-iptables=1, as here) bridged
                # worker-to-worker packets also pass the root's PREROUTING; without this
                # they would be held twice (here and in the receiving namespace).
                (HOST, ["PREROUTING", "-i", bridge, "-s", f"{ip}/32", "-m", "addrtype",
                        "--dst-type", "LOCAL", *tail])]
        plan += [(p, ["PREROUTING", "-i", _NS_IF, "-s", f"{ip}/32", *tail]) for p in peers]
        return plan

    def _clear_stale(self, places: list[str]) -> None:
        """Drop pgval rules for this ns left by a delay whose holder is gone; refuse a live one.

        Why: with ``--queue-bypass`` a rule without a listener accepts packets, and an
        accepted packet skips the rest of its chain, so a stale rule would silently
        disable the new delay.
        """
        for where in places:
            bound = _bound_queues(where)
            for table in TABLES:
                for args, comment in _pgval_rules(where, table):
                    target = _comment_target(comment)
                    if target != self.ns and not (target is None and where == self.ns):
                        continue  # another worker's delay (or, outside ns, not ours to judge)
                    m = re.search(r"--queue-num (\d+)", " ".join(args))
                    if m and int(m.group(1)) in bound and target == self.ns:
                        raise EnvironmentFailure(f"{self.ns} is already delayed by pgval "
                                                f"(rule {comment}); remove that delay first")
                    if _run(_iptables(where, *args)).returncode == 0:
                        self.stale_removed.append(f"{where}: {shlex.join(args)}")

    def _pick_queue(self, places: list[str], avoid: set[int]) -> int:
        taken = set(avoid)
        for where in places:
            taken |= _bound_queues(where) | _queues_in_rules(where)
        q = QUEUE_BASE
        while q in taken:
            q += 1
        return q

    def _inject_nfqueue(self) -> None:
        ip, bridge, peers = self._receivers()
        places = [self.ns, HOST, *peers]
        self._clear_stale(places)
        auto = self.queue_num is None
        tried: set[int] = set()
        for attempt in range(3):
            if auto:
                self.queue_num = self._pick_queue(places, tried)
            assert self.queue_num is not None
            tried.add(self.queue_num)
            try:
                self._start_holder(places)
                break
            except _BindFailed as exc:
                # Another run's holder took the number between our check and its bind
                # (the root namespace's queue numbers are shared by all runs).
                if not auto or attempt == 2:
                    raise EnvironmentFailure(str(exc)) from None
        # Inserted first in mangle/PREROUTING: an accepted packet skips the rest of this
        # chain only; filter rules (other faults' DROPs) still see it afterwards.
        for where, spec in self._rule_plan(ip, bridge, peers):
            _checked(_iptables(where, "-t", "mangle", "-I", *spec[:1], "1", *spec[1:]))
            self._rules.append((where, spec))

    def _verdict_args(self) -> list[str]:
        """What the holder does with each packet: hold it ``delay_ms`` (+/- jitter)."""
        return ["--delay-ms", str(self.delay_ms), "--jitter-ms", str(self.jitter_ms)]

    def _start_holder(self, places: list[str]) -> None:
        """Start the holder bound to ``self.queue_num`` in ``places``; wait until it is."""
        name = f"{self.holder_label}-{self.ns}"
        ready = self.run_dir / "pids" / f"{name}.ready"
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        owner = Owner.me()
        argv = [sys.executable, "-m", HOLDER_MODULE, "--queue", str(self.queue_num),
                *self._verdict_args(), "--target", self.ns, "--ready-file", str(ready),
                "--comment", self.comment,
                "--owner-pid", str(owner.pid), "--owner-start", str(owner.start),
                "--max-seconds", f"{self.max_seconds:g}"]
        if self.max_held is not None:
            argv += ["--max-held", str(self.max_held)]
        for where in places:
            argv += ["--netns", "self" if where == HOST else where]
        self.holder = spawn(name, argv, self.run_dir / "logs" / f"{name}.log",
                            pid_dir=self.run_dir / "pids")
        ticks = start_ticks(self.holder.pid)
        if ticks is not None:  # identity for cleanup: pid + start ticks, never argv text
            registry.register_holder(self.holder.pid, ticks, owner, self.ns, self.run_dir)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while not ready.exists():
            rc = self.holder.popen.poll()
            if rc is not None:
                msg = (f"the packet holder for {self.ns} exited at start: "
                       f"{self.holder.log_tail(3)} (log {self.holder.log_path})")
                self.holder.stop(grace_s=0.5)
                registry.unregister_holder(self.holder.pid)
                raise _BindFailed(msg) if rc == HOLDER_RC_BIND else EnvironmentFailure(msg)
            if time.monotonic() > deadline:
                raise EnvironmentFailure(f"the packet holder for {self.ns} did not bind NFQUEUE "
                                        f"{self.queue_num} within {_READY_TIMEOUT_S:.0f} s")
            time.sleep(0.02)
        ready.unlink(missing_ok=True)

    # -- removal -------------------------------------------------------------------------
    def _remove_nfqueue_rules(self) -> dict[str, Any]:
        """Delete this delay's iptables rules where their namespace still exists, retrying
        (xtables lock time-outs are transient): what was removed, and what is left."""
        out: dict[str, Any] = {"rules_removed": [], "leftovers": []}
        existing = set(netns.list_namespaces()) | {HOST}
        places = list(dict.fromkeys([w for w, _ in self._rules]))
        for attempt in range(_REMOVE_ATTEMPTS):
            for where, spec in self._rules:
                if where in existing and _run(_iptables(where, "-t", "mangle", "-D",
                                                        *spec)).returncode == 0:
                    out["rules_removed"].append(f"{where}: {shlex.join(['-A', *spec])}")
            existing = set(netns.list_namespaces()) | {HOST}
            out["leftovers"] = [f"{where}: {' '.join(args)}" for where in places
                                if where in existing
                                for args, c in _pgval_rules(where, "mangle")
                                if c == self.comment]
            if not out["leftovers"]:
                break
            out["attempts"] = attempt + 2
            time.sleep(0.5)
        return out

    def _undo(self) -> dict[str, Any]:
        """Remove whatever of this delay exists; tolerant of a vanished namespace."""
        out: dict[str, Any] = {"rules_removed": [], "leftovers": []}
        existing = set(netns.list_namespaces()) | {HOST}
        if self.mechanism == "netem":
            for where, (dev,) in self._rules:
                if where in existing and _run(_in(where, "tc", "qdisc", "del", "dev", dev,
                                                  "root", "handle", NETEM_HANDLE)).returncode == 0:
                    out["rules_removed"].append(f"{where}: {dev} {NETEM_HANDLE}")
        else:
            # Rules first: from here on no new packet is queued, so stopping the holder
            # (which accepts everything it still holds) ends the delay cleanly.
            out.update(self._remove_nfqueue_rules())
        if self.holder is not None:
            self.holder.stop(grace_s=3.0)
            registry.unregister_holder(self.holder.pid)
            out["holder"] = _holder_summary(self.holder.log_path)
        if out["leftovers"]:
            raise EnvironmentFailure(f"could not remove the delay rules for {self.ns}: "
                                    f"{'; '.join(out['leftovers'])}")
        self._rules = []
        return out


def holder_processes() -> list[tuple[int, str]]:
    """(pid, target namespace) of every running packet holder pgval registered.

    Identity comes from pgval's registry (``/run/pgval/holders``: pid + start ticks, see
    :func:`registry.register_holder`), never from a command line: any local user can run
    a process whose argv mentions ``pgval.faults.holder``.
    """
    return [(pid, str(entry.get("target") or ""))
            for pid, entry in registry.registered_holders().items()]


def _holder_argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _arg(words: list[str], flag: str) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == flag]


def holder_owner(pid: int) -> Owner | None:
    """The pgval a registered, running holder belongs to (from the registry), else None."""
    entry = registry.registered_holders().get(pid)
    return Owner.from_dict(entry.get("owner")) if entry else None


def stop_holder(pid: int) -> list[str]:
    """Stop one holder (it releases what it holds) and delete the rules feeding it."""
    from pgval.faults.holder import remove_rules

    words = _holder_argv(pid)
    comment = (_arg(words, "--comment") or [""])[0]
    places = _arg(words, "--netns") or ["self"]
    target = (_arg(words, "--target") or [""])[0]
    _stop_pid(pid)
    registry.unregister_holder(pid)
    return [f"holder pid {pid} ({target or 'no target'})",
            *(f"iptables {r}" for r in remove_rules(comment, places))]


def _stop_pid(pid: int) -> None:
    """SIGTERM (the holder then releases what it holds), SIGKILL after 3 s. SIGCONT too:
    a stopped holder acts on the SIGTERM only once it runs again."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    for sig in (signal.SIGTERM, signal.SIGCONT):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    if pgid == pid:
        kill_group(pgid, grace_s=3.0)
        return
    for _ in range(150):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def cleanup_delays(prefix: str = netns.NS_PREFIX) -> list[str]:
    """Undo every pgval packet delay on namespaces named ``prefix*``; return what was removed.

    Works without any state of the pgval that injected (it may have been SIGKILLed):
    rules are found by their ``pgval-delay-<id>-<target>`` comment (in the root namespace
    and every ``pgval-`` namespace, since a delay puts rules on the receiving sides),
    qdiscs by handle ``504d:``, holders by their registered target namespace. With
    the default prefix it also removes delays of other pgval runs in progress; pass
    ``pgval-<suffix>-`` to stay within one run. Also works after the namespaces are gone
    (the root namespace's rules and the holder are what would remain).
    """
    if not prefix.startswith(netns.NS_PREFIX):
        raise EnvironmentFailure(f"cleanup prefix {prefix!r} must start with {netns.NS_PREFIX!r}")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    removed: list[str] = []
    everything = prefix == netns.NS_PREFIX
    places = [HOST] + [n for n in netns.list_namespaces() if n.startswith(netns.NS_PREFIX)]
    if shutil.which(IPTABLES) is not None:
        for where in places:
            in_scope = where != HOST and where.startswith(prefix)
            for table in TABLES:
                for args, comment in _pgval_rules(where, table):
                    target = _comment_target(comment)
                    ours = (in_scope or everything if target is None
                            else target.startswith(prefix))
                    if ours and _run(_iptables(where, *args)).returncode == 0:
                        removed.append(f"{where}: iptables {shlex.join(args)}")
    for pid, target in holder_processes():
        if target.startswith(prefix) or (everything and not target):
            _stop_pid(pid)
            registry.unregister_holder(pid)
            removed.append(f"holder pid {pid} ({target or 'no target'})")
    if shutil.which("tc") is not None:
        for ns in places[1:]:
            if ns.startswith(prefix):
                removed += [f"{ns}: {r}" for r in _del_netem(_in(ns, "tc"), lambda _d: True)]
        # Host-side veths of matching namespaces (netem shapes traffic towards the worker).
        rest = prefix[len(netns.NS_PREFIX):].split("-", 1)[0]
        veth_prefix = f"{netns.LINK_PREFIX}{rest}"
        removed += [f"{HOST}: {r}"
                    for r in _del_netem(["tc"], lambda d: d.startswith(veth_prefix))]
    return removed


def _del_netem(tc: list[str], dev_ok: Callable[[str], bool]) -> list[str]:
    """Delete root qdiscs with pgval's handle on the devices ``dev_ok`` accepts."""
    res = _run([*tc, "-j", "qdisc", "show"])
    try:
        qdiscs = json.loads(res.stdout) if res.returncode == 0 and res.stdout.strip() else []
    except ValueError:
        return []
    out = []
    for q in qdiscs:
        dev, handle = str(q.get("dev", "")), str(q.get("handle", ""))
        if handle == NETEM_HANDLE and q.get("root") and dev_ok(dev):
            del_res = _run([*tc, "qdisc", "del", "dev", dev, "root", "handle", NETEM_HANDLE])
            if del_res.returncode == 0:
                out.append(f"tc qdisc {dev} {NETEM_HANDLE} {q.get('kind', '')}")
    return out
