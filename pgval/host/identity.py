"""Who owns a run: a pid together with that process's start time and the boot it ran in.

Why not the pid alone: pids are reused, so "pid 4711 is alive" says nothing about the
pgval that wrote 4711 into a state file an hour ago. The start time (clock ticks since
boot, ``/proc/<pid>/stat`` field 22) and the kernel's boot id make the pair unique: a
recorded owner is alive only if a process with that pid exists *and* started at that
tick of this boot. Cleanup (``pgval cleanup``), stale-run marking and the reaper all
decide with :meth:`Owner.alive`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        if fields[0] in ("Z", "X"):  # a zombie has finished; only its parent's wait is due
            return None
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Owner:
    """The process a run, a fault or a claimed matrix cell belongs to."""

    pid: int
    start: int
    boot: str

    @classmethod
    def me(cls) -> Owner:
        return cls.of(os.getpid())

    @classmethod
    def of(cls, pid: int) -> Owner:
        ticks = start_ticks(pid)
        if ticks is None:
            raise ProcessLookupError(pid)
        return cls(pid, ticks, boot_id())

    def alive(self) -> bool:
        """True while the very process recorded here still runs (not a reuse of its pid)."""
        if self.boot and self.boot != boot_id():
            return False
        return start_ticks(self.pid) == self.start

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Owner | None:
        """The owner recorded in ``data`` (a state file's ``owner``), None if absent or bad."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(int(data["pid"]), int(data["start"]), str(data.get("boot", "")))
        except (KeyError, TypeError, ValueError):
            return None
