"""A run whose outputs go to a sink other than Kafka (``--sink files``, ``delta``, a user's):
watching what it wrote while the run goes on, and reading it back at the end.

The Kafka sinks' outputs are watched and read by :class:`pgval.run.monitor.OutputMonitor`
and :mod:`pgval.run.readback`; here is the same for the others, so that the warm-up, the
crash points (did a batch write?) and the evidence work alike:

* **files**, **delta** — the data files in the output folder: counted, and their
  ``window_end`` (when the job has one) with the file's time read once each, for the
  warm-up; at the end the rows through the sink's log (``_spark_metadata``, ``_delta_log``)
  and raw (:mod:`pgval.run.sink_files`, :mod:`pgval.run.sink_delta`).
* **a user's sink** — the rows its writes were given, from the driver's progress lines
  (:class:`pgval.topologies.user_sink.SinkWriter`); at the end what its ``read`` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pgval.checker.result import Result
from pgval.checker.validity import sink_reasons
from pgval.deploy.driver_process import DriverProcess
from pgval.evidence.bundle import SINK_RAW, SINK_ROWS, SINK_ROWS_SCHEMA, save_sink_rows
from pgval.run.sink_delta import read_delta
from pgval.run.sink_files import data_files, read_file_sink
from pgval.topologies.user_sink import load_sink, read_back, rows_written


class FileSinkWatch:
    """A file sink's or a Delta table's folder while the run goes on (its logs, in folders
    whose names start with ``_``, are not data)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._seen: set[Path] = set()
        self._rows: dict[Path, int] = {}  # a data file's rows, from its footer (immutable)

    def count(self) -> int:
        """Rows in the directory's data files (grows when a batch wrote rows). Rows, not
        files: every micro-batch writes at least one file, an empty one when it has no
        rows (FileFormatWriter.executeTask: "in case of empty job, leave first partition
        to save meta for file format like parquet"), so a crash point aimed at a batch
        that wrote outputs, counting files, hit batches with none (CI, a windowed job).
        A file whose footer cannot be read yet is still being written: counted later."""
        if not self.out_dir.is_dir():
            return 0
        total = 0
        for path in data_files(self.out_dir):
            rows = self._rows.get(path)
            if rows is None:
                try:
                    rows = pq.ParquetFile(path).metadata.num_rows
                except (OSError, pa.ArrowException):
                    continue
                self._rows[path] = rows
            total += rows
        return total

    def new_outputs(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``(window_end, file time, rows)`` of the files not seen before, as the Kafka
        monitor's :meth:`~pgval.run.monitor.OutputMonitor.new_outputs`."""
        ends: list[np.ndarray] = []
        stamps: list[np.ndarray] = []
        seen = 0
        for path in data_files(self.out_dir) if self.out_dir.is_dir() else []:
            if path in self._seen:
                continue
            try:
                table = pq.read_table(path)
                mtime = int(path.stat().st_mtime * 1000)
            except (OSError, pa.ArrowException):
                continue  # still being written: next time
            self._seen.add(path)
            seen += table.num_rows
            end = _window_ends(table)
            ends.append(end)
            stamps.append(np.full(len(end), mtime, dtype=np.int64))
        if not ends:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), seen
        return np.concatenate(ends), np.concatenate(stamps), seen


def _window_ends(table: pa.Table) -> np.ndarray:
    """A file's ``window_end`` column in epoch ms (a timestamp or an integer column; none:
    empty), nulls left out."""
    if "window_end" not in table.column_names:
        return np.zeros(0, dtype=np.int64)
    col = table.column("window_end").combine_chunks().drop_null()
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col.cast(pa.timestamp("ms", col.type.tz)), pa.int64())
    elif not pa.types.is_integer(col.type):
        return np.zeros(0, dtype=np.int64)
    return col.to_numpy(zero_copy_only=False).astype(np.int64)


class UserSinkWatch:
    """A user's sink while the run goes on: the rows its writes were given."""

    def __init__(self, driver: DriverProcess) -> None:
        self.driver = driver
        self._rows = 0

    def count(self) -> int:
        return rows_written(self.driver.progress())

    def new_outputs(self) -> tuple[np.ndarray, np.ndarray, int]:
        """No window ends (the rows stay in the sink); how many rows were written since."""
        now = self.count()
        seen, self._rows = now - self._rows, now
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, max(seen, 0)


@dataclass
class SinkReadBack:
    """What a sink held after the drain, as kept in the evidence."""

    kind: str
    rows: pa.Table
    raw: pa.Table | None = None
    describe: dict[str, Any] = field(default_factory=dict)
    reasons: Result = field(default_factory=Result)


def committed_batches(checkpoint: Path) -> int:
    """Batches in the query's commit log (the newest query under ``checkpoint``)."""
    commits = sorted((p for p in checkpoint.rglob("commits/*") if p.name.isdigit()),
                     key=lambda p: int(p.name))
    return int(commits[-1].name) + 1 if commits else 0


def read_sink(kind: str, ref: str, sink_dir: Path, checkpoint: Path, run_dir: Path
              ) -> SinkReadBack:
    """Read the sink back, keep its rows in the evidence and say what the read shows.

    A file sink's log must reach the query's last committed batch (the sink logs a batch
    before the query commits it): a log that ends earlier, a file it or a Delta log names
    that is gone or unreadable, is a reason (the run is unknown;
    :func:`pgval.checker.validity.sink_reasons`, which a re-check applies to run.json's
    record of the read). A user's sink proves nothing of its own: what its ``read``
    returns is what is judged, and said so."""
    if kind in ("files", "delta"):
        read = read_delta(sink_dir) if kind == "delta" else read_file_sink(sink_dir)
        save_sink_rows(run_dir, read.through_log, SINK_ROWS)
        save_sink_rows(run_dir, read.raw, SINK_RAW)
        described = read.describe()
        if kind == "files":  # the sink logs a batch before the query commits it
            described["committed_batches"] = committed_batches(checkpoint)
        return SinkReadBack(kind, read.through_log, read.raw, described,
                            sink_reasons(kind, described))
    table = read_back(load_sink(ref), sink_dir)
    n = table.num_rows
    rows = pa.table({"key": table.column("key"), "ids": table.column("ids"),
                     "written_ms": table.column("written_ms"),
                     "batch": pa.array(np.full(n, -1, dtype=np.int64)),
                     "origin": pa.repeat(pa.scalar("read", pa.string()), n),
                     "value": table.column("value")},
                    schema=SINK_ROWS_SCHEMA)
    save_sink_rows(run_dir, rows, SINK_ROWS)
    return SinkReadBack(kind, rows, None, {"rows": n, "read": f"{ref}: read({sink_dir})"})
