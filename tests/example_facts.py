"""The numbers docs/example-report/README.md quotes from its database, computed from it.

The README is a discussion written by hand, but each number it takes from
experiments/grid-23/results.db sits between ``<!-- fact:NAME -->`` and ``<!-- /fact -->``,
and :data:`FACTS` computes NAME from the database. tests/test_example_report.py holds every
marked number equal to its computation; ``python -m tests.example_facts`` rewrites them
after the database changed (the prose around them is still to be read again).

"The grid" is its complete ``validate`` runs made for it (runs copied from the previous
example database, ``summary.copied_from``, left out): 43 cells, 130 runs.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pgval.report.data import RunData, load_runs, number

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "docs" / "example-report" / "README.md"
DB = ROOT / "experiments" / "grid-23" / "results.db"
MARK = re.compile(r"<!-- fact:([\w.-]+) -->(.*?)<!-- /fact -->", re.S)


@dataclass(frozen=True)
class Grid:
    """The grid's runs, and the same copied from elsewhere (``beyond``: the faults beyond
    the paper, runs 158–193)."""

    runs: list[RunData]
    beyond: list[RunData]

    @classmethod
    def load(cls, db: Path = DB) -> Grid:
        runs = [r for r in load_runs(db) if r.row.get("kind") == "validate"
                and r.row.get("status") == "complete" and not r.oir_trial]
        own = [r for r in runs if "copied_from" not in r.summary]
        return cls(own, [r for r in runs if "copied_from" in r.summary])

    def cell(self, topology: str | None = None, pgs: str | None = None,
             fault: str | None = None, point: str | None = None,
             restart: str | None = None) -> list[RunData]:
        """The grid's runs of a cell (``pgs``: one PG or several, "a1,e1"), in id order."""
        def keep(r: RunData) -> bool:
            return ((topology is None or r.row["topology"] == topology)
                    and (pgs is None or r.row["pg"] in pgs.split(","))
                    and (fault is None or r.row["fault"] == fault)
                    and (point is None or r.params.get("crash_point") == point)
                    and (restart is None or r.params.get("restart") == restart))
        found = [r for r in self.runs if keep(r)]
        if not found:
            raise LookupError(f"no grid run of {topology} {pgs} {fault} {point} {restart}")
        return found

    def ids(self, *ids: int) -> list[RunData]:
        """The grid's runs of these ids (a part of a cell the README discusses apart)."""
        found = [r for r in self.runs if r.id in ids]
        if len(found) != len(ids):
            raise LookupError(f"runs {ids} are not all in the grid")
        return found


def span(values: Iterable[float | None], digits: int = 1, unit: str = "") -> str:
    """``low–high`` (one number when they print alike), en dash, as the README writes."""
    got = [v for v in values if v is not None]
    if not got:
        raise ValueError("no value to quote")
    low, high = f"{min(got):,.{digits}f}", f"{max(got):,.{digits}f}"
    return (low if low == high else f"{low}–{high}") + unit


def cost(run: RunData) -> float | None:
    return number(run.row.get("failure_cost_s"))


def costs(runs: list[RunData]) -> str:
    """The failure costs' range; ``≥ `` in front when every one is a lower bound (by the
    report's rule), and how many are when some are and some are not."""
    bounded = sum(run.bounded("failure_cost") for run in runs)
    text = span(cost(r) for r in runs)
    if bounded in (0, len(runs)):
        return ("≥ " if bounded else "") + text
    return f"{text} ({bounded} of {len(runs)} lower bounds)"


def each_cost(runs: list[RunData]) -> str:
    """Each run's failure cost in run order ("≥ 82.0, ≥ 86.2 and 80.3")."""
    texts = [("≥ " if r.bounded("failure_cost") else "") + f"{cost(r):.1f}" for r in runs]
    return ", ".join(texts[:-1]) + " and " + texts[-1] if len(texts) > 1 else texts[0]


def column(runs: list[RunData], name: str, scale: float = 1.0) -> list[float | None]:
    return [None if number(r.row.get(name)) is None else number(r.row.get(name)) * scale
            for r in runs]


def p50(runs: list[RunData], phase: str) -> list[float | None]:
    return [r.phase_value(phase, "latency_p50_s") for r in runs]


def warmup_s(run: RunData) -> float | None:
    return number((run.summary.get("warmup") or {}).get("seconds"))


