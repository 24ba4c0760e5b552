"""The fault log as the evidence rules read it.

:class:`pgval.run.schedule.FaultSchedule` writes one entry per step (``inject``, ``remove``,
``holder-died``; the experiment adds ``timeouts``), each with the fault's own detail. Every
mechanism's ``reasons(entries)`` (see :mod:`pgval.faults.took_effect`) reads a log through
these few helpers, so a live run and a re-check of its stored log judge the same entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pgval.checker.result import Reason
from pgval.core.errors import UserMistake
from pgval.faults.descriptor import descriptor, descriptors

#: A fault log: its entries in the order they were written.
Entries = Sequence[Mapping[str, Any]]


def first(entries: Entries, step: str) -> Mapping[str, Any]:
    """The first entry of ``step`` (empty when there is none: nothing it logged is known)."""
    return next((e for e in entries if e.get("step") == step), {})


def finding(text: str) -> Reason:
    """What a mechanism's rule found wrong; :func:`pgval.faults.took_effect.fault_reasons`
    puts the fault's name in front (``crash: no worker process was killed``)."""
    return Reason("fault", text)


#: The time-out scan's key for the driver's "Lost executor N": what a fault above the
#: time-outs does, and one below them must not.
EXECUTOR_LOST = "executor lost (driver)"


def timeout_reasons(entries: Entries, what: str = "delay") -> list[Reason]:
    """Did the delay (or pause) act as its label says? ``-gt-timeout``: the driver reported
    an executor lost (the ``timeouts`` entry's ``fired``, a scan of the run's logs written
    after the run); ``-lt-timeout``: it did not, or the run measured one above the time-outs
    under the wrong name — unless it shared the run with a part that costs executors itself
    (``shared_with``, :func:`pgval.faults.composite.part_logs`). No scan, or a damaged one,
    tells nothing: a reason."""
    kind = first(entries, "inject").get("fault") or first(entries, "timeouts").get("fault")
    fired = first(entries, "timeouts").get("fired")
    if not isinstance(fired, Mapping):
        return [finding(f"no scan of the logs tells whether an executor was lost, so nothing "
                        f"shows the {what} was on the side of the time-outs its name says")]
    lost = fired.get(EXECUTOR_LOST)
    try:
        above = descriptor(kind).above_timeouts
    except UserMistake:
        above = None
    if above is True and not lost:
        return [finding(f"the driver reported no executor lost: the {what} did not act as "
                        "one above the time-outs")]
    if above is False and lost:
        # Faults that cost an executor whatever the time-outs (their descriptors say so).
        shared = set(first(entries, "timeouts").get("shared_with") or ()) & {
            str(k) for k, d in descriptors().items() if d.loses_executors}
        if shared:  # in a schedule, another part may have cost the executor
            return []
        return [finding(f"the driver reported an executor lost ({lost}×): the {what} "
                        "behaved as one above the time-out")]
    return []


def probe_reasons(inject: Mapping[str, Any]) -> list[Reason]:
    """Did the TCP handshake to the worker slow down by about the delay? No probe data is a
    reason too: without it nothing shows the delay acted."""
    delayed = _probe_saw_delay(inject)
    if delayed is False:
        return [finding("the probe saw no delay after injection")]
    if delayed is None:
        return [finding("no probe evidence that the delay took effect")]
    return []


def _probe_saw_delay(inject: Mapping[str, Any]) -> bool | None:
    """True: the handshake after injection took at least half the delay (or, without a
    delay, 50 ms more than before); None: no data."""
    before = inject.get("probe_connect_ms_before")
    after = inject.get("probe_connect_ms_after")
    delay = inject.get("delay_ms")
    if not isinstance(after, (int, float)):
        return None
    if isinstance(delay, (int, float)) and delay > 0:
        return after >= 0.5 * delay
    if isinstance(before, (int, float)):
        return after > before + 50
    return None
