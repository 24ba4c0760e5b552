"""Per-worker network namespaces bridged to the root namespace.

Why: faults (packet delay via NFQUEUE, crashes) must hit exactly ONE Spark worker
and its executors. Giving each worker its own network namespace makes it
individually addressable: its own IP, its own iptables, its own process list.

Layout for a run with suffix ``s`` (``[a-z0-9]{1,8}``)::

    root ns:  bridge pgvbr<s>, 10.213.X.1/24        (X picked per run, unused on host)
              veth pgv<s>h<i>  -> enslaved to the bridge
    ns pgval-<s>-w<i>:  eth0 (veth peer) 10.213.X.(10+i)/24, lo up,
                        default route via 10.213.X.1

Reachability: the bridge address lives in the root namespace, so root<->ns and
ns<->ns traffic needs no IP forwarding; the default route lets a namespace reach
every address of the root namespace (bridge IP, eth0's, ...). Forwarding is
switched off on the bridge (``net.ipv4.conf.<bridge>.forwarding=0``), so nothing
from a namespace is routed off this machine even if the host forwards.

Loopback gotcha: ``127.0.0.1`` inside a namespace is the namespace's OWN
loopback. A service in the root namespace that executors must reach (Kafka
brokers, the Spark master, the driver) has to listen on :attr:`NetLayout.bridge_ip`
(e.g. ``KafkaCluster(host=layout.bridge_ip)``), not on 127.0.0.1.

DNS gotcha: the host's resolver is unreachable from a namespace, so a reverse
lookup (Java's ``getCanonicalHostName``) hangs ~10 s. Each namespace gets
``/etc/netns/<ns>/resolv.conf`` pointing at its own loopback (refused at once),
which ``ip netns exec`` bind-mounts over ``/etc/resolv.conf``; ``/etc/hosts`` stays the
host's. Spark processes should still advertise IPs (``SPARK_LOCAL_HOSTNAME``), never names.

Everything carries the suffix so :func:`cleanup_all` can remove what a killed
run leaked. Teardown is idempotent.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.core.files import write_public
from pgval.host import registry

NS_PREFIX = "pgval-"
LINK_PREFIX = "pgv"
BRIDGE_PREFIX = "pgvbr"
NET_BASE = "10.213"
NETNS_ETC = Path("/etc/netns")
_SUFFIX_RE = re.compile(r"^(?!br)[a-z0-9]{1,8}$")
_IP_TIMEOUT_S = 15.0


def new_suffix() -> str:
    """A short random run suffix that fits Linux's 15-character interface names."""
    return secrets.token_hex(3)


def ns_name(suffix: str, index: int) -> str:
    return f"{NS_PREFIX}{suffix}-w{index}"


def bridge_name(suffix: str) -> str:
    return f"{BRIDGE_PREFIX}{suffix}"


def host_veth_name(suffix: str, index: int) -> str:
    return f"{LINK_PREFIX}{suffix}h{index}"