def ids(values: Iterable[float | None]) -> str:
    got = [int(v) for v in values if v is not None]
    return f"{min(got):,}" if min(got) == max(got) else f"{min(got):,}–{max(got):,}"


def _grid_facts(g: Grid) -> dict[str, str]:
    none = g.cell(fault="none")
    return {
        "cells": str(len({(r.key, r.params.get("crash_point"), r.params.get("restart"))
                          for r in g.runs})),
        "runs": f"{len(g.runs):,}",
        "warmup": span((warmup_s(r) for r in g.runs), unit=" s"),
        "none.control_p50.sst": span(p50(g.cell("sst", fault="none"), "control")),
        "none.control_p50.mst": span(p50(g.cell("mst", fault="none"), "control")),
        "none.recovery_p50.sst": span(p50(g.cell("sst", fault="none"), "recovery")),
        "none.recovery_p50.mst": span(p50(g.cell("mst", fault="none"), "recovery")),
        "none.cost": costs(none),
        "none.gap": span(column(none, "downtime_s")),
        "none.latency_back": span(column(none, "recovery_latency_s")),
        "control_p50": span(p50(g.runs, "control")),
        "bounded.other": ", ".join(str(r.id) for r in g.runs if r.bounded("failure_cost")
                                   and r.row["fault"] != "delay-lt-timeout"
                                   and (r.row["fault"], r.params.get("restart"))
                                   != ("driver-crash", "at-remove")),
    }


def _driver_facts(g: Grid) -> dict[str, str]:
    now = {"fault": "driver-crash", "point": "timed", "restart": "immediate"}
    t3 = {"fault": "driver-crash", "point": "timed", "restart": "at-remove"}
    aimed = {"fault": "driver-crash", "point": "after-sink-write"}
    return {
        "driver.cost.sst.a1": costs(g.cell("sst", "a1", **now)),
        "driver.cost.sst.e1": costs(g.cell("sst", "e1", **now)),
        "driver.cost.sst": costs(g.cell("sst", "a1,e1", **now)),
        "driver.cost.mst": costs(g.cell("mst", "a1,e1", **now)),
        "driver.m1.lost.sst": ids(column(g.cell("sst", "m1", **now), "unprocessed")),
        "driver.m1.lost.mst": ids(column(g.cell("mst", "m1", **now), "unprocessed")),
        "driver.m1.reliability.sst": span(column(g.cell("sst", "m1", **now), "reliability",
                                                 100)),
        "driver.m1.reliability.mst": span(column(g.cell("mst", "m1", **now), "reliability",
                                                 100)),
        "driver.m1.cost": costs(g.cell(pgs="m1", **now)),
        "driver.t3.cost": costs(g.cell("sst", "a1,e1", **t3)),
        "driver.t3.m1.reliability": span(column(g.cell("sst", "m1", **t3), "reliability",
                                                100)),
        "aimed.a1.cost.sst": costs(g.cell("sst", "a1", **aimed)),
        "aimed.a1.reliability.sst": span(column(g.cell("sst", "a1", **aimed), "reliability",
                                                100)),
        "aimed.a1.reliability.mst": span(column(g.cell("mst", "a1", **aimed), "reliability",
                                                100), 2),
        "aimed.a1.cost.mst": costs(g.cell("mst", "a1", **aimed)),
        "aimed.e1.cost.sst": costs(g.cell("sst", "e1", **aimed)),
        "aimed.e1.cost.mst": costs(g.cell("mst", "e1", **aimed)),
        "aimed.a1.dup.sst": ids(column(g.cell("sst", "a1", **aimed), "duplicate")),
        "aimed.a1.dup.mst": ids(column(g.cell("mst", "a1", **aimed), "duplicate")),
        "aimed.m1.reliability.sst": span(column(g.cell("sst", "m1", **aimed), "reliability",
                                                100)),
        "aimed.m1.reliability.mst": span(column(g.cell("mst", "m1", **aimed), "reliability",
                                                100)),
    }


