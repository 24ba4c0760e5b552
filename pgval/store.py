"""SQLite results store (sqlite-utils): one row per run, per phase, per witness, per second.

The schema is flat so that ``sqlite3 results.db`` or Datasette answers questions
directly; ``pgval report`` reads the same tables. Runs are created with status
``running`` and finished as ``complete``/``failed``, so an interrupted matrix
can tell which runs to redo.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import sqlite_utils

from pgval.evaluate import Evaluation
from pgval.schema import PHASES
from pgval.validity import Validity, evaluation_reasons

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
}
PHASE_COLUMNS = {
    "run_id": int, "phase": str, "expected": int, "processed": int,
    "unprocessed": int, "duplicate": int, "incorrect": int, "reliability": float,
    # By the input's clock (docs/semantics.md, "Two clocks in a phase row").
    "reliable": int, "duplicated_ids": int, "incorrect_ids": int,
    "throughput": float, "latency_n": int, "latency_p50_s": float,
    "latency_p95_s": float, "latency_p99_s": float, "latency_max_s": float,
    "karimov_p50_s": float, "karimov_p99_s": float,
}


class ResultsStore:
    """A results database; safe to open many times, tables are created on first use."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite_utils.Database(self.path)
        self._ensure_schema()

    def _ensure_schema(self) -> None:
        db = self.db
        if "runs" not in db.table_names():
            db["runs"].create(RUN_COLUMNS, pk="id")
            db["runs"].create_index(["topology", "pg", "fault"])
        if "phase_results" not in db.table_names():
            db["phase_results"].create(PHASE_COLUMNS, pk=("run_id", "phase"),
                                       foreign_keys=[("run_id", "runs", "id")])
        # Databases from older versions: add the columns they lack (never drop any).
        for table, columns in (("runs", RUN_COLUMNS), ("phase_results", PHASE_COLUMNS)):
            have = set(db[table].columns_dict)
            for name, typ in columns.items():
                if name not in have:
                    db[table].add_column(name, typ)
        if "witnesses" not in db.table_names():
            db["witnesses"].create({"run_id": int, "kind": str, "window_start": int, "id": int},
                                   foreign_keys=[("run_id", "runs", "id")])
            db["witnesses"].create_index(["run_id", "kind"])
        if "series" not in db.table_names():
            db["series"].create({"run_id": int, "t_ms": int, "inputs": int, "outputs": int,
                                 "reliable": int, "latency_p50_s": float,
                                 "latency_max_s": float},
                                pk=("run_id", "t_ms"), foreign_keys=[("run_id", "runs", "id")])

    # ------------------------------------------------------------------ runs
    def start_run(self, kind: str, topology: str, window_ms: int, pg: str | None = None,
                  fault: str | None = None, seed: int | None = None, repeat: int | None = None,
                  params: Mapping[str, Any] | None = None) -> int:
        table = self.db["runs"]
        table.insert({
            "created_at": time.time(), "kind": kind, "status": "running", "topology": topology,
            "pg": pg, "fault": fault, "window_ms": window_ms, "seed": seed, "repeat": repeat,
            "params": json.dumps(dict(params or {}), default=str),
        })
        return int(table.last_pk)

    def fail_run(self, run_id: int, error: str, status: str = "failed") -> None:
        self.db["runs"].update(run_id, {"status": status, "error": error,
                                        "finished_at": time.time()})

    def finish_run(self, run_id: int, evaluation: Evaluation,
                   extra: Mapping[str, Any] | None = None,
                   validity: Validity | None = None, run_dir: Path | None = None) -> None:
        """Store a run's evaluation: totals, phases, witnesses, 1 s series, validity,
        recovery and causes, in one transaction (a failure leaves no half-stored run)."""
        v = evaluation.validation
        m = evaluation.metrics
        summary = evaluation.summary()
        if validity is None:
            validity = Validity(evaluation_reasons(evaluation))
        summary.update(validity.as_dict())
        if extra:
            summary.update(extra)
        ph = evaluation.phases
        bounded = ph.bounded()
        with self.db.conn:
            self.db["runs"].update(run_id, {
                "status": "complete", "finished_at": time.time(), "guarantee": v.guarantee,
                "expected": v.expected, "processed": v.processed, "duplicate": v.duplicate,
                "incorrect": v.incorrect, "unprocessed": v.unprocessed, "malformed": v.malformed,
                "malformed_inputs": v.malformed_inputs, "reliability": v.reliability,
                "correctness": v.correctness, "outputs": v.outputs,
                "failure_cost_s": m.failure_cost_s,
                "t_start": ph.start if bounded else None, "t2": ph.t2 if bounded else None,
                "t3": ph.t3 if bounded else None,
                "summary": json.dumps(summary, default=_json_default),
                "valid": int(validity.valid),
                "validity_reasons": json.dumps(validity.reasons),
                "run_dir": str(run_dir) if run_dir is not None else None,
            })
            rows = []
            for p in PHASES:
                c = v.phases[p]
                lat = m.latency[p]
                kar = m.latency_karimov[p]
                rows.append({
                    "run_id": run_id, "phase": p, **c.as_dict(), "reliability": c.reliability,
                    "throughput": m.throughput[p], "latency_n": lat.n,
                    "latency_p50_s": lat.p50, "latency_p95_s": lat.p95,
                    "latency_p99_s": lat.p99, "latency_max_s": lat.max,
                    "karimov_p50_s": kar.p50, "karimov_p99_s": kar.p99,
                })
            self.db["phase_results"].upsert_all(rows, pk=("run_id", "phase"), alter=True)
            self.db["witnesses"].insert_all(
                {"run_id": run_id, "kind": kind, "window_start": w, "id": i}
                for kind, pairs in v.witnesses.items() for w, i in pairs)
            self.db["series"].upsert_all(_series_rows(run_id, evaluation),
                                         pk=("run_id", "t_ms"))
            self.save_recovery(run_id, evaluation.recovery.as_dict())
            self.save_unprocessed_causes(run_id, evaluation.unprocessed_causes)

    def save_recovery(self, run_id: int, recovery: Mapping[str, Any]) -> None:
        """Downtime, recovery times, catch-up (pgval/recovery.py) as columns of ``runs``."""
        row = {k: (int(v) if isinstance(v, bool) else v) for k, v in recovery.items()}
        self.db["runs"].update(run_id, row, alter=True)

    def save_unprocessed_causes(self, run_id: int, explained: Mapping[str, Any]) -> None:
        """Counts per cause (late, in-flight at end, lost) with example IDs."""
        rows = [{"run_id": run_id, "cause": cause, "count": int(count),
                 "examples": json.dumps(explained.get("examples", {}).get(cause, []))}
                for cause, count in explained.get("counts", {}).items()]
        if rows:
            self.db["unprocessed_causes"].insert_all(
                rows, pk=("run_id", "cause"), replace=True,
                foreign_keys=[("run_id", "runs", "id")])

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
            self.db["batches"].insert_all(rows, pk=("run_id", "seq"), replace=True,
                                          foreign_keys=[("run_id", "runs", "id")])

    def save_fault_log(self, run_id: int, entries: Iterable[Mapping[str, Any]]) -> None:
        """The realized fault timeline: intended vs actual times, mechanism, errors."""
        rows = [{"run_id": run_id, "seq": k, "step": e.get("step"), "fault": e.get("fault"),
                 "intended_ms": e.get("intended_ms"), "actual_ms": e.get("actual_ms"),
                 "done_ms": e.get("done_ms"), "error": e.get("error"),
                 "detail": json.dumps(dict(e), default=str)} for k, e in enumerate(entries)]
        if rows:
            self.db["fault_log"].insert_all(rows, pk=("run_id", "seq"), replace=True,
                                            foreign_keys=[("run_id", "runs", "id")])

    def save_check(self, evaluation: Evaluation, params: Mapping[str, Any] | None = None,
                   kind: str = "check") -> int:
        run_id = self.start_run(kind, evaluation.topology, evaluation.window_ms,
                                params=params)
        self.finish_run(run_id, evaluation)
        return run_id

    def run(self, run_id: int) -> dict[str, Any] | None:
        """One run's row, or None."""
        rows = list(self.db["runs"].rows_where("id = ?", [run_id]))
        return rows[0] if rows else None

    def runs(self, where: str | None = None, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        return list(self.db["runs"].rows_where(where, list(args), order_by="id"))

    def phase_results(self, run_id: int) -> list[dict[str, Any]]:
        return list(self.db["phase_results"].rows_where("run_id = ?", [run_id]))


def _series_rows(run_id: int, evaluation: Evaluation) -> Iterable[dict[str, Any]]:
    m = evaluation.metrics
    n = len(m.inputs_per_s)
    lat = m.latency_per_output_ms
    sec = (m.output_ingress_ms - m.series_start_ms) // 1000
    ok = ~np.isnan(lat) & (sec >= 0) & (sec < n)
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
               "latency_max_s": None if np.isnan(mx[i]) else mx[i]}


def _json_default(obj: object) -> object:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return str(obj)
