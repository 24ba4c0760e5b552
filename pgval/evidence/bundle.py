"""A run's evidence: the records exactly as read back from Kafka, and what they mean.

Jepsen's rule: a run's store holds everything needed to check it again. After the drain,
``pgval validate`` writes into ``<run>/evidence/``:

* ``get.parquet``, ``post.parquet``, ``output.parquet`` — every record read back
  (partition, offset, timestamp, key, value as raw bytes), zstd-compressed. Malformed
  values are kept as they were, so a re-check counts them again.
* ``run.json`` — the manifest: topology, window, phase bounds, the range of control IDs
  pgval itself wrote (the only IDs it may set aside), the read-back proof per topic and the
  reconciliation with the generator, the validity verdict and the run's config.
* ``progress.jsonl`` — the driver's per-batch progress (offsets, watermarks), which the
  why-unprocessed attribution needs.
* ``expected.parquet`` and ``job.py`` — a user's job only (``--job``): the job's rows
  as its ``build`` gave them run as a batch over these inputs (key text and ``ids``: the
  oracle, :mod:`pgval.topologies.batch`), and the job's source file as it ran.
* ``anomalies.parquet`` — every anomaly the run's evaluation found, one row each (kind,
  ID, phase, cause, the outputs involved: :mod:`pgval.checker.anomalies`); derived from the
  records, kept so the full set is with the run, and compared by ``recheck``.
* ``SHA256SUMS`` — the SHA-256 of each file above and the run id (``sha256sum -c``
  reads it). It proves nothing by itself (it sits in the same editable folder): the same
  hashes are stored with the run in the results database by :func:`seal`, and ``recheck``
  and ``export`` compare the files with the database (:func:`verify`) before reading them.

:func:`evaluation_streams` is the one conversion from raw records to the columns that
:func:`pgval.checker.evaluate.evaluate` reads; ``validate`` and ``recheck`` both call it, which is
why a re-check gives the same answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pgval.core.errors import EvidenceInDoubt, UserMistake
from pgval.core.files import copy_private, private_temp_path, write_private
from pgval.core.record_ids import OWN_KEY, record_ids
from pgval.core.redact import redact_record
from pgval.core.schema import (
    BUILTIN_TOPOLOGIES,
    GET_TOPIC,
    OUTPUT_TOPIC,
    POST_TOPIC,
    SINKS,
    resource_name,
)
from pgval.kafka.topic_records import RECORD_SCHEMA, TopicRecords
from pgval.oracle.expected import ExpectedOutputs
from pgval.oracle.replay import LateDrops, NoReplay, apply_replay, batch_by_run, topic_of
from pgval.oracle.rows import (
    RowsError,
    expected_from_rows,
    key_by_single_id,
    match_rows,
    rows_of,
    set_aside_rows,
    single_id_keys,
)
from pgval.oracle.values import DEFAULT_TOLERANCE, ValueCheck
from pgval.records.parse import (
    JOB_VALUE,
    InputEvents,
    KafkaInputColumns,
    OutputRecords,
    ResourceTable,
    inputs_from_topics,
    job_outputs_from_kafka,
    job_outputs_from_rows,
    outputs_from_kafka,
    parse_values,
)
from pgval.records.phases import Phases

EVIDENCE_DIR = "evidence"
MANIFEST = "run.json"
PROGRESS = "progress.jsonl"
ANOMALIES = "anomalies.parquet"
#: A user's job: its batch oracle's rows and its source as it ran.
EXPECTED = "expected.parquet"
#: The batch oracle's rows of a job without ``ids`` (judged by rows): key text, row text.
EXPECTED_ROWS = "expected-rows.parquet"
#: A job's rows from the run's micro-batches replayed (:mod:`pgval.oracle.replay`): kept
#: where the run's stateful operators dropped rows behind the watermark.
REPLAY = "replay.parquet"
EXPECTED_ROWS_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.string()),
                                  ("own", pa.bool_())])
JOB_SOURCE = "job.py"
#: A sink other than Kafka: its rows as read back (a file sink: through its log), and a
#: file sink's rows as a reader listing the directory sees them ("raw").
SINK_ROWS = "output-rows.parquet"
SINK_RAW = "output-raw.parquet"
SINK_ROWS_SCHEMA = pa.schema([("key", pa.string()), ("ids", pa.list_(pa.int64())),
                              ("written_ms", pa.int64()), ("batch", pa.int64()),
                              ("origin", pa.string()),
                              # a user's sink: the job's columns its read gave back, as JSON
                              ("value", pa.string())])
SUMS = "SHA256SUMS"
INPUT_TOPICS = (GET_TOPIC, POST_TOPIC)
#: Every file a re-check or an export reads, in the order they are verified; the progress
#: file only when the driver wrote one, the anomalies only in runs stored since they are.
EVIDENCE_FILES = (MANIFEST, *(f"{t}.parquet" for t in (*INPUT_TOPICS, OUTPUT_TOPIC)), PROGRESS,
                  ANOMALIES, EXPECTED, EXPECTED_ROWS, REPLAY, JOB_SOURCE, SINK_ROWS, SINK_RAW)


#: A run judged on Spark keeps its tables and anomaly sets here (Parquet folders, every file
#: sealed): :mod:`pgval.run.spark_judge`.
SPARK_DIR = "spark"


def spark_files(folder: Path) -> list[str]:
    """Every file under the evidence folder's :data:`SPARK_DIR`, relative to the evidence
    folder, sorted (none for a run judged by numpy alone)."""
    root = folder / SPARK_DIR
    if not root.is_dir():
        return []
    return sorted(p.relative_to(folder).as_posix() for p in root.rglob("*") if p.is_file())


def is_spark_key(key: str) -> bool:
    """A stored evidence key inside :data:`SPARK_DIR`, no way out of it."""
    parts = key.split("/")
    return (len(parts) > 2 and parts[:2] == [EVIDENCE_DIR, SPARK_DIR]
            and not any(p in ("", ".", "..") for p in parts))


class EvidenceError(UserMistake):
    """A run directory or run id without usable evidence: missing, unreadable or damaged
    files, a run the database does not hold (bad input, exit 2). Evidence that is there
    but not what was sealed is :class:`~pgval.core.errors.EvidenceInDoubt` (exit 3)."""


class JobNotJudgeable(EvidenceError):
    """A job whose batch rows the validator cannot use (two rows with one key, an ID that
    is no input): found from the evidence, a mistake of the job, not of the run."""

@dataclass
class Manifest:
    """``run.json``: what a re-check needs besides the records themselves."""

    topology: str
    window_ms: int
    phases: list[int]  # [start, t2, t3]
    t4: int | None = None
    resources: int = 0
    #: Inclusive range [lo, hi] of the negative IDs pgval wrote (priming and closing
    #: events); only these are set aside. None: pgval wrote none.
    control_ids: list[int] | None = None
    control_events: int = 0
    readback: dict[str, Any] = field(default_factory=dict)
    reconciliation: dict[str, Any] = field(default_factory=dict)
    valid: bool | None = None
    validity_reasons: list[str] = field(default_factory=list)
    run_id: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    #: Inputs of the validity a re-check recomputes (None in manifests written before
    #: they were kept): the generator's report, and the reasons only seen live (drain time-
    #: out, driver died), which nothing after the run could recompute.
    generator: dict[str, Any] | None = None
    observed_reasons: list[str] | None = None
    #: The validity reasons with their kinds, ``[{"kind": …, "text": …}]``
    #: (:meth:`pgval.checker.result.Reason.as_record`), what a re-check compares by kind;
    #: None in manifests written before kinds (``validity_reasons`` alone, read by
    #: :func:`pgval.evidence.recheck.legacy_reason_kind`).
    validity: list[dict[str, str]] | None = None
    #: Whether T3 was the schedule's (:attr:`pgval.records.phases.Phases.removal_scheduled`); None
    #: in manifests written before restart policies, whose removals were all at T3.
    removal_scheduled: bool | None = None
    #: A user's job (topology ``job``): ``{"ref", "source", "sha256", "oracle"}``, the
    #: job as named, its source file, that file's hash, and what the batch oracle said.
    job: dict[str, Any] | None = None
    #: A sink other than Kafka: ``{"kind", "ref", "clock", "read"}`` (kind: one of
    #: :data:`SINK_KINDS`), the outputs then in ``output-rows.parquet`` (and, for a sink
    #: read raw too, ``output-raw.parquet`` beside them).
    sink: dict[str, Any] | None = None

    @property
    def phase_bounds(self) -> Phases:
        start, t2, t3 = self.phases
        return Phases(start, t2, t3, self.t4,
                      removal_scheduled=self.removal_scheduled is not False)

    def write(self, run_dir: Path) -> Path:
        text = json.dumps(redact_record(asdict(self)), indent=1, default=str) + "\n"
        return write_private(evidence_dir(run_dir) / MANIFEST, text)

    @classmethod
    def read(cls, run_dir: Path) -> Manifest:
        path = evidence_dir(run_dir) / MANIFEST
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise EvidenceError(f"{run_dir} holds no evidence ({path} is missing); only runs "
                                "stored by this version of pgval can be re-checked") from exc
        except (OSError, ValueError, RecursionError) as exc:
            raise EvidenceError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise EvidenceError(f"{path} is not a pgval manifest (a JSON object), but a "
                                f"JSON {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        for name, value in values.items():
            if (problem := _manifest_problem(name, value)) is not None:
                raise EvidenceError(f"{path} is damaged: its {name} {problem}")
        missing = [n for n in _REQUIRED if n not in values]
        if missing:
            raise EvidenceError(f"{path} is damaged: it lacks {', '.join(missing)}")
        return cls(**values)


#: The sinks whose rows the evidence keeps beside the (empty) output topic.
SINK_KINDS = tuple(name for name in SINKS if name != "kafka")
#: The manifest fields without a default; every other one may be absent (older runs).
_REQUIRED = ("topology", "window_ms", "phases")
#: The most resources a manifest may name: the evaluation builds a table of their names.
MAX_RESOURCES = 1_000_000


def _is_int(value: object, lo: int = -(1 << 63), hi: int = (1 << 63) - 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _manifest_problem(name: str, value: object) -> str | None:
    """Why a run.json field cannot be what a re-check reads, or None: the manifest is
    an editable file, and a wrong type must be one sentence, never a traceback deep in the
    evaluation."""
    from pgval.core.schema import TOPOLOGIES
    from pgval.records.phases import MAX_MS

    if name == "topology":
        ok = value in TOPOLOGIES
        want = f"must be one of {', '.join(TOPOLOGIES)}"
    elif name == "window_ms":
        ok, want = _is_int(value, 1, MAX_MS), f"must be an integer from 1 to {MAX_MS} (ms)"
    elif name == "phases":
        ok = (isinstance(value, list) and len(value) == 3
              and all(_is_int(v, 0, MAX_MS) for v in value) and value == sorted(value))
        want = "must be three ascending times in ms, [start, t2, t3]"
    elif name == "t4":
        ok, want = value is None or _is_int(value, 0, MAX_MS), "must be a time in ms or null"
    elif name == "resources":
        ok = _is_int(value, 0, MAX_RESOURCES)
        want = f"must be an integer from 0 to {MAX_RESOURCES:,}"
    elif name == "control_ids":
        ok = value is None or (isinstance(value, list) and len(value) == 2
                               and all(_is_int(v) for v in value) and value[0] <= value[1])
        want = "must be null or an inclusive range [lo, hi] of 64-bit integers"
    elif name in ("control_events", "run_id"):
        ok = _is_int(value) or (name == "run_id" and value is None)
        want = "must be an integer" + (" or null" if name == "run_id" else "")
    elif name == "readback":
        ok, want = _readback_ok(value), ("must be a JSON object of topics, each with "
                                         "end_offsets of integers, and inputs with integer "
                                         "delivered and control counts")
    elif name == "job":
        ok = value is None or (isinstance(value, dict) and isinstance(value.get("ref"), str))
        want = "must be null or a JSON object naming the job (ref)"
    elif name == "sink":
        ok = value is None or (isinstance(value, dict) and value.get("kind") in SINK_KINDS)
        want = f"must be null or a JSON object whose kind is {' or '.join(SINK_KINDS)}"
    elif name in ("reconciliation", "config"):
        ok, want = isinstance(value, dict), "must be a JSON object"
    elif name == "generator":
        ok = value is None or (isinstance(value, dict) and all(
            value.get(k) is None or _is_int(value[k], 0) for k in ("failed", "undelivered"))
            and isinstance(value.get("errors") or [], list))
        want = ("must be null or a JSON object with integer failed/undelivered counts and a "
                "list of errors")
    elif name == "valid":
        ok, want = value is None or isinstance(value, bool), "must be true, false or null"
    elif name in ("validity_reasons", "observed_reasons"):
        ok = ((value is None and name == "observed_reasons")
              or (isinstance(value, list) and all(isinstance(r, str) for r in value)))
        want = "must be a list of strings"
    elif name == "validity":
        from pgval.checker.result import REASON_KINDS, reasons_from_records

        ok = value is None or reasons_from_records(value) is not None
        want = f"must be null or a list of {{kind, text}} objects, kinds {', '.join(REASON_KINDS)}"
    else:
        return None
    return None if ok else f"{want}, not {_shown(value)}"


def _readback_ok(value: object) -> bool:
    """The read-back proof's shape as the re-check reads it (recheck.recompute_validity)."""
    if not isinstance(value, dict):
        return False
    for key, info in value.items():
        if not isinstance(info, dict):
            return False
        if key == "inputs":
            ok = all(info.get(k) is None or _is_int(info[k], 0) for k in ("delivered", "control"))
        else:
            ends = info.get("end_offsets", {})
            problems = info.get("problems") or []
            ok = (isinstance(ends, dict) and all(_is_int(o, 0) for o in ends.values())
                  and isinstance(problems, list) and all(isinstance(p, str) for p in problems)
                  and isinstance(info.get("complete", False), bool))
        if not ok:
            return False
    return True


