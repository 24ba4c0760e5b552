"""Which machines a report's runs were made on (:mod:`pgval.host.machine`).

Means and comparisons across runs are like for like only on one machine: the same warm cell
took 15 % less time on a new machine of the same size. A report whose runs name more than
one machine says so in its header, with each machine's runs; so does one whose runs' JVMs
read different options from the environment (C1 alone changes a run's timings as a
machine does). Runs stored before machines were recorded are counted as such, never
guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pgval.host.machine import machine_label, setting_of
from pgval.report.data import RunData


def id_ranges(ids: Iterable[int]) -> str:
    """``1–3, 7, 9–10`` for 1, 2, 3, 7, 9, 10."""
    spans: list[list[int]] = []
    for i in sorted(set(ids)):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}–{b}" if b > a else str(a) for a, b in spans)


def machines_note(runs: Sequence[RunData]) -> str:
    """The header's note on machines ("" when no run recorded one: older databases)."""
    by_setting: dict[str, tuple[dict[str, Any], list[int]]] = {}
    unrecorded: list[int] = []
    for run in runs:
        machine = run.summary.get("machine")
        if not isinstance(machine, dict):
            unrecorded.append(run.id)
            continue
        by_setting.setdefault(setting_of(machine), (machine, []))[1].append(run.id)
    if not by_setting:
        return ""
    if len(by_setting) == 1 and not unrecorded:
        (machine, _), = by_setting.values()
        return f"every run on one machine: {machine_label(machine)}"
    parts = [f"{machine_label(machine)}: runs {id_ranges(ids)}"
             for machine, ids in by_setting.values()]
    if unrecorded:
        parts.append(f"not recorded: runs {id_ranges(unrecorded)}")
    boots = {str(machine.get("boot") or "") for machine, _ in by_setting.values()}
    what = ("runs from more than one machine" if len(boots) > 1 or unrecorded
            else "runs with more than one set of JVM options")
    return (f"{what}, so not like for like across them — "
            + "; ".join(parts))
