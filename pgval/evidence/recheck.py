"""Re-check a stored run from its evidence.

``recheck`` recomputes everything (oracle, validator, metrics, recovery, why-unprocessed)
from the records the run kept (:mod:`pgval.evidence.bundle`), and the validity too, from its
inputs (:func:`recompute_validity`), never from the verdict run.json or the database
stored. (:mod:`pgval.evidence.export` writes the same streams for ``pgval check``;
:mod:`pgval.evidence.run_import` stores a run whose storing failed.)

A re-check first compares the evidence files with the SHA-256 hashes stored with the run in the
results database (:func:`anchor`): edited evidence is refused in one sentence. A run
directory given without a database has no anchor, and the output says so. Then the run's
stored row is held to what the evidence gives (:func:`compare_figures`): a figure edited in
the database is named. ``--expect`` passes only when both hold
(:func:`pgval.checker.gate.doubt_of`).

Stored and recomputed validity are compared by the reasons' kinds, never their wording.
Runs stored before reasons had kinds keep only sentences: :func:`legacy_reason_kind` reads
their kinds from the sentences' first words, for those runs only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pgval.checker.anomalies import counts as anomaly_counts
from pgval.checker.evaluate import Evaluation, evaluate
from pgval.checker.evaluate import by_rows as rows_verdict
from pgval.checker.result import Reason, ReasonKind, reasons_from_records
from pgval.checker.validity import (
    Validity,
    evaluation_reasons,
    generator_reasons,
    readback_reasons,
    reconcile_inputs,
    sink_reasons,
)
from pgval.core.errors import EvidenceInDoubt
from pgval.core.files import is_dir
from pgval.core.schema import FAULTS, OUTPUT_TOPIC, SINKS, Fault
from pgval.evidence.bundle import (
    INPUT_TOPICS,
    MANIFEST,
    EvidenceError,
    Manifest,
    Streams,
    by_rows,
    cross_check_of,
    evaluation_streams,
    evidence_dir,
    load_anomalies,
    load_progress,
    load_topic,
    verify,
)
from pgval.faults.took_effect import fault_reasons
from pgval.kafka.topic_records import TopicRecords
from pgval.scale.evaluation import read_reasons
from pgval.store.dbfile import StoreError, connect_readonly, json_cell, json_object_cell
from pgval.store.results import (
    RECOVERY_COLUMNS,
    SCHEMA_VERSION,
    SEALED_AT_IMPORT,
    UNSEALED_IMPORT,
    phase_figures,
    run_figures,
)

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
    #: The columns judged (None: a run judged on Spark, whose columns are its tables).
    streams: Streams | None
    evaluation: Evaluation
    validity: Validity
    evidence: Anchor = field(default_factory=lambda: Anchor(False, NO_ANCHOR))
    #: Reason kinds only in the stored validity / only now (compared by kind, not text).
    validity_changes: dict[str, list[str]] = field(default_factory=dict)
    #: Kinds whose inputs the run did not keep: their reasons are the stored ones.
    carried: list[str] = field(default_factory=list)
    #: The recomputed anomaly set against the one the run kept (:func:`compare_anomalies`).
    anomalies: dict[str, Any] = field(default_factory=dict)
    #: The stored row's figures against the recomputed ones (:func:`compare_figures`).
    figures: dict[str, Any] = field(default_factory=lambda: dict(NO_FIGURES))

    def summary(self) -> dict[str, Any]:
        """The ``pgval check --json`` object plus validity, evidence check and run id."""
        out = self.evaluation.summary()
        out.update(self.validity.as_dict())
        out["run_id"] = self.manifest.run_id
        out["evidence"] = self.evidence.as_dict()
        out["validity_changes"] = self.validity_changes
        out["validity_carried"] = self.carried
        out["anomalies"] = self.anomalies
        out["stored_figures"] = self.figures
        return out


def compare_anomalies(stored: pa.Table | None, now: pa.Table) -> dict[str, Any]:
    """The recomputed anomaly set beside the kept one: ``same`` (None: the run kept none),
    the counts per kind of both, and a sentence."""
    counted = anomaly_counts(now)
    if stored is None:
        return {"same": None, "now": counted,
                "note": "the run kept no anomaly set (stored before they were kept)"}
    kept = anomaly_counts(stored)
    if stored.equals(now):
        return {"same": True, "now": counted, "stored": kept,
                "note": f"anomaly set: the {len(now):,} kept anomalies recomputed exactly"}
    moved = [f"{k} {kept[k]:,} kept, {counted[k]:,} now" for k in kept if kept[k] != counted[k]]
    return {"same": False, "now": counted, "stored": kept,
            "note": "the recomputed anomaly set differs from the kept one: "
                    + ("; ".join(moved) or _rows_differ(stored, now))}


def _rows_differ(stored: pa.Table, now: pa.Table) -> str:
    """Where two anomaly sets of the same counts per kind differ, as a phrase. A kept set
    may hold rows of no kind pgval knows (a null, another word), which no count shows."""
    if len(stored) != len(now):
        return (f"the same counts per kind, but {len(stored):,} rows kept and {len(now):,} "
                f"now (kept rows of no known kind)")
    rows = np.flatnonzero(~np.array([a == b for a, b in zip(
        stored.to_pylist(), now.to_pylist(), strict=True)], dtype=bool))
    if not len(rows):
        return "the same rows, in a table of another schema"
    return f"the same counts, {len(rows):,} rows differ (the first is row {int(rows[0]):,})"


#: What a re-check without a stored row reports for ``stored_figures``.
NO_FIGURES: dict[str, Any] = {"same": None, "differ": {},
                              "note": "no stored row to compare (no results database)"}
#: The phase figures a row has held since phases were stored; others may be NULL in a row
#: stored before they existed, and a NULL there is not compared.
PHASE_COUNTS = ("expected", "processed", "unprocessed", "duplicate", "incorrect")


def compare_figures(row: dict[str, Any], phases: dict[str, dict[str, Any]],
                    evaluation: Evaluation, validity: Validity) -> dict[str, Any]:
    """The stored row's figures (``runs`` and ``phase_results``, what ``pgval report``
    shows) against those the re-check computed, as :meth:`ResultsStore.finish_run` would
    store them: ``same``, the figures that ``differ`` (stored, now) and a sentence. A
    figure the row lacks (a column or phase row from before it existed, NULL) is not
    compared, except the verdict's counts, which every row has."""
    now: dict[str, Any] = {**run_figures(evaluation, validity),
                           **{k: v for k, v in evaluation.recovery.as_dict().items()
                              if k in RECOVERY_COLUMNS}}
    differ: dict[str, dict[str, Any]] = {}
    for key, value in now.items():
        stored = row.get(key)
        if key in row and (stored is not None or key in VERDICT_FIELDS) \
                and not _same(stored, value):
            differ[key] = {"stored": _plain(stored), "now": _plain(value)}
    for phase, figures in (phase_figures(evaluation).items() if phases else ()):
        kept = phases.get(phase, {})
        for key, value in figures.items():
            stored = kept.get(key)
            if (stored is not None or key in PHASE_COUNTS) and not _same(stored, value):
                differ[f"{phase}.{key}"] = {"stored": _plain(stored), "now": _plain(value)}
    run = row.get("id")
    if not differ:
        return {"same": True, "differ": {},
                "note": f"stored figures: run {run}'s row equals its re-check"}
    said = [f"{k} {_shown_figure(d['stored'])} stored, {_shown_figure(d['now'])} now"
            for k, d in differ.items()]
    more = f" (and {len(said) - 6} more)" if len(said) > 6 else ""
    measures = set(RECOVERY_COLUMNS)
    hint = ("; these recovery measures are derived, and a newer pgval's definitions may "
            f"move them: `pgval recheck {run} --db DB --store` stores the recomputed ones"
            if set(differ) <= measures else "")
    return {"same": False, "differ": differ,
            "note": f"the stored row of run {run} differs from what its evidence gives: "
                    f"{'; '.join(said[:6])}{more}{hint}"}


