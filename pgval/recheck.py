"""Re-check a stored run from its evidence, or export it for ``pgval check``.

``recheck`` recomputes everything (oracle, validator, metrics, recovery, why-unprocessed)
from the records the run kept (:mod:`pgval.evidence`); the run-level validity reasons
(read-back, drain, fault evidence) come from the manifest, the data-level ones are
recomputed. ``export`` writes the same streams in the ``pgval check`` format, so any
other tool — or ``pgval check`` itself — can reach the same counts.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from pgval.dbfile import StoreError, connect_readonly
from pgval.evaluate import Evaluation, evaluate
from pgval.evidence import EvidenceError, Manifest, Streams, load_progress, load_streams
from pgval.records import InputEvents, OutputRecords
from pgval.validity import Validity, evaluation_reasons

#: A line that is a JSON object without any field pgval reads: ``pgval check`` counts it as
#: malformed, exactly like the record it stands for (one that could not be parsed at all).
MALFORMED_LINE = b'{"pgval_malformed": true}\n'


@dataclass
class Recheck:
    manifest: Manifest
    streams: Streams
    evaluation: Evaluation
    validity: Validity

    def summary(self) -> dict[str, Any]:
        """The ``pgval check --json`` object plus validity and the run it came from."""
        out = self.evaluation.summary()
        out.update(self.validity.as_dict())
        out["run_id"] = self.manifest.run_id
        return out


def locate_run(run: str, db: Path | None = None) -> Path:
    """A run directory, from a path or from a run id looked up in ``db``."""
    path = Path(run)
    if path.is_dir():
        return path
    if not run.isdigit():
        raise EvidenceError(f"{run!r} is neither a run directory nor a run id")
    if db is None:
        raise EvidenceError(f"run id {run} needs --db with the results database that holds it")
    row = _stored_run(Path(db), int(run))
    if row is None:
        raise EvidenceError(f"{db} has no run {run}")
    found = row.get("run_dir") or json.loads(row.get("params") or "{}").get("run_dir")
    if not found:
        raise EvidenceError(f"run {run} in {db} records no run directory (a `pgval check` "
                            "run keeps no evidence; re-run check on its files instead)")
    if not Path(found).is_dir():
        raise EvidenceError(f"the run directory of run {run}, {found}, no longer exists")
    return Path(found)


def _stored_run(db: Path, run_id: int) -> dict[str, Any] | None:
    """Run ``run_id``'s row, read without writing: a missing or foreign file is one
    sentence (and a missing one is not created)."""
    try:
        conn = connect_readonly(db)
    except StoreError as exc:
        raise EvidenceError(str(exc)) from exc
    try:
        cur = conn.execute("SELECT * FROM runs WHERE id = ?", [run_id])
        found = cur.fetchone()
        names = [d[0] for d in cur.description]
    except sqlite3.OperationalError as exc:
        raise EvidenceError(f"{db} has no runs table (is it a pgval results database?)") \
            from exc
    finally:
        conn.close()
    return dict(zip(names, found, strict=True)) if found is not None else None


def recheck(run_dir: Path) -> Recheck:
    """Evaluate a stored run again from its evidence alone."""
    manifest = Manifest.read(run_dir)
    streams = load_streams(run_dir, manifest)
    evaluation = evaluate(streams.events, streams.outputs, manifest.topology,
                          manifest.window_ms, manifest.phase_bounds,
                          progress=load_progress(run_dir))
    fault = manifest.config.get("fault")
    data_reasons = set(evaluation_reasons(evaluation)) | set(evaluation_reasons(evaluation,
                                                                                fault))
    validity = Validity()
    validity.extend(r for r in manifest.validity_reasons if r not in data_reasons)
    validity.extend(evaluation_reasons(evaluation, fault))
    return Recheck(manifest, streams, evaluation, validity)


#: The stored counts a re-check must reproduce before its derived measures may be stored.
VERDICT_FIELDS = ("guarantee", "expected", "processed", "duplicate", "incorrect",
                  "unprocessed")


def store_derived(db: Path, run_id: int, result: Recheck) -> None:
    """Write a re-check's recovery metrics and unprocessed causes over the stored ones.

    These are derived measures whose definitions improve (a detector fix); the verdict and
    counts are the evidence and must not move: when they differ from the stored row the
    run is left untouched and the difference is the error."""
    from pgval.store import ResultsStore

    stored = _stored_run(Path(db), run_id)
    if stored is None:
        raise EvidenceError(f"{db} has no run {run_id}")
    now = result.evaluation.summary()
    moved = [f"{k} {stored.get(k)!r} → {now.get(k)!r}" for k in VERDICT_FIELDS
             if stored.get(k) != now.get(k)]
    if moved:
        raise EvidenceError(f"run {run_id}'s re-check does not reproduce its stored counts "
                            f"({'; '.join(moved)}); nothing was stored")
    with ResultsStore(db) as store, store.transaction():
        store.save_recovery(run_id, result.evaluation.recovery.as_dict())
        store.save_unprocessed_causes(run_id, result.evaluation.unprocessed_causes)


def export(run_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Write ``inputs.jsonl``, ``outputs.jsonl`` and ``run.json`` for ``pgval check``."""
    manifest = Manifest.read(run_dir)
    streams = load_streams(run_dir, manifest)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_in = _write_inputs(streams.events, out_dir / "inputs.jsonl")
    n_out = _write_outputs(streams.outputs, out_dir / "outputs.jsonl")
    info = {"topology": manifest.topology, "window_ms": manifest.window_ms,
            "phases": list(manifest.phases), "t4": manifest.t4, "source": str(run_dir),
            "run_id": manifest.run_id, "inputs": n_in, "outputs": n_out,
            "control_ids_set_aside": manifest.control_ids}
    (out_dir / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def _write_inputs(events: InputEvents, path: Path) -> int:
    """One JSON object per event in read order; malformed records as malformed lines."""
    names = events.resources.names
    ids, is_get = events.id.tolist(), events.is_get.tolist()
    res, ev_ts, ing = events.resource.tolist(), events.event_ts.tolist(), events.ingress_ts.tolist()
    with open(path, "wb") as fh:
        for k in range(len(ids)):
            fh.write(orjson.dumps({"id": ids[k], "type": "GET" if is_get[k] else "POST",
                                   "resource": names[res[k]], "event_ts": ev_ts[k],
                                   "ingress_ts": ing[k]}) + b"\n")
        fh.write(MALFORMED_LINE * events.malformed)
    return len(ids) + events.malformed


def _write_outputs(outputs: OutputRecords, path: Path) -> int:
    """Outputs in stream order (ingress time, then position), so line order = stream order."""
    order = np.lexsort((outputs.position, outputs.ingress_ts))
    names = outputs.resources.names
    offsets = outputs.offsets
    with open(path, "wb") as fh:
        for k in order.tolist():
            row: dict[str, Any] = {"window_start": int(outputs.window_start[k])}
            for name in ("window_end", "count", "gets", "posts"):
                value = int(getattr(outputs, name)[k])
                if value != -1:  # -1: the record did not carry the field
                    row[name] = value
            code = int(outputs.resource[k])
            row["resource"] = names[code] if code >= 0 else None
            row["ids"] = outputs.ids[offsets[k]:offsets[k + 1]].tolist()
            row["ingress_ts"] = int(outputs.ingress_ts[k])
            fh.write(orjson.dumps(row) + b"\n")
        fh.write(MALFORMED_LINE * outputs.malformed)
    return len(order) + outputs.malformed
