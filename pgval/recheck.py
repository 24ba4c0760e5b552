"""Re-check a stored run from its evidence, or export it for ``pgval check``.

``recheck`` recomputes everything (oracle, validator, metrics, recovery, why-unprocessed)
from the records the run kept (:mod:`pgval.evidence`), and the validity too, from its
inputs (:func:`recompute_validity`), never from the verdict run.json or the database
stored. ``export`` writes the same streams in the ``pgval check`` format, so any other
tool — or ``pgval check`` itself — can reach the same counts.

Both first compare the evidence files with the SHA-256 hashes stored with the run in the
results database (:func:`anchor`): edited evidence is refused in one sentence. A run
directory given without a database has no anchor, and the output says so.

Stored and recomputed validity are compared by the reasons' kinds, never their wording.
Runs stored before reasons had kinds keep only sentences: :func:`legacy_reason_kind` reads
their kinds from the sentences' first words, for those runs only.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from pgval.checker.evaluate import Evaluation, evaluate
from pgval.checker.result import Reason, ReasonKind, reasons_from_records
from pgval.checker.validity import (
    Validity,
    evaluation_reasons,
    generator_reasons,
    readback_reasons,
    reconcile_inputs,
)
from pgval.dbfile import StoreError, connect_readonly, json_cell, json_object_cell
from pgval.evidence import (
    INPUT_TOPICS,
    MANIFEST,
    EvidenceError,
    Manifest,
    Streams,
    evidence_dir,
    load_progress,
    load_streams,
    load_topic,
    streams_from_records,
    verify,
)
from pgval.faults.evidence import fault_reasons
from pgval.files import is_dir
from pgval.kafka.topic_records import TopicRecords
from pgval.records import InputEvents, OutputRecords
from pgval.schema import FAULTS, OUTPUT_TOPIC, Fault
from pgval.store import SEALED_AT_IMPORT

#: A line that is a JSON object without any field pgval reads: ``pgval check`` counts it as
#: malformed, exactly like the record it stands for (one that could not be parsed at all).
MALFORMED_LINE = b'{"pgval_malformed": true}\n'


#: The note of a re-check or export of a run directory given without a database.
NO_ANCHOR = "evidence not verified: no results database"


@dataclass
class Anchor:
    """What vouches for a run directory's evidence: the database's hashes, or nothing."""

    verified: bool
    note: str
    row: dict[str, Any] | None = None  # the run's row, when a database was given
    fault_log: list[dict[str, Any]] | None = None  # its fault log rows (None: none stored)

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.verified, "note": self.note}


@dataclass
class Recheck:
    manifest: Manifest
    streams: Streams
    evaluation: Evaluation
    validity: Validity
    evidence: Anchor = field(default_factory=lambda: Anchor(False, NO_ANCHOR))
    #: Reason kinds only in the stored validity / only now (compared by kind, not text).
    validity_changes: dict[str, list[str]] = field(default_factory=dict)
    #: Kinds whose inputs the run did not keep: their reasons are the stored ones.
    carried: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The ``pgval check --json`` object plus validity, evidence check and run id."""
        out = self.evaluation.summary()
        out.update(self.validity.as_dict())
        out["run_id"] = self.manifest.run_id
        out["evidence"] = self.evidence.as_dict()
        out["validity_changes"] = self.validity_changes
        out["validity_carried"] = self.carried
        return out


def parse_run_id(text: str) -> int | None:
    """``text`` as a run id, or None. ASCII digits only (``²`` and ``١`` are digits to
    Python but no run id) and below 2^63 (SQLite's rowids; 10^23 overflows its integers)."""
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value < 1 << 63 else None