def _shown(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def evidence_dir(run_dir: Path) -> Path:
    return Path(run_dir) / EVIDENCE_DIR


# --------------------------------------------------------------------------- sealing


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (evidence files reach hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's) contents to the disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seal(run_dir: Path, run_id: int | None) -> dict[str, str]:
    """Hash and fsync every evidence file, write ``SHA256SUMS`` (with the run id), fsync
    the folders: ``{"evidence/<file>": sha256}``, what the results database stores.

    Called once the evidence is complete and before the database commit and the deletion
    of the broker data, so a run stored ``complete`` never refers to evidence that a power
    cut could still take away, and the records exist somewhere durable at every moment."""
    folder = evidence_dir(run_dir)
    hashes: dict[str, str] = {}
    for name in (*EVIDENCE_FILES, *spark_files(folder)):
        path = folder / name
        if path.is_file():
            path.chmod(0o600)  # Spark's files come with its umask
            _fsync(path)
            hashes[f"{EVIDENCE_DIR}/{name}"] = sha256_file(path)
    if (folder / SPARK_DIR).is_dir():
        for sub in (folder / SPARK_DIR, *(folder / SPARK_DIR).rglob("*")):
            if sub.is_dir():
                sub.chmod(0o700)
    lines = [f"# pgval evidence of run {run_id}"]
    lines += [f"{h}  {key.split('/', 1)[1]}" for key, h in hashes.items()]
    sums = write_private(folder / SUMS, "\n".join(lines) + "\n", fsync=True)
    hashes[f"{EVIDENCE_DIR}/{SUMS}"] = sha256_file(sums)
    _fsync(folder)
    _fsync(Path(run_dir))
    return hashes


def _printable(text: object) -> str:
    """A string read from a file or database, safe inside a one-line message (no control
    characters, no line breaks, at most 80 characters)."""
    text = str(text)
    ok = text.isprintable() and text.isascii() and len(text) <= 80
    return text if ok else repr(text)[:77] + ("..." if len(repr(text)) > 77 else "")


def sums_run_id(run_dir: Path) -> int | None:
    """The run id ``SHA256SUMS`` names (None: no file or no id)."""
    try:
        first = (evidence_dir(run_dir) / SUMS).read_text(errors="replace").split("\n", 1)[0]
    except OSError:
        return None
    tail = first.rsplit(" ", 1)[-1]
    return int(tail) if first.startswith("# pgval evidence of run ") and \
        tail.isascii() and tail.isdigit() else None


def verify(run_dir: Path, stored: Mapping[str, str], run_id: int) -> None:
    """Refuse (:class:`~pgval.core.errors.EvidenceInDoubt`, one sentence naming the first file
    that differs) evidence that is not what was stored with run ``run_id`` at the end of
    the run."""
    folder = evidence_dir(run_dir)
    refuse = "refusing to re-check edited evidence"
    known = {f"{EVIDENCE_DIR}/{name}" for name in (*EVIDENCE_FILES, SUMS)}
    for key, digest in stored.items():
        if key not in known and not is_spark_key(key):  # never hash another path
            raise EvidenceInDoubt(f"the results database names {_printable(key)} as evidence "
                                  f"of run {run_id}, which is no evidence file; {refuse}")
        digest = _printable(digest)
        path = Path(run_dir) / key
        try:
            now = sha256_file(path) if path.is_file() else None
        except OSError:
            now = None
        if now is None:
            raise EvidenceInDoubt(f"{key} of run {run_id} is missing or unreadable, but was "
                                  f"stored at the end of the run (sha256 {digest[:16]}…); "
                                  f"{refuse}")
        if now != digest:
            raise EvidenceInDoubt(f"{key} of run {run_id} differs from what was stored at the "
                                  f"end of the run (sha256 {digest[:16]}… stored, "
                                  f"{now[:16]}… now); {refuse}")
    for name in (*EVIDENCE_FILES, *spark_files(folder)):
        key = f"{EVIDENCE_DIR}/{name}"
        if key not in stored and (folder / name).exists():
            raise EvidenceInDoubt(f"{key} of run {run_id} was not there at the end of the "
                                  f"run; {refuse}")
    named = {"run.json": Manifest.read(run_dir).run_id, SUMS: sums_run_id(run_dir)}
    for name, other in named.items():
        if f"{EVIDENCE_DIR}/{name}" in stored and other != run_id:
            raise EvidenceInDoubt(f"{EVIDENCE_DIR}/{name} names run {other}, not run "
                                  f"{run_id}; {refuse}")


# --------------------------------------------------------------------------- records


#: How a topic's records are encoded in Parquet: offsets and append times rise within a
#: partition, so their deltas are small; dictionaries only where values repeat (partition,
#: key). On a real run's input topic this keeps 41 % less than zstd over the default
#: dictionaries (2.29 → 1.36 MB, MST without fault), and writes faster.
TOPIC_PARQUET: dict[str, Any] = {
    "compression": "zstd", "use_dictionary": ["partition", "key"],
    "column_encoding": {"offset": "DELTA_BINARY_PACKED", "timestamp": "DELTA_BINARY_PACKED"}}


def save_topic(run_dir: Path, records: TopicRecords, name: str | None = None) -> Path:
    """Write one topic's records as read back (Parquet, zstd, :data:`TOPIC_PARQUET`)."""
    path = evidence_dir(run_dir) / f"{name or records.topic}.parquet"
    with private_temp_path(path) as tmp:
        pq.write_table(records.to_table(), tmp, **TOPIC_PARQUET)
    return path


#: The columns of a topic's records that every record has (Kafka gives each one).
RECORD_NOT_NULL = ("partition", "offset", "timestamp")


def read_evidence_table(path: Path, schema: pa.Schema, what: str,
                        not_null: Sequence[str] = (), missing: str | None = None,
                        required: Sequence[str] | None = None) -> pa.Table:
    """One evidence Parquet file as ``schema``, or refused in one sentence naming ``what``
    it should hold: a path that is not a regular file (a directory reads as an empty
    dataset), a file lacking one of the columns (read with ``schema``, Arrow would fill it
    with nulls; ``required``: the columns it must have, default all), or nulls in a
    ``not_null`` column. Each was judged as if it were a run (an empty ``output.parquet``
    directory: at-most-once, valid). ``missing``: the sentence when nothing is there."""
    if not path.is_file():
        if not path.exists():
            raise EvidenceError(missing or f"{path} is missing")
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise EvidenceError(f"{path} is {kind}, not one Parquet file of {what}; refusing it")
    try:
        have = pq.ParquetFile(path).schema_arrow
        lacking = [name for name in (schema.names if required is None else required)
                   if have.get_field_index(name) < 0]
        if lacking:
            raise EvidenceError(f"{path} is not a file of {what}: it lacks the column"
                                f"{'s' if len(lacking) > 1 else ''} {', '.join(lacking)} "
                                f"(its columns: {', '.join(have.names)[:80] or 'none'}); "
                                "refusing it")
        table = pq.read_table(path, schema=schema)
    except FileNotFoundError as exc:  # gone since is_file()
        raise EvidenceError(missing or f"{path} is missing") from exc
    except (OSError, pa.ArrowException) as exc:
        raise EvidenceError(f"cannot read {path}: {exc}") from exc
    for name in not_null:
        empty = table.column(name).null_count
        if empty:
            raise EvidenceError(f"{path} is not a file of {what}: {empty:,} of its "
                                f"{table.num_rows:,} rows have no {name}; refusing it")
    return table


def load_topic(run_dir: Path, topic: str) -> TopicRecords:
    """Read one topic's records back from the evidence (the inverse of :func:`save_topic`)."""
    path = evidence_dir(run_dir) / f"{topic}.parquet"
    table = read_evidence_table(path, RECORD_SCHEMA, "Kafka records", RECORD_NOT_NULL,
                                missing=f"the evidence of {run_dir} lacks {path.name}")
    return TopicRecords.from_table(table, topic)


def _save_table(run_dir: Path, name: str, table: pa.Table) -> Path:
    """One evidence table as zstd Parquet, replaced whole (before :func:`seal`)."""
    path = evidence_dir(run_dir) / name
    with private_temp_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


def _load_table(run_dir: Path, name: str, schema: pa.Schema, what: str,
                **checks: Any) -> pa.Table:
    """One evidence table; a missing, unreadable or foreign one is one sentence naming
    ``what`` (``checks``: :func:`read_evidence_table`'s ``required`` and ``not_null``)."""
    return read_evidence_table(evidence_dir(run_dir) / name, schema, what,
                               missing=f"the evidence of {run_dir} lacks {name}, {what}",
                               **checks)


def save_anomalies(run_dir: Path, table: pa.Table) -> Path:
    """Keep a run's full anomaly set with its evidence (Parquet, zstd), before :func:`seal`."""
    return _save_table(run_dir, ANOMALIES, table)


def load_anomalies(run_dir: Path) -> pa.Table | None:
    """The anomaly set a run kept (None: stored before anomaly sets were kept)."""
    from pgval.checker.anomalies import REQUIRED, SCHEMA

    path = evidence_dir(run_dir) / ANOMALIES
    if not path.exists():
        return None
    return read_evidence_table(path, SCHEMA, "a run's anomalies", ("kind", "id"),
                               required=REQUIRED)


def save_progress(run_dir: Path, progress_file: Path) -> None:
    """Keep the driver's progress lines with the evidence (the attribution reads them)."""
    if progress_file.exists():
        copy_private(progress_file, evidence_dir(run_dir) / PROGRESS)


def load_progress(run_dir: Path) -> list[dict[str, Any]]:
    path = evidence_dir(run_dir) / PROGRESS
    if not path.exists():
        return []
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:  # a directory, no permission, …
        raise EvidenceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a line cut short by a killed driver
        if isinstance(entry, dict) and _usable_progress(entry):  # else skipped alike
            out.append(entry)
    return out


def _offsets_ok(value: object) -> bool:
    """A source's start/end offsets as Spark writes them: a string (``"latest"``…), null,
    or {topic: {partition digits: offset}}."""
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, dict) and all(
        isinstance(parts, dict) and all(
            isinstance(p, str) and p.isascii() and p.isdigit() and len(p) < 10
            and _is_int(o) for p, o in parts.items())
        for parts in value.values())


def _usable_progress(entry: dict[str, Any]) -> bool:
    """Whether a progress line has the types the why-unprocessed attribution reads
    (:mod:`pgval.checker.explain`); a line that does not is skipped like one cut short."""
    if "batchId" in entry and not _is_int(entry["batchId"], 0):
        return False
    operators = entry.get("stateOperators")
    if operators is not None and not (isinstance(operators, list) and all(
            isinstance(op, dict) and (op.get("numRowsDroppedByWatermark") is None
                                      or _is_int(op["numRowsDroppedByWatermark"], 0))
            for op in operators)):
        return False
    event_time = entry.get("eventTime")
    if event_time is not None and not (isinstance(event_time, dict) and isinstance(
            event_time.get("watermark") or "", str)):
        return False
    sources = entry.get("sources")
    if sources is None:
        return True
    return isinstance(sources, list) and all(
        isinstance(src, dict) and _offsets_ok(src.get("startOffset"))
        and _offsets_ok(src.get("endOffset")) for src in sources)


# --------------------------------------------------------------------------- streams


@dataclass
class Streams:
    """The columns one evaluation reads, plus what was set aside and why."""

    events: InputEvents
    outputs: OutputRecords
    control_inputs: int = 0  # pgval's own priming/closing events removed from the inputs
    control_outputs: int = 0  # output records that held only pgval's control IDs
    control_occurrences: int = 0  # control IDs removed from outputs
    #: A job judged by rows: the ingress time of each real input record (its events are
    #: synthetic, one per expected row), so each phase's load is still known.
    real_ingress: np.ndarray | None = None
    #: A user's job's outputs' values against its batch rows' (None: not compared).
    values: ValueCheck | None = None
    #: What the run's watermark dropped by Spark's rule (None: a run with no such record).
    late: LateDrops | None = None


def is_control(ids: np.ndarray, control_ids: Sequence[int] | np.ndarray | None
               ) -> np.ndarray:
    """True for the IDs pgval wrote itself: an inclusive range ``[lo, hi]`` (the web log's
    negative IDs), or the IDs themselves (a sorted array: a job reading Kafka itself, whose
    IDs are coordinates); nothing else is set aside."""
    if isinstance(control_ids, np.ndarray):
        return np.isin(ids, control_ids)
    if not control_ids:
        return np.zeros(len(ids), dtype=bool)
    lo, hi = control_ids
    return (ids >= lo) & (ids <= hi)


def set_aside_control(outputs: OutputRecords, control_ids: Sequence[int] | None
                      ) -> tuple[OutputRecords, int, int]:
    """Remove pgval's own control IDs from outputs: (outputs, records dropped, IDs removed).

    Outputs left with no ID (windows that held only control events) are dropped. Any other
    ID, negative or not, stays and is judged like every other: a negative ID pgval did not
    write is a foreign ID, i.e. incorrect.
    """
    control = is_control(outputs.ids, control_ids)
    if not control.any():
        return outputs, 0, 0
    owner = np.repeat(np.arange(len(outputs)), outputs.lengths)
    keep_id = ~control
    new_lengths = np.bincount(owner[keep_id], minlength=len(outputs))
    control_only = (new_lengths == 0) & (outputs.lengths > 0)
    keep_out = ~control_only
    lengths = new_lengths[keep_out]
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    kept = OutputRecords(
        window_start=outputs.window_start[keep_out], window_end=outputs.window_end[keep_out],
        resource=outputs.resource[keep_out], count=outputs.count[keep_out],
        gets=outputs.gets[keep_out], posts=outputs.posts[keep_out],
        ingress_ts=outputs.ingress_ts[keep_out], position=outputs.position[keep_out],
        ids=outputs.ids[keep_id & keep_out[owner]], offsets=offsets,
        resources=outputs.resources, malformed=outputs.malformed,
        malformed_samples=outputs.malformed_samples, missing=outputs.missing,
        partition=None if outputs.partition is None else outputs.partition[keep_out],
        offset=None if outputs.offset is None else outputs.offset[keep_out])
    return kept, int(control_only.sum()), int(control.sum())


def _input_events(inputs: Mapping[str, TopicRecords], resources: int,
                  control_ids: Sequence[int] | np.ndarray | None) -> tuple[InputEvents, int]:
    """The input records as events, pgval's own set aside: (events, control inputs)."""
    table = ResourceTable(resource_name(r) for r in range(resources))
    topics = [KafkaInputColumns(recs.values, recs.timestamps, recs.partitions, recs.offsets,
                                topic_code=code, decoded=recs.chunk_notes)
              for code, topic in enumerate(INPUT_TOPICS)
              if (recs := inputs.get(topic)) is not None]
    return inputs_from_topics(topics, table, partial(is_control, control_ids=control_ids))


def streams_from_records(inputs: Mapping[str, TopicRecords], output: TopicRecords,
                         resources: int, control_ids: Sequence[int] | None) -> Streams:
    """Raw Kafka records → input events and output records, control events set aside."""
    events, control_inputs = _input_events(inputs, resources, control_ids)
    outputs = outputs_from_kafka(output.values, output.timestamps, output.partitions,
                                 output.offsets, events.resources)
    outputs, control_outputs, control_occ = set_aside_control(outputs, control_ids)
    return Streams(events, outputs, control_inputs, control_outputs, control_occ)


def coordinate_events(inputs: Mapping[str, TopicRecords]) -> tuple[InputEvents, np.ndarray]:
    """The input records of a job that reads Kafka itself as events: each ID the record's
    coordinates (:func:`pgval.core.record_ids.record_ids`, slot = the input's position),
    event and ingress time the broker's timestamp; and the sorted IDs of pgval's own
    records (Kafka key :data:`OWN_KEY`), set aside. Nothing is parsed: the payload is the
    job's, so no record is malformed here."""
    table = ResourceTable(["input"])
    parts, own = [], []
    for code, topic in enumerate(INPUT_TOPICS):
        recs = inputs.get(topic)
        if recs is None:
            continue
        ids = record_ids(code, recs.partitions, recs.offsets)
        mine = pc.equal(recs.keys, pa.scalar(OWN_KEY, pa.binary())).fill_null(False)
        mine_np = mine.to_numpy(zero_copy_only=False).astype(bool)
        own.append(ids[mine_np])
        n = len(ids)
        ev = InputEvents(ids, np.ones(n, dtype=bool), np.zeros(n, dtype=np.int32),
                         recs.timestamps, recs.timestamps, table,
                         topic=np.full(n, code, dtype=np.int64),
                         partition=recs.partitions.astype(np.int64), offset=recs.offsets)
        parts.append(ev.take(np.flatnonzero(~mine_np)))
    control = np.sort(np.concatenate(own)) if own else np.zeros(0, dtype=np.int64)
    return InputEvents.concat(parts, table), control


def job_streams_from_records(inputs: Mapping[str, TopicRecords],
                             output: TopicRecords | pa.Table, rows: pa.Table, resources: int,
                             control_ids: Sequence[int] | None, coordinates: bool = False,
                             tolerance: float = DEFAULT_TOLERANCE,
                             columns: Sequence[str] | None = None,
                             replay: Mapping[str, Any] | None = None
                             ) -> tuple[Streams, ExpectedOutputs]:
    """A user's job's streams and its expected outputs: the batch oracle's ``rows``
    (:data:`pgval.topologies.batch.EXPECTED_SCHEMA`) and the outputs' key texts coded with
    one table, so an output's key is an expected one exactly when the texts are equal. A
    batch result the validator cannot use (an ID in two rows, an ID that is no input) is
    an :class:`EvidenceError`, one sentence. ``coordinates``: the job reads Kafka itself,
    its IDs are the records' coordinates (:func:`coordinate_events`). Where the batch rows
    have their values and the outputs theirs, each output's values are compared with its
    row's (:mod:`pgval.oracle.values`, relative ``tolerance``). ``replay``: what the batch
    oracle said of the run's batches replayed, with its ``rows``, the run's ``progress``
    and its input ``topics``: the pairs Spark's watermark dropped leave the expectation
    (:func:`late_drops`)."""
    if coordinates:
        events, control = coordinate_events(inputs)
        control_inputs, control_ids = len(control), control
    else:
        events, control_inputs = _input_events(inputs, resources, control_ids)
    keys = ResourceTable()
    rows = set_aside_rows(rows, control_ids)
    late = None
    if replay is not None:
        rows, late = late_drops(rows, replay, events, control_ids)
    rows, by_id = key_by_single_id(rows)
    try:
        expected = expected_from_rows(*rows_of(rows), events, keys)
    except RowsError as exc:
        raise JobNotJudgeable(f"the job cannot be judged ID by ID: {exc}") from exc
    if isinstance(output, pa.Table):  # a sink's rows (SINK_ROWS_SCHEMA)
        outputs = job_outputs_from_rows(output, keys)
    else:
        outputs = job_outputs_from_kafka(output.values, output.timestamps, output.partitions,
                                         output.offsets, keys)
    outputs, control_outputs, control_occ = set_aside_control(outputs, control_ids)
    if by_id:
        outputs = rekey_by_single_id(outputs, keys)
    written, compared = written_values(output, outputs)
    return Streams(events, outputs, control_inputs, control_outputs, control_occ,
                   values=value_check(rows, keys, outputs, written, compared,
                                      tolerance, columns), late=late), expected


def late_drops(rows: pa.Table, replay: Mapping[str, Any], events: InputEvents,
               control_ids: Sequence[int] | np.ndarray | None) -> tuple[pa.Table, LateDrops]:
    """The batch's ``rows`` less the (input, row) pairs the replay of the run's batches
    shows Spark's watermark dropped (:mod:`pgval.oracle.replay`), and what was dropped;
    the rows as they are, with the reason, where the replay cannot stand for the run."""
    run_dropped = replay["run_dropped"] if _is_int(replay.get("run_dropped"), 0) else 0
    if not replay.get("used") or replay.get("rows") is None:
        return rows, LateDrops.unused(str(replay.get("why") or "no replay"), run_dropped)
    try:
        topics = [str(t) for t in replay.get("topics") or []]
        if events.topic is None or events.partition is None or events.offset is None:
            raise NoReplay("the inputs have no Kafka positions")
        batch, plan = batch_by_run(list(replay.get("progress") or []), topics, events.topic,
                                   events.partition, events.offset)
        # Spark drops a late row in the batch that reads it: only an input read in a batch
        # whose operators dropped rows may have been dropped (not one still in state), or
        # in a batch the run has no line of (a driver killed before its listener wrote it).
        read = (batch >= 0) & (np.isin(batch, plan.dropping())
                               | ~np.isin(batch, list(plan.dropped)))
        applied = apply_replay(rows, set_aside_rows(replay["rows"], control_ids),
                               np.sort(events.id[read]))
    except NoReplay as exc:
        return rows, LateDrops.unused(str(exc), run_dropped)
    return applied.rows, LateDrops(True, None, applied.dropped, run_dropped)


def value_check(rows: pa.Table, keys: ResourceTable, outputs: OutputRecords,
                written: pa.Array | None, compared: str, tolerance: float,
                columns: Sequence[str] | None = None) -> ValueCheck | None:
    """Each output's written value text against its batch row's (the row with its key:
    the keys are coded with ``keys``, as the rows were); None when either side has no
    values (a run kept before values were, a sink that gives back none). ``columns``:
    the job's, which a sink's values are compared on."""
    if written is None or "value" not in rows.column_names:
        return None
    row_of = np.full(len(keys.names), -1, dtype=np.int64)  # key code -> batch row
    row_of[keys.encode(rows.column("key").combine_chunks())] = np.arange(rows.num_rows)
    row = np.where(outputs.resource >= 0, row_of[np.maximum(outputs.resource, 0)], -1)
    expected_text = rows.column("value").combine_chunks().take(
        pa.array(np.maximum(row, 0), mask=row < 0))
    return ValueCheck.of(expected_text, written, tolerance, compared, columns)


def written_values(output: TopicRecords | pa.Table, outputs: OutputRecords
                   ) -> tuple[pa.Array | None, str]:
    """Each judged output's written value text and what it holds: from Kafka, the
    ``_pgval_value`` the streaming query wrote with it (``all`` its value columns); from
    a user's sink, the columns its ``read`` gave back (``read``); None where the evidence
    has none (a run stored before values were kept, a file sink)."""
    if isinstance(output, pa.Table):
        if "value" not in output.column_names or outputs.offset is None:
            return None, "read"
        column = output.column("value").combine_chunks()
        if column.null_count == len(column):
            return None, "read"
        return column.take(pa.array(outputs.offset, pa.int64())), "read"
    if outputs.partition is None or outputs.offset is None or not len(output.values):
        return None, "all"
    table, kept, _, _ = parse_values(output.values, pa.schema([(JOB_VALUE, pa.string())]))
    texts = table.column(JOB_VALUE).combine_chunks()
    if texts.null_count == len(texts):
        return None, "all"
    where = (np.asarray(output.partitions, np.int64)[kept] << 40) | np.asarray(
        output.offsets, np.int64)[kept]
    order = np.argsort(where, kind="stable")
    want = (outputs.partition.astype(np.int64) << 40) | outputs.offset.astype(np.int64)
    at = np.minimum(np.searchsorted(where[order], want), max(len(order) - 1, 0))
    found = where[order][at] == want if len(order) else np.zeros(len(want), dtype=bool)
    return texts.take(pa.array(order[at], mask=~found)), "all"


def rekey_by_single_id(outputs: OutputRecords, keys: ResourceTable) -> OutputRecords:
    """Outputs keyed as :func:`pgval.oracle.rows.key_by_single_id` keyed the batch's rows:
    each output's key text and its one ID (after pgval's own IDs were set aside)."""
    known = outputs.resource >= 0
    texts = pa.array(keys.names, pa.string()).take(
        pa.array(np.where(known, outputs.resource, 0), mask=~known))
    ids = pa.LargeListArray.from_arrays(pa.array(outputs.offsets, pa.int64()),
                                        pa.array(outputs.ids, pa.int64()))
    codes = keys.encode(single_id_keys(texts, ids)).astype(np.int32)
    return dataclasses.replace(outputs, resource=codes)


def rows_streams(rows: pa.Table, output: TopicRecords,
                 inputs: Mapping[str, TopicRecords] | None = None
                 ) -> tuple[Streams, ExpectedOutputs]:
    """The streams of a job judged by rows (:func:`pgval.oracle.rows.match_rows`): each
    expected row one synthetic input, each output the synthetic ID of the row it equals."""
    order = np.lexsort((output.offsets, output.partitions, output.timestamps))
    keys = output.keys.take(pa.array(order)).cast(pa.string())
    values = output.values.take(pa.array(order)).cast(pa.string())
    own = rows.column("own").combine_chunks().to_numpy(zero_copy_only=False)
    matched = match_rows(rows.column("key").combine_chunks(),
                         rows.column("value").combine_chunks(), own, keys, values,
                         output.timestamps[order])
    table = ResourceTable()
    expected = expected_from_rows(matched.expected_keys, matched.expected_ids,
                                  matched.expected_offsets, matched.events, table)
    kept = pa.array(matched.kept)
    n = int(matched.kept.sum())
    sunk = pa.table({"key": keys.filter(kept), "ids": matched.output_ids,
                     "written_ms": pa.array(output.timestamps[order][matched.kept], pa.int64()),
                     "batch": pa.array(output.partitions[order][matched.kept].astype(np.int64)),
                     "origin": pa.nulls(n, pa.string()),
                     "value": pa.nulls(n, pa.string())}, schema=SINK_ROWS_SCHEMA)
    real = coordinate_events(inputs)[0].ingress_ts if inputs is not None else None
    return Streams(matched.events, job_outputs_from_rows(sunk, table),
                   control_inputs=int(own.sum()), control_outputs=matched.set_aside,
                   real_ingress=real), expected


def save_expected(run_dir: Path, rows: pa.Table) -> Path:
    """Keep a job's batch-oracle rows with the evidence (Parquet, zstd), before :func:`seal`."""
    return _save_table(run_dir, EXPECTED, rows)


def load_expected(run_dir: Path) -> pa.Table:
    """A job's batch-oracle rows (``key``, ``ids``, and ``value`` since values are
    compared: a run stored before has none) from the evidence."""
    table = _load_table(run_dir, EXPECTED, pa.schema([("key", pa.string()),
                                                      ("ids", pa.list_(pa.int64())),
                                                      ("value", pa.string())]),
                        "the batch oracle's rows of its job", required=("key", "ids"))
    if table.num_rows and table.column("value").null_count == table.num_rows:
        return table.drop_columns(["value"])
    return table


def save_replay(run_dir: Path, rows: pa.Table) -> Path:
    """Keep the rows of the run's micro-batches replayed, beside the batch oracle's."""
    return _save_table(run_dir, REPLAY, rows)


def load_replay(run_dir: Path) -> pa.Table:
    """The rows of the run's micro-batches replayed (``key``, ``ids``, ``value``)."""
    return _load_table(run_dir, REPLAY, pa.schema([("key", pa.string()),
                                                   ("ids", pa.list_(pa.int64())),
                                                   ("value", pa.string())]),
                       "the job's rows over the run's batches replayed",
                       required=("key", "ids"))


def replay_of(manifest: Manifest) -> dict[str, Any]:
    """What the batch oracle said of the replay of the run's batches ({}: nothing)."""
    job = manifest.job if isinstance(manifest.job, dict) else {}
    oracle = job.get("oracle") if isinstance(job.get("oracle"), dict) else {}
    replay = oracle.get("replay")
    return replay if isinstance(replay, dict) else {}


def save_expected_rows(run_dir: Path, rows: pa.Table) -> Path:
    """Keep the batch oracle's rows of a job without ``ids`` (:data:`EXPECTED_ROWS_SCHEMA`):
    its rows over every record the run read, ``own`` the rows that are not also rows of
    the run over the real records alone (those of pgval's priming and closing records)."""
    return _save_table(run_dir, EXPECTED_ROWS, rows)


def load_expected_rows(run_dir: Path) -> pa.Table:
    """The batch oracle's rows of a job judged by rows (``key``, ``value``, ``own``: a row
    only pgval's own records made, set aside)."""
    return _load_table(run_dir, EXPECTED_ROWS, EXPECTED_ROWS_SCHEMA,
                       "the batch oracle's rows of its job")


def by_rows(manifest: Manifest) -> bool:
    """The run's job carries no ``ids``: it is judged by its rows."""
    job = manifest.job if isinstance(manifest.job, dict) else {}
    oracle = job.get("oracle") if isinstance(job.get("oracle"), dict) else {}
    return bool(oracle.get("by_rows"))


def save_sink_rows(run_dir: Path, rows: pa.Table, name: str = SINK_ROWS) -> Path:
    """Keep a sink's rows as read back (:data:`SINK_ROWS_SCHEMA`), before :func:`seal`."""
    if "value" not in rows.column_names:  # a sink that gives back no values of its own
        rows = rows.append_column("value", pa.nulls(rows.num_rows, pa.string()))
    return _save_table(run_dir, name,
                       rows.select(SINK_ROWS_SCHEMA.names).cast(SINK_ROWS_SCHEMA))


def load_sink_rows(run_dir: Path, name: str = SINK_ROWS) -> pa.Table:
    """A sink's rows from the evidence (:func:`save_sink_rows`)."""
    return _load_table(run_dir, name, SINK_ROWS_SCHEMA, "the rows its sink held",
                       required=("key", "ids", "written_ms"), not_null=("written_ms",))


def keep_job_source(run_dir: Path, source: Path | None) -> str | None:
    """Copy a job's source file into the evidence (what ran, for a reader of the run) as
    the run starts; its SHA-256, or None when there is no single file to keep."""
    if source is None or not source.is_file():
        return None
    path = write_private(evidence_dir(run_dir) / JOB_SOURCE, source.read_bytes())
    return sha256_file(path)


def reads_kafka(manifest: Manifest) -> bool:
    """The run's job read Kafka itself: its IDs are the records' coordinates."""
    return isinstance(manifest.job, dict) and manifest.job.get("ids") == "kafka"


def tolerance_of(manifest: Manifest) -> float:
    """The relative tolerance the run's job declared (``build.tolerance``, as its batch
    oracle said it), else :data:`pgval.oracle.values.DEFAULT_TOLERANCE`."""
    job = manifest.job if isinstance(manifest.job, dict) else {}
    oracle = job.get("oracle") if isinstance(job.get("oracle"), dict) else {}
    value = oracle.get("tolerance")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1:
        return float(value)
    return DEFAULT_TOLERANCE


def columns_of(manifest: Manifest) -> list[str] | None:
    """The job's columns (but ids) as its batch oracle said them: what a sink's values
    are compared on (None: a run stored before, every field a sink gives back)."""
    job = manifest.job if isinstance(manifest.job, dict) else {}
    oracle = job.get("oracle") if isinstance(job.get("oracle"), dict) else {}
    columns = oracle.get("columns")
    if isinstance(columns, list) and all(isinstance(c, str) for c in columns):
        return columns
    return None


def cross_check_of(manifest: Manifest) -> dict[str, Any] | None:
    """A built-in job's topology and window, as its batch oracle named them: the run's
    expectation is then compared with pgval's own oracle (None: a user's job)."""
    job = manifest.job if isinstance(manifest.job, dict) else {}
    oracle = job.get("oracle") if isinstance(job.get("oracle"), dict) else {}
    builtin = oracle.get("builtin")
    if (isinstance(builtin, dict) and builtin.get("topology") in BUILTIN_TOPOLOGIES
            and _is_int(builtin.get("window_ms"), 1)):
        return {"topology": builtin["topology"], "window_ms": builtin["window_ms"]}
    return None


def evaluation_streams(run_dir: Path, manifest: Manifest, inputs: Mapping[str, TopicRecords],
                       output: TopicRecords, raw: bool = False
                       ) -> tuple[Streams, ExpectedOutputs | None]:
    """The streams a run is judged on and, for a user's job, its expected outputs from the
    batch oracle's rows kept in the evidence (None: the topology's own oracle runs). A
    sink other than Kafka: its rows as kept (``raw``: a file sink's raw read)."""
    if manifest.topology == "job" and by_rows(manifest):
        streams, expected = rows_streams(load_expected_rows(run_dir), output, inputs)
        said = replay_of(manifest)
        if _is_int(said.get("run_dropped"), 1):  # rows carry no inputs: not set apart
            streams = dataclasses.replace(streams, late=LateDrops.unused(
                str(said.get("why")), said["run_dropped"]))
        return streams, expected
    if manifest.topology == "job":
        sunk = (load_sink_rows(run_dir, SINK_RAW if raw else SINK_ROWS)
                if manifest.sink is not None else output)
        return job_streams_from_records(inputs, sunk, load_expected(run_dir),
                                        manifest.resources, manifest.control_ids,
                                        coordinates=reads_kafka(manifest),
                                        tolerance=tolerance_of(manifest),
                                        columns=columns_of(manifest),
                                        replay=replay_inputs(run_dir, manifest))
    return streams_from_records(inputs, output, manifest.resources, manifest.control_ids), None


def replay_inputs(run_dir: Path, manifest: Manifest) -> dict[str, Any] | None:
    """What :func:`late_drops` reads of a run whose watermark dropped rows: the batch
    oracle's word on the replay, its rows, the run's progress and input topics (None: a
    run whose stateful operators dropped nothing, or one stored before replays were)."""
    said = replay_of(manifest)
    if not said.get("run_dropped"):
        return None
    progress = load_progress(run_dir)
    job = manifest.job if isinstance(manifest.job, dict) else {}
    named = job.get("inputs") if isinstance(job.get("inputs"), dict) else None
    topics = (list(named.values()) if named and reads_kafka(manifest)
              else [topic_of(t, progress) for t in INPUT_TOPICS])
    return {**said, "progress": progress, "topics": topics,
            "rows": load_replay(run_dir) if said.get("used") else None}


def load_streams(run_dir: Path, manifest: Manifest | None = None) -> Streams:
    """The streams of a stored run, exactly as ``validate`` evaluated them."""
    manifest = manifest or Manifest.read(run_dir)
    inputs = {t: load_topic(run_dir, t) for t in INPUT_TOPICS}
    return evaluation_streams(run_dir, manifest, inputs, load_topic(run_dir, OUTPUT_TOPIC))[0]