def exec_prefix(ns: str) -> list[str]:
    """argv prefix that runs a command inside ``ns`` (``ip netns exec`` execs, keeping the pid)."""
    return ["ip", "netns", "exec", ns]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS``; on failure raise a one-sentence error carrying ip's message."""
    try:
        res = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
        )
    except FileNotFoundError as exc:
        raise EnvironmentFailure("the `ip` command (iproute2) is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentFailure(f"`ip {' '.join(args)}` hung for {_IP_TIMEOUT_S:.0f} s") from exc
    if check and res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().replace("\n", " ")
        raise EnvironmentFailure(f"`ip {' '.join(args)}` failed: {msg}")
    return res


def _ip_json(*args: str) -> list[dict[str, object]]:
    out = _ip("-j", *args).stdout.strip()
    return list(json.loads(out)) if out else []


def list_namespaces() -> list[str]:
    """Names of all named network namespaces (``ip netns list``)."""
    if shutil.which("ip") is None:
        return []
    return [str(e["name"]) for e in _ip_json("netns", "list") if "name" in e]


def list_links() -> list[str]:
    """Interface names in the root namespace."""
    if shutil.which("ip") is None:
        return []
    return [str(e["ifname"]) for e in _ip_json("link", "show") if "ifname" in e]


def netns_pids(ns: str) -> list[int]:
    """Pids of processes whose network namespace is ``ns`` (empty if it does not exist)."""
    res = _ip("netns", "pids", ns, check=False)
    if res.returncode != 0:
        return []
    return [int(tok) for tok in res.stdout.split() if tok.isdigit()]


def namespaces_supported() -> tuple[bool, str]:
    """Whether per-worker namespaces can be used here, and why not if they cannot."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    if shutil.which("ip") is None:
        return False, "the `ip` command (iproute2) is not installed"
    probe = f"{NS_PREFIX}probe{os.getpid()}"
    veth = f"{LINK_PREFIX}probe{os.getpid() % 100000}"
    try:
        _ip("netns", "add", probe)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", probe)
    except PgvalError as exc:
        return False, str(exc)
    finally:
        _ip("link", "del", veth, check=False)
        _ip("netns", "del", probe, check=False)
    return True, "ok"


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network that appears in an address or route on the host."""
    nets: list[ipaddress.IPv4Network] = []
    for link in _ip_json("-4", "addr", "show"):
        for a in link.get("addr_info", []) or []:  # type: ignore[union-attr]
            with contextlib.suppress(ValueError, KeyError, TypeError):
                nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for route in _ip_json("-4", "route", "show", "table", "all"):
        dst = str(route.get("dst", ""))
        if dst in ("", "default") or route.get("type") in ("local", "broadcast"):
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    return nets


def pick_subnet(suffix: str) -> int:
    """Third octet X for ``10.213.X.0/24``: derived from the suffix, skipping networks in use."""
    start = int(hashlib.sha256(suffix.encode()).hexdigest(), 16) % 254 + 1
    used = _used_networks()
    for k in range(254):
        x = (start - 1 + k) % 254 + 1
        cand = ipaddress.IPv4Network(f"{NET_BASE}.{x}.0/24")
        if not any(cand.overlaps(n) for n in used):
            return x
    raise EnvironmentFailure(f"no free /24 left in {NET_BASE}.0.0/16 for a pgval bridge")


def _no_forwarding(dev: str) -> None:
    """Never route packets that arrive from the namespaces off the machine.

    IPv4 forwarding is decided per input device, so this holds even when the host has
    ``net.ipv4.ip_forward=1`` (e.g. set for containers).
    """
    path = Path(f"/proc/sys/net/ipv4/conf/{dev}/forwarding")
    try:
        path.write_text("0\n")
    except OSError as exc:
        raise EnvironmentFailure(f"cannot disable forwarding on {dev}: {exc}") from exc


def _host_lock() -> contextlib.AbstractContextManager[None]:
    """Serialise subnet choice + bridge creation between concurrent pgval runs."""
    return registry.host_lock("netns")


@dataclass(frozen=True)
class WorkerNs:
    """One worker's namespace: what a fault injector needs to address it."""

    index: int
    name: str
    ip: str
    host_veth: str


@dataclass
class NetLayout:
    """A bridge plus per-worker namespaces for one run; create with :meth:`create`."""

    suffix: str = field(default_factory=new_suffix)
    #: Recorded with the owner in /run/pgval/netns, so `pgval cleanup` can tell live runs.
    run_dir: Path | None = None
    octet: int | None = None
    namespaces: dict[int, WorkerNs] = field(default_factory=dict)
    _bridge_up: bool = False

    def __post_init__(self) -> None:
        if not _SUFFIX_RE.match(self.suffix):
            raise EnvironmentFailure(f"netns suffix {self.suffix!r} must match [a-z0-9]{{1,8}}")

    @property
    def bridge(self) -> str:
        return bridge_name(self.suffix)

    @property
    def bridge_ip(self) -> str:
        """Root-namespace address every namespace reaches; bind shared services here."""
        if self.octet is None:
            raise EnvironmentFailure("the pgval bridge has not been created yet")
        return f"{NET_BASE}.{self.octet}.1"

    def worker_ip(self, index: int) -> str:
        if not 0 <= index < 240:
            raise EnvironmentFailure(f"worker index {index} out of range 0..239")
        return f"{NET_BASE}.{self.octet}.{10 + index}"

    def create(self) -> NetLayout:
        """Create the bridge (idempotent for this layout)."""
        if self._bridge_up:
            return self
        with _host_lock():
            if self.bridge in list_links():
                raise EnvironmentFailure(f"bridge {self.bridge} already exists (suffix reused?)")
            registry.register_netns(self.suffix, self.run_dir)  # before anything exists
            self.octet = pick_subnet(self.suffix)
            try:
                _ip("link", "add", self.bridge, "type", "bridge")
                _ip("addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
                _ip("link", "set", self.bridge, "up")
                _no_forwarding(self.bridge)
            except PgvalError:
                _ip("link", "del", self.bridge, check=False)
                raise
        self._bridge_up = True
        return self

    def add_namespace(self, index: int) -> WorkerNs:
        """Create namespace ``pgval-<suffix>-w<index>`` wired to the bridge; return its handle."""
        if not self._bridge_up:
            self.create()
        if index in self.namespaces:
            return self.namespaces[index]
        ns = WorkerNs(index, ns_name(self.suffix, index), self.worker_ip(index),
                      host_veth_name(self.suffix, index))
        try:
            _ip("netns", "add", ns.name)
            _ip("link", "add", ns.host_veth, "type", "veth", "peer", "name", "eth0",
                "netns", ns.name)
            _ip("link", "set", ns.host_veth, "master", self.bridge)
            _ip("link", "set", ns.host_veth, "up")
            _ip("-n", ns.name, "link", "set", "lo", "up")
            _ip("-n", ns.name, "addr", "add", f"{ns.ip}/24", "dev", "eth0")
            _ip("-n", ns.name, "link", "set", "eth0", "up")
            _ip("-n", ns.name, "route", "add", "default", "via", self.bridge_ip)
            self.namespaces[index] = ns
            self._write_etc(ns)
        except (PgvalError, OSError) as exc:
            _delete_namespace(ns.name)
            _ip("link", "del", ns.host_veth, check=False)
            raise EnvironmentFailure(f"cannot create namespace {ns.name}: {exc}") from exc
        return ns

    def _write_etc(self, ns: WorkerNs) -> None:
        """Per-namespace resolv.conf so lookups fail at once instead of timing out."""
        d = NETNS_ETC / ns.name
        d.mkdir(parents=True, exist_ok=True)
        write_public(d / "resolv.conf",  # read by every program in the namespace
                     "# pgval: no DNS inside worker namespaces\n"
                     "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    def remove_namespace(self, index: int) -> None:
        """Kill what still runs in the namespace, then delete it (idempotent)."""
        ns = self.namespaces.pop(index, None)
        name = ns.name if ns else ns_name(self.suffix, index)
        _delete_namespace(name)
        _ip("link", "del", host_veth_name(self.suffix, index), check=False)

    def teardown(self) -> None:
        """Delete every namespace, veth and the bridge of this run; safe to call twice."""
        for index in list(self.namespaces):
            self.remove_namespace(index)
        cleanup_all(prefix=f"{NS_PREFIX}{self.suffix}-")
        if not [n for n in list_namespaces() if n.startswith(f"{NS_PREFIX}{self.suffix}-")] \
                and self.bridge not in list_links():
            registry.unregister_netns(self.suffix)  # kept while anything of it remains
        self._bridge_up = False

    def __enter__(self) -> NetLayout:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.teardown()


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _delete_namespace(name: str) -> None:
    """SIGKILL processes inside ``name`` (they would keep the veth alive), then delete it."""
    for _ in range(50):
        pids = netns_pids(name)
        if not pids:
            break
        _kill_pids(pids)
        time.sleep(0.05)
    _ip("netns", "del", name, check=False)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def cleanup_all(prefix: str = NS_PREFIX) -> list[str]:
    """Remove namespaces, veths and bridges named by ``prefix``; return what was removed.

    ``prefix="pgval-"`` removes every pgval leftover on the host, including those of
    runs still in progress: use a run-specific prefix (``pgval-<suffix>-``) when other
    runs may be active. Processes still inside a removed namespace are SIGKILLed.
    """
    if not prefix.startswith(NS_PREFIX):
        raise EnvironmentFailure(f"cleanup prefix {prefix!r} must start with {NS_PREFIX!r}")
    if shutil.which("ip") is None or os.geteuid() != 0:
        return []
    rest = prefix[len(NS_PREFIX):].split("-", 1)[0]
    removed: list[str] = []
    for name in list_namespaces():
        if name.startswith(prefix):
            _delete_namespace(name)
            removed.append(name)
    # The suffix's own links exactly: a prefix match would also take another run's whose
    # suffix starts the same (``pgvab`` is the start of ``pgvabcdefh0``).
    suffix = re.escape(rest) if rest else "[a-z0-9]+"
    own = re.compile(rf"{BRIDGE_PREFIX}{suffix}|{LINK_PREFIX}{suffix}(h\d+)?")
    links = [n.split("@", 1)[0] for n in list_links()]
    # veths first, then bridges
    for name in sorted(links, key=lambda n: n.startswith(BRIDGE_PREFIX)):
        if own.fullmatch(name) and _ip("link", "del", name, check=False).returncode == 0:
            removed.append(name)
    if NETNS_ETC.is_dir():
        for d in NETNS_ETC.iterdir():
            if d.name.startswith(prefix):
                shutil.rmtree(d, ignore_errors=True)
    return removed
