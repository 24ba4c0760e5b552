"""``pgval cleanup``: remove what dead pgval runs left behind, and nothing of live ones.

Two sweeps, both judged by owner (:class:`~pgval.host.identity.Owner`: pid + start time):

* **run directories** under the runs root (``--runs``, else ``$PGVAL_RUNS``, else
  ``runs``): a ``state.json`` whose owner is dead gets :func:`~pgval.cluster.local.
  force_down`; a live owner's run, and a cluster held by ``pgval cluster up``, are spared
  and named;
* **the host** (as root): namespaces, veths and bridges whose suffix this installation's
  registry (``$PGVAL_RUN_ROOT/netns``, by default ``/run/pgval/netns``) records with a
  dead owner (wherever their run directory is), packet holders whose owner is dead
  (holders pgval registered with their start ticks, never a process picked by its command
  line), and delay rules naming such namespaces. A ``pgval-`` namespace its registry does
  not record is another installation's (another ``PGVAL_RUN_ROOT``), live or not: it is
  named and left alone, as that installation's own cleanup judges it.

``force=True`` removes everything of this installation regardless of owners (a last
resort: it stops runs in progress too), still nothing another registry records.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pgval.cluster.guard import force_down, read_state
from pgval.core.errors import PgvalError
from pgval.host import netns, registry
from pgval.host.identity import Owner, start_ticks

_NS_RE = re.compile(rf"^{re.escape(netns.NS_PREFIX)}([a-z0-9]{{1,8}})-")
_BRIDGE_RE = re.compile(rf"^{netns.BRIDGE_PREFIX}([a-z0-9]{{1,8}})$")
_VETH_RE = re.compile(rf"^{netns.LINK_PREFIX}([a-z0-9]+)h\d+$")
_PROBE_NS_RE = re.compile(rf"^{re.escape(netns.NS_PREFIX)}probe(\d+)$")


@dataclass
class CleanupReport:
    removed: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)


def run_dirs(root: Path) -> list[Path]:
    """Directories under ``root`` that hold a run's state or pid files."""
    if not root.is_dir():
        return []
    found = {p.parent for p in root.glob("**/state.json")}
    found |= {p.parent for p in root.glob("**/pids") if any(p.glob("*.json"))}
    return sorted(found)


def cleanup(runs_root: Path, force: bool = False) -> CleanupReport:
    """Both sweeps (see the module docstring). A runs root other users can write to is
    refused, and a run directory or state file that is not ours alone is left alone: as
    root, cleanup must not act on files a hostile local user planted."""
    report = CleanupReport()
    registry.check_run_root(Path(runs_root))
    for run_dir in run_dirs(Path(runs_root)):
        if not _trusted_run_dir(run_dir):
            report.spared.append(f"{run_dir}: writable by other users or not ours; "
                                 "its files are not trusted")
            continue
        state = read_state(run_dir) or {}
        owner = Owner.from_dict(state.get("owner"))
        if not force and state.get("held"):
            report.spared.append(f"cluster held by `pgval cluster up` in {run_dir} "
                                 f"(stop it with `pgval cluster down --run-dir {run_dir}`)")
            continue
        if not force and owner is not None and owner.alive():
            report.spared.append(f"live run {run_dir} (pgval pid {owner.pid})")
            continue
        report.removed += [f"{run_dir.name}: {r}" for r in force_down(run_dir)]
    report.removed += sweep_host(force)
    report.spared += [f"network {netns.NS_PREFIX}{suffix}-*: not in this installation's "
                      f"registry ({registry.RUN_ROOT / 'netns'}; another PGVAL_RUN_ROOT's?)"
                      for suffix in foreign_suffixes()]
    return report


def _trusted_run_dir(run_dir: Path) -> bool:
    try:
        registry.check_run_root(run_dir)
    except PgvalError:
        return False
    state = run_dir / "state.json"
    return not state.exists() or registry.trusted_file(state)


def _suffix_of(name: str) -> str | None:
    for rx in (_NS_RE, _BRIDGE_RE, _VETH_RE):
        m = rx.match(name)
        if m:
            return m.group(1)
    return None


def _suffixes_on_host() -> set[str]:
    """Suffixes of the pgval namespaces, veths and bridges that exist on this host."""
    names = [*netns.list_namespaces(), *netns.list_links()]
    return {s for n in names if (s := _suffix_of(n.split("@")[0]))}


def foreign_suffixes() -> list[str]:
    """Suffixes of pgval networks on this host that this installation's registry does not
    record: another installation's (another ``PGVAL_RUN_ROOT``), never swept from here."""
    if os.geteuid() != 0:
        return []
    return sorted(_suffixes_on_host() - set(registry.netns_entries()))


def sweep_host(force: bool = False) -> list[str]:
    """Remove host-level pgval resources of this installation's registry whose owner is
    dead (all of them with ``force``)."""
    if os.geteuid() != 0:
        return []
    from pgval.faults.delay import cleanup_delays, holder_owner, holder_processes, stop_holder

    entries = registry.netns_entries()
    removed: list[str] = []
    for pid, _target in holder_processes():  # registered ones only (pid + start ticks)
        owner = holder_owner(pid)
        if force or owner is None or not owner.alive():
            removed += stop_holder(pid)
    names = netns.list_namespaces()
    for name in names:
        m = _PROBE_NS_RE.match(name)
        if m and (force or start_ticks(int(m.group(1))) is None):
            removed += netns.cleanup_all(name)
    # Only what this registry records: a namespace it does not know may be another
    # installation's live run (its registry elsewhere), which this owner check cannot see.
    dead = [s for s, entry in entries.items() if force or not registry.entry_is_live(entry)]
    for suffix in sorted(dead):
        prefix = f"{netns.NS_PREFIX}{suffix}-"
        removed += [f"delay {d}" for d in cleanup_delays(prefix)]
        removed += [f"netns {n}" for n in netns.cleanup_all(prefix)]
        registry.unregister_netns(suffix)
    return removed
