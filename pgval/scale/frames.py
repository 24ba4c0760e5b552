"""A run's expected and produced outputs as flat Parquet tables, the Spark checker's input.

Four tables, one row each per:

* ``rows`` — expected output: ``row`` (its index), ``window_start``, ``resource`` (the
  dense code), ``gets``, ``posts``;
* ``slots`` — expected (input, row) pair: ``slot`` (its index, ascending by ID then row),
  ``id``, ``row``, ``ingress`` (the input's ingress time);
* ``outputs`` — produced output: ``output`` (its index), ``ingress_ts``, ``position``,
  ``window_start``, ``resource``, ``count``, ``gets``, ``posts``, ``n_ids`` and
  ``wrong_value`` (its values differ from its expected row's; false where not compared);
* ``occurrences`` — ID in an output: ``output``, ``k`` (its place in the output), ``id``.

Flat on purpose: a read-back done by Spark itself (Kafka's batch source, ``explode`` of the
IDs) yields exactly these rows, so the checker never needs the whole run in one process.
Written from numpy's columns, the indices are the numpy checker's
(:mod:`pgval.checker.validator`). The Spark oracle (:mod:`pgval.scale.oracle`) writes
``rows`` and ``slots`` itself, from the inputs table (:func:`write_inputs`); the checker
needs of ``slot`` only that it is one number per pair, ascending with the row within an
input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pgval.oracle.expected import ExpectedOutputs
from pgval.records.parse import InputEvents, OutputRecords


def _write(path: Path, columns: dict[str, np.ndarray]) -> None:
    table = pa.table({name: pa.array(np.ascontiguousarray(col)) for name, col in columns.items()})
    pq.write_table(table, path)


def write_inputs(events: InputEvents, path: Path) -> Path:
    """The input events as the Spark oracle reads them (:mod:`pgval.scale.oracle`): ``id``,
    ``is_get``, ``resource``, ``event_ts``, ``ingress_ts`` and ``pos`` (the event's place,
    which breaks a tie between two ingresses of one ID as the numpy oracle's stable sort
    does)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, {"id": events.id.astype(np.int64), "is_get": events.is_get.astype(bool),
                  "resource": events.resource.astype(np.int32),
                  "event_ts": events.event_ts.astype(np.int64),
                  "ingress_ts": events.ingress_ts.astype(np.int64),
                  "pos": np.arange(len(events), dtype=np.int64)})
    return path


def write_expected(expected: ExpectedOutputs, folder: Path) -> dict[str, Path]:
    """The ``rows`` and ``slots`` tables of ``expected`` into ``folder``; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.parquet" for name in ("rows", "slots")}
    n_rows = len(expected)
    _write(paths["rows"], {
        "row": np.arange(n_rows, dtype=np.int64),
        "window_start": expected.window_start.astype(np.int64),
        "resource": expected.resource.astype(np.int32),
        "gets": expected.gets.astype(np.int64),
        "posts": expected.posts.astype(np.int64)})
    n_slots = len(expected.id_sorted)
    _write(paths["slots"], {
        "slot": np.arange(n_slots, dtype=np.int64),
        "id": expected.id_sorted.astype(np.int64),
        "row": expected.id_output.astype(np.int64),
        "ingress": expected.id_ingress.astype(np.int64)})
    return paths


def write_produced(outputs: OutputRecords, folder: Path, wrong_value: np.ndarray | None = None
                   ) -> dict[str, Path]:
    """The ``outputs`` and ``occurrences`` tables of ``outputs`` into ``folder``; their
    paths. ``wrong_value``: per output, whether a value check found its values wrong."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.parquet" for name in ("outputs", "occurrences")}
    n_out = len(outputs)
    wrong = (np.zeros(n_out, dtype=bool) if wrong_value is None
             else np.asarray(wrong_value, dtype=bool))
    _write(paths["outputs"], {
        "output": np.arange(n_out, dtype=np.int64),
        "ingress_ts": outputs.ingress_ts.astype(np.int64),
        "position": outputs.position.astype(np.int64),
        "window_start": outputs.window_start.astype(np.int64),
        "resource": outputs.resource.astype(np.int32),
        "count": outputs.count.astype(np.int64),
        "gets": outputs.gets.astype(np.int64),
        "posts": outputs.posts.astype(np.int64),
        "n_ids": outputs.lengths.astype(np.int64),
        "wrong_value": wrong})
    lengths = outputs.lengths
    owner = np.repeat(np.arange(n_out, dtype=np.int64), lengths)
    _write(paths["occurrences"], {
        "output": owner,
        "k": np.arange(len(outputs.ids), dtype=np.int64) - np.repeat(outputs.offsets[:-1],
                                                                     lengths),
        "id": outputs.ids.astype(np.int64)})
    return paths


def write_frames(expected: ExpectedOutputs, outputs: OutputRecords, folder: Path,
                 wrong_value: np.ndarray | None = None) -> dict[str, Path]:
    """Write the four tables of one run into ``folder``; their paths by name."""
    return {**write_expected(expected, folder), **write_produced(outputs, folder, wrong_value)}
