"""A run directory's guard against a kill of pgval: ``state.json``, the reaper beside it.

Every run directory pgval starts processes in is guarded: an embedded cluster's own
(:class:`pgval.cluster.local.LocalCluster`), or a run's on a cluster it does not own
(:class:`RunGuard`). ``state.json`` names the owner (pid + start ticks) before anything of
the run exists; the reaper (:mod:`pgval.cluster.reaper`, its own session) waits for that
owner to die and then runs :func:`force_down`, as ``pgval cleanup`` does for a dead owner.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from pgval.core.files import append_private, write_private_json
from pgval.core.redact import private_dir
from pgval.host import netns, registry
from pgval.host.identity import Owner
from pgval.host.procs import kill_recorded, recorded_group_is_ours

#: The reaper's module (:mod:`pgval.cluster.reaper`), started as ``python -m``; named, not
#: imported: the reaper imports this module.
REAPER_MODULE = "pgval.cluster.reaper"


def start_reaper(run_dir: Path, owner: Owner) -> subprocess.Popen[bytes]:
    """Start the watcher that cleans ``run_dir`` up if ``owner`` dies (own session)."""
    with append_private(run_dir / "logs" / "reaper.log") as out:
        return subprocess.Popen(
            [sys.executable, "-m", REAPER_MODULE, "--run-dir", str(run_dir),
             "--owner-pid", str(owner.pid), "--owner-start", str(owner.start)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)


def stop_reaper(reaper: subprocess.Popen[bytes] | None) -> None:
    """The owner is done: end its reaper quietly (and reap it, no zombie)."""
    if reaper is None:
        return
    with contextlib.suppress(ProcessLookupError):
        reaper.send_signal(signal.SIGTERM)
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait(timeout=5)


def read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / "state.json").read_text())
    except (OSError, ValueError):
        return None


def force_down(run_dir: Path) -> list[str]:
    """Stop whatever a (possibly killed) pgval left in ``run_dir``; remove its namespaces.

    In order: every recorded process group that is still the one started (pid files
    carry start ticks), the run's pending undo records (a user's nemesis remove command,
    pumba's netem; :mod:`pgval.host.undo`), then the delays and namespaces of the run's
    prefix — only if the prefix has the exact form of one and pgval's registry says it
    belongs to this directory (:func:`registry.run_netns_prefix`), so other runs on the
    same host are left alone. ``state.json`` goes last, and only when nothing of the run
    is left, so a failed attempt can be repeated. A directory other users can write to is
    not acted on at all (its files could be planted): a plain error says so.
    """
    from pgval.host import undo

    run_dir = Path(run_dir)
    registry.check_run_root(run_dir, "run directory")  # a plain error: nothing is done
    state_file = run_dir / "state.json"
    trusted = not state_file.exists() or registry.trusted_file(state_file)
    state = (read_state(run_dir) or {}) if trusted else {}
    stopped = kill_recorded(run_dir / "pids")
    stopped += undo.run_pending(run_dir)
    prefix = registry.run_netns_prefix(state.get("netns_prefix"), run_dir)
    if prefix:
        from pgval.faults.delay import cleanup_delays

        stopped += [f"delay {d}" for d in cleanup_delays(prefix)]
        stopped += [f"netns {n}" for n in netns.cleanup_all(prefix)]
        suffix = prefix[len(netns.NS_PREFIX):].rstrip("-")
        if not any(n.startswith(prefix) for n in netns.list_namespaces()):
            registry.unregister_netns(suffix)
    if not [name for name, alive in cluster_processes(run_dir) if alive] \
            and not undo.pending(run_dir):
        state_file.unlink(missing_ok=True)
    return stopped


class RunGuard:
    """``state.json`` and a reaper for a run directory no cluster of its own guards.

    Why: a run on a warm cluster (matrix cells, OIR trials), on a `pgval cluster up`
    cluster (``--cluster``), on an external cluster or on compose starts drivers,
    generators, packet holders, nemesis commands in *its* directory; the cluster's reaper
    (if there is one) watches only the cluster's directory. The owner goes into
    ``state.json`` first, before anything of the run exists; then the reaper starts.
    """

    def __init__(self, run_dir: Path, kind: str) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.kind = kind
        self.owner = Owner.me()
        self.reaper: subprocess.Popen[bytes] | None = None

    def start(self) -> RunGuard:
        private_dir(self.run_dir)
        registry.check_run_dir(self.run_dir)  # as made: the reaper will trust its files
        self._write("starting")
        self.reaper = start_reaper(self.run_dir, self.owner)
        self._write("running")
        return self

    def problem(self) -> str | None:
        """Why the run is no longer covered against a kill (its reaper died), or None."""
        return reaper_problem(self.reaper)

    def stop(self) -> bool:
        """The run's teardown is over: remove ``state.json`` and end the reaper — unless a
        recorded process still runs or an undo is pending; then both stay, and the
        reaper finishes the job once this pgval exits. True if the guard was removed."""
        from pgval.host import undo

        if [n for n, alive in cluster_processes(self.run_dir) if alive] \
                or undo.pending(self.run_dir):
            return False
        (self.run_dir / "state.json").unlink(missing_ok=True)
        stop_reaper(self.reaper)
        self.reaper = None
        return True

    def _write(self, stage: str) -> None:
        state = {"owner": self.owner.as_dict(), "held": False, "stage": stage,
                 "kind": self.kind,
                 "reaper_pid": self.reaper.pid if self.reaper is not None else None}
        write_private_json(self.run_dir / "state.json", state, indent=1)


def reaper_problem(reaper: subprocess.Popen[bytes] | None) -> str | None:
    """A sentence if ``reaper`` (started by this process) is no longer running."""
    if reaper is None or reaper.poll() is None:
        return None
    return (f"the reaper (pid {reaper.pid}) died: a kill of pgval now would leave "
            "processes behind; stopping")


def cluster_processes(run_dir: Path) -> list[tuple[str, bool]]:
    """(name, alive) for every process group recorded in the run's pid files."""
    out = []
    for pid_file in sorted((Path(run_dir) / "pids").glob("*.json")):
        try:
            info = json.loads(pid_file.read_text())
            pgid = int(info["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        # Alive only if the group is still the one recorded (a reused pid is not ours).
        out.append((str(info.get("name", pgid)), recorded_group_is_ours(info)))
    return out