def locate_run(run: str, db: Path | None = None) -> Path:
    """A run directory, from a path or from a run id looked up in ``db``."""
    path = Path(run)
    if is_dir(path):
        return path
    run_id = parse_run_id(run)
    if run_id is None:  # digits to Python (², ١, 10^23) are told what a run id is
        hint = " (a run id is ASCII digits, below 2^63)" if run.isdigit() else ""
        raise EvidenceError(f"{run!r} is neither a run directory nor a run id{hint}")
    if db is None:
        raise EvidenceError(f"run id {run} needs --db with the results database that holds it")
    row = _stored_run(Path(db), run_id)
    if row is None:
        raise EvidenceError(f"{db} has no run {run}")
    found = row.get("run_dir") or json_object_cell(row.get("params")).get("run_dir")
    if found and not isinstance(found, str):
        raise EvidenceError(f"run {run} in {db} records no usable run directory "
                            f"({found!r}); the database is damaged")
    if not found:
        raise EvidenceError(f"run {run} in {db} records no run directory (a `pgval check` "
                            "run keeps no evidence; re-run check on its files instead)")
    if not is_dir(Path(found)):
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


def anchor(run_dir: Path, db: Path | None = None, run_id: int | None = None) -> Anchor:
    """Verify ``run_dir``'s evidence against the hashes stored with its run in ``db``.

    ``run_id``: the run asked for (else the one run.json names). Edited, missing or added
    files are refused (:class:`EvidenceError`); a run stored before hashes existed, or
    never completed, is let through with a note saying it is not verified."""
    if db is None:
        return Anchor(False, NO_ANCHOR)
    if run_id is None:
        run_id = Manifest.read(run_dir).run_id
        if not isinstance(run_id, int) or isinstance(run_id, bool):
            raise EvidenceError(f"the run.json of {run_dir} names no run, so {db} cannot "
                                "vouch for its evidence; re-check it without --db")
    row, hashes, fault_log = _stored_evidence(Path(db), run_id)
    if row is None:
        raise EvidenceError(f"{db} has no run {run_id}")
    if hashes:
        verify(run_dir, hashes, run_id)
        if row.get("sealed") == SEALED_AT_IMPORT:  # its own SHA256SUMS, not a seal we kept
            return Anchor(False, f"evidence unchanged since run {run_id} was imported, but its "
                          "hashes came from the run's own SHA256SUMS at the import: not "
                          "verified against the end of the run", row, fault_log)
        return Anchor(True, f"evidence verified: its {len(hashes)} files match the hashes "
                      f"stored with run {run_id}", row, fault_log)
    if row.get("sealed"):
        raise EvidenceError(f"run {run_id} was stored with evidence hashes, but {db} holds "
                            "none for it; refusing to re-check unverifiable evidence")
    if row.get("sealed") == 0:
        note = (f"run {run_id} was stored without evidence to seal (e.g. `pgval check`): "
                "not verified")
    elif row.get("status") != "complete":
        note = (f"run {run_id} was never completed (status {row.get('status')}), so its "
                "evidence was never sealed: not verified")
    else:
        from pgval.store import EVIDENCE_SCHEMA

        note = (f"stored before evidence hashes (schema v{EVIDENCE_SCHEMA - 1} or older): "
                "not verified")
    return Anchor(False, note, row, fault_log)


def _stored_evidence(db: Path, run_id: int) -> tuple[dict[str, Any] | None, dict[str, str],
                                                      list[dict[str, Any]] | None]:
    """Run ``run_id``'s row, its evidence hashes in the order stored, its fault log."""
    row = _stored_run(db, run_id)
    if row is None:
        return None, {}, None
    try:
        conn = connect_readonly(db)
    except StoreError as exc:
        raise EvidenceError(str(exc)) from exc
    try:
        try:
            hashes = {str(p): str(h) for p, h in conn.execute(
                "SELECT path, sha256 FROM evidence_files WHERE run_id = ? ORDER BY rowid",
                [run_id])}
        except sqlite3.OperationalError:  # a database from before evidence hashes
            hashes = {}
        try:
            details = [d for (d,) in conn.execute(
                "SELECT detail FROM fault_log WHERE run_id = ? ORDER BY seq", [run_id])]
        except sqlite3.OperationalError:
            details = []
    finally:
        conn.close()
    log = []
    for detail in details:
        try:
            entry = json.loads(detail)
        except (TypeError, ValueError):
            continue
        if isinstance(entry, dict):
            log.append(entry)
    return row, hashes, log or None


