"""The reaper: stops a run's processes, faults and namespaces when the pgval owning it dies.

Why: pgval can be killed in ways no ``finally`` survives (SIGKILL, the OOM killer, a
closed terminal's SIGHUP racing teardown). Each run therefore starts, before anything
else, a small watcher in its own session::

    python -m pgval.cluster.reaper --run-dir DIR --owner-pid P --owner-start T

It polls the owner twice a second (pid + start time, so a reused pid does not count).
When the owner is gone and the run's ``state.json`` is still there (a finished run
removes it), it does what ``pgval cleanup`` would do for that run — stop every recorded
process group, run its pending undo records (a nemesis remove command, pumba's netem),
undo its packet delays, delete its namespaces — writes what it removed
to ``logs/reaper.log`` and exits. A SIGTERM from the owner (its teardown succeeded)
ends it quietly. It ignores SIGINT and SIGHUP, which are meant for the owner.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from pgval.cluster.guard import REAPER_MODULE as MODULE
from pgval.cluster.guard import force_down
from pgval.core.errors import PgvalError
from pgval.host.identity import Owner, boot_id

POLL_S = 0.5


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--owner-pid", type=int, required=True)
    p.add_argument("--owner-start", type=int, required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    owner = Owner(args.owner_pid, args.owner_start, boot_id())
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    state = args.run_dir / "state.json"
    while not stop:
        if not state.exists():
            return 0  # the owner finished and removed its state: nothing to guard
        if not owner.alive():
            break
        time.sleep(POLL_S)
    if stop:
        return 0

    t0 = time.monotonic()
    try:
        removed = force_down(args.run_dir)
    except PgvalError as exc:  # a directory it must not trust: say so, do nothing
        print(json.dumps({"event": "refused", "owner_pid": owner.pid, "why": str(exc)}),
              flush=True)
        return 1
    print(json.dumps({"event": "reaped", "owner_pid": owner.pid, "removed": removed,
                      "seconds": round(time.monotonic() - t0, 2),
                      "at_ms": time.time_ns() // 10**6}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
