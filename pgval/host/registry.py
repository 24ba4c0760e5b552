"""Host-wide bookkeeping shared by concurrent pgval runs: one lock and who owns which net.

Why a root-owned directory (``/run/pgval``, mode 0700) and not ``/tmp``: pgval runs as
root, and a fixed ``/tmp`` path can be planted as a symlink (root then creates or
truncates a file anywhere) or flocked by any user to block every run. Files here are
opened with ``O_NOFOLLOW`` and the directory is checked to be root's, not a link.

The registry (``/run/pgval/netns/<suffix>.json``) says which run owns the namespaces,
veths and bridge of a suffix (:class:`~pgval.host.identity.Owner` plus run directory),
so ``pgval cleanup`` can remove exactly what belongs to dead owners and leave live runs
alone. ``/run`` is a tmpfs: a reboot, which also clears namespaces, clears it too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pgval.core.errors import EnvironmentFailure, PgvalError, UserMistake
from pgval.core.files import append_private, write_private_json
from pgval.host.identity import Owner

RUN_ROOT = Path(os.environ.get("PGVAL_RUN_ROOT", "/run/pgval"))
LOCK_TIMEOUT_S = 60.0


def _private_dir(path: Path) -> Path:
    """``path`` as a directory owned by us, mode 0700, not a symlink (created if needed)."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise EnvironmentFailure(f"cannot create {path}: {exc.strerror} (pgval needs root for "
                                "network namespaces and faults)") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise EnvironmentFailure(f"{path} is not a directory owned by this user (a planted link "
                                "or another user's?); remove it and run pgval again")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def run_root() -> Path:
    return _private_dir(RUN_ROOT)