def _plain(value: object) -> object:
    """A figure as JSON keeps it: booleans as 0/1, numpy scalars as Python, NaN as None, and
    a blob (a damaged cell where a number belongs) as SQLite writes one: ``X'FF00'``."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"X'{bytes(value).hex().upper()}'"
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _same(stored: object, now: object) -> bool:
    """Whether a stored figure is the recomputed one (floats to 1e-9, as SQLite keeps them)."""
    a, b = _plain(stored), _plain(now)
    if a is None or b is None:
        return a is None and b is None
    if not (isinstance(a, int | float) and isinstance(b, int | float)):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def _shown_figure(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
    recorded = Path(found)
    if is_dir(evidence_dir(recorded)):
        return recorded
    shipped = shipped_run_dir(Path(db), run_id)
    if is_dir(evidence_dir(shipped)):
        return shipped
    if is_dir(recorded):  # there, without evidence: recheck says so in its own words
        return recorded
    raise EvidenceError(f"the run directory of run {run}, {found}, no longer exists, and "
                        f"{db} has no copy of its evidence beside it ({shipped}/evidence)")


def shipped_run_dir(db: Path, run_id: int) -> Path:
    """Where a results database carries a run's evidence with it: ``evidence/run-<id>/``
    beside the database file (a symlinked database: beside the file it links to, the one
    that is read). A run directory stays on the machine that made it; a database committed
    with its evidence (experiments/grid-23/) is re-checked from any clone. The copy is held
    to the database's hashes like the original."""
    return db.resolve().parent / "evidence" / f"run-{run_id}"


