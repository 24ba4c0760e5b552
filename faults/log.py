"""The fault log as the evidence rules read it.

:class:`pgval.run.schedule.FaultSchedule` writes one entry per step (``inject``, ``remove``,
``holder-died``; the experiment adds ``timeouts``), each with the fault's own detail. Every
mechanism's ``reasons(entries)`` (see :mod:`pgval.faults.evidence`) reads a log through
these few helpers, so a live run and a re-check of its stored log judge the same entries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pgval.checker.result import Reason

#: A fault log: its entries in the order they were written.
Entries = Sequence[Mapping[str, Any]]


def first(entries: Entries, step: str) -> Mapping[str, Any]:
    """The first entry of ``step`` (empty when there is none: nothing it logged is known)."""
    return next((e for e in entries if e.get("step") == step), {})


def finding(text: str) -> Reason:
    """What a mechanism's rule found wrong; :func:`pgval.faults.evidence.fault_reasons`
    puts the fault's name in front (``crash: no worker process was killed``)."""
    return Reason("fault", text)
