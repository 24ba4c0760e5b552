"""What a report reads: runs from a results database (read-only), grouped and averaged.

Everything else in :mod:`pgval.report` starts from here — the tables, the plots and the
entry point — so this module imports none of them. The database is opened read-only,
so a report can run while an experiment matrix is still writing to it; columns and
tables that older databases lack (recovery metrics, unprocessed causes, per-phase
anomalies on the input's clock) are read when present.

Runs whose validity is ``unknown`` (``runs.valid = 0``: the run is no evidence,
docs/semantics.md) stay out unless the :class:`Selection` includes them or names runs by
id. Databases from before validity existed (``valid`` NULL) count as valid. Imported runs
(``pgval recheck RUN_DIR --store``: unsealed, or sealed only with the run's own
``SHA256SUMS``) are held apart the same way (:attr:`RunData.held_apart` says why): no seal
kept at the end of the run vouches for their numbers. Runs are grouped by the user's
``label`` too (``pgval check --label``), so unrelated results never pool.

A number is carried with what it is: *undefined* (a phase without outputs has no latency;
runs say why in their summary, older ones by ``latency_n = 0``) and *a lower bound* (the
run's schedule bounded it: the summary's ``*_bound`` keys, :mod:`pgval.checker.metrics`).
A :class:`Stat` counts both, so the tables print "undefined" and "≥", never a blank or 0.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sqlite3
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.checker.metrics import failure_cost_bound
from pgval.checker.recovery import recovery_bounds
from pgval.core.errors import UserMistake
from pgval.core.schema import CrashPoint, Fault, Guarantee, Topology
from pgval.core.shape import REPORTED, RunShape
from pgval.store.dbfile import StoreError, connect_readonly, json_object_cell
from pgval.store.results import SCHEMA_VERSION, SEALED_AT_IMPORT, UNSEALED_IMPORT

#: Display order of the matrix axes; unknown values sort after these, alphabetically.
TOPOLOGY_ORDER: tuple[str, ...] = (Topology.SST, Topology.MST, Topology.JOB)
PG_ORDER: tuple[str, ...] = (Guarantee.A1, Guarantee.E1, Guarantee.M1)
FAULT_ORDER: tuple[str, ...] = (Fault.NONE, Fault.DELAY_LT_TIMEOUT, Fault.DELAY_GT_TIMEOUT,
                                Fault.CRASH, Fault.DRIVER_CRASH)
#: Optional per-run recovery metrics (``runs`` columns added by newer stores).
RECOVERY_METRICS = (("downtime_s", "downtime"), ("control_max_gap_s", "control max gap"),
                    ("recovery_throughput_s", "throughput back"),
                    ("recovery_latency_s", "latency back"), ("catchup_s", "catch-up"))
RECOVERY_FLAGS = (("recovered", "recovered"), ("censored", "censored"))
DASH = "–"
UNDEFINED = "undefined"
#: What "hit the window that matters" means per crash point, said after "k/n".
CRASH_WINDOW = {CrashPoint.TIMED: "hit a batch in flight",
                CrashPoint.AFTER_SINK_WRITE: "halted after a sink write",
                CrashPoint.DURING_SINK_WRITE: "killed during a sink write"}


class ReportError(UserMistake, ValueError):
    """A plain one-sentence problem with the report's input: the database, the selection,
    where it is written (a ``ValueError`` too, as it always was to a caller)."""


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
    #: Also aggregate imported runs (unsealed, or sealed only at the import).
    include_unsealed: bool = False

    def keeps(self, run: RunData) -> bool:
        """Whether ``run`` enters aggregates: valid runs sealed at their end (or stored
        before seals, or a ``check``); others if asked, or when runs are named by id."""
        if self.run_ids is not None:
            return True
        return ((run.valid or self.include_unknown)
                and (run.held_apart is None or self.include_unsealed))

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
        if self.include_unsealed:
            parts.append("imported runs included")
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

    @functools.cached_property
    def params(self) -> dict[str, Any]:
        return json_object_cell(self.row.get("params"))

    @functools.cached_property
    def run_shape(self) -> RunShape:
        """The run's shape from its params, the row's own columns taking precedence."""
        columns = {k: _text(self.row[k]) for k in ("topology", "pg", "fault")
                   if self.row.get(k) is not None}
        columns.update({k: self.row[k] for k in REPORTED if self.row.get(k) is not None})
        return RunShape.of({**self.params, **columns})

    @property
    def shape(self) -> tuple[Any, ...]:
        """What of the run's shape a report compares (:data:`pgval.core.shape.REPORTED`;
        numbers as floats, defaults filled in)."""
        values: list[Any] = []
        for name in REPORTED:
            v = self.run_shape.value(name)
            if isinstance(v, int | float) and not isinstance(v, bool):
                v = number(v)  # a float, or None for NaN, infinities and damage
            elif v is not None and not isinstance(v, str):
                v = json.dumps(v, default=str)  # a list or object: compared as its text
            values.append(v)
        return tuple(values)

    @property
    def oir_trial(self) -> bool:
        """A trial of an OIR search: a rate probe, not a cell of the fault tables."""
        return bool(self.params.get("oir_trial"))

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        return (_text(self.row.get("topology")), _text(self.row.get("pg")),
                _text(self.row.get("fault")))

    @functools.cached_property
    def held_apart(self) -> str | None:
        """Why the run stays out of the tables unless asked (``--include-unsealed``), or
        None: an import, whose evidence no seal kept at the end of the run vouches for
        (``runs.sealed`` 2 or 3, or an import stored before those marks, ``sealed`` 0)."""
        sealed = self.row.get("sealed")
        if sealed == SEALED_AT_IMPORT:
            return ("imported: its evidence hashes came from the run's own SHA256SUMS at "
                    "the import, not from the end of the run")
        if sealed == UNSEALED_IMPORT or (sealed == 0 and json_object_cell(
                self.row.get("summary")).get("imported") is True):
            return "imported without evidence hashes (unsealed): nothing vouches for it"
        return None

    @property
    def label(self) -> str | None:
        """The user's name for the run (``pgval check --label``), None when it has none."""
        return _text(self.row.get("label")) or None

    @property
    def valid(self) -> bool:
        """False only for runs stored as unknown; NULL (older databases) counts as valid."""
        return self.row.get("valid") is None or bool(self.row.get("valid"))

    @property
    def validity_reasons(self) -> list[str]:
        text = self.row.get("validity_reasons")
        try:
            reasons = json.loads(text) if isinstance(text, str) and text else []
        except (ValueError, RecursionError):
            return [str(text)]
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
        return number(p.get(column))

    def latency_undefined(self, phase: str) -> str | None:
        """Why the phase's latency is undefined (None when it has one): the summary's reason,
        or, for runs stored before reasons, a stored phase with no latency measured."""
        stats = (self.summary.get("latency") or {}).get(phase)
        if isinstance(stats, dict) and "undefined" in stats:
            return str(stats["undefined"])
        row = self.phases.get(phase)
        if row and row.get("latency_n") == 0 and number(row.get("latency_p50_s")) is None:
            return "no output with a latency in this phase"
        return None

    def bounded(self, name: str, phase: str | None = None) -> bool:
        """Whether the number ``name`` is a lower bound: ``failure_cost``, a phase's latency
        ``max``, or a recovery number (``downtime``, ``recovery_throughput``, …)."""
        if phase is not None:
            stats = (self.summary.get("latency") or {}).get(phase)
            return isinstance(stats, dict) and stats.get(f"{name}_bound") == "lower"
        if self.summary.get(f"{name}_bound") == "lower":
            return True
        outage = self.summary.get("schedule_bound")
        if name == "failure_cost":  # the current rule on what any stored run kept
            recovered = self.row.get("recovered")
            return failure_cost_bound(outage if isinstance(outage, dict) else None,
                                      None if recovered is None else bool(recovered)) is not None
        return (isinstance(outage, dict)
                and f"{name}_bound" in recovery_bounds(self.row, outage))

    def undefined(self, name: str) -> bool:
        """Whether a run-level number (``failure_cost``) is undefined, by the summary's
        reason; older runs leave it blank (NULL), which says nothing."""
        return f"{name}_undefined" in self.summary

    @functools.cached_property
    def crash_window(self) -> tuple[str, bool] | None:
        """(what the window is, whether this run's crash hit it), from the inject entry of
        a crash fault's log; None when the log does not say (not a crash, an older log)."""
        inject = next((e for e in self.fault_log if e.get("step") == "inject"), None)
        if inject is None:
            return None
        entry = {**json_object_cell(inject.get("detail")), **inject}
        point = entry.get("crash_point")
        if point not in CRASH_WINDOW:
            return None
        if point == CrashPoint.TIMED:
            if "in_flight_batch" not in entry:
                return None
            return CRASH_WINDOW[point], entry["in_flight_batch"] is not None
        key = "batch" if point == CrashPoint.AFTER_SINK_WRITE else "hit_ms"
        return CRASH_WINDOW[point], entry.get(key) is not None and not entry.get("error")