def recheck(run_dir: Path, db: Path | None = None, run_id: int | None = None) -> Recheck:
    """Evaluate a stored run again from its evidence, verified against ``db`` first."""
    evidence = anchor(run_dir, db, run_id)
    manifest = Manifest.read(run_dir)
    fault = _fault(manifest, run_dir)
    inputs = {t: load_topic(run_dir, t) for t in INPUT_TOPICS}
    streams = streams_from_records(inputs, load_topic(run_dir, OUTPUT_TOPIC),
                                   manifest.resources, manifest.control_ids)
    evaluation = evaluate(streams.events, streams.outputs, manifest.topology,
                          manifest.window_ms, manifest.phase_bounds,
                          progress=load_progress(run_dir))
    row = evidence.row or {}
    stored = (stored_reasons(json_cell(row.get("validity")), row.get("validity_reasons"))
              if row else stored_reasons(manifest.validity, manifest.validity_reasons))
    generator = manifest.generator
    if generator is None and row:
        summary = json_object_cell(row.get("summary"))
        generator = summary.get("generator") if isinstance(summary.get("generator"),
                                                           dict) else None
    validity, carried = recompute_validity(manifest, inputs, evaluation, stored, generator,
                                           fault, evidence.fault_log)
    before = {r.kind for r in stored}
    now = validity.kinds()
    changes = {"only_stored": sorted(before - now), "only_now": sorted(now - before)}
    return Recheck(manifest, streams, evaluation, validity, evidence,
                   {k: v for k, v in changes.items() if v}, carried)


def recompute_validity(manifest: Manifest, inputs: dict[str, TopicRecords],
                       evaluation: Evaluation, stored: list[Reason],
                       generator: dict[str, Any] | None, fault: Fault | None,
                       fault_log: list[dict[str, Any]] | None) -> tuple[Validity, list[str]]:
    """The run's validity from its inputs, as the run itself decided it: read-back proof
    (run.json), reconciliation (the records read against the end offsets and deliveries),
    generator report, what was seen live (drain, driver), the data, the fault log (the
    database's). A kind whose inputs the run did not keep (older runs; the fault log
    without a database) keeps its stored reasons; those kinds are returned too."""
    validity = Validity()
    carried: list[str] = []

    def carry(kind: ReasonKind) -> None:
        validity.add(r for r in stored if r.kind == kind)
        carried.append(kind)

    readback = manifest.readback if isinstance(manifest.readback, dict) else {}
    per_topic = {k: v for k, v in readback.items() if k != "inputs" and isinstance(v, dict)}
    if per_topic:
        validity.add(readback_reasons(per_topic))
    else:
        carry("readback")
    info = readback.get("inputs")
    ends = [per_topic.get(t, {}).get("end_offsets") for t in INPUT_TOPICS]
    if isinstance(info, dict) and all(isinstance(e, dict) for e in ends):
        clean = (generator_reasons(generator).valid if generator is not None
                 else not any(r.kind == "generator" for r in stored))
        _, reasons = reconcile_inputs(
            sum(len(inputs[t]) for t in INPUT_TOPICS),
            sum(int(o) for e in ends for o in e.values()),
            int(info.get("delivered") or 0), int(info.get("control") or 0), clean)
        validity.add(reasons)
    else:
        carry("reconcile")
    if generator is not None:
        validity.add(generator_reasons(generator))
    else:
        carry("generator")
    if manifest.observed_reasons is not None:
        validity.add(Reason("observed", str(r)) for r in manifest.observed_reasons)
    else:
        carry("observed")
    validity.add(evaluation_reasons(evaluation, fault))
    if fault_log is not None and fault is not None:
        validity.add(fault_reasons(fault, fault_log))
    elif fault not in (None, Fault.NONE):
        carry("fault")
    carry("other")
    return validity, [k for k in carried if k != "other"]