def _read_only(db: Path) -> sqlite3.Connection:
    """The results database opened without writing; a missing or foreign file is one
    sentence (and a missing one is not created)."""
    try:
        return connect_readonly(db, newest=SCHEMA_VERSION)
    except StoreError as exc:
        raise EvidenceError(str(exc)) from exc


def _stored_run(db: Path, run_id: int) -> dict[str, Any] | None:
    """Run ``run_id``'s row, read without writing: a missing or foreign file is one
    sentence (and a missing one is not created)."""
    conn = _read_only(db)
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
    files are refused (:class:`~pgval.core.errors.EvidenceInDoubt`), and so is a row that
    cannot be this evidence's (a ``pgval check`` result, a row without a run directory); a
    run stored before hashes existed, never completed, or imported is let through with a
    note saying it is not verified."""
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
    if row.get("sealed") == UNSEALED_IMPORT or (row.get("sealed") == 0 and _imported(row)):
        return Anchor(False, f"run {run_id} was imported without evidence hashes "
                      "(unsealed): not verified", row, fault_log)
    if row.get("sealed"):
        raise EvidenceInDoubt(f"run {run_id} was stored with evidence hashes, but {db} holds "
                              "none for it; refusing to re-check unverifiable evidence")
    _refuse_foreign_row(run_dir, db, run_id, row)
    if row.get("sealed") == 0:
        note = (f"run {run_id} was stored without evidence to seal (e.g. `pgval check`): "
                "not verified")
    elif row.get("status") != "complete":
        note = (f"run {run_id} was never completed (status {row.get('status')}), so its "
                "evidence was never sealed: not verified")
    else:
        from pgval.store.results import EVIDENCE_SCHEMA

        note = (f"stored before evidence hashes (schema v{EVIDENCE_SCHEMA - 1} or older): "
                "not verified")
    return Anchor(False, note, row, fault_log)


def _imported(row: dict[str, Any]) -> bool:
    """Whether a row was stored by an import (its summary says so; older imports without
    hashes were stored ``sealed = 0``, as a ``check`` is)."""
    return json_object_cell(row.get("summary")).get("imported") is True


def _refuse_foreign_row(run_dir: Path, db: Path, run_id: int, row: dict[str, Any]) -> None:
    """Refuse a row without hashes that cannot be ``run_dir``'s: a ``pgval check`` result
    or any row that records no run directory. (A sealed row is held to its hashes, which
    name the run, instead.) Without this, a run.json naming such a row re-checked as merely
    "not verified"."""
    recorded = row.get("run_dir") or json_object_cell(row.get("params")).get("run_dir")
    if row.get("kind") == "validate" and recorded:
        return
    what = ("a `pgval check` result" if row.get("kind") == "check"
            else "a row that records no run directory" if not recorded
            else f"a {str(row.get('kind'))[:20]!r} row")
    raise EvidenceInDoubt(f"run {run_id} in {db} is {what}, not a run with evidence, so it "
                          f"cannot vouch for the evidence in {run_dir}; refusing to re-check "
                          "it against another row (re-check the directory without --db)")


def _stored_phases(db: Path, run_id: int) -> dict[str, dict[str, Any]]:
    """Run ``run_id``'s ``phase_results`` rows by phase (none: a database without them)."""
    conn = _read_only(db)
    try:
        cur = conn.execute("SELECT * FROM phase_results WHERE run_id = ?", [run_id])
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    except sqlite3.OperationalError:  # no such table: nothing stored to compare
        return {}
    finally:
        conn.close()
    return {str(r.get("phase")): r for r in rows}


