"""A stored run's streams as plain JSON lines, for ``pgval check`` or any other tool.

``export`` writes ``inputs.jsonl``, ``outputs.jsonl``, ``anomalies.jsonl`` and ``run.json``
from evidence verified first against the results database (:func:`pgval.evidence.recheck.anchor`),
so another checker reading them can reach the same counts as pgval, and compare its
anomalies with pgval's one by one. An anomaly's ``output`` and ``first_output`` are the
output's record number in the exported ``outputs.jsonl`` (as ``pgval check --anomalies``
gives them for that file), not its place among all the records of the output topic, which
count pgval's own control outputs and unreadable records that the file leaves out or puts
last; ``output_partition`` and ``output_offset`` still name it in Kafka.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from pgval.checker.evaluate import evaluate
from pgval.core.errors import UserMistake
from pgval.core.files import open_public, write_public
from pgval.evidence.bundle import Manifest, load_anomalies, load_progress, load_streams
from pgval.evidence.recheck import anchor, judged_on_spark
from pgval.records.parse import InputEvents, OutputRecords

#: A line that is a JSON object without any field pgval reads: ``pgval check`` counts it as
#: malformed, exactly like the record it stands for (one that could not be parsed at all).
MALFORMED_LINE = b'{"pgval_malformed": true}\n'


def write_anomalies(table: pa.Table, path: Path) -> int:
    """An anomaly set (:mod:`pgval.checker.anomalies`) as JSON lines, one object per
    anomaly in the table's order; returns how many."""
    with open_public(path) as fh:
        for batch in table.to_batches(max_chunksize=65_536):
            rows = batch.to_pylist()
            if rows:
                fh.write(b"\n".join(map(orjson.dumps, rows)) + b"\n")
    return len(table)


def export(run_dir: Path, out_dir: Path, db: Path | None = None,
           run_id: int | None = None) -> dict[str, Any]:
    """Write ``inputs.jsonl``, ``outputs.jsonl`` and ``run.json`` for ``pgval check``, from
    evidence verified against ``db`` first (as :func:`recheck`)."""
    evidence = anchor(run_dir, db, run_id)
    manifest = Manifest.read(run_dir)
    if judged_on_spark(manifest) is not None:
        raise UserMistake(f"{run_dir} was judged on Spark (--checker spark): its records are "
                          f"Parquet tables in {run_dir / 'evidence' / 'spark' / 'read'} "
                          "(inputs, outputs, occurrences), read with Spark or pyarrow, and "
                          "its anomaly sets are in evidence/spark/sets")
    streams = load_streams(run_dir, manifest)
    found = load_anomalies(run_dir)
    if found is None:  # a run stored before its anomaly set was kept: computed now
        found = evaluate(streams.events, streams.outputs, manifest.topology,
                         manifest.window_ms, manifest.phase_bounds,
                         progress=load_progress(run_dir)).anomalies()
        source = "recomputed from the evidence (the run kept none)"
    else:
        source = "as kept with the run's evidence"
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        n_in = write_inputs(streams.events, out_dir / "inputs.jsonl")
        n_out = write_outputs(streams.outputs, out_dir / "outputs.jsonl")
        n_anomalies = write_anomalies(renumber_outputs(found, streams.outputs),
                                      out_dir / "anomalies.jsonl")
        info = {"topology": manifest.topology, "window_ms": manifest.window_ms,
                "phases": list(manifest.phases), "t4": manifest.t4, "source": str(run_dir),
                "run_id": manifest.run_id, "inputs": n_in, "outputs": n_out,
                "anomalies": n_anomalies, "anomalies_source": source,
                # Unreadable records, written as lines `pgval check` counts as malformed.
                "malformed": {"inputs": streams.events.malformed,
                              "outputs": streams.outputs.malformed},
                "control_ids_set_aside": manifest.control_ids,
                "evidence": evidence.as_dict()}
        write_public(out_dir / "run.json", json.dumps(info, indent=1) + "\n")
    except OSError as exc:  # a file in the way, no such place, the disk full, …
        raise UserMistake(f"cannot write the export to {out_dir}: "
                          f"{exc.strerror or exc} ({exc.filename or out_dir})") from exc
    return info


def write_inputs(events: InputEvents, path: Path) -> int:
    """One JSON object per event in read order; malformed records as malformed lines."""
    names = events.resources.names
    ids, is_get = events.id.tolist(), events.is_get.tolist()
    res, ev_ts, ing = events.resource.tolist(), events.event_ts.tolist(), events.ingress_ts.tolist()
    with open_public(path) as fh:
        for k in range(len(ids)):
            fh.write(orjson.dumps({"id": ids[k], "type": "GET" if is_get[k] else "POST",
                                   "resource": names[res[k]], "event_ts": ev_ts[k],
                                   "ingress_ts": ing[k]}) + b"\n")
        fh.write(MALFORMED_LINE * events.malformed)
    return len(ids) + events.malformed


def export_order(outputs: OutputRecords) -> np.ndarray:
    """The outputs in the order ``outputs.jsonl`` holds them: stream order (ingress time,
    then position), so line order = stream order."""
    return np.lexsort((outputs.position, outputs.ingress_ts))


def renumber_outputs(table: pa.Table, outputs: OutputRecords) -> pa.Table:
    """The anomaly set with ``output`` and ``first_output`` turned from the outputs' places
    in the output topic (``outputs.position``) into record numbers of the exported file."""
    places = outputs.position[export_order(outputs)]  # line k holds the output at places[k]
    by_place = np.argsort(places, kind="stable")
    sorted_places = places[by_place]
    for name in ("output", "first_output"):
        column = table.column(name)
        values = column.fill_null(-1).to_numpy()
        at = np.searchsorted(sorted_places, values)
        found = column.is_valid().to_numpy(zero_copy_only=False) & (at < len(places))
        found[found] = sorted_places[at[found]] == values[found]
        lines = np.zeros(len(values), dtype=np.int64)
        lines[found] = by_place[at[found]]
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pa.array(lines, mask=~found))
    return table


def write_outputs(outputs: OutputRecords, path: Path) -> int:
    """Outputs in stream order (:func:`export_order`); malformed records last."""
    order = export_order(outputs)
    names = outputs.resources.names
    offsets = outputs.offsets
    with open_public(path) as fh:
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