@dataclass
class Group:
    key: tuple[str | None, str | None, str | None]
    runs: list[RunData]
    shape: tuple[Any, ...] = ()
    #: What sets this group's shape apart from the others' (empty when all share one),
    #: its label first when its runs have one.
    shape_label: str = ""
    #: The label its runs share (``pgval check --label``), None for runs without one.
    label: str | None = None

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def keys(self) -> dict[str, str]:
        topo, pg, fault = self.key
        out = {"topology": topo or DASH, "pg": pg or DASH, "fault": fault or DASH}
        if self.shape_label:
            out["shape"] = self.shape_label
        return out


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
        return connect_readonly(Path(db), newest=SCHEMA_VERSION)
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


def stored_run_columns(conn: sqlite3.Connection) -> set[str]:
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
            cause = str(c["cause"])
            run.causes[cause] = run.causes.get(cause, 0) + int(number(c["count"]) or 0)
            seen.add(run.id)
        for run in runs:  # a run with nothing unprocessed has no cause rows: all zero
            if run.id not in seen and (run.row.get("unprocessed") or 0) == 0:
                run.causes = {}
    if "fault_log" in tables:
        for e in _rows(conn, f"SELECT * FROM fault_log WHERE run_id IN ({marks}) "
                             "ORDER BY run_id, seq", list(by_id)):
            by_id[e["run_id"]].fault_log.append(e)
    for run in runs:
        run.summary = json_object_cell(run.row.get("summary"))
        if not run.fault_log:  # older stores kept the fault log only in the summary
            run.fault_log = [e for e in run.summary.get("fault_log") or []
                             if isinstance(e, dict)]
    return runs