@contextlib.contextmanager
def host_lock(name: str = "netns", timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive lock shared by every pgval on this host, or a plain error after
    ``timeout_s`` (naming the lock, so a stuck holder can be found with ``fuser``)."""
    path = run_root() / f"{name}.lock"
    try:
        lock = append_private(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise EnvironmentFailure(f"{path} is a symlink; remove it and run pgval "
                                     "again") from None
        raise EnvironmentFailure(f"cannot open the lock {path}: {exc.strerror}") from None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EnvironmentFailure(
                        f"another process has held {path} for more than {timeout_s:.0f} s "
                        f"(`fuser {path}` names it)") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    finally:
        lock.close()


def _registry() -> Path:
    return _private_dir(run_root() / "netns")


def register_netns(suffix: str, run_dir: Path | None, owner: Owner | None = None,
                   held: bool = False) -> None:
    """Record that ``owner`` (default: this process) owns the network of ``suffix``.

    ``held``: a cluster kept up by ``pgval cluster up`` after its command exited; it
    belongs to its record, and only ``cluster down`` or ``cleanup --force`` removes it.
    """
    entry = {"suffix": suffix, "owner": (owner or Owner.me()).as_dict(), "held": held,
             "run_dir": str(run_dir) if run_dir else None}
    write_private_json(_registry() / f"{suffix}.json", entry)


def unregister_netns(suffix: str) -> None:
    with contextlib.suppress(OSError, PgvalError):
        (_registry() / f"{suffix}.json").unlink(missing_ok=True)


def netns_entries() -> dict[str, dict[str, Any]]:
    """suffix -> registry entry, for every registered network."""
    out: dict[str, dict[str, Any]] = {}
    try:
        files = sorted(_registry().glob("*.json"))
    except (OSError, PgvalError):
        return out
    for f in files:
        with contextlib.suppress(OSError, ValueError):
            entry = json.loads(f.read_text())
            if isinstance(entry, dict):
                out[f.stem] = entry
    return out


def entry_is_live(entry: dict[str, Any]) -> bool:
    """Held, or owned by a process that still runs."""
    owner = Owner.from_dict(entry.get("owner"))
    return bool(entry.get("held")) or (owner is not None and owner.alive())


def live_suffixes(include_held: bool = True) -> set[str]:
    """Suffixes whose registered owner is still alive (and held clusters' unless told not)."""
    return {s for s, e in netns_entries().items()
            if entry_is_live(e) and (include_held or not e.get("held"))}


# ---- validated names ----------------------------------------------------------------------

#: A run's namespace prefix: ``pgval-`` + the 6 hex digits of :func:`netns.new_suffix` + ``-``.
NETNS_PREFIX_RE = re.compile(r"^pgval-[0-9a-f]{6}-$")


def run_netns_prefix(state_prefix: Any, run_dir: Path) -> str | None:
    """The namespace prefix ``run_dir``'s state names, if pgval's registry agrees; else None.

    Why not the state file's value alone: a ``state.json`` is a file in a directory; a
    prefix of ``pgval-`` there would make cleanup remove every run's namespaces. The value
    must have the exact form of a run's prefix *and* the registry (root's, 0700) must say
    that suffix belongs to this very run directory.
    """
    if not isinstance(state_prefix, str) or not NETNS_PREFIX_RE.match(state_prefix):
        return None
    suffix = state_prefix[len("pgval-"):-1]
    entry = netns_entries().get(suffix)
    if entry is None or not entry.get("run_dir"):
        return None
    try:
        same = Path(str(entry["run_dir"])).resolve() == Path(run_dir).resolve()
    except OSError:
        return None
    return state_prefix if same else None


# ---- packet holders -----------------------------------------------------------------------

def _holders_dir() -> Path:
    return _private_dir(run_root() / "holders")


def register_holder(pid: int, start: int, owner: Owner, target: str,
                    run_dir: Path | None) -> None:
    """Record a packet holder pgval started: pid *and* start ticks, its owner, its target.

    Why: cleanup stops holders whose owner is dead. Telling a holder by its command line
    would make any process with ``pgval.faults.holder`` in its argv one (a user's
    ``sleep 100 pgval.faults.holder`` included); the registry is written by pgval only.
    """
    entry = {"pid": pid, "start": start, "boot": owner.boot, "owner": owner.as_dict(),
             "target": target, "run_dir": str(run_dir) if run_dir else None}
    write_private_json(_holders_dir() / f"{pid}.json", entry)


def unregister_holder(pid: int) -> None:
    with contextlib.suppress(OSError, PgvalError):
        (_holders_dir() / f"{pid}.json").unlink(missing_ok=True)


def registered_holders() -> dict[int, dict[str, Any]]:
    """pid -> entry of every registered holder that still runs (pid and start ticks
    match); entries of holders gone are removed on the way."""
    from pgval.host.identity import boot_id, start_ticks

    out: dict[int, dict[str, Any]] = {}
    try:
        files = sorted(_holders_dir().glob("*.json"))
    except (OSError, PgvalError):
        return out
    for f in files:
        try:
            entry = json.loads(f.read_text())
            pid, start = int(entry["pid"]), int(entry["start"])
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                f.unlink()
            continue
        if entry.get("boot") == boot_id() and start_ticks(pid) == start:
            out[pid] = entry
        else:
            with contextlib.suppress(OSError):
                f.unlink()
    return out


# ---- directories whose files pgval trusts -------------------------------------------------

def _shared_by_others(st: os.stat_result) -> bool:
    """Writable by group or others, or owned by a user other than us and root."""
    return bool(st.st_mode & 0o022) or st.st_uid not in (os.geteuid(), 0)


def check_run_root(root: Path, what: str = "runs directory") -> None:
    """Refuse (one sentence) a directory whose files cleanup would act on as root when
    another local user could write there (plant ``state.json`` or pid files)."""
    try:
        st = os.stat(root)
    except OSError:
        return  # not there yet: pgval creates it, with its own mode
    if stat.S_ISDIR(st.st_mode) and _shared_by_others(st):  # the --run-dir/--runs given
        raise UserMistake(
            f"the {what} {root} is writable by other users or owned by another user "
            f"(mode {stat.S_IMODE(st.st_mode):o}); pgval acts on its files as root, so "
            f"`chmod go-w {root}` (or choose another) first")


def check_run_dir(run_dir: Path) -> None:
    """A run directory and its parent must not be writable by others (a sticky,
    root-owned parent such as /tmp is fine: nobody else can replace our entries)."""
    run_dir = Path(run_dir)
    check_run_root(run_dir, "run directory")
    parent = run_dir.resolve().parent
    try:
        st = os.stat(parent)
    except OSError:
        return
    if st.st_mode & stat.S_ISVTX and st.st_uid == 0:
        return
    check_run_root(parent, "directory of the run directory")


def trusted_file(path: Path) -> bool:
    """A file cleanup may act on: ours (this user's), not writable by others, not a link."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and not _shared_by_others(st)
