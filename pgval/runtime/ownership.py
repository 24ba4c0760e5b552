"""Host-wide bookkeeping shared by concurrent pgval runs: one lock and who owns which net.

Why a root-owned directory (``/run/pgval``, mode 0700) and not ``/tmp``: pgval runs as
root, and a fixed ``/tmp`` path can be planted as a symlink (root then creates or
truncates a file anywhere) or flocked by any user to block every run. Files here are
opened with ``O_NOFOLLOW`` and the directory is checked to be root's, not a link.

The registry (``/run/pgval/netns/<suffix>.json``) says which run owns the namespaces,
veths and bridge of a suffix (:class:`~pgval.runtime.owner.Owner` plus run directory),
so ``pgval cleanup`` can remove exactly what belongs to dead owners and leave live runs
alone. ``/run`` is a tmpfs: a reboot, which also clears namespaces, clears it too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pgval.runtime.owner import Owner
from pgval.runtime.procs import RuntimeErrorPlain

RUN_ROOT = Path(os.environ.get("PGVAL_RUN_ROOT", "/run/pgval"))
LOCK_TIMEOUT_S = 60.0


def _private_dir(path: Path) -> Path:
    """``path`` as a directory owned by us, mode 0700, not a symlink (created if needed)."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise RuntimeErrorPlain(f"cannot create {path}: {exc.strerror} (pgval needs root for "
                                "network namespaces and faults)") from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise RuntimeErrorPlain(f"{path} is not a directory owned by this user (a planted link "
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
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RuntimeErrorPlain(f"{path} is a symlink; remove it and run pgval again") from None
        raise RuntimeErrorPlain(f"cannot open the lock {path}: {exc.strerror}") from None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeErrorPlain(
                        f"another process has held {path} for more than {timeout_s:.0f} s "
                        f"(`fuser {path}` names it)") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


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
    path = _registry() / f"{suffix}.json"
    tmp = path.with_name(f".{suffix}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(entry, fh)
    tmp.replace(path)


def unregister_netns(suffix: str) -> None:
    with contextlib.suppress(OSError, RuntimeErrorPlain):
        (_registry() / f"{suffix}.json").unlink(missing_ok=True)


def netns_entries() -> dict[str, dict[str, Any]]:
    """suffix -> registry entry, for every registered network."""
    out: dict[str, dict[str, Any]] = {}
    try:
        files = sorted(_registry().glob("*.json"))
    except (OSError, RuntimeErrorPlain):
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
