"""``pgval report``: aggregate stored runs over repetitions into the paper's tables.

Runs are grouped by topology × PG × fault; every number is the mean over the
group's repetitions with the sample standard deviation beside it (omitted when
a group has one run, since one run says nothing about spread). The same table
model renders to a terminal (rich), GitHub Markdown, one tidy CSV, or one
self-contained HTML page with the plots inlined, so every format shows the same
numbers.

The report only reads the database (opened read-only), so it can run while an
experiment matrix is still writing to it. Columns and tables that older
databases lack (recovery metrics, unprocessed causes, per-phase anomalies on the
input's clock) are shown when present.

Runs whose validity is ``unknown`` (``runs.valid = 0``: the run is no evidence,
docs/semantics.md) stay out of every aggregate unless ``include_unknown`` is set;
the header says how many were left out, and the run list shows each with its
first reason. Databases from before validity existed (``valid`` NULL) count as valid.

CSV layout (one file, long/tidy so pandas can pivot it)::

    table, topology, pg, fault, phase, metric, unit, mean, sd, n, text

one line per table cell; ``text`` holds non-numeric cells (verdicts, k/n flags).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import html
import io
import json
import math
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from pgval.dbfile import StoreError, connect_readonly
from pgval.schema import PHASES

Format = Literal["terminal", "markdown", "csv", "html"]
FORMATS: tuple[str, ...] = ("terminal", "markdown", "csv", "html")

#: Display order of the matrix axes; unknown values sort after these, alphabetically.
TOPOLOGY_ORDER = ("sst", "mst")
PG_ORDER = ("a1", "e1")
FAULT_ORDER = ("none", "delay-lt-timeout", "delay-gt-timeout", "crash", "driver-crash")
#: The paper's names for the faults (Table 4).
FAULT_LABELS = {"none": "No fault", "delay-lt-timeout": "PD < TO",
                "delay-gt-timeout": "PD > TO", "crash": "Process crash",
                "driver-crash": "Driver crash"}
#: Optional per-run recovery metrics (``runs`` columns added by newer stores).
RECOVERY_METRICS = (("downtime_s", "downtime"), ("control_max_gap_s", "control max gap"),
                    ("recovery_throughput_s", "throughput back"),
                    ("recovery_latency_s", "latency back"), ("catchup_s", "catch-up"))
RECOVERY_FLAGS = (("recovered", "recovered"), ("censored", "censored"))
CAUSES = ("late", "in-flight at end", "lost")
DASH = "–"


class ReportError(ValueError):
    """A plain one-sentence problem with the report's input (the CLI shows it as is)."""


# ---------------------------------------------------------------------------- selection
@dataclass(frozen=True)
class Selection:
    """Which runs a report or matrix plot covers; ``None`` means no filter."""

    topology: str | None = None
    pg: str | None = None
    fault: str | None = None
    kind: str | None = None
    run_ids: tuple[int, ...] | None = None
    status: str | None = "complete"
    #: Also aggregate runs whose validity is unknown (they are not evidence).
    include_unknown: bool = False

    def keeps(self, run: RunData) -> bool:
        """Whether ``run`` enters aggregates: valid runs, all runs if asked or named by id."""
        return run.valid or self.include_unknown or self.run_ids is not None

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        args: list[Any] = []
        for col in ("topology", "pg", "fault", "kind", "status"):
            value = getattr(self, col)
            if value is not None:
                clauses.append(f"{col} = ?")
                args.append(value)
        if self.run_ids is not None:
            ids = [int(i) for i in self.run_ids]
            clauses.append(f"id IN ({', '.join('?' * len(ids)) or 'NULL'})")
            args.extend(ids)
        return (" AND ".join(clauses) or "1 = 1"), args

    def describe(self) -> str:
        parts = [f"{c}={getattr(self, c)}" for c in ("topology", "pg", "fault", "kind", "status")
                 if getattr(self, c) is not None]
        if self.run_ids is not None:
            parts.append(f"runs={','.join(map(str, self.run_ids))}")
        if self.include_unknown:
            parts.append("unknown runs included")
        return ", ".join(parts) or "all runs"


