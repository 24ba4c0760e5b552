"""Store a run whose storing failed, from its sealed evidence: ``pgval recheck RUN_DIR
--store --db DB``.

Why a module of its own: the run's results never reached the database (disk full, the
database locked past its busy time-out, read-only storage), but its evidence and
``SHA256SUMS`` did. The evidence must still match those hashes (an import must not launder
an edit); the re-check of :mod:`pgval.evidence.recheck` then computes what is stored.

An import is never a run sealed at its end: with the run's own ``SHA256SUMS`` it is stored
``runs.sealed = 2`` (an edit made before the import cannot be ruled out), without them (the
file deleted, or the evidence naming another run) ``runs.sealed = 3``, *unsealed*. Neither
is verified evidence: ``recheck --expect`` does not pass on it, and ``pgval report`` holds
both apart from its tables unless ``--include-unsealed``.
"""

from __future__ import annotations

from pathlib import Path

from pgval.core.errors import EvidenceInDoubt
from pgval.evidence.bundle import (
    EVIDENCE_DIR,
    EVIDENCE_FILES,
    EvidenceError,
    Manifest,
    evidence_dir,
    is_spark_key,
    load_progress,
    sha256_file,
    spark_files,
)
from pgval.evidence.recheck import recheck
from pgval.store.dbfile import json_object_cell


def import_run(run_dir: Path, db: Path) -> tuple[int, str]:
    """Store a run whose evidence is complete but whose storing failed (disk full, the
    database locked past the busy time-out, read-only): ``pgval recheck RUN_DIR --store
    --db DB``. The evidence must still match the ``SHA256SUMS`` the run wrote; its row in
    ``db`` (the one run.json names, if it is this run's and not complete) is finished
    with the evidence hashes; else a new row is made, without them (the evidence names
    another run id, so a re-check by the new id could not verify it). Returns the run id and
    a sentence saying how it is sealed."""
    from pgval.store.results import UNSTORED, ResultsStore

    manifest = Manifest.read(run_dir)
    hashes = _sums_verified(run_dir)
    result = recheck(run_dir)  # no database: the validity run.json recorded is kept
    extra = json_object_cell(_read_text(Path(run_dir) / UNSTORED))
    fault_log = [e for e in extra.pop("fault_log", None) or [] if isinstance(e, dict)]
    with ResultsStore(db) as store:
        row = store.run(manifest.run_id) if isinstance(manifest.run_id, int) else None
        mine = row is not None and row.get("kind") == "validate" and all(
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
                         evidence=hashes, imported=True)
    (Path(run_dir) / UNSTORED).unlink(missing_ok=True)
    if hashes is not None:
        return run_id, ("sealed with the hashes of its own SHA256SUMS (an edit before the "
                        "import cannot be ruled out): not verified evidence")
    why = ("its evidence has no SHA256SUMS" if not (evidence_dir(run_dir) / "SHA256SUMS")
           .exists() else f"its evidence names run {manifest.run_id}, not this row")
    return run_id, (f"unsealed ({why}): not verified evidence; `pgval report` holds it apart "
                    "unless --include-unsealed")


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
    wrote none). An edited file is refused (:class:`~pgval.core.errors.EvidenceInDoubt`): an
    import must not launder it."""
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
        if name not in EVIDENCE_FILES and not is_spark_key(f"{EVIDENCE_DIR}/{name}"):
            raise EvidenceInDoubt(f"SHA256SUMS of {run_dir} names {name[:80]!r}, which is no "
                                  "evidence file; refusing to import it")
        try:
            now = sha256_file(folder / name)
        except OSError:
            now = None
        if now != digest:
            raise EvidenceInDoubt(f"{EVIDENCE_DIR}/{name} of {run_dir} differs from its hash "
                                  "in SHA256SUMS (edited after the run); refusing to import "
                                  "it")
        hashes[f"{EVIDENCE_DIR}/{name}"] = digest
    added = [n for n in (*EVIDENCE_FILES, *spark_files(folder))
             if f"{EVIDENCE_DIR}/{n}" not in hashes and (folder / n).exists()]
    if added:
        raise EvidenceInDoubt(f"{EVIDENCE_DIR}/{added[0]} of {run_dir} is not in "
                              "SHA256SUMS (added after the run); refusing to import it")
    hashes[f"{EVIDENCE_DIR}/SHA256SUMS"] = sha256_file(sums)
    return hashes