def _stored_evidence(db: Path, run_id: int) -> tuple[dict[str, Any] | None, dict[str, str],
                                                      list[dict[str, Any]] | None]:
    """Run ``run_id``'s row, its evidence hashes in the order stored, its fault log."""
    row = _stored_run(db, run_id)
    if row is None:
        return None, {}, None
    conn = _read_only(db)
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
    spark_read = judged_on_spark(manifest)
    inputs: dict[str, TopicRecords] = {}
    streams: Streams | None = None
    if spark_read is not None:  # the run's evidence is the Spark read's tables
        evaluation, kept_sets, recounted = _rejudge_on_spark(run_dir, manifest, spark_read)
        manifest = dataclasses.replace(manifest, readback={**manifest.readback,
                                                           "spark": recounted})
    else:
        inputs = {t: load_topic(run_dir, t) for t in INPUT_TOPICS}
        streams, evaluation = evaluate_run(run_dir, manifest, inputs,
                                           load_topic(run_dir, OUTPUT_TOPIC),
                                           load_progress(run_dir))
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
                   {k: v for k, v in changes.items() if v}, carried,
                   kept_sets if spark_read is not None else
                   compare_anomalies(load_anomalies(run_dir), evaluation.anomalies()),
                   _row_figures(db, row, evaluation, validity))


def judged_on_spark(manifest: Manifest) -> dict[str, Any] | None:
    """The Spark read of a run judged on Spark (``--checker spark``: its evidence is the
    read's tables, not the topics' records), else None."""
    judged = manifest.config.get("judged_by") if isinstance(manifest.config, dict) else None
    if not isinstance(judged, dict) or judged.get("checker") != "spark":
        return None
    spark = judged.get("spark")
    return spark if isinstance(spark, dict) else {}