# ---------------------------------------------------------------------------- loading
@dataclass
class RunData:
    """One stored run: its ``runs`` row, per-phase rows and unprocessed causes (if stored)."""

    row: dict[str, Any]
    phases: dict[str, dict[str, Any]]
    causes: dict[str, int] | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    fault_log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> int:
        return int(self.row["id"])

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        return self.row.get("topology"), self.row.get("pg"), self.row.get("fault")

    @property
    def valid(self) -> bool:
        """False only for runs stored as unknown; NULL (older databases) counts as valid."""
        return self.row.get("valid") is None or bool(self.row.get("valid"))

    @property
    def validity_reasons(self) -> list[str]:
        try:
            reasons = json.loads(self.row.get("validity_reasons") or "[]")
        except ValueError:
            return [str(self.row.get("validity_reasons"))]
        return [str(r) for r in reasons] if isinstance(reasons, list) else [str(reasons)]

    @property
    def validity_text(self) -> str:
        """"valid", or "unknown: <first reason>" (and how many more)."""
        if self.valid:
            return "valid"
        reasons = self.validity_reasons
        if not reasons:
            return "unknown"
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        return f"unknown: {reasons[0]}{more}"

    def phase_value(self, phase: str, column: str) -> float | None:
        """A phase metric, or None when the phase saw no expected input (nothing to judge)."""
        p = self.phases.get(phase)
        if not p or not p.get("expected"):
            return None
        return _num(p.get(column))


@dataclass
class Group:
    key: tuple[str | None, str | None, str | None]
    runs: list[RunData]

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def keys(self) -> dict[str, str]:
        topo, pg, fault = self.key
        return {"topology": topo or DASH, "pg": pg or DASH, "fault": fault or DASH}


def connect(db: Path | str | Any) -> sqlite3.Connection:
    """A read-only connection; also accepts a connection, ResultsStore or sqlite-utils Database.

    Read-only so that a report never creates a file or tables, nor locks out a running
    matrix; the path is taken literally (``a#b.db`` is that file, not a URI).
    """
    if isinstance(db, sqlite3.Connection):
        return db
    inner = getattr(db, "db", db)  # ResultsStore → sqlite_utils.Database
    conn = getattr(inner, "conn", None)
    if isinstance(conn, sqlite3.Connection):
        return conn
    try:
        return connect_readonly(Path(db))
    except StoreError as exc:
        raise ReportError(str(exc)) from exc


@contextlib.contextmanager
def opened(db: Path | str | Any) -> Iterator[sqlite3.Connection]:
    """:func:`connect`, closing the connection afterwards only if it was opened here."""
    conn = connect(db)
    try:
        yield conn
    finally:
        if conn is not db and conn is not getattr(getattr(db, "db", db), "conn", None):
            conn.close()


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info([{table}])")}


