"""A user's own sink (``--sink PATH.py:FUNCTION``): a ``foreachBatch`` function and the
reader that gives back what it wrote.

The sink is a module with two functions::

    def write(batch: DataFrame, batch_id: int) -> None   # the foreachBatch function
    def read(sink_dir: Path) -> pyarrow.Table | list[dict]

``write`` gets each micro-batch's rows: the job's own columns, ``ids`` and ``_pgval_key``
(the output's key text); it must keep ``_pgval_key`` and ``ids`` with each row it stores.
``read`` (the module's, or ``write.read``) returns every row the sink holds after the
run, each with ``_pgval_key``, ``ids`` and ``written_ms`` (when the row was written,
epoch ms: the latency of a sink without Kafka's append time is measured from it). Both
get the run's own folder for the sink, ``sink_dir`` (``write`` in ``PGVAL_SINK_DIR``); a
sink that writes elsewhere must keep the runs apart itself.

The driver calls ``write`` through :class:`SinkWriter`, which counts the batch and records
in the progress file when each write started and ended (``sink_write_start``,
``sink_write``): what a crash point aimed at the sink reads. This module imports pyspark
only inside the writer.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgval.records.parse import JOB_KEY, JOB_VALUE
from pgval.topologies.job import JobError, JobRef, import_module

#: The environment variable the driver sets for ``write``: the run's folder for the sink.
SINK_DIR_ENV = "PGVAL_SINK_DIR"
#: What ``read`` must give per row.
READ_COLUMNS = (JOB_KEY, "ids", "written_ms")


@dataclass(frozen=True)
class UserSink:
    ref: JobRef
    write: Callable[..., Any]
    read: Callable[[Path], Any]


def load_sink(text: str) -> UserSink:
    """Import the sink and find its two functions; one sentence (:class:`JobError`) for a
    sink that cannot be used."""
    ref = JobRef.parse(text, option="--sink")
    module = import_module(ref, option="--sink")
    write = getattr(module, ref.function, None)
    if not callable(write):
        raise JobError(f"--sink {ref}: {ref.target} has no function {ref.function}")
    read = getattr(write, "read", None) or getattr(module, "read", None)
    if not callable(read):
        raise JobError(f"--sink {ref}: the sink needs a reader, read(sink_dir), beside "
                       f"{ref.function} (or {ref.function}.read) that returns what it wrote")
    return UserSink(ref, write, read)


def read_back(sink: UserSink, sink_dir: Path) -> pa.Table:
    """Every row the sink holds (``read``), as ``key``, ``ids``, ``written_ms`` and
    ``value``: the row's other columns (the job's own, as the sink stored them) as JSON
    text, null when it gave back none; a reader that fails or returns other columns is
    one sentence (:class:`JobError`)."""
    try:
        got = sink.read(sink_dir)
    except Exception as exc:  # the user's reader
        raise JobError(f"--sink {sink.ref}: read({sink_dir}) failed: "
                       f"{type(exc).__name__}: {exc}") from exc
    try:
        table = got if isinstance(got, pa.Table) else pa.Table.from_pylist(list(got))
    except (TypeError, pa.ArrowException) as exc:
        raise JobError(f"--sink {sink.ref}: read returned {type(got).__name__}, not a "
                       "pyarrow Table or a list of dicts") from exc
    missing = [c for c in READ_COLUMNS if c not in table.column_names]
    if missing and table.num_rows:
        raise JobError(f"--sink {sink.ref}: read's rows lack {', '.join(missing)} (each "
                       f"row needs {', '.join(READ_COLUMNS)})")
    if not table.num_rows:
        return pa.table({"key": pa.array([], pa.string()),
                         "ids": pa.array([], pa.list_(pa.int64())),
                         "written_ms": pa.array([], pa.int64()),
                         "value": pa.array([], pa.string())})
    try:
        out = pa.table({"key": table.column(JOB_KEY).cast(pa.string()),
                        "ids": table.column("ids").cast(pa.list_(pa.int64())),
                        "written_ms": table.column("written_ms").cast(pa.int64())})
    except pa.ArrowException as exc:
        raise JobError(f"--sink {sink.ref}: read's columns are not {JOB_KEY} text, ids a "
                       f"list of integers and written_ms an integer: {exc}") from exc
    nulls = [c for c in out.column_names if out.column(c).null_count] + (
        ["ids (an element)"] if pc.list_flatten(out.column("ids")).null_count else [])
    if nulls:
        raise JobError(f"--sink {sink.ref}: read returned rows whose {', '.join(nulls)} is "
                       "null: each row needs a key, its IDs and when it was written")
    own = [c for c in table.column_names if c not in (*READ_COLUMNS, JOB_VALUE, "batch")]
    value = (pa.array([json.dumps(row, default=str, separators=(",", ":"))
                       for row in table.select(own).to_pylist()], pa.string())
             if own else pa.nulls(out.num_rows, pa.string()))
    return out.append_column("value", value)


class SinkWriter:
    """The ``foreachBatch`` function the driver runs: the user's ``write`` between two
    progress lines, on the batch persisted and counted (so the count runs the batch once
    and the write reads it from the cache)."""

    def __init__(self, sink: UserSink, sink_dir: Path, log: Callable[..., None]) -> None:
        self.sink = sink
        self.sink_dir = sink_dir
        self.log = log
        sink_dir.mkdir(parents=True, exist_ok=True)
        os.environ[SINK_DIR_ENV] = str(sink_dir)

    def __call__(self, df: Any, batch_id: int) -> None:
        df.persist()
        try:
            rows = df.count()
            self.log("sink_write_start", batchId=batch_id, rows=rows)
            t0 = time.monotonic()
            self.sink.write(df, batch_id)
            self.log("sink_write", batchId=batch_id, rows=rows,
                     ms=round((time.monotonic() - t0) * 1000, 1))
        finally:
            df.unpersist()


def rows_written(progress: list[dict[str, Any]]) -> int:
    """Rows the sink was given in writes that ended (the crash points' output count)."""
    return int(np.sum([p.get("rows") or 0 for p in progress
                       if p.get("event") == "sink_write"], dtype=np.int64))