def _fault_facts(g: Grid) -> dict[str, str]:
    crash = {"fault": "crash", "point": "timed"}
    below = g.cell(fault="delay-lt-timeout")
    return {
        "crash.cost.sst": costs(g.cell("sst", **crash)),
        "writing.a1.dup.sst": ids(column(g.cell("sst", "a1", "crash", "during-sink-write"),
                                         "duplicate")),
        "writing.a1.dup.mst": ids(column(g.cell("mst", "a1", "crash", "during-sink-write"),
                                         "duplicate")),
        "crash.cost.mst": costs(g.cell("mst", **crash)),
        "delay-gt.cost.sst": costs(g.cell("sst", fault="delay-gt-timeout")),
        "delay-gt.downtime.sst": span(column(g.cell("sst", fault="delay-gt-timeout"),
                                             "downtime_s")),
        "delay-gt.each.mst.a1": each_cost(g.cell("mst", "a1", "delay-gt-timeout")),
        "delay-gt.each.mst.m1": each_cost(g.cell("mst", "m1", "delay-gt-timeout")),
        "delay-gt.each.mst.e1": each_cost(g.cell("mst", "e1", "delay-gt-timeout")),
        "flagship.control_p50": span(p50(g.cell("mst", "a1", "delay-gt-timeout"), "control")),
        "flagship.recovery_p50": span(p50(g.cell("mst", "a1", "delay-gt-timeout"),
                                          "recovery")),
        "delay-gt.mst.short": span((cost(r) for r in g.ids(22, 23, 70, 27, 28)), 0),
        "delay-gt.mst.long": span((cost(r) for r in g.ids(21, 24, 25, 26, 29)), 0),
        "flagship.short.cost": costs(g.ids(22, 23, 70)),
        "flagship.long.cost": costs(g.ids(21)),
        "delay-lt.cost": costs(below),
        "delay-lt.gap": span(column(below, "downtime_s")),
        "delay-lt.recovery_p50.sst": span(p50(g.cell("sst", fault="delay-lt-timeout"),
                                              "recovery")),
        "delay-lt.control_p50.sst": span(p50(g.cell("sst", fault="delay-lt-timeout"),
                                             "control")),
        "delay-lt.recovery_p50.mst": span(p50(g.cell("mst", fault="delay-lt-timeout"),
                                              "recovery")),
        "delay-lt.control_p50.mst": span(p50(g.cell("mst", fault="delay-lt-timeout"),
                                             "control")),
    }


def _beyond_facts(g: Grid) -> dict[str, str]:
    def runs(fault: str, pg: str | None = None, target: str | None = None) -> list[RunData]:
        return [r for r in g.beyond if r.row["fault"] == fault
                and (pg is None or r.row["pg"] == pg)
                and (target is None or r.params.get("target") == target)]

    def each(found: list[RunData]) -> str:
        return " / ".join(("≥ " if r.bounded("failure_cost") else "") + f"{cost(r):.1f}"
                          for r in found)

    coordinator = runs("broker-crash", "e1", "coordinator")
    leader_e1 = [r for r in runs("broker-crash", "e1") if r not in coordinator]
    return {
        "beyond.broker.coordinator": each(coordinator),
        "beyond.broker.a1": each(runs("broker-crash", "a1")),
        "beyond.broker.e1": each(leader_e1),
        "beyond.partition": costs(runs("partition")),
        "beyond.pause-gt": costs(runs("pause-gt-timeout")),
        "beyond.pause-lt": costs(runs("pause-lt-timeout")),
    }


FACTS: tuple[Callable[[Grid], dict[str, str]], ...] = (
    _grid_facts, _driver_facts, _fault_facts, _beyond_facts)


def facts(db: Path = DB) -> dict[str, str]:
    """Every fact's text, by name, from the database."""
    grid = Grid.load(db)
    out: dict[str, str] = {}
    for part in FACTS:
        out.update(part(grid))
    return out


def marked(text: str) -> list[tuple[str, str]]:
    """(name, text) of every marked number of a README, in order."""
    return [(m.group(1), m.group(2)) for m in MARK.finditer(text)]


def rewrite(text: str, known: dict[str, str]) -> str:
    """The README with every marked number replaced by its computation."""
    return MARK.sub(lambda m: f"<!-- fact:{m.group(1)} -->{known[m.group(1)]}<!-- /fact -->",
                    text)


if __name__ == "__main__":  # python -m tests.example_facts: rewrite the README's numbers
    README.write_text(rewrite(README.read_text(encoding="utf-8"), facts()), encoding="utf-8")
    sys.stdout.write(f"rewrote the marked numbers of {README}\n")