def _has_rows(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute(f"SELECT EXISTS (SELECT 1 FROM [{table}])").fetchone()[0] == 1


def _stored_run_columns(conn: sqlite3.Connection) -> set[str]:
    """Columns of ``runs`` that hold results. Recovery columns count only once some run
    has a value in one of them: a store declares them up front (and migrates older files
    to have them), where older stores added them with the first stored recovery, so an
    older database reports as it always did."""
    columns = _columns(conn, "runs")
    recovery = [c for c, _ in (*RECOVERY_METRICS, *RECOVERY_FLAGS) if c in columns]
    if recovery and not conn.execute(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE "
            + " OR ".join(f"[{c}] IS NOT NULL" for c in recovery) + ")").fetchone()[0]:
        columns -= set(recovery)
    return columns


def _rows(conn: sqlite3.Connection, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
    cur = conn.execute(sql, list(args))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def load_runs(db: Path | str | Any, selection: Selection | None = None) -> list[RunData]:
    """The selected runs with their phase rows, in id order.

    Unknown runs are left out unless the selection includes them (or names runs by id).
    """
    conn = connect(db)
    tables = _tables(conn)
    if "runs" not in tables:
        raise ReportError("the database has no runs table (is it a pgval results database?)")
    selection = selection or Selection()
    where, args = selection.where()
    runs = [run for run in (RunData(row=r, phases={}) for r in
                            _rows(conn, f"SELECT * FROM runs WHERE {where} ORDER BY id", args))
            if selection.keeps(run)]
    if not runs:
        return []
    by_id = {r.id: r for r in runs}
    marks = ", ".join("?" * len(by_id))
    if "phase_results" in tables:
        for p in _rows(conn, f"SELECT * FROM phase_results WHERE run_id IN ({marks})",
                       list(by_id)):
            by_id[p["run_id"]].phases[p["phase"]] = p
    # Declared up front by the store: causes are known once any were stored (batch progress).
    if "unprocessed_causes" in tables and _has_rows(conn, "unprocessed_causes"):
        seen: set[int] = set()
        for c in _rows(conn, "SELECT run_id, cause, count FROM unprocessed_causes "
                             f"WHERE run_id IN ({marks})", list(by_id)):
            run = by_id[c["run_id"]]
            if run.causes is None:
                run.causes = {}
            run.causes[c["cause"]] = run.causes.get(c["cause"], 0) + int(c["count"] or 0)
            seen.add(run.id)
        for run in runs:  # a run with nothing unprocessed has no cause rows: all zero
            if run.id not in seen and (run.row.get("unprocessed") or 0) == 0:
                run.causes = {}
    if "fault_log" in tables:
        for e in _rows(conn, f"SELECT * FROM fault_log WHERE run_id IN ({marks}) "
                             "ORDER BY run_id, seq", list(by_id)):
            by_id[e["run_id"]].fault_log.append(e)
    for run in runs:
        try:
            run.summary = json.loads(run.row.get("summary") or "{}")
        except ValueError:
            run.summary = {}
        if not run.fault_log:  # older stores kept the fault log only in the summary
            run.fault_log = [e for e in run.summary.get("fault_log") or []
                             if isinstance(e, dict)]
    return runs


def _order(value: str | None, order: Sequence[str]) -> tuple[int, str]:
    if value is None:
        return (len(order) + 1, "")
    return (order.index(value), "") if value in order else (len(order), value)


def group_key_order(key: tuple[str | None, str | None, str | None]) -> tuple:
    return (_order(key[0], TOPOLOGY_ORDER), _order(key[1], PG_ORDER),
            _order(key[2], FAULT_ORDER))


def group_runs(runs: Iterable[RunData]) -> list[Group]:
    """Repetitions of one topology × PG × fault together, in the paper's order."""
    groups: dict[tuple, list[RunData]] = {}
    for run in runs:
        groups.setdefault(run.key, []).append(run)
    return [Group(k, groups[k]) for k in sorted(groups, key=group_key_order)]


# ---------------------------------------------------------------------------- aggregation
@dataclass(frozen=True)
class Stat:
    """Mean ± sample stdev over the runs that have a value; ``of`` = runs in the group."""

    mean: float | None
    sd: float | None
    n: int
    of: int

    @classmethod
    def of_values(cls, values: Iterable[float | None], of: int | None = None) -> Stat:
        vals = [float(v) for v in values if v is not None and not _isnan(v)]
        total = len(vals) if of is None else of
        if not vals:
            return cls(None, None, 0, total)
        sd = statistics.stdev(vals) if len(vals) >= 2 else None
        return cls(statistics.fmean(vals), sd, len(vals), total)

    def text(self, decimals: int = 2, scale: float = 1.0) -> str:
        if self.mean is None:
            return DASH
        out = f"{self.mean * scale:,.{decimals}f}"
        if self.sd is not None:
            out += f" ± {self.sd * scale:,.{decimals}f}"
        if self.n < self.of:
            out += f" (n={self.n})"
        return out


def _isnan(v: object) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _num(v: object) -> float | None:
    if v is None or _isnan(v):
        return None
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


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


def _stat(group: Group, fn: Any) -> Stat:
    return Stat.of_values((fn(r) for r in group.runs), of=group.n)


def reliability_table(groups: list[Group]) -> ReportTable:
    cols = [Column(f"{p} reliability %", "reliability", "%", p, 2, 100.0) for p in PHASES]
    cols += [Column("run reliability %", "reliability", "%", "total", 2, 100.0),
             Column("correctness %", "correctness", "%", "total", 2, 100.0)]
    rows = []
    for g in groups:
        vals: list[Cell] = [_stat(g, lambda r, p=p: r.phase_value(p, "reliability"))
                            for p in PHASES]
        vals.append(_stat(g, lambda r: _num(r.row.get("reliability"))))
        vals.append(_stat(g, lambda r: _num(r.row.get("correctness"))))
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("reliability", "(a) Reliability and correctness per phase", GROUP_KEYS,
                       cols, rows, "Reliability: expected IDs with exactly one own occurrence "
                       "and no incorrect one. Correctness (share of outputs whose counts match "
                       "the oracle) is stored per run only. – = no expected input in that phase.")


def throughput_table(groups: list[Group]) -> ReportTable:
    cols = [Column(f"{p} ev/s", "reliable_throughput", "events/s", p, 0) for p in PHASES]
    rows = [Row(g.keys, g.n, [_stat(g, lambda r, p=p: r.phase_value(p, "throughput"))
                              for p in PHASES]) for g in groups]
    return ReportTable("throughput", "(b) Reliable throughput per phase (events/s)", GROUP_KEYS,
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
                _stat(g, lambda r, p=p, s=s: _num((r.phases.get(p) or {}).get(s)))
                for s in sources]
            rows.append(Row({**g.keys, "phase": p}, g.n, vals))
    return ReportTable("latency", "(c) Latency per phase (s): paper's definition, Karimov's "
                       "beside it", [*GROUP_KEYS, ("phase", "phase")], cols, rows,
                       "Paper: output ingress − ingress of the first input that closes the "
                       "window. Karimov: − ingress of the window's last input.")


def failure_cost_table(groups: list[Group]) -> ReportTable:
    rows = [Row(g.keys, g.n, [_stat(g, lambda r: _num(r.row.get("failure_cost_s")))])
            for g in groups]
    return ReportTable("failure_cost", "(d) Failure cost (s), the paper's Table 4 layout",
                       [("topology", "Topology"), ("pg", "PG"), ("fault", "Fault")],
                       [Column("Spark", "failure_cost", "s", None, 1)], rows,
                       "Max paper latency in failure + recovery − median control latency.",
                       key_format={"topology": str.upper, "pg": str.upper,
                                   "fault": lambda f: FAULT_LABELS.get(f, f)})


def _verdicts(group: Group) -> str:
    counts: dict[str, int] = {}
    for r in group.runs:
        v = r.row.get("guarantee") or "?"
        counts[v] = counts.get(v, 0) + 1
    order = ("exactly-once", "at-least-once", "at-most-once", "none", "unknown")
    keys = sorted(counts, key=lambda v: (order.index(v) if v in order else len(order), v))
    return ", ".join(f"{v} ×{counts[v]}" for v in keys)


def anomalies_table(groups: list[Group]) -> ReportTable:
    names = ("duplicate", "incorrect", "unprocessed", "malformed")
    cols = [Column(n, n, "count", None, 1) for n in names]
    cols.append(Column("guarantee verdicts", "guarantee"))
    rows = []
    for g in groups:
        vals: list[Cell] = [_stat(g, lambda r, n=n: _num(r.row.get(n))) for n in names]
        vals.append(_verdicts(g))
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("anomalies", "(e) Anomalies (mean per run) and guarantee verdicts",
                       GROUP_KEYS, cols, rows,
                       "A verdict is the strongest guarantee a run is consistent with.")


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
            vals: list[Cell] = [_stat(g, lambda r, p=p, c=c: _num((r.phases.get(p) or {})
                                                                   .get(c)))
                                for c, _, _ in specs]
            rows.append(Row({**g.keys, "phase": p}, g.n, vals))
    return ReportTable("phase_anomalies", "(e2) Anomalies per phase, on both clocks (mean per "
                       "run)", [*GROUP_KEYS, ("phase", "phase")], cols, rows,
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
        vals: list[Cell] = [_stat(g, lambda r, c=c: _num(r.row.get(c))) for c, _ in metrics]
        vals += [_flag_text(g, c) for c, _ in flags]
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("recovery", "(f) Recovery", GROUP_KEYS, cols, rows,
                       "Seconds. Downtime: longest output gap ending after T2 (beside "
                       "control's longest). Throughput/latency back: from T2 until back near the "
                       "control baseline. Catch-up: latency back − downtime. recovered/censored: "
                       "runs flagged / runs with the flag.")


def causes_table(groups: list[Group]) -> ReportTable | None:
    if not any(r.causes is not None for g in groups for r in g.runs):
        return None
    cols = [Column(c, "unprocessed_" + c.replace(" ", "_").replace("-", "_"), "count", None, 1)
            for c in CAUSES]
    rows = []
    for g in groups:
        vals: list[Cell] = [_stat(g, lambda r, c=c: None if r.causes is None
                                  else float(r.causes.get(c, 0))) for c in CAUSES]
        rows.append(Row(g.keys, g.n, vals))
    return ReportTable("unprocessed_causes", "(g) Why events were unprocessed (mean per run)",
                       GROUP_KEYS, cols, rows,
                       "late = behind the watermark; in-flight at end = still in the pipeline "
                       "when the run stopped; lost = neither.")


def runs_table(runs: list[RunData]) -> ReportTable:
    """One line per run, to find a run's plot and the fault's actual timing."""
    cols = [Column("seed", "seed"), Column("repeat", "repeat"), Column("verdict", "guarantee"),
            Column("validity", "validity"),
            Column("reliability %", "reliability", "%", "total", 2, 100.0),
            Column("failure cost s", "failure_cost", "s", None, 1),
            Column("inject lag s", "inject_lag", "s", None, 2),
            Column("remove lag s", "remove_lag", "s", None, 2)]
    rows = []
    for r in runs:
        lags = fault_lags(r)
        rows.append(Row({"run": str(r.id), "topology": r.row.get("topology") or DASH,
                         "pg": r.row.get("pg") or DASH, "fault": r.row.get("fault") or DASH},
                        1, [_str(r.row.get("seed")), _str(r.row.get("repeat")),
                            r.row.get("guarantee") or DASH, r.validity_text,
                            Stat.of_values([_num(r.row.get("reliability"))]),
                            Stat.of_values([_num(r.row.get("failure_cost_s"))]),
                            Stat.of_values([lags.get("inject")]),
                            Stat.of_values([lags.get("remove")])]))
    return ReportTable("runs", "Runs", [("run", "run"), *GROUP_KEYS], cols, rows,
                       "Lag = actual − intended fault time, from the fault log. Validity "
                       "unknown: the run is no evidence (first reason shown); such runs stay "
                       "out of the tables above unless --include-unknown.")


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def fault_lags(run: RunData) -> dict[str, float]:
    """Actual − intended time (s) of the first inject and remove step."""
    out: dict[str, float] = {}
    for e in run.fault_log:
        if (e.get("step") in ("inject", "remove")
                and e.get("actual_ms") is not None and e.get("intended_ms") is not None):
            out.setdefault(e["step"], (e["actual_ms"] - e["intended_ms"]) / 1000.0)
    return out


def build_tables(runs: list[RunData], run_columns: set[str],
                 listed: list[RunData] | None = None) -> list[ReportTable]:
    """Tables (a)–(g) over ``runs``, then the run list of ``listed`` (default: ``runs``).

    Optional tables only when stored.
    """
    groups = group_runs(runs)
    tables = [reliability_table(groups), throughput_table(groups), latency_table(groups),
              failure_cost_table(groups), anomalies_table(groups),
              phase_anomalies_table(groups)]
    for extra in (recovery_table(groups, run_columns), causes_table(groups)):
        if extra is not None:
            tables.append(extra)
    tables.append(runs_table(runs if listed is None else listed))
    return tables


# ---------------------------------------------------------------------------- rendering
def render_terminal(tables: list[ReportTable], console: Console, header: str) -> None:
    console.print(f"[bold]{header}[/]")
    for t in tables:
        table = Table(title=t.title, title_justify="left", caption=t.note or None,
                      caption_justify="left")
        for _, h in t.key_headers:
            table.add_column(h, justify="left", no_wrap=True)
        if t.name != "runs":
            table.add_column("n", justify="right")
        for c in t.columns:
            table.add_column(c.header, justify="left" if c.metric == "guarantee" else "right")
        prev: tuple[str, str] | None = None
        for row in t.rows:
            head = (row.keys.get("topology", ""), row.keys.get("pg", ""))
            if prev is not None and head != prev:
                table.add_section()
            prev = head
            cells = [t.key_text(row, k) for k, _ in t.key_headers]
            if t.name != "runs":
                cells.append(str(row.n))
            cells += [t.cell_text(c, v) for c, v in zip(t.columns, row.values, strict=True)]
            table.add_row(*cells)
        console.print()
        console.print(table)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(tables: list[ReportTable], header: str,
                    images: Sequence[tuple[str, str]] = ()) -> str:
    lines = ["# pgval report", "", header, ""]
    for t in tables:
        lines += [f"## {t.title}", ""]
        heads = [h for _, h in t.key_headers] + (["n"] if t.name != "runs" else [])
        heads += [c.header for c in t.columns]
        aligns = [":--"] * len(t.key_headers) + (["--:"] if t.name != "runs" else [])
        aligns += [":--" if c.metric == "guarantee" else "--:" for c in t.columns]
        lines.append("| " + " | ".join(_md_cell(h) for h in heads) + " |")
        lines.append("| " + " | ".join(aligns) + " |")
        for row in t.rows:
            cells = [t.key_text(row, k) for k, _ in t.key_headers]
            if t.name != "runs":
                cells.append(str(row.n))
            cells += [t.cell_text(c, v) for c, v in zip(t.columns, row.values, strict=True)]
            lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        if t.note:
            lines += ["", f"_{t.note}_"]
        lines.append("")
    if images:
        lines += ["## Plots", ""]
        for caption, ref in images:
            lines += [f"![{caption}]({ref})", ""]
    return "\n".join(lines)


CSV_FIELDS = ("table", "topology", "pg", "fault", "phase", "metric", "unit", "mean", "sd", "n",
              "text")


def render_csv(tables: list[ReportTable]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for t in tables:
        for row in t.rows:
            base = {"table": t.name, "topology": row.keys.get("topology", ""),
                    "pg": row.keys.get("pg", ""), "fault": row.keys.get("fault", ""),
                    "n": row.n}
            if t.name == "runs":
                base["table"] = f"runs:{row.keys['run']}"
            for c, v in zip(t.columns, row.values, strict=True):
                rec = {**base, "phase": c.phase or row.keys.get("phase", ""),
                       "metric": c.metric, "unit": c.unit}
                if isinstance(v, Stat):
                    rec.update(mean=_csv_num(v.mean, c.scale), sd=_csv_num(v.sd, c.scale),
                               n=v.n)
                elif v is not None:
                    rec["text"] = v
                w.writerow(rec)
    return buf.getvalue()


def _csv_num(v: float | None, scale: float) -> str:
    return "" if v is None else f"{v * scale:.6g}"


HTML_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1400px;padding:0 1rem;color:#222;line-height:1.4}
h1{margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{padding:.25rem .6rem;border-bottom:1px solid #e5e5e5;white-space:nowrap}
th{background:#f4f4f4;text-align:left;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.sep td{border-top:2px solid #bbb}
p.note{color:#555;font-size:.85rem;margin:.2rem 0 1rem}
.meta{color:#555}figure{margin:1rem 0}figcaption{color:#444;font-size:.9rem}
img{max-width:100%;height:auto;border:1px solid #eee}
details{margin:.4rem 0}summary{cursor:pointer}
"""


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(tables: list[ReportTable], header: str,
                matrix_images: Sequence[tuple[str, Path]] = (),
                run_images: Sequence[tuple[str, Path]] = ()) -> str:
    esc = html.escape
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>pgval report</title>", f"<style>{HTML_CSS}</style></head><body>",
             "<h1>pgval report</h1>", f"<p class=\"meta\">{esc(header)}</p>"]
    for t in tables:
        parts.append(f"<h2>{esc(t.title)}</h2><table><thead><tr>")
        heads = [h for _, h in t.key_headers] + (["n"] if t.name != "runs" else [])
        heads += [c.header for c in t.columns]
        parts.append("".join(f"<th>{esc(h)}</th>" for h in heads) + "</tr></thead><tbody>")
        prev: tuple[str, str] | None = None
        for row in t.rows:
            head = (row.keys.get("topology", ""), row.keys.get("pg", ""))
            cls = " class=\"sep\"" if prev is not None and head != prev else ""
            prev = head
            cells = [f"<td>{esc(t.key_text(row, k))}</td>" for k, _ in t.key_headers]
            if t.name != "runs":
                cells.append(f"<td class=\"num\">{row.n}</td>")
            for c, v in zip(t.columns, row.values, strict=True):
                klass = "" if c.metric == "guarantee" else " class=\"num\""
                cells.append(f"<td{klass}>{esc(t.cell_text(c, v))}</td>")
            parts.append(f"<tr{cls}>{''.join(cells)}</tr>")
        parts.append("</tbody></table>")
        if t.note:
            parts.append(f"<p class=\"note\">{esc(t.note)}</p>")
    if matrix_images:
        parts.append("<h2>Matrix plots</h2>")
        for caption, path in matrix_images:
            parts.append(f"<figure><img alt=\"{esc(caption)}\" src=\"{_data_uri(path)}\">"
                         f"<figcaption>{esc(caption)}</figcaption></figure>")
    if run_images:
        parts.append("<h2>Runs over time</h2>")
        for caption, path in run_images:
            parts.append(f"<details><summary>{esc(caption)}</summary><figure>"
                         f"<img alt=\"{esc(caption)}\" src=\"{_data_uri(path)}\"></figure>"
                         "</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------- entry point
def build_report(db_path: Path | str, runs: Selection | Sequence[int] | None = None,
                 fmt: Format = "terminal", out: Path | None = None,
                 plots_dir: Path | None = None, *, console: Console | None = None,
                 run_plots: bool = True, width: int = 160) -> str | Path:
    """Render the report; returns the text, or ``out`` once the text is written there.

    ``runs``: a :class:`Selection` (default: all complete runs) or explicit run ids.
    ``plots_dir``: also write PNGs there (matrix + one per run unless ``run_plots`` is
    False) and reference them (Markdown links; HTML always inlines its plots, rendering
    them in a temporary directory when ``plots_dir`` is None). ``console``: for
    ``terminal``, also print the tables there with colours.
    """
    if fmt not in FORMATS:
        raise ReportError(f"unknown report format {fmt!r}; choose from {', '.join(FORMATS)}")
    selection = (runs if isinstance(runs, Selection) else
                 Selection() if runs is None else Selection(run_ids=tuple(runs)))
    with opened(db_path) as conn:
        text = _build(conn, str(db_path), selection, fmt, out, plots_dir, console, run_plots,
                      width)
    if out is None:
        return text
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def _build(conn: sqlite3.Connection, db_name: str, selection: Selection, fmt: str,
           out: Path | None, plots_dir: Path | None, console: Console | None,
           run_plots: bool, width: int) -> str:
    listed = load_runs(conn, replace(selection, include_unknown=True))
    loaded = [r for r in listed if selection.keeps(r)]
    left_out = len(listed) - len(loaded)
    if not listed:
        raise ReportError(f"no runs in {db_name} match ({selection.describe()})")
    if not loaded:
        raise ReportError(f"all {left_out} runs in {db_name} that match "
                          f"({selection.describe()}) are unknown, not evidence; "
                          "use --include-unknown to report them anyway")
    tables = build_tables(loaded, _stored_run_columns(conn), listed)
    unknown = sum(not r.valid for r in loaded)
    header = (f"{len(loaded)} runs in {len(group_runs(loaded))} groups from {db_name} "
              f"({selection.describe()}); mean ± sample stdev over repetitions, n = runs; "
              f"generated {time.strftime('%Y-%m-%d %H:%M:%S')}")
    if left_out:
        header += (f"; {left_out} unknown run{'s' if left_out != 1 else ''} left out "
                   "(use --include-unknown)")
    elif unknown:
        header += f"; {unknown} unknown run{'s' if unknown != 1 else ''} included"

    images: list[tuple[str, Path]] = []
    run_images: list[tuple[str, Path]] = []
    with contextlib.ExitStack() as stack:
        if plots_dir is not None or fmt == "html":
            from pgval.plots import plot_matrix, plot_run, run_caption

            target = (Path(plots_dir) if plots_dir is not None else
                      Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgval-"))))
            target.mkdir(parents=True, exist_ok=True)
            for path in plot_matrix(conn, target / "matrix-", selection):
                images.append((f"matrix: {path.stem.removeprefix('matrix-')}", path))
            if run_plots:
                for run in loaded:
                    path = plot_run(conn, run.id, target / f"run-{run.id}.png")
                    run_images.append((run_caption(run), path))
        if fmt == "terminal":
            rec = Console(record=True, width=width, file=io.StringIO(), color_system=None)
            render_terminal(tables, rec, header)
            if console is not None:
                render_terminal(tables, console, header)
            if plots_dir is not None:
                note = f"plots: {len(images) + len(run_images)} PNGs in {plots_dir}"
                rec.print(note)
                if console is not None:
                    console.print(note)
            text = rec.export_text()
        elif fmt == "markdown":
            base = Path(out).parent if out is not None else None
            refs = [(c, _relative(p, base)) for c, p in [*images, *run_images]]
            text = render_markdown(tables, header, refs)
        elif fmt == "csv":
            text = render_csv(tables)
        else:  # inline the PNGs before the temporary directory goes away
            text = render_html(tables, header, images, run_images)
    return text


def _relative(path: Path, base: Path | None) -> str:
    if base is None:
        return path.as_posix()
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()