def _rejudge_on_spark(run_dir: Path, manifest: Manifest, spark_run: dict[str, Any]
                      ) -> tuple[Evaluation, dict[str, Any], dict[str, Any]]:
    """A run judged on Spark judged again from the tables it kept (``evidence/spark/read``),
    in a local Spark session: the evaluation, its anomaly sets held to the kept ones ID for
    ID, and the read with every partition's records counted again from the kept tables."""
    import shutil
    import tempfile

    from pgval.scale.agreement import checker_session, spark_call
    from pgval.scale.evaluation import as_evaluation, recount_read, rejudge_kept, same_sets

    kept = manifest.readback.get("spark") if isinstance(manifest.readback, dict) else None
    read = (spark_run["read"] if isinstance(spark_run.get("read"), dict)
            else kept if isinstance(kept, dict) else {})  # a checker that failed: its reason
    folder = evidence_dir(run_dir) / "spark"
    unjudged = spark_run.get("unjudged") or (spark_run.get("reason") if read.get("complete")
                                             and spark_run.get("counts") is None else None)
    if not read.get("complete") or unjudged:  # judged by nobody then, and now
        note = (f"nothing was judged ({unjudged}): no sets" if unjudged
                else "the Spark read was incomplete: no sets")
        return (as_evaluation(None, manifest.topology, manifest.window_ms,
                              manifest.phase_bounds, 0),
                {"same": None, "now": {}, "note": note}, dict(read))
    if not (folder / "read" / "inputs").is_dir():
        raise EvidenceError(f"{run_dir} was judged on Spark, but its tables "
                            f"({folder / 'read'}) are missing")
    job = _kept_job(folder, manifest, spark_run)
    master = "local[2]"
    spark = checker_session(master)
    out = Path(tempfile.mkdtemp(prefix="pgval-recheck-spark-"))
    try:
        judged = spark_call(master, lambda: rejudge_kept(
            spark, folder / "read", manifest.topology, manifest.window_ms,
            manifest.phase_bounds, out, int(read.get("malformed_outputs") or 0), job))
        kept = {kind: folder / "sets" / kind for kind in judged.sets}
        sets = spark_call(master, lambda: same_sets(spark, kept, judged.sets))
        recounted = spark_call(master, lambda: recount_read(spark, folder / "read", read))
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
    return (as_evaluation(judged, manifest.topology, manifest.window_ms, manifest.phase_bounds,
                          int(read.get("malformed_inputs") or 0)), sets, recounted)


def _kept_job(folder: Path, manifest: Manifest, spark_run: dict[str, Any]) -> Any:
    """A user's job judged on Spark: the rows its batch run kept and how they were judged
    (:class:`pgval.scale.evaluation.KeptJob`); None for a built-in topology."""
    from pgval.oracle.values import DEFAULT_TOLERANCE
    from pgval.scale.evaluation import KeptJob

    if manifest.job is None:
        return None
    if not (folder / "batch").is_dir():
        raise EvidenceError(f"{folder.parent.parent} was judged on Spark, but the rows of its "
                            f"job's batch run ({folder / 'batch'}) are missing")
    said = spark_run.get("job") if isinstance(spark_run.get("job"), dict) else {}
    tolerance = said.get("tolerance")
    return KeptJob(folder / "batch", manifest.control_ids,
                   float(tolerance) if isinstance(tolerance, int | float) else DEFAULT_TOLERANCE)


def _row_figures(db: Path | None, row: dict[str, Any], evaluation: Evaluation,
                 validity: Validity) -> dict[str, Any]:
    """:func:`compare_figures` of a complete stored row; :data:`NO_FIGURES` without one."""
    if not row or db is None:
        return dict(NO_FIGURES)
    if row.get("status") != "complete":
        return {**NO_FIGURES, "note": f"run {row.get('id')} was never completed: no stored "
                                      "figures to compare"}
    return compare_figures(row, _stored_phases(Path(db), int(row["id"])), evaluation, validity)


