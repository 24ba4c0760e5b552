"""What pgval-made things exist on this host: for tests, the soak and `pgval cleanup`'s users.

Looks at what really exists — processes, named network namespaces, pgval links,
iptables rules carrying pgval's comment in every namespace, pgval qdiscs (handle
``504d:``), ``/run/pgval`` registry entries — never at pgval's own bookkeeping (pid
files and ``state.json`` are deleted by a clean stop, so a check built on them could
never fail). :class:`HostSnapshot` diffs two moments.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pgval.core.errors import PgvalError

_OURS = re.compile(r"java|pgval|multiprocessing|netfilterqueue|kafka|spark", re.I)


def _processes() -> dict[int, str]:
    """pid -> command line of every live (non-zombie) process that looks like pgval's."""
    out: dict[int, str] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        # multiprocessing's resource tracker lives as long as the process that made it.
        if (cmd and state not in ("Z", "X") and _OURS.search(cmd) and "pytest" not in cmd
                and "resource_tracker" not in cmd):
            out[int(entry)] = cmd
    return out


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _namespaces() -> set[str]:
    return {line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines()
            if line.startswith("pgval-")}


def _links() -> set[str]:
    return {m.group(1) for m in re.finditer(r"^\d+: (pgv[^:@]+)", _run(["ip", "-o", "link"]),
                                            re.M)}


def _rules(namespaces: set[str]) -> set[str]:
    """Every iptables rule with a pgval comment, in the root and the given namespaces."""
    found = set()
    for ns in [None, *sorted(namespaces)]:
        prefix = [] if ns is None else ["ip", "netns", "exec", ns]
        for table in ("mangle", "filter"):
            listing = _run([*prefix, "iptables-legacy", "-w", "10", "-t", table, "-S"])
            found |= {f"{ns or 'host'}/{table}: {line}" for line in listing.splitlines()
                      if "pgval-" in line}
    return found


def _qdiscs(namespaces: set[str]) -> set[str]:
    """Root qdiscs with pgval's netem handle, in the root and the given namespaces."""
    found = set()
    for ns in [None, *sorted(namespaces)]:
        prefix = [] if ns is None else ["ip", "netns", "exec", ns]
        found |= {f"{ns or 'host'}: {line}" for line in
                  _run([*prefix, "tc", "qdisc", "show"]).splitlines() if " 504d: " in line}
    return found


def _registry() -> set[str]:
    from pgval.host.registry import RUN_ROOT

    d = RUN_ROOT / "netns"
    return {p.name for p in d.glob("*.json")} if d.is_dir() else set()


@dataclass
class HostSnapshot:
    """What pgval-like things exist on the host now; :meth:`new_since` diffs two."""

    processes: dict[int, str]
    namespaces: set[str]
    links: set[str]
    rules: set[str]
    registry: set[str]
    qdiscs: set[str]

    @classmethod
    def take(cls) -> HostSnapshot:
        ns = _namespaces() if os.geteuid() == 0 else set()
        root = os.geteuid() == 0
        return cls(_processes(), ns, _links() if root else set(),
                   _rules(ns) if root else set(), _registry() if root else set(),
                   _qdiscs(ns) if root else set())

    def new_since(self, before: HostSnapshot, spared: Sequence[str] = (),
                  others: Others | None = None) -> dict[str, list[str]]:
        """What is here and was not in ``before``; processes working under a ``spared``
        directory (a cluster several tests share, which may restart a worker) aside, and
        everything of ``others`` (programs that share the host, such as another test worker)."""
        # The namespaces, links and registry entry of a shared cluster started since
        # (one with other daemon settings) are its, like its processes; what appears under
        # a shared cluster that was already there is not spared.
        shared = {s for s in suffixes_under(spared) if f"{s}.json" not in before.registry
                  } if spared else set()
        foreign = others.suffixes() if others is not None else set()

        def new(now: set[str], then: set[str], also_shared: bool = True) -> list[str]:
            theirs = (shared | foreign) if also_shared else foreign
            return sorted(n for n in now - then if not any(_names(n, s) for s in theirs))

        def ours(pid: int) -> bool:
            # One gone since the snapshot can no longer be told apart, and is not left.
            return (os.path.exists(f"/proc/{pid}") and not _works_under(pid, spared)
                    and (others is None or not others.own(pid)))

        out = {
            "processes": [f"{p}: {c[:200]}" for p, c in self.processes.items()
                          if p not in before.processes and ours(p)],
            "namespaces": new(self.namespaces, before.namespaces),
            "links": new(self.links, before.links),
            "rules": new(self.rules, before.rules, also_shared=False),
            "registry": new(self.registry, before.registry),
            "qdiscs": new(self.qdiscs, before.qdiscs, also_shared=False),
        }
        return {k: v for k, v in out.items() if v}


