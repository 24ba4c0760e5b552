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
Indices are the numpy checker's (:mod:`pgval.checker.validator`), so the two checkers'
anomalies can be compared slot by slot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pgval.oracle.expected import ExpectedOutputs
from pgval.records.parse import OutputRecords

TABLES = ("rows", "slots", "outputs", "occurrences")


def _write(path: Path, columns: dict[str, np.ndarray]) -> None:
    table = pa.table({name: pa.array(np.ascontiguousarray(col)) for name, col in columns.items()})
    pq.write_table(table, path)


def write_frames(expected: ExpectedOutputs, outputs: OutputRecords, folder: Path,
                 wrong_value: np.ndarray | None = None) -> dict[str, Path]:
    """Write the four tables of one run into ``folder``; their paths by name."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.parquet" for name in TABLES}
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