def evaluate_run(run_dir: Path, manifest: Manifest, inputs: dict[str, TopicRecords],
                 output: TopicRecords, progress: list[dict[str, Any]],
                 release: Callable[[], None] | None = None) -> tuple[Streams, Evaluation]:
    """A run judged from its records: what ``validate`` does at the end of a run and
    ``recheck`` does again, one function so the two cannot differ. A user's job is judged
    by its batch oracle's rows, a built-in one also against pgval's own oracle; a file
    sink's raw read is judged too, as what a reader listing the directory would conclude
    (:attr:`Evaluation.views`). ``release``: called once the records are turned into
    streams, for the caller to empty what holds them (``inputs`` among it), so the
    validation reuses their memory (they are evidence on disk by then)."""
    streams, expected = evaluation_streams(run_dir, manifest, inputs, output)
    sink = manifest.sink if isinstance(manifest.sink, dict) else {}
    raw = (evaluation_streams(run_dir, manifest, inputs, output, raw=True)
           if sink.get("kind") in SINKS and SINKS[sink["kind"]].raw_read else None)
    if release is not None:
        release()
    evaluation = evaluate(streams.events, streams.outputs, manifest.topology,
                          manifest.window_ms, manifest.phase_bounds, progress=progress,
                          expected=expected, cross_check=cross_check_of(manifest),
                          values=streams.values, late=streams.late)
    if by_rows(manifest):  # a job without ids: synthetic inputs, one per expected row
        evaluation = rows_verdict(evaluation, streams.real_ingress)
    if raw is not None:
        evaluation.views["raw"] = evaluate(
            raw[0].events, raw[0].outputs, manifest.topology, manifest.window_ms,
            manifest.phase_bounds, progress=progress, expected=raw[1]).view()
    if sink:
        evaluation.views["clock"] = sink.get("clock")
    return streams, evaluation


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
    per_topic = {k: v for k, v in readback.items() if k not in ("inputs", "spark")
                 and isinstance(v, dict)}
    spark_read = readback.get("spark")
    if isinstance(spark_read, dict):  # judged on Spark: its read's proof and counts
        info = readback.get("inputs") if isinstance(readback.get("inputs"), dict) else {}
        clean = (generator_reasons(generator).valid if generator is not None
                 else not any(r.kind == "generator" for r in stored))
        judged = judged_on_spark(manifest) or {}
        validity.add(read_reasons(spark_read, list(judged.get("input_topics") or []),
                                  int(info.get("delivered") or 0),
                                  int(info.get("control") or 0), clean))
    elif per_topic:
        validity.add(readback_reasons(per_topic))
        sink = manifest.sink if isinstance(manifest.sink, dict) else None
        if sink is not None and isinstance(sink.get("read"), dict):
            validity.add(sink_reasons(str(sink.get("kind")), sink["read"]))
    else:
        carry("readback")
    info = readback.get("inputs")
    ends = [per_topic.get(t, {}).get("end_offsets") for t in INPUT_TOPICS]
    if isinstance(spark_read, dict):
        pass  # reconciled with the read above
    elif isinstance(info, dict) and all(isinstance(e, dict) for e in ends):
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
    validity.add(evaluation_reasons(evaluation))
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
    from pgval.store.results import ResultsStore

    if not result.evidence.verified:  # edited evidence must not rewrite what was measured
        raise EvidenceInDoubt(f"run {run_id}'s evidence cannot be verified "
                              f"({result.evidence.note}); --store writes only what verified "
                              "evidence gives, nothing was stored")
    stored = _stored_run(Path(db), run_id)
    if stored is None:
        raise EvidenceError(f"{db} has no run {run_id}")
    now = result.evaluation.summary()
    moved = [f"{k} {stored.get(k)!r} → {now.get(k)!r}" for k in VERDICT_FIELDS
             if stored.get(k) != now.get(k)]
    if moved:
        raise EvidenceInDoubt(f"run {run_id}'s re-check does not reproduce its stored "
                              f"counts ({'; '.join(moved)}); nothing was stored")
    with ResultsStore(db) as store, store.transaction():
        store.save_recovery(run_id, result.evaluation.recovery.as_dict())
        store.save_unprocessed_causes(run_id, result.evaluation.unprocessed_causes)
