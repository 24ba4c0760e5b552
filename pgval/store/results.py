"""SQLite results store (sqlite-utils): one row per run, per phase, per witness, per second.

The schema is flat so that ``sqlite3 results.db`` or Datasette answers questions
directly; ``pgval report`` reads the same tables. Runs are created with status
``running`` and finished as ``complete``/``failed``, so an interrupted matrix
can tell which runs to redo.

Every table is declared here (:data:`TABLES`); nothing is created by a first insert.
The schema has a version (``PRAGMA user_version``, :data:`SCHEMA_VERSION`) and an
ordered list of migrations (:data:`MIGRATIONS`); creating or migrating happens once,
under ``BEGIN IMMEDIATE``, so processes opening a fresh file together never race. Every
write is one ``BEGIN IMMEDIATE`` transaction: taking the write lock first means a read
inside never has to upgrade to a write, which SQLite refuses at once ("database is
locked") when another writer got in between. A run carries its :class:`Owner`, so a
``running`` row of a live pgval is never taken for a stale one.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from pgval.checker.anomalies import per_second
from pgval.checker.evaluate import Evaluation
from pgval.checker.validity import Validity, evaluation_reasons
from pgval.core.files import write_private
from pgval.core.redact import redact_record
from pgval.core.schema import PHASES
from pgval.host.identity import Owner
from pgval.store.dbfile import StoreError, connect, plain_error

RUN_COLUMNS = {
    "id": int, "created_at": float, "finished_at": float, "kind": str, "status": str,
    "topology": str, "pg": str, "fault": str, "window_ms": int, "seed": int, "repeat": int,
    "params": str, "error": str, "guarantee": str, "expected": int, "processed": int,
    "duplicate": int, "incorrect": int, "unprocessed": int, "malformed": int,
    "malformed_inputs": int, "reliability": float, "correctness": float, "outputs": int,
    "failure_cost_s": float, "t_start": int, "t2": int, "t3": int, "summary": str,
    # 1 = valid evidence, 0 = unknown (reasons in validity_reasons, a JSON list); NULL in
    # databases written before validity existed (read as valid).
    "valid": int, "validity_reasons": str, "run_dir": str,
    # Recovery (pgval/checker/recovery.py, Recovery.as_dict; booleans as 0/1).
    "downtime_s": float, "control_max_gap_s": float, "recovery_throughput_s": float,
    "recovery_latency_s": float, "catchup_s": float, "recovered": int, "censored": int,
    "steady_control_s": float, "baseline_throughput": float, "note": str,
    # The pgval process the run belongs to (JSON of Owner.as_dict()); NULL in older rows.
    "owner": str,
    # 1: the run's evidence hashes are in evidence_files (stored at finish_run); 0: finished
    # without evidence (a `pgval check`); 2: imported, its hashes taken from the run's own
    # SHA256SUMS (SEALED_AT_IMPORT); 3: imported without hashes (UNSEALED_IMPORT); NULL:
    # stored before evidence hashes existed.
    "sealed": int,
    # The validity reasons with their kinds, a JSON list of {"kind", "text"} (what recheck
    # compares, by kind); NULL in runs stored before kinds (validity_reasons only).
    "validity": str,
    # Incorrect occurrences whose output arrived before their input (part of incorrect);
    # NULL in runs stored before they were told apart.
    "output_before_input": int,
    # A name the user gave the run (`pgval check --label`): `pgval report` groups by it.
    # NULL when none was given, and in runs stored before labels.
    "label": str,
}
#: Anomalies per second by kind, columns of ``series`` (the run plot's anomaly panel);
#: NULL in runs stored before they were counted.
SERIES_ANOMALIES = {"unprocessed": "unprocessed", "duplicate": "duplicate",
                    "incorrect": "incorrect", "output-before-input": "output_before_input"}
#: The anomaly kinds each series column counts: a wrong value is an incorrect occurrence.
_SERIES_COLUMNS = {column: tuple(k for k, c in {**SERIES_ANOMALIES,
                                                  "wrong-value": "incorrect"}.items()
                                 if c == column)
                   for column in SERIES_ANOMALIES.values()}
#: The recovery columns of ``runs`` (a test keeps them equal to Recovery's fields).
RECOVERY_COLUMNS = ("downtime_s", "control_max_gap_s", "recovery_throughput_s",
                    "recovery_latency_s", "catchup_s", "recovered", "censored",
                    "steady_control_s", "baseline_throughput", "note")
PHASE_COLUMNS = {
    "run_id": int, "phase": str, "expected": int, "processed": int,
    "unprocessed": int, "duplicate": int, "incorrect": int, "reliability": float,
    # By the input's clock (docs/semantics.md, "Two clocks in a phase row").
    "reliable": int, "duplicated_ids": int, "incorrect_ids": int,
    "throughput": float, "latency_n": int, "latency_p50_s": float,
    "latency_p95_s": float, "latency_p99_s": float, "latency_max_s": float,
    "karimov_p50_s": float, "karimov_p99_s": float,
}


@dataclass(frozen=True)
class Table:
    """One declared table: columns, primary key, indexes; ``per_run`` tables refer to runs."""

    name: str
    columns: dict[str, type]
    pk: str | tuple[str, ...] | None = None
    per_run: bool = True
    indexes: tuple[tuple[str, ...], ...] = ()


TABLES: tuple[Table, ...] = (
    Table("runs", RUN_COLUMNS, pk="id", per_run=False,
          indexes=(("topology", "pg", "fault"),)),
    Table("phase_results", PHASE_COLUMNS, pk=("run_id", "phase")),
    Table("witnesses", {"run_id": int, "kind": str, "window_start": int, "id": int},
          indexes=(("run_id", "kind"),)),
    Table("series", {"run_id": int, "t_ms": int, "inputs": int, "outputs": int,
                     "reliable": int, "latency_p50_s": float, "latency_max_s": float,
                     **dict.fromkeys(SERIES_ANOMALIES.values(), int)},
          pk=("run_id", "t_ms")),
    Table("batches", {"run_id": int, "seq": int, "batch_id": int, "timestamp": str,
                      "num_input_rows": int, "input_rows_per_s": float,
                      "processed_rows_per_s": float, "watermark": str,
                      "rows_dropped_by_watermark": int, "state_rows": int, "trigger_ms": int,
                      "raw": str},
          pk=("run_id", "seq")),
    Table("fault_log", {"run_id": int, "seq": int, "step": str, "fault": str,
                        "intended_ms": int, "actual_ms": int, "done_ms": int, "error": str,
                        "detail": str},
          pk=("run_id", "seq")),
    # SHA-256 of each evidence file (path relative to the run directory, e.g.
    # evidence/output.parquet) when the run was stored: recheck and export refuse files
    # that differ (pgval/evidence/bundle.py, seal and verify).
    Table("evidence_files", {"run_id": int, "path": str, "sha256": str},
          pk=("run_id", "path")),
    Table("unprocessed_causes", {"run_id": int, "cause": str, "count": int, "examples": str},
          pk=("run_id", "cause")),
    # The optimum ingestion rate per (topology, pg), one row per search (pgval/campaigns/oir.py).
    # rate: the highest passing rate below upper, the lowest failing one; bracketed: the
    # two within precision; machine: host name and cores (an OIR is the machine's too);
    # shape: the cluster's size and the query's knobs it was measured with (JSON).
    Table("oir", {"topology": str, "pg": str, "rate": float, "measured_at": float,
                  "trials": str, "upper": float, "precision": float, "bracketed": int,
                  "machine": str, "shape": str}, per_run=False),
)


def _create_table(db: sqlite_utils.Database, table: Table) -> None:
    db[table.name].create(table.columns, pk=table.pk, if_not_exists=True,
                          foreign_keys=[("run_id", "runs", "id")] if table.per_run else None)


def _ensure_declared(db: sqlite_utils.Database) -> None:
    """Every declared table, column and index that is missing, added; nothing dropped.

    Idempotent, so it is safe as (part of) any migration."""
    have = set(db.table_names())
    for table in TABLES:
        if table.name not in have:
            _create_table(db, table)
        else:
            present = set(db[table.name].columns_dict)
            for name, typ in table.columns.items():
                if name not in present:
                    db[table.name].add_column(name, typ)
        for columns in table.indexes:
            db[table.name].create_index(list(columns), if_not_exists=True)


def _v1_declared_schema(db: sqlite_utils.Database) -> None:
    """Unversioned (0) → 1: databases from before the schema had a version got their
    tables on first insert and their columns over time; bring them to the declaration."""
    _ensure_declared(db)


#: MIGRATIONS[v] takes a database at version v to v + 1. Append, never edit; keep each
#: idempotent (a fresh database is created from :data:`TABLES` and then has every
#: migration's effect already).
def _v2_oir_bracket(db: sqlite_utils.Database) -> None:
    """1 → 2: the oir table records the bracket (upper, precision, bracketed) and the
    machine it was measured on."""
    _ensure_declared(db)


def _v3_oir_shape(db: sqlite_utils.Database) -> None:
    """2 → 3: the oir table records the run shape it was measured with (older rows: null,
    which counts for any shape)."""
    _ensure_declared(db)


def _v4_evidence_hashes(db: sqlite_utils.Database) -> None:
    """3 → 4: runs record whether their evidence was sealed (``sealed``), the hashes go to
    ``evidence_files``; runs stored before keep ``sealed`` NULL (re-checked, not verified)."""
    _ensure_declared(db)


def _v5_reason_kinds(db: sqlite_utils.Database) -> None:
    """4 → 5: runs record their validity reasons with kinds (``validity``); runs stored
    before keep it NULL, and a re-check reads their kinds from the texts' words
    (:func:`pgval.evidence.recheck.legacy_reason_kind`)."""
    _ensure_declared(db)


def _v6_anomaly_series(db: sqlite_utils.Database) -> None:
    """5 → 6: runs count incorrect occurrences before their input apart
    (``output_before_input``), and the 1 s series counts anomalies by kind; rows stored
    before keep them NULL (the run plot then shows no anomaly panel)."""
    _ensure_declared(db)


def _v7_run_labels(db: sqlite_utils.Database) -> None:
    """6 → 7: runs carry the label a user gave them (``label``, ``pgval check --label``),
    which ``pgval report`` groups by; rows stored before keep it NULL (no label)."""
    _ensure_declared(db)


MIGRATIONS: tuple[Callable[[sqlite_utils.Database], None], ...] = (_v1_declared_schema,
                                                                    _v2_oir_bracket,
                                                                    _v3_oir_shape,
                                                                    _v4_evidence_hashes,
                                                                    _v5_reason_kinds,
                                                                    _v6_anomaly_series,
                                                                    _v7_run_labels)
SCHEMA_VERSION = len(MIGRATIONS)
#: The first schema whose runs carry evidence hashes (older ones are re-checked unverified).
EVIDENCE_SCHEMA = MIGRATIONS.index(_v4_evidence_hashes) + 1


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def owner_alive(recorded: str | None) -> bool:
    """Whether the owner recorded in a ``runs.owner`` cell still runs; no owner = dead."""
    try:
        owner = Owner.from_dict(json.loads(recorded)) if recorded else None
    except ValueError:
        owner = None
    return owner is not None and owner.alive()


def _current_owner() -> str | None:
    try:
        return json.dumps(Owner.me().as_dict())
    except OSError:  # no /proc: the run is stored without an owner (read as dead)
        return None


#: ``runs.sealed`` of a run whose hashes came from its own SHA256SUMS at an import.
SEALED_AT_IMPORT = 2
#: ``runs.sealed`` of a run imported without hashes (its SHA256SUMS was missing, or its
#: evidence names another run id): nothing vouches for its evidence.
UNSEALED_IMPORT = 3


def run_figures(evaluation: Evaluation, validity: Validity) -> dict[str, Any]:
    """The figures of a run's ``runs`` row, as :meth:`ResultsStore.finish_run` stores them
    and ``pgval recheck`` holds a stored row to (one function, so the two cannot differ)."""
    v = evaluation.validation
    ph = evaluation.phases
    bounded = ph.bounded()
    return {"guarantee": v.guarantee, "expected": v.expected, "processed": v.processed,
            "duplicate": v.duplicate, "incorrect": v.incorrect, "unprocessed": v.unprocessed,
            "malformed": v.malformed, "malformed_inputs": v.malformed_inputs,
            "reliability": v.reliability, "output_before_input": v.output_before_input,
            "correctness": v.correctness, "outputs": v.outputs,
            "failure_cost_s": evaluation.metrics.failure_cost_s,
            "t_start": ph.start if bounded else None, "t2": ph.t2 if bounded else None,
            "t3": ph.t3 if bounded else None, "valid": int(validity.valid)}


def phase_figures(evaluation: Evaluation) -> dict[str, dict[str, Any]]:
    """Each phase's ``phase_results`` row (without ``run_id`` and ``phase``), by phase."""
    v = evaluation.validation
    m = evaluation.metrics
    out = {}
    for p in PHASES:
        c = v.phases[p]
        lat = m.latency[p]
        kar = m.latency_karimov[p]
        out[p] = {**c.as_dict(), "reliability": c.reliability,
                  "throughput": m.throughput[p], "latency_n": lat.n,
                  "latency_p50_s": lat.p50, "latency_p95_s": lat.p95,
                  "latency_p99_s": lat.p99, "latency_max_s": lat.max,
                  "karimov_p50_s": kar.p50, "karimov_p99_s": kar.p99}
    return out