def _fault(manifest: Manifest, run_dir: Path) -> Fault | None:
    """The run's fault as run.json's config names it (None: not named); a name pgval
    does not know is a damaged manifest, said in one sentence."""
    fault = manifest.config.get("fault")
    if fault is None:
        return None
    if not (isinstance(fault, str) and fault in FAULTS):
        shown = json.dumps(fault, default=str)[:40]
        raise EvidenceError(f"{evidence_dir(run_dir) / MANIFEST} is damaged: its config names "
                            f"the fault {shown}, which is none of {', '.join(FAULTS)}")
    return Fault(fault)


#: How a run stored before reasons had kinds is read: the kind of each of its sentences,
#: by their first words (the sentences pgval wrote then). Used for those runs only.
LEGACY_REASON_STARTS: tuple[tuple[ReasonKind, tuple[str, ...]], ...] = (
    ("data", ("nothing was expected", "the control phase had no", "the failure phase had no",
              "the recovery phase had no")),
    ("readback", ("read-back of topic",)),
    ("reconcile", ("input records read", "input topics hold")),
    ("generator", ("the generator had", "a generator process failed")),
    ("observed", ("the drain timed out", "the driver died")),
    ("fault", ("injecting ", "removing ", "crash:", "driver-crash:", "delay")),
)


def legacy_reason_kind(text: str) -> ReasonKind:
    """The kind of one reason stored as a sentence alone (``other``: no rule knows it, and
    a re-check carries it unchanged)."""
    for kind, starts in LEGACY_REASON_STARTS:
        if text.startswith(starts):
            return kind
    if text.startswith("the ") and " fault was never " in text:
        return "fault"
    return "other"


def stored_reasons(typed: object, texts: object) -> list[Reason]:
    """A stored validity: its reasons with their stored kinds (``typed``, the records of
    run.json's or the database's ``validity``), or, for a run stored before kinds (no
    usable records), its sentences (``texts``) with kinds read by
    :func:`legacy_reason_kind`."""
    reasons = reasons_from_records(typed)
    if reasons is not None:
        return reasons
    if isinstance(texts, str):  # the database's column: a JSON list
        texts = json_cell(texts)
    if not isinstance(texts, list):
        return []
    return [Reason(legacy_reason_kind(str(t)), str(t)) for t in texts]


#: The stored counts a re-check must reproduce before its derived measures may be stored.
VERDICT_FIELDS = ("guarantee", "expected", "processed", "duplicate", "incorrect",
                  "unprocessed")


def store_derived(db: Path, run_id: int, result: Recheck) -> None:
    """Write a re-check's recovery metrics and unprocessed causes over the stored ones.

    These are derived measures whose definitions improve (a detector fix); the verdict and
    counts are the evidence and must not move: when they differ from the stored row the
    run is left untouched and the difference is the error."""
    from pgval.store import ResultsStore

    if not result.evidence.verified:  # edited evidence must not rewrite what was measured
        raise EvidenceError(f"run {run_id}'s evidence cannot be verified "
                            f"({result.evidence.note}); --store writes only what verified "
                            "evidence gives, nothing was stored")
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


def import_run(run_dir: Path, db: Path) -> int:
    """Store a run whose evidence is complete but whose storing failed (disk full, the
    database locked past the busy time-out, read-only): ``pgval recheck RUN_DIR --store
    --db DB``. The evidence must still match the ``SHA256SUMS`` the run wrote; its row in
    ``db`` (the one run.json names, if it is this run's and not complete) is finished
    with the evidence hashes; else a new row is made, without them (the evidence names
    another run id, so a re-check by the new id could not verify it). Returns the run id."""
    from pgval.store import UNSTORED, ResultsStore

    manifest = Manifest.read(run_dir)
    hashes = _sums_verified(run_dir)
    result = recheck(run_dir)  # no database: the validity run.json recorded is kept
    extra = json_object_cell(_read_text(Path(run_dir) / UNSTORED))
    fault_log = [e for e in extra.pop("fault_log", None) or [] if isinstance(e, dict)]
    with ResultsStore(db) as store:
        row = store.run(manifest.run_id) if isinstance(manifest.run_id, int) else None
        mine = row is not None and all(
            _same_dir(where, run_dir) for where in (
                row.get("run_dir"), json_object_cell(row.get("params")).get("run_dir")))
        if row is not None and mine and row.get("status") == "complete":
            raise EvidenceError(f"run {manifest.run_id} is already stored complete in {db}")
        cfg = manifest.config
        if mine and isinstance(manifest.run_id, int):
            run_id = manifest.run_id
        else:  # a new row: the evidence names another run id, so it is stored unsealed
            hashes = None
            run_id = store.start_run(
                "validate", manifest.topology, manifest.window_ms, pg=_str(cfg.get("pg")),
                fault=_str(cfg.get("fault")), seed=cfg.get("seed") if isinstance(
                    cfg.get("seed"), int) else None, params={**cfg, "run_dir": str(run_dir)})
        store.finish_run(run_id, result.evaluation, extra={**extra, "imported": True},
                         validity=result.validity, run_dir=Path(run_dir),
                         batches=load_progress(run_dir), fault_log=fault_log or None,
                         **({"evidence": hashes, "sealed_at_import": True}
                            if hashes is not None else {}))
    (Path(run_dir) / UNSTORED).unlink(missing_ok=True)
    return run_id


