"""Signals for a whole pgval command: INT, TERM and HUP stop it; teardown is not stopped.

Why: every long command (validate, matrix, oir, cluster up) starts processes, faults and
namespaces that its ``finally`` blocks must stop. Python turns only SIGINT into
``KeyboardInterrupt``; SIGTERM (``kill``, systemd, CI time-outs) and SIGHUP (a closed
terminal) would kill pgval at once and skip teardown. :func:`handled` maps all three
to :class:`Interrupted` for the whole command. Inside :func:`shielded` (teardown) a
signal is noted on stderr and obeyed only when teardown is over, so a second Ctrl-C
cannot leave half a cluster behind. SIGKILL cannot be handled: the reaper
(:mod:`pgval.cluster.reaper`) covers it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """pgval was asked to stop by a signal (``KeyboardInterrupt``, so ``except Exception``
    blocks do not swallow it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


class _State:
    depth = 0  # nesting of handled()
    shield = 0  # nesting of shielded()
    pending: int | None = None  # a signal noted during teardown


def _on_signal(signum: int, _frame: Any) -> None:
    if _State.shield:
        if _State.pending is None:
            _State.pending = signum
            print(f"pgval: {signal.Signals(signum).name} noted; finishing teardown first "
                  "(SIGKILL leaves the rest to the reaper)", file=sys.stderr, flush=True)
        return
    raise Interrupted(signum)


def pending() -> bool:
    """Was a signal noted during a shielded block (work that can wait should stop)?"""
    return _State.pending is not None


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """INT/TERM/HUP raise :class:`Interrupted` inside the block (main thread only;
    nested use is a no-op)."""
    if threading.current_thread() is not threading.main_thread() or _State.depth:
        _State.depth += 1
        try:
            yield
        finally:
            _State.depth -= 1
        return
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Run teardown to its end: signals arriving meanwhile are noted, then raised after
    the block unless an exception is already on its way out."""
    _State.shield += 1
    ok = False
    try:
        yield
        ok = True
    finally:
        _State.shield -= 1
        pending, _State.pending = (_State.pending, None) if not _State.shield else (None,
                                                                                  _State.pending)
        if ok and pending is not None and _State.depth:
            raise Interrupted(pending)