#: The longest label a run may carry (a table's column, not a note).
MAX_LABEL = 80


def label_problem(label: str) -> str | None:
    """Why ``label`` cannot name a run (``pgval check --label``), or None: it must be 1 to
    :data:`MAX_LABEL` printable characters, since ``pgval report`` shows it in a column."""
    if not label.strip() or len(label) > MAX_LABEL or not label.isprintable():
        return (f"--label must be 1 to {MAX_LABEL} printable characters (no line breaks or "
                f"control characters), not {label[:MAX_LABEL]!r}")
    return None


class ResultsStore:
    """A results database; safe to open from many processes at once."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        conn = connect(self.path)
        try:
            self.db = sqlite_utils.Database(conn)
            self._ensure_schema()
        except sqlite3.Error as exc:
            conn.close()
            raise plain_error(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """One ``BEGIN IMMEDIATE`` transaction (nested calls join the outer one).

        Immediate: the write lock is taken (waiting up to the busy time-out) before any
        read, so nothing inside can fail for a lock another writer took meanwhile."""
        conn = self.db.conn
        if conn.in_transaction:
            yield self.db
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _ensure_schema(self) -> None:
        """Create or migrate the schema once; concurrent first opens wait for each other."""
        conn = self.db.conn
        version = schema_version(conn)
        if version == SCHEMA_VERSION:
            return
        with self.transaction():
            version = schema_version(conn)  # again, under the lock: another may have done it
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} was written by a newer pgval (schema version "
                                 f"{version}; this pgval knows up to {SCHEMA_VERSION})")
            if version == SCHEMA_VERSION:
                return
            if version == 0 and not self.db.table_names():
                for table in TABLES:
                    _create_table(self.db, table)
                    for columns in table.indexes:
                        self.db[table.name].create_index(list(columns), if_not_exists=True)
            else:
                for migrate in MIGRATIONS[version:]:
                    migrate(self.db)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # ------------------------------------------------------------------ runs
    def start_run(self, kind: str, topology: str, window_ms: int, pg: str | None = None,
                  fault: str | None = None, seed: int | None = None, repeat: int | None = None,
                  params: Mapping[str, Any] | None = None, label: str | None = None) -> int:
        """A new ``running`` row owned by this process (``label``: the user's name for it)."""
        with self.transaction():
            table = self.db["runs"]
            table.insert({
                "created_at": time.time(), "kind": kind, "status": "running",
                "topology": topology, "pg": pg, "fault": fault, "window_ms": window_ms,
                "seed": seed, "repeat": repeat,
                "params": json.dumps(redact_record(dict(params or {})), default=str),
                "owner": _current_owner(), "label": label,
            })
            return int(table.last_pk)

    def fail_run(self, run_id: int, error: str, status: str = "failed") -> None:
        with self.transaction():
            self.db["runs"].update(run_id, {"status": status, "error": error,
                                            "finished_at": time.time()})

    def set_params(self, run_id: int, params: Mapping[str, Any]) -> None:
        """Replace a run's recorded parameters (a claimed row learns its run directory and
        the configuration as the experiment completed it)."""
        with self.transaction():
            self.db["runs"].update(run_id, {"params": json.dumps(redact_record(dict(params)),
                                                                 default=str)})

    def finish_run(self, run_id: int, evaluation: Evaluation,
                   extra: Mapping[str, Any] | None = None,
                   validity: Validity | None = None, run_dir: Path | None = None,
                   batches: Iterable[Mapping[str, Any]] | None = None,
                   fault_log: Iterable[Mapping[str, Any]] | None = None,
                   evidence: Mapping[str, str] | None = None,
                   imported: bool = False) -> None:
        """Store a run's evaluation: totals, phases, witnesses, 1 s series, validity,
        recovery, causes, micro-batches, fault log and evidence hashes (``evidence``,
        from :func:`pgval.evidence.bundle.seal`), in one transaction whose last statement marks the
        run ``complete`` (a failure leaves it ``running``, with nothing of it stored, so a
        matrix redoes it). ``imported``: stored by an import (``pgval recheck RUN_DIR
        --store``), not at the end of the run: marked :data:`SEALED_AT_IMPORT` with hashes,
        :data:`UNSEALED_IMPORT` without."""
        summary = evaluation.summary()
        if validity is None:
            validity = Validity(evaluation_reasons(evaluation))
        summary.update(validity.as_dict())
        if extra:
            summary.update(extra)
        sealed = ((SEALED_AT_IMPORT if imported else 1) if evidence
                  else UNSEALED_IMPORT if imported else 0)
        with self.transaction():
            self.db["runs"].update(run_id, {
                **run_figures(evaluation, validity),
                "summary": json.dumps(redact_record(summary), default=_json_default),
                "validity_reasons": json.dumps(validity.texts),
                "validity": json.dumps(validity.records()),
                "run_dir": str(run_dir) if run_dir is not None else None,
                "sealed": sealed,
            })
            if evidence is not None:
                self.db["evidence_files"].insert_all(
                    ({"run_id": run_id, "path": k, "sha256": h} for k, h in evidence.items()),
                    replace=True)
            self.db["phase_results"].upsert_all(
                ({"run_id": run_id, "phase": p, **row}
                 for p, row in phase_figures(evaluation).items()), pk=("run_id", "phase"))
            v = evaluation.validation
            self.db["witnesses"].insert_all(
                {"run_id": run_id, "kind": kind, "window_start": w, "id": i}
                for kind, pairs in v.witnesses.items() for w, i in pairs)
            self.db["series"].upsert_all(_series_rows(run_id, evaluation),
                                         pk=("run_id", "t_ms"))
            self.save_recovery(run_id, evaluation.recovery.as_dict())
            self.save_unprocessed_causes(run_id, evaluation.unprocessed_causes)
            if batches is not None:
                self.save_batches(run_id, batches)
            if fault_log is not None:
                self.save_fault_log(run_id, fault_log)
            # Last: until here a reader (and a matrix) sees the run as not complete.
            self.db.execute("UPDATE runs SET status = 'complete', finished_at = ? WHERE id = ?",
                            [time.time(), run_id])

    def save_recovery(self, run_id: int, recovery: Mapping[str, Any]) -> None:
        """Downtime, recovery times, catch-up (pgval/checker/recovery.py) as columns of ``runs``."""
        row = {k: (int(v) if isinstance(v, bool) else v) for k, v in recovery.items()}
        with self.transaction():
            self.db["runs"].update(run_id, row)

    def save_unprocessed_causes(self, run_id: int, explained: Mapping[str, Any]) -> None:
        """Counts per cause (late, skipped, in-flight at end, lost) with example IDs."""
        rows = [{"run_id": run_id, "cause": cause, "count": int(count),
                 "examples": json.dumps(explained.get("examples", {}).get(cause, []))}
                for cause, count in explained.get("counts", {}).items()]
        if rows:
            with self.transaction():
                self.db["unprocessed_causes"].insert_all(rows, replace=True)

    def save_batches(self, run_id: int, progress: Iterable[Mapping[str, Any]]) -> None:
        """Per micro-batch progress from the driver: explains unprocessed events later."""
        rows = []
        for k, p in enumerate(progress):
            if p.get("event") not in (None, "progress"):
                continue
            state = p.get("stateOperators") or []
            rows.append({
                "run_id": run_id, "seq": k, "batch_id": p.get("batchId"),
                "timestamp": p.get("timestamp"), "num_input_rows": p.get("numInputRows"),
                "input_rows_per_s": p.get("inputRowsPerSecond"),
                "processed_rows_per_s": p.get("processedRowsPerSecond"),
                "watermark": (p.get("eventTime") or {}).get("watermark"),
                "rows_dropped_by_watermark": sum(
                    int(s.get("numRowsDroppedByWatermark") or 0) for s in state),
                "state_rows": sum(int(s.get("numRowsTotal") or 0) for s in state),
                "trigger_ms": (p.get("durationMs") or {}).get("triggerExecution"),
                "raw": json.dumps(p, default=str),
            })
        if rows:
            with self.transaction():
                self.db["batches"].insert_all(rows, replace=True)

    def save_fault_log(self, run_id: int, entries: Iterable[Mapping[str, Any]]) -> None:
        """The realized fault timeline: intended vs actual times, mechanism, errors."""
        rows = [{"run_id": run_id, "seq": k, "step": e.get("step"), "fault": e.get("fault"),
                 "intended_ms": e.get("intended_ms"), "actual_ms": e.get("actual_ms"),
                 "done_ms": e.get("done_ms"), "error": e.get("error"),
                 "detail": json.dumps(redact_record(dict(e)), default=str)}
                for k, e in enumerate(entries)]
        if rows:
            with self.transaction():
                self.db["fault_log"].insert_all(rows, replace=True)

    def save_check(self, evaluation: Evaluation, params: Mapping[str, Any] | None = None,
                   kind: str = "check", label: str | None = None,
                   validity: Validity | None = None) -> int:
        """Store a ``pgval check`` result (no evidence to seal), with the user's label and
        the validity the command printed (its files' doubts included)."""
        run_id = self.start_run(kind, evaluation.topology, evaluation.window_ms,
                                params=params, label=label)
        self.finish_run(run_id, evaluation, validity=validity)
        return run_id

    def run(self, run_id: int) -> dict[str, Any] | None:
        """One run's row, or None."""
        rows = list(self.db["runs"].rows_where("id = ?", [run_id]))
        return rows[0] if rows else None

    def runs(self, where: str | None = None, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        return list(self.db["runs"].rows_where(where, list(args), order_by="id"))

    def phase_results(self, run_id: int) -> list[dict[str, Any]]:
        return list(self.db["phase_results"].rows_where("run_id = ?", [run_id]))


#: Written into a run directory whose storing failed: what the database would have held
#: that the evidence does not (the fault log, timings, …), for the import.
UNSTORED = "unstored.json"


def unstored_error(db: Path, run_id: int, run_dir: Path, exc: BaseException,
                   extra: Mapping[str, Any]) -> StoreError:
    """The one sentence for a run whose evidence is complete but whose ``finish_run`` failed
    (disk full, the database locked past the busy time-out, read-only), after keeping
    ``extra`` (fault log, timings) in ``run_dir/unstored.json`` (0600, secrets redacted)
    for ``pgval recheck RUN_DIR --store --db DB``, which imports the run later."""
    why = str(plain_error(db, exc)).removeprefix(f"cannot use the results database {db}: ")
    with contextlib.suppress(OSError):  # the same full disk: the import stores the run
        write_private(Path(run_dir) / UNSTORED,  # without its fault log
                      json.dumps(redact_record(dict(extra)), default=_json_default) + "\n")
    return StoreError(f"run {run_id} finished, but storing it in {db} failed ({why}); its "
                      f"evidence is complete in {run_dir}: store it later with `pgval "
                      f"recheck {run_dir} --store --db {db}`")


def _series_rows(run_id: int, evaluation: Evaluation) -> Iterable[dict[str, Any]]:
    m = evaluation.metrics
    n = len(m.inputs_per_s)
    lat = m.latency_per_output_ms
    sec = (m.output_ingress_ms - m.series_start_ms) // 1000
    ok = ~np.isnan(lat) & (sec >= 0) & (sec < n)
    per_kind = ({} if evaluation.outputs is None else
                per_second(evaluation.anomalies(), m.series_start_ms, n))
    p50 = np.full(n, np.nan)
    mx = np.full(n, np.nan)
    if ok.any():
        order = np.lexsort((lat[ok], sec[ok]))
        s = sec[ok][order]
        v = lat[ok][order]
        bounds = np.flatnonzero(np.r_[True, s[1:] != s[:-1], True])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            p50[s[a]] = float(np.median(v[a:b])) / 1000.0
            mx[s[a]] = float(v[b - 1]) / 1000.0
    for i in range(n):
        yield {"run_id": run_id, "t_ms": m.series_start_ms + 1000 * i,
               "inputs": int(m.inputs_per_s[i]), "outputs": int(m.outputs_per_s[i]),
               "reliable": int(m.reliable_per_s[i]),
               "latency_p50_s": None if np.isnan(p50[i]) else p50[i],
               "latency_max_s": None if np.isnan(mx[i]) else mx[i],
               **{column: int(sum(per_kind[kind][i] for kind in kinds if kind in per_kind))
                  for column, kinds in _SERIES_COLUMNS.items()
                  if any(kind in per_kind for kind in kinds)}}


def _json_default(obj: object) -> object:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return str(obj)
