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

:func:`streams_from_records` is the one conversion from raw records to the columns that
:func:`pgval.evaluate.evaluate` reads; ``validate`` and ``recheck`` both call it, which is
why a re-check gives the same answer.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pgval.phases import Phases
from pgval.records import (
    InputEvents,
    OutputRecords,
    ResourceTable,
    inputs_from_kafka,
    outputs_from_kafka,
)
from pgval.runtime.kafka import TopicRecords
from pgval.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC, resource_name

EVIDENCE_DIR = "evidence"
MANIFEST = "run.json"
PROGRESS = "progress.jsonl"
INPUT_TOPICS = (GET_TOPIC, POST_TOPIC)

_RECORD_SCHEMA = pa.schema([
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()),
])


class EvidenceError(Exception):
    """A run directory without usable evidence (a plain sentence for the user)."""


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

    @property
    def phase_bounds(self) -> Phases:
        start, t2, t3 = self.phases
        return Phases(start, t2, t3, self.t4)

    def write(self, run_dir: Path) -> Path:
        path = evidence_dir(run_dir) / MANIFEST
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1, default=str) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, run_dir: Path) -> Manifest:
        path = evidence_dir(run_dir) / MANIFEST
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise EvidenceError(f"{run_dir} holds no evidence ({path} is missing); only runs "
                                "stored by this version of pgval can be re-checked") from exc
        except (OSError, ValueError) as exc:
            raise EvidenceError(f"cannot read {path}: {exc}") from exc
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def evidence_dir(run_dir: Path) -> Path:
    return Path(run_dir) / EVIDENCE_DIR


# --------------------------------------------------------------------------- records


def save_topic(run_dir: Path, records: TopicRecords, name: str | None = None) -> Path:
    """Write one topic's records as read back (Parquet, zstd)."""
    path = evidence_dir(run_dir) / f"{name or records.topic}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "partition": pa.array(records.partitions, type=pa.int32()),
        "offset": pa.array(records.offsets, type=pa.int64()),
        "timestamp": pa.array(records.timestamps, type=pa.int64()),
        "key": records.keys,
        "value": records.values,
    }, schema=_RECORD_SCHEMA)
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)
    return path


def load_topic(run_dir: Path, topic: str) -> TopicRecords:
    """Read one topic's records back from the evidence (the inverse of :func:`save_topic`)."""
    path = evidence_dir(run_dir) / f"{topic}.parquet"
    try:
        table = pq.read_table(path, schema=_RECORD_SCHEMA)
    except FileNotFoundError as exc:
        raise EvidenceError(f"the evidence of {run_dir} lacks {path.name}") from exc
    except (OSError, pa.ArrowException) as exc:
        raise EvidenceError(f"cannot read {path}: {exc}") from exc
    return TopicRecords(
        keys=table.column("key"),
        values=table.column("value"),
        timestamps=table.column("timestamp").to_numpy().astype(np.int64),
        partitions=table.column("partition").to_numpy().astype(np.int32),
        offsets=table.column("offset").to_numpy().astype(np.int64),
        topic=topic,
    )


def save_progress(run_dir: Path, progress_file: Path) -> None:
    """Keep the driver's progress lines with the evidence (the attribution reads them)."""
    if progress_file.exists():
        shutil.copyfile(progress_file, evidence_dir(run_dir) / PROGRESS)


def load_progress(run_dir: Path) -> list[dict[str, Any]]:
    path = evidence_dir(run_dir) / PROGRESS
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a killed driver
    return out


# --------------------------------------------------------------------------- streams


@dataclass
class Streams:
    """The columns one evaluation reads, plus what was set aside and why."""

    events: InputEvents
    outputs: OutputRecords
    control_inputs: int = 0  # pgval's own priming/closing events removed from the inputs
    control_outputs: int = 0  # output records that held only pgval's control IDs
    control_occurrences: int = 0  # control IDs removed from outputs


def is_control(ids: np.ndarray, control_ids: Sequence[int] | None) -> np.ndarray:
    """True for the IDs pgval wrote itself (inclusive range); nothing else is set aside."""
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
        malformed_samples=outputs.malformed_samples)
    return kept, int(control_only.sum()), int(control.sum())


def streams_from_records(inputs: Mapping[str, TopicRecords], output: TopicRecords,
                         resources: int, control_ids: Sequence[int] | None) -> Streams:
    """Raw Kafka records → input events and output records, control events set aside."""
    table = ResourceTable(resource_name(r) for r in range(resources))
    parts = []
    control_inputs = 0
    for code, topic in enumerate(INPUT_TOPICS):
        recs = inputs.get(topic)
        if recs is None:
            continue
        ev = inputs_from_kafka(recs.values, recs.timestamps, table, recs.partitions,
                               recs.offsets, topic_code=code)
        control = is_control(ev.id, control_ids)
        control_inputs += int(control.sum())
        parts.append(ev.take(np.flatnonzero(~control)) if control.any() else ev)
    events = InputEvents.concat(parts, table)
    outputs = outputs_from_kafka(output.values, output.timestamps, output.partitions,
                                 output.offsets, table)
    outputs, control_outputs, control_occ = set_aside_control(outputs, control_ids)
    return Streams(events, outputs, control_inputs, control_outputs, control_occ)


def load_streams(run_dir: Path, manifest: Manifest | None = None) -> Streams:
    """The streams of a stored run, exactly as ``validate`` evaluated them."""
    manifest = manifest or Manifest.read(run_dir)
    inputs = {t: load_topic(run_dir, t) for t in INPUT_TOPICS}
    output = load_topic(run_dir, OUTPUT_TOPIC)
    return streams_from_records(inputs, output, manifest.resources, manifest.control_ids)


def evidence_bytes(run_dir: Path) -> int:
    """Size of the kept evidence (for the closing line and the docs)."""
    d = evidence_dir(run_dir)
    return sum(p.stat().st_size for p in d.glob("*") if p.is_file()) if d.exists() else 0
