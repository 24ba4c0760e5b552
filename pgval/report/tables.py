"""The paper's tables (a)–(g), the run list and (h) every cell run by run, as one model
every output format renders.

A table is rows of :class:`~pgval.report.data.Stat` cells (mean ± sample stdev over a
group's repetitions; the stdev is omitted when a group has one run, since one run says
nothing about spread) or text cells (verdicts, k/n flags). Building the model once, apart
from rendering it, is what makes the terminal, Markdown, CSV and HTML show the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pgval.checker.explain import CAUSES, JOB_CAUSES
from pgval.core.schema import PHASES, Fault
from pgval.core.shape import REPORTED
from pgval.report.data import (
    DASH,
    RECOVERY_FLAGS,
    RECOVERY_METRICS,
    Group,
    RunData,
    Stat,
    cell_labels,
    group_runs,
    number,
)

#: The paper's names for the faults (Table 4).
FAULT_LABELS: dict[str, str] = {Fault.NONE: "No fault", Fault.DELAY_LT_TIMEOUT: "PD < TO",
                                Fault.DELAY_GT_TIMEOUT: "PD > TO", Fault.CRASH: "Process crash",
                                Fault.DRIVER_CRASH: "Driver crash"}


# ---------------------------------------------------------------------------- table model
@dataclass(frozen=True)
class Column:
    """A value column: display header plus what the CSV needs (metric, phase, unit)."""

    header: str
    metric: str
    unit: str = ""
    phase: str | None = None
    decimals: int = 2
    scale: float = 1.0


Cell = Stat | str | None


@dataclass
class Row:
    keys: dict[str, str]
    n: int
    values: list[Cell]


@dataclass
class ReportTable:
    name: str
    title: str
    key_headers: list[tuple[str, str]]  # (key in Row.keys, display header)
    columns: list[Column]
    rows: list[Row]
    note: str = ""
    #: Display form of key values (CSV keeps the raw ones), e.g. "crash" → "Process crash".
    key_format: dict[str, Callable[[str], str]] = field(default_factory=dict)

    def key_text(self, row: Row, key: str) -> str:
        value = row.keys.get(key, DASH)
        fmt = self.key_format.get(key)
        return fmt(value) if fmt is not None and value != DASH else value

    def cell_text(self, column: Column, cell: Cell) -> str:
        if cell is None:
            return DASH
        if isinstance(cell, Stat):
            return cell.text(column.decimals, column.scale)
        return cell


GROUP_KEYS = [("topology", "topology"), ("pg", "PG"), ("fault", "fault")]
SHAPE_KEY = ("shape", "run shape")


def group_keys(groups: list[Group], headers: list[tuple[str, str]] = GROUP_KEYS
               ) -> list[tuple[str, str]]:
    """The key columns of a table over ``groups``: the run shape only where shapes differ."""
    return [*headers, SHAPE_KEY] if any(g.shape_label for g in groups) else headers


def _stat(group: Group, fn: Any, undefined: Any = None, bounded: Any = None) -> Stat:
    """Mean ± stdev of ``fn`` over the group's runs, counting the runs for which
    ``undefined(run)`` (the value is undefined, a measurement) or ``bounded(run)`` (a lower
    bound) holds."""
    return Stat.of_values((fn(r) for r in group.runs), of=group.n,
                          undefined=sum(bool(undefined(r)) for r in group.runs)
                          if undefined else 0,
                          bounded=sum(bool(bounded(r)) and fn(r) is not None
                                      for r in group.runs) if bounded else 0)


def reliability_table(groups: list[Group]) -> ReportTable:
    cols = [Column(f"{p} reliability %", "reliability", "%", p, 2, 100.0) for p in PHASES]
    cols += [Column("run reliability %", "reliability", "%", "total", 2, 100.0),
             Column("correctness %", "correctness", "%", "total", 2, 100.0)]
    rows = []
    for g in groups:
        vals: list[Cell] = [_stat(g, lambda r, p=p: r.phase_value(p, "reliability"))
                            for p in PHASES]
        vals.append(_stat(g, lambda r: number(r.row.get("reliability"))))
        vals.append(_stat(g, lambda r: number(r.row.get("correctness"))))
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("reliability", "(a) Reliability and correctness per phase",
                       group_keys(groups),
                       cols, rows, "Reliability: expected IDs with exactly one own occurrence "
                       "and no incorrect one. Correctness (share of outputs whose counts match "
                       "the oracle) is stored per run only. – = no expected input in that phase.")


def throughput_table(groups: list[Group]) -> ReportTable:
    cols = [Column(f"{p} ev/s", "reliable_throughput", "events/s", p, 0) for p in PHASES]
    rows = [Row(g.keys, g.n, [_stat(g, lambda r, p=p: r.phase_value(p, "throughput"))
                              for p in PHASES]) for g in groups]
    return ReportTable("throughput", "(b) Reliable throughput per phase (events/s)",
                       group_keys(groups),
                       cols, rows, "Each expected ID counts once, when it first appears "
                       "correctly placed; duplicates and incorrect occurrences never count.")


def latency_table(groups: list[Group]) -> ReportTable:
    cols = [Column("p50 s", "latency_p50", "s"), Column("p50 s (Karimov)", "karimov_p50", "s"),
            Column("p99 s", "latency_p99", "s"), Column("p99 s (Karimov)", "karimov_p99", "s"),
            Column("max s", "latency_max", "s")]
    sources = ("latency_p50_s", "karimov_p50_s", "latency_p99_s", "karimov_p99_s",
               "latency_max_s")
    rows = []
    for g in groups:
        for p in PHASES:
            vals: list[Cell] = [
                _stat(g, lambda r, p=p, s=s: number((r.phases.get(p) or {}).get(s)),
                      lambda r, p=p: r.latency_undefined(p),
                      (lambda r, p=p: r.bounded("max", p)) if s == "latency_max_s" else None)
                for s in sources]
            rows.append(Row({**g.keys, "phase": p}, g.n, vals))
    return ReportTable("latency", "(c) Latency per phase (s): paper's definition, Karimov's "
                       "beside it", [*group_keys(groups), ("phase", "phase")], cols, rows,
                       "Paper: output ingress − ingress of the first input that closes the "
                       "window. Karimov: − ingress of the window's last input. undefined: no "
                       "output in that phase (a measurement: the run stays valid). ≥: a lower "
                       "bound, the fault's outage was still on when it was removed at T3.")


def _failure_cost(group: Group) -> Stat:
    return _stat(group, lambda r: number(r.row.get("failure_cost_s")),
                 lambda r: r.undefined("failure_cost"), lambda r: r.bounded("failure_cost"))


def failure_cost_table(groups: list[Group]) -> ReportTable:
    rows = [Row(g.keys, g.n, [_failure_cost(g)]) for g in groups]
    return ReportTable("failure_cost", "(d) Failure cost (s), the paper's Table 4 layout",
                       group_keys(groups, [("topology", "Topology"), ("pg", "PG"),
                                           ("fault", "Fault")]),
                       [Column("Spark", "failure_cost", "s", None, 1)], rows,
                       "Max paper latency in failure + recovery − median control latency. "
                       "≥: a lower bound — the fault's outage was still on when it was removed "
                       "at T3 (no output, or the outputs further behind their inputs than in "
                       "control), or the recovery was not over when the load ended, so a "
                       "longer phase could give a larger number (lengthen --phase-seconds to "
                       "measure it). undefined: no control latency or none after T2. The "
                       "paper's Table 4 ran each system at the highest rate it sustains: set a "
                       "cell beside it only when its rate was that rate on this machine "
                       "(`pgval oir` finds it), as a fault's cost grows with the load.",
                       key_format={"topology": str.upper, "pg": str.upper,
                                   "fault": lambda f: FAULT_LABELS.get(f, f)})


def _verdicts(group: Group) -> str:
    """Each verdict with its count and, for crashes whose log says, how many of its runs hit
    the window that matters ("exactly-once ×2 (0/2 hit a batch in flight)"): a crash that
    caught no batch tested nothing of the guarantee."""
    runs: dict[str, list[RunData]] = {}
    for r in group.runs:
        runs.setdefault(r.row.get("guarantee") or "?", []).append(r)
    order = ("exactly-once", "at-least-once", "at-most-once", "none", "unknown")
    keys = sorted(runs, key=lambda v: (order.index(v) if v in order else len(order), v))
    texts = []
    for v in keys:
        windows = [w for w in (r.crash_window for r in runs[v]) if w is not None]
        hit = {what for what, _ in windows}
        share = (f" ({sum(h for _, h in windows)}/{len(windows)} {hit.pop()})"
                 if len(hit) == 1 else "")
        texts.append(f"{v} ×{len(runs[v])}{share}")
    return ", ".join(texts)


def anomalies_table(groups: list[Group]) -> ReportTable:
    names = ("duplicate", "incorrect", "unprocessed", "malformed")
    cols = [Column(n, n, "count", None, 1) for n in names]
    cols.append(Column("guarantee verdicts", "guarantee"))
    rows = []
    for g in groups:
        vals: list[Cell] = [_stat(g, lambda r, n=n: number(r.row.get(n))) for n in names]
        vals.append(_verdicts(g))
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("anomalies", "(e) Anomalies (mean per run) and guarantee verdicts",
                       group_keys(groups), cols, rows,
                       "A verdict is the strongest guarantee a run is consistent with. (k/n …): "
                       "the runs whose kill hit the window that matters (a batch in flight, a "
                       "sink write); one between batches tests little of the guarantee.")


#: Per-phase anomalies on both clocks (docs/semantics.md, "Two clocks in a phase row"):
#: (phase_results column, header, clock). The input-clock columns are newer.
PHASE_ANOMALIES = (("duplicate", "duplicate occ.", "output"),
                   ("duplicated_ids", "duplicated IDs", "input"),
                   ("incorrect", "incorrect occ.", "output"),
                   ("incorrect_ids", "incorrect IDs", "input"),
                   ("reliable", "reliable IDs", "input"),
                   ("expected", "expected IDs", "input"))


def phase_anomalies_table(groups: list[Group]) -> ReportTable:
    """Anomalies per phase on the output's clock, and the IDs behind them on the input's.

    The input-clock columns are shown only when some run stored them (older databases
    lack them); a run without them is left out of that column's mean (n=…).
    """
    present = {k for g in groups for r in g.runs for ph in r.phases.values() for k in ph
               if ph.get(k) is not None}
    specs = [(c, h, clock) for c, h, clock in PHASE_ANOMALIES
             if clock == "output" or c in present]
    cols = [Column(f"{h} ({clock} time)", c, "count", None, 1) for c, h, clock in specs]
    rows = []
    for g in groups:
        for p in PHASES:
            vals: list[Cell] = [_stat(g, lambda r, p=p, c=c: number((r.phases.get(p) or {})
                                                                   .get(c)))
                                for c, _, _ in specs]
            rows.append(Row({**g.keys, "phase": p}, g.n, vals))
    return ReportTable("phase_anomalies", "(e2) Anomalies per phase, on both clocks (mean per "
                       "run)", [*group_keys(groups), ("phase", "phase")], cols, rows,
                       "Output time: occurrences, in the phase the output appeared (when the "
                       "anomaly happened). Input time: expected IDs, in the phase their input "
                       "arrived — the IDs the phase's reliability is about.")


def _flag_text(group: Group, column: str) -> str | None:
    vals = [r.row.get(column) for r in group.runs if r.row.get(column) is not None]
    return f"{sum(1 for v in vals if v)}/{len(vals)}" if vals else None


def recovery_table(groups: list[Group], present: set[str]) -> ReportTable | None:
    metrics = [(c, h) for c, h in RECOVERY_METRICS if c in present]
    flags = [(c, h) for c, h in RECOVERY_FLAGS if c in present]
    if not metrics and not flags:
        return None
    cols = [Column(f"{h} s", c.removesuffix("_s"), "s", None, 1) for c, h in metrics]
    cols += [Column(h, c) for c, h in flags]
    rows = []
    for g in groups:
        vals: list[Cell] = [_stat(g, lambda r, c=c: number(r.row.get(c)), None,
                                  lambda r, c=c: r.bounded(c.removesuffix("_s")))
                            for c, _ in metrics]
        vals += [_flag_text(g, c) for c, _ in flags]
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("recovery", "(f) Recovery", group_keys(groups), cols, rows,
                       "Seconds. Downtime: longest output gap ending after T2 (beside "
                       "control's longest). Throughput/latency back: from T2 until back near the "
                       "control baseline. Catch-up: latency back − downtime. recovered/censored: "
                       "runs flagged / runs with the flag (censored: not back by T4). ≥: a "
                       "lower bound, the outage lasted until the fault was removed at T3.")


def causes_table(groups: list[Group]) -> ReportTable | None:
    if not any(r.causes is not None for g in groups for r in g.runs):
        return None
    # "late or lost" is a user's job's cause: a column only where some run has it.
    causes = [c for c in CAUSES if c not in JOB_CAUSES or any(
        (r.causes or {}).get(c) for g in groups for r in g.runs)]
    cols = [Column(c, "unprocessed_" + c.replace(" ", "_").replace("-", "_"), "count", None, 1)
            for c in causes]
    rows = []
    for g in groups:
        vals: list[Cell] = [_stat(g, lambda r, c=c: None if r.causes is None
                                  else float(r.causes.get(c, 0))) for c in causes]
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("unprocessed_causes", "(g) Why events were unprocessed (mean per run)",
                       group_keys(groups), cols, rows,
                       "late = behind the watermark; skipped = never read, the query's offsets "
                       "went past it; in-flight at end = still in the pipeline when the run "
                       "stopped; lost = read, on time, still missing." + (
                           " late or lost (a user's job) = read behind the watermark, its "
                           "window unknown." if "late or lost" in causes else ""))


#: Where a group's shape holds its rate.
RATE_AT = REPORTED.index("rate")

#: Table (h)'s per-run columns: (header, runs column, unit, decimals, scale, what
#: :meth:`RunData.bounded` / :meth:`RunData.undefined` call it).
CELL_RUN_VALUES = (("reliability %", "reliability", "%", 2, 100.0, None),
                   ("duplicated IDs", "duplicate", "count", 0, 1.0, None),
                   ("unprocessed IDs", "unprocessed", "count", 0, 1.0, None),
                   ("downtime s", "downtime_s", "s", 1, 1.0, "downtime"),
                   ("latency back s", "recovery_latency_s", "s", 1, 1.0, "recovery_latency"),
                   ("catch-up s", "catchup_s", "s", 1, 1.0, "catchup"),
                   ("failure cost s", "failure_cost_s", "s", 1, 1.0, "failure_cost"))


def _run_value(run: RunData, column: str, decimals: int, scale: float,
               name: str | None) -> str:
    value = number(run.row.get(column))
    stat = Stat.of_values([value], undefined=int(name is not None and run.undefined(name)),
                          bounded=int(name is not None and value is not None
                                      and run.bounded(name)))
    return stat.text(decimals, scale).replace("≥ ", "≥")


def cells_by_run_table(groups: list[Group], run_columns: set[str],
                       unknown_aggregated: bool = False) -> ReportTable:
    """Every cell with each run's own numbers side by side ("a / b / c", in run order),
    unknown runs included and named: the spread a mean ± sd hides, and the table the
    example README shows (tests/test_example_report.py holds them equal). Recovery columns
    only where the database stores them, as in (f)."""
    recovery = {c for c, _ in RECOVERY_METRICS}
    values = [v for v in CELL_RUN_VALUES if v[1] not in recovery or v[1] in run_columns]
    cols = [Column("rate ev/s", "rate", "events/s"), Column("runs", "runs"),
            Column("verdicts", "guarantee"), Column("unknown", "validity")]
    cols += [Column(h, c.removesuffix("_s"), unit, "total" if unit == "%" else None, d, sc)
             for h, c, unit, d, sc, _ in values]
    rows = []
    for g in groups:
        runs = sorted(g.runs, key=lambda r: r.id)
        rate = number(g.shape[RATE_AT]) if len(g.shape) > RATE_AT else None
        unknown = [r for r in runs if not r.valid]
        valid = [r for r in runs if r.valid]
        verdicts = ", ".join(t for t in (_verdicts(Group(g.key, valid)) if valid else "",
                                         f"{len(unknown)} unknown" if unknown else "") if t)
        vals: list[Cell] = [DASH if rate is None else f"{rate:,.0f}",
                            ", ".join(str(r.id) for r in runs), verdicts,
                            ", ".join(str(r.id) for r in unknown) or DASH]
        vals += [" / ".join(_run_value(r, c, d, sc, name) for r in runs)
                 for _, c, _, d, sc, name in values]
        rows.append(Row(g.keys, g.n, vals))
    where = ("they are in tables (a)–(g) too (--include-unknown)" if unknown_aggregated
             else "tables (a)–(g) leave them out")
    return ReportTable("cells_by_run", "(h) Every cell, run by run", group_keys(groups), cols,
                       rows, "Each run's own value, in run order (the runs column); verdicts "
                       f"count valid runs. Unknown runs are listed and named; {where}. "
                       "Downtime: the longest output gap after T2; latency back: from T2 until "
                       "latency is back near control's; catch-up: their difference; failure "
                       "cost: the paper's. ≥: a lower bound (the outage lasted until T3, or "
                       "the recovery until the load ended).")


def runs_table(runs: list[RunData]) -> ReportTable:
    """One line per run, to find a run's plot and the fault's actual timing."""
    cols = [Column("seed", "seed"), Column("repeat", "repeat"), Column("verdict", "guarantee"),
            Column("validity", "validity"),
            Column("reliability %", "reliability", "%", "total", 2, 100.0),
            Column("failure cost s", "failure_cost", "s", None, 1),
            Column("inject lag s", "inject_lag", "s", None, 2),
            Column("remove lag s", "remove_lag", "s", None, 2)]
    rows = []
    labels = cell_labels([(r.key, r.shape) for r in runs])
    show_shape = any(labels) or any(r.oir_trial for r in runs)
    for r, label in zip(runs, labels, strict=True):
        lags = fault_lags(r)
        keys = {"run": str(r.id), "topology": r.row.get("topology") or DASH,
                "pg": r.row.get("pg") or DASH, "fault": r.row.get("fault") or DASH}
        if show_shape:
            keys["shape"] = (label or DASH) + (" (OIR trial)" if r.oir_trial else "")
        rows.append(Row(keys,
                        1, [_str(r.row.get("seed")), _str(r.row.get("repeat")),
                            r.row.get("guarantee") or DASH, r.validity_text,
                            Stat.of_values([number(r.row.get("reliability"))]),
                            _failure_cost(Group(r.key, [r])),
                            Stat.of_values([lags.get("inject")]),
                            Stat.of_values([lags.get("remove")])]))
    keys = [("run", "run"), *GROUP_KEYS, *([SHAPE_KEY] if show_shape else [])]
    return ReportTable("runs", "Runs", keys, cols, rows,
                       "Lag = actual − intended fault time, from the fault log. Validity "
                       "unknown: the run is no evidence (first reason shown); such runs stay "
                       "out of the tables above unless --include-unknown.")


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def fault_lags(run: RunData) -> dict[str, float]:
    """Actual − intended time (s) of the first inject and remove step; a step whose times
    are not numbers (a damaged log) has no lag."""
    out: dict[str, float] = {}
    for e in run.fault_log:
        actual, intended = number(e.get("actual_ms")), number(e.get("intended_ms"))
        if e.get("step") in ("inject", "remove") and actual is not None and intended is not None:
            out.setdefault(e["step"], (actual - intended) / 1000.0)
    return out


def build_tables(runs: list[RunData], run_columns: set[str],
                 listed: list[RunData] | None = None) -> list[ReportTable]:
    """Tables (a)–(g) over ``runs``, then the run list and (h) of ``listed`` (default:
    ``runs``).

    Optional tables only when stored.
    """
    groups = group_runs([r for r in runs if not r.oir_trial])
    tables: list[ReportTable] = []
    if groups:
        tables += [reliability_table(groups), throughput_table(groups), latency_table(groups),
                   failure_cost_table(groups), anomalies_table(groups),
                   phase_anomalies_table(groups)]
        for extra in (recovery_table(groups, run_columns), causes_table(groups)):
            if extra is not None:
                tables.append(extra)
    listed = runs if listed is None else listed
    trials = [r for r in runs if r.oir_trial]
    if trials:
        tables.append(oir_trials_table(trials))
    tables.append(runs_table(listed))
    every = group_runs([r for r in listed if not r.oir_trial])
    if every:
        tables.append(cells_by_run_table(every, run_columns,
                                         unknown_aggregated=any(not r.valid for r in runs)))
    return tables


def oir_trials_table(trials: list[RunData]) -> ReportTable:
    """OIR trials apart from the fault tables: each is a probe of one rate, no fault."""
    cols = [Column("rate ev/s", "rate", "events/s", None, 0),
            Column("reliability %", "reliability", "%", "total", 2, 100.0),
            *[Column(f"{p} p50 s", "latency_p50", "s", p) for p in PHASES],
            Column("verdict", "guarantee"), Column("validity", "validity")]
    rows = []
    def order(r: RunData) -> tuple:
        return (*(k or "" for k in r.key), number(r.params.get("rate")) or 0.0, r.id)

    for r in sorted(trials, key=order):
        keys = {"run": str(r.id), "topology": r.row.get("topology") or DASH,
                "pg": r.row.get("pg") or DASH}
        rows.append(Row(keys, 1, [
            Stat.of_values([number(r.params.get("rate"))]),
            Stat.of_values([number(r.row.get("reliability"))]),
            *[Stat.of_values([number((r.phases.get(p) or {}).get("latency_p50_s"))],
                             undefined=int(r.latency_undefined(p) is not None))
              for p in PHASES],
            r.row.get("guarantee") or DASH, r.validity_text]))
    return ReportTable("oir_trials", "OIR trials (rate probes, no fault; not in the tables "
                       "above)", [("run", "run"), ("topology", "topology"), ("pg", "PG")],
                       cols, rows, "pgval oir: the highest rate that stays 100 % reliable "
                       "with stable latency is the OIR (docs/performance.md).")