def _text(value: object) -> str | None:
    """A stored label (topology, pg, fault) as text; None stays None."""
    if value is None or isinstance(value, str):
        return value
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _order(value: str | None, order: Sequence[str]) -> tuple[int, str]:
    if value is None:
        return (len(order) + 1, "")
    return (order.index(value), "") if value in order else (len(order), value)


def group_key_order(key: tuple[str | None, str | None, str | None]) -> tuple:
    return (_order(key[0], TOPOLOGY_ORDER), _order(key[1], PG_ORDER),
            _order(key[2], FAULT_ORDER))


def _shape_order(shape: tuple[Any, ...]) -> tuple:
    return tuple((v is not None, isinstance(v, str), v if v is not None else 0) for v in shape)


def group_runs(runs: Iterable[RunData]) -> list[Group]:
    """Repetitions of one topology × PG × fault, one label and one run shape together, in
    the paper's order. A group's ``shape_label`` names its label ("label nightly") and the
    shape parameters that differ from the other groups of its topology × PG × fault (so a
    matrix at each cell's own OIR is not labelled with rates, while two rates of one cell
    are)."""
    groups: dict[tuple, list[RunData]] = {}
    for run in runs:
        groups.setdefault((run.key, run.label, run.shape), []).append(run)
    order = sorted(groups, key=lambda ks: (group_key_order(ks[0]), ks[1] is not None,
                                           ks[1] or "", _shape_order(ks[2])))
    out = [Group(key, groups[(key, label, shape)], shape, label=label)
           for key, label, shape in order]
    for g, part in zip(out, cell_labels([(g.key, g.shape) for g in out]), strict=True):
        g.shape_label = ", ".join(t for t in (f"label {g.label}" if g.label else "", part)
                                  if t)
    return out


def cell_labels(cells: Sequence[tuple[tuple, tuple[Any, ...]]]) -> list[str]:
    """Each (topology × pg × fault, shape) said by the parameters that differ within some
    topology × pg × fault of the same fault, named for every one of that fault. Named only
    where it differed, a crash point labelled "@timed" in one cell and nothing in another
    split one shape into two groups ("crash", "crash @timed"), with empty panels in every
    matrix plot; a rate that differs only between cells (each at its own OIR) is no label."""
    shapes: dict[tuple, set[tuple[Any, ...]]] = {}
    for key, shape in cells:
        shapes.setdefault(key, set()).add(shape)
    named: dict[Any, set[int]] = {}
    for key, same in shapes.items():
        named.setdefault(key[2], set()).update(_varying(list(same)))
    return [", ".join(shape_part(REPORTED[i], shape[i]) for i in sorted(named[key[2]]))
            for key, shape in cells]