def _same_dir(recorded: object, run_dir: Path) -> bool:
    """Whether a row's recorded run directory (None: not recorded) is ``run_dir``."""
    if recorded is None:
        return True
    try:
        return isinstance(recorded, str) and Path(recorded).resolve() == Path(run_dir).resolve()
    except (OSError, ValueError):
        return False


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _sums_verified(run_dir: Path) -> dict[str, str] | None:
    """The hashes ``SHA256SUMS`` holds, once every file still matches them (None: the run
    wrote none). An edited file is refused: an import must not launder it."""
    from pgval.evidence import EVIDENCE_DIR, EVIDENCE_FILES, sha256_file

    folder = evidence_dir(run_dir)
    sums = folder / "SHA256SUMS"
    text = _read_text(sums)
    if text is None:
        return None
    hashes: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        digest, _, name = line.partition("  ")
        if name not in EVIDENCE_FILES:
            raise EvidenceError(f"SHA256SUMS of {run_dir} names {name[:80]!r}, which is no "
                                "evidence file; refusing to import it")
        try:
            now = sha256_file(folder / name)
        except OSError:
            now = None
        if now != digest:
            raise EvidenceError(f"{EVIDENCE_DIR}/{name} of {run_dir} differs from its hash in "
                                "SHA256SUMS (edited after the run); refusing to import it")
        hashes[f"{EVIDENCE_DIR}/{name}"] = digest
    added = [n for n in EVIDENCE_FILES if f"{EVIDENCE_DIR}/{n}" not in hashes
             and (folder / n).exists()]
    if added:
        raise EvidenceError(f"{EVIDENCE_DIR}/{added[0]} of {run_dir} is not in SHA256SUMS "
                            "(added after the run); refusing to import it")
    hashes[f"{EVIDENCE_DIR}/SHA256SUMS"] = sha256_file(sums)
    return hashes


def export(run_dir: Path, out_dir: Path, db: Path | None = None,
           run_id: int | None = None) -> dict[str, Any]:
    """Write ``inputs.jsonl``, ``outputs.jsonl`` and ``run.json`` for ``pgval check``, from
    evidence verified against ``db`` first (as :func:`recheck`)."""
    evidence = anchor(run_dir, db, run_id)
    manifest = Manifest.read(run_dir)
    streams = load_streams(run_dir, manifest)
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        n_in = _write_inputs(streams.events, out_dir / "inputs.jsonl")
        n_out = _write_outputs(streams.outputs, out_dir / "outputs.jsonl")
        info = {"topology": manifest.topology, "window_ms": manifest.window_ms,
                "phases": list(manifest.phases), "t4": manifest.t4, "source": str(run_dir),
                "run_id": manifest.run_id, "inputs": n_in, "outputs": n_out,
                "control_ids_set_aside": manifest.control_ids,
                "evidence": evidence.as_dict()}
        (out_dir / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    except OSError as exc:  # a file in the way, no such place, the disk full, …
        raise EvidenceError(f"cannot write the export to {out_dir}: "
                            f"{exc.strerror or exc} ({exc.filename or out_dir})") from exc
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
