"""Undo records: what a fault outside pgval's own processes needs to be taken back.

Why: the reaper can stop every process a run recorded (pid files), but some faults act
elsewhere — a user's nemesis command put a delay on *their* cluster, pumba left a netem
qdisc in a container, a driver runs inside the compose runner. Before such a fault acts,
its undo is written to ``<run>/undo/<name>.json`` (mode 0600: a nemesis argv may hold a
token, so this is not ``state.json``; the argv is kept as given, it must stay runnable);
a successful removal deletes it. Whatever is still there when pgval died is run by
:func:`run_pending` (from :func:`pgval.cluster.guard.force_down`: the reaper and
``pgval cleanup``).

A record is ``{"argv": [...], "what": ...}``: a command run without a shell, 120 s at most,
done when it exits 0 (pumba's leftover qdisc is cleared by ``python -m
pgval.deploy.compose.pumba --clear-netem``: this module imports no fault).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from pgval.core.files import write_private_json

TIMEOUT_S = 120.0
_DIR = "undo"


def record(run_dir: Path, name: str, action: dict[str, Any]) -> Path:
    """Write the undo of ``name`` (replacing an older one), private to this user."""
    d = Path(run_dir) / _DIR
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    # fsync: a SIGKILL right after the fault acts must find it.
    return write_private_json(d / f"{name}.json", {"name": name, **action}, fsync=True)


def done(run_dir: Path, name: str) -> None:
    """The fault was removed: nothing left to undo."""
    with contextlib.suppress(OSError):
        (Path(run_dir) / _DIR / f"{name}.json").unlink()


def pending(run_dir: Path) -> list[dict[str, Any]]:
    """Undo records still present (trusted ones only: ours, not writable by others)."""
    from pgval.host.registry import trusted_file

    out = []
    for path in sorted((Path(run_dir) / _DIR).glob("*.json")):
        if not trusted_file(path):
            continue
        with contextlib.suppress(OSError, ValueError):
            entry = json.loads(path.read_text())
            if isinstance(entry, dict):
                out.append(entry)
    return out


def _run_argv(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        # Never the exception's text: it quotes the whole argv, which may hold a token.
        return f"failed ({os.path.basename(argv[0])} timed out after {TIMEOUT_S:g} s)"
    except OSError as exc:
        return f"failed ({os.path.basename(argv[0])}: {exc.strerror or type(exc).__name__})"
    return f"exit {proc.returncode}"


def run_pending(run_dir: Path) -> list[str]:
    """Run every pending undo of ``run_dir``; a record goes only when its undo succeeded,
    so a failure is tried again by the next cleanup. Returns what was done."""
    out = []
    for entry in pending(run_dir):
        name = str(entry.get("name", "?"))
        if isinstance(entry.get("argv"), list) and entry["argv"]:
            result = _run_argv([str(a) for a in entry["argv"]])
            ok = result == "exit 0"
        else:
            result, ok = "unknown record, removed", True
        out.append(f"undo {name}: {entry.get('what', name)} ({result})")
        if ok:
            done(run_dir, name)
    return out