def _varying(shapes: Sequence[tuple[Any, ...]]) -> list[int]:
    """Indexes (into :data:`REPORTED`) of the parameters that differ among ``shapes``."""
    return [i for i in range(len(REPORTED)) if len({s[i] for s in shapes}) > 1]


def shape_part(name: str, value: Any) -> str:
    """One shape parameter as a reader says it: "2,000 ev/s", "45 s phases", "W 1,000 ms"."""
    if value is None:
        return f"{name} {DASH}"
    if name == "rate":
        return f"{value:,.0f} ev/s"
    if name == "phase_seconds":
        return f"{value:g} s phases"
    if name == "window_ms":
        return f"W {value:,.0f} ms"
    if name == "crash_point":
        return f"@{value}"
    if name == "restart":
        return f"restart {value}"
    if name == "restart_delay_s":
        return f"restart delay {value:g} s"
    if name in ("job", "sink"):  # /home/me/jobs/sessions.py:build as sessions.py:build
        target, _, function = str(value).rpartition(":")
        short = f"{target.rsplit('/', 1)[-1]}:{function}" if function else str(value)
        return short if name == "job" else f"sink {short}"
    if name == "target":
        return f"target {value}"
    if name == "partition":
        return f"cut {value}"
    if name == "schedule":  # the parts' kinds, in order (the report's column stays short)
        try:
            parts = json.loads(value) if isinstance(value, str) else value
            return "schedule " + "+".join(str(p.get("fault")) for p in parts)
        except (ValueError, TypeError, AttributeError):
            return "schedule"
    return str(value)


# ---------------------------------------------------------------------------- aggregation
@dataclass(frozen=True)
class Stat:
    """Mean ± sample stdev over the runs that have a value; ``of`` = runs in the group;
    ``undefined`` = runs whose value is undefined (a measurement, e.g. no output in the
    phase), ``bounded`` = runs whose value is a lower bound (then so is the mean)."""

    mean: float | None
    sd: float | None
    n: int
    of: int
    undefined: int = 0
    bounded: int = 0

    @classmethod
    def of_values(cls, values: Iterable[float | None], of: int | None = None,
                  undefined: int = 0, bounded: int = 0) -> Stat:
        vals = [x for x in map(number, values) if x is not None]
        total = len(vals) if of is None else of
        if not vals:
            return cls(None, None, 0, total, undefined)
        sd = statistics.stdev(vals) if len(vals) >= 2 else None
        return cls(statistics.fmean(vals), sd, len(vals), total, undefined, bounded)

    def text(self, decimals: int = 2, scale: float = 1.0) -> str:
        if self.mean is None:
            return UNDEFINED if self.undefined else DASH
        out = ("≥ " if self.bounded else "") + f"{self.mean * scale:,.{decimals}f}"
        if self.sd is not None:
            out += f" ± {self.sd * scale:,.{decimals}f}"
        if self.n < self.of:
            out += f" (n={self.n}" + (f", {self.undefined} {UNDEFINED}" if self.undefined
                                      else "") + ")"
        return out

    def flags(self) -> str:
        """What the number is besides a mean, for a format without "≥" (the CSV's text)."""
        parts = [f"lower bound ({self.bounded}/{self.n} runs)"] if self.bounded else []
        if self.undefined:
            parts.append(f"{UNDEFINED} in {self.undefined}/{self.of} runs")
        return "; ".join(parts)


#: No metric pgval stores comes near this (counts stay below 2^63 ≈ 9.2e18, times and rates
#: far below): a larger stored value is damage, read as missing, so that sums, means and
#: plot limits stay finite (1e308 + 1e308 overflowed fsum).
MAX_ABS = 1e30


def number(v: object) -> float | None:
    """A stored value as a float; None for NULL, NaN, infinities, magnitudes beyond
    :data:`MAX_ABS` and anything not a number."""
    if v is None or isinstance(v, bytes):
        return None
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and abs(x) <= MAX_ABS else None