@dataclass(frozen=True)
class Others:
    """Programs that share this host with the one checking it (another pytest worker):
    processes working under their ``dirs``, whose environment holds one of their ``marks``
    (``NAME=value``, inherited by everything they start) or that are one of their ``pids``
    are theirs; so are the networks pgval's registry gives to a folder of theirs or to an
    owner process of theirs."""

    dirs: tuple[str, ...]
    marks: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()

    def own(self, pid: int) -> bool:
        """Whether process ``pid`` is theirs."""
        if pid in self.pids or _works_under(pid, self.dirs):
            return True
        if not self.marks:
            return False
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False
        return any(m.encode() in env for m in self.marks)

    def suffixes(self) -> set[str]:
        """The namespace suffixes pgval's registry gives to their folders or processes."""
        from pgval.host.identity import Owner
        from pgval.host.registry import netns_entries

        found = suffixes_under(self.dirs)
        with contextlib.suppress(OSError, PgvalError):
            for suffix, entry in netns_entries().items():
                # The owner itself, not a process that reuses its pid after it died.
                owner = Owner.from_dict(entry.get("owner"))
                if owner is not None and owner.alive() and self.own(owner.pid):
                    found.add(suffix)
        return found


def _names(text: str, suffix: str) -> bool:
    """Whether ``text`` (a namespace, link, rule or qdisc) names ``suffix`` as a whole, not
    as a part of a longer hex string."""
    return re.search(rf"(?<![0-9a-f]){re.escape(suffix)}(?![0-9a-f])", text) is not None


def suffixes_under(dirs: Sequence[str]) -> set[str]:
    """The namespace suffixes pgval's registry gives to runs or clusters under ``dirs``."""
    from pgval.host.registry import netns_entries

    found = set()
    with contextlib.suppress(OSError, PgvalError):
        for suffix, entry in netns_entries().items():
            where = str(entry.get("run_dir") or "")
            if where and any(where == d or where.startswith(d.rstrip("/") + "/")
                             for d in dirs):
                found.add(suffix)
    return found


def _works_under(pid: int, dirs: Sequence[str]) -> bool:
    """Whether process ``pid``'s working directory is under one of ``dirs``."""
    if not dirs:
        return False
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return any(cwd == d or cwd.startswith(d.rstrip("/") + "/") for d in dirs)


def leftovers(before: HostSnapshot, wait_s: float = 15.0, spared: Sequence[str] = (),
              others: Others | None = None) -> dict[str, list[str]]:
    """What appeared since ``before`` and is still there after up to ``wait_s`` seconds
    (processes working under a ``spared`` directory aside, and everything of ``others``)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = HostSnapshot.take().new_since(before, spared, others)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def processes_mentioning(text: str) -> list[str]:
    """Live processes whose command line or working directory mentions ``text``."""
    out = []
    for pid, cmd in _processes().items():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if text in cmd or cwd.startswith(text):
            out.append(f"{pid}: {cmd[:200]}")
    return out
