"""What Spark's file sink wrote, read two ways: through its metadata log, and raw.

Spark's file sink (``writeStream.format("parquet")``) writes each micro-batch's data files
straight into the output directory and then records them in ``_spark_metadata/<batch>``
(``FileStreamSinkLog``: a line ``v1``, then one JSON object per file, ``{"path", "size",
"isDir", "modificationTime", "blockReplication", "blockSize", "action"}``; every 10th
batch a ``<batch>.compact`` file that repeats all earlier entries). Its exactly-once
promise is for readers that go through that log (Spark's own file source does): files of
a batch that failed or was re-run are in the directory but in no log entry. A reader that
lists the directory sees them too — "raw". pgval reads both and judges both.

Each output row becomes one row of :data:`pgval.evidence.bundle.SINK_ROWS_SCHEMA`: its key text
and ``ids`` (the columns the driver adds to a job's rows), the batch whose log entry names
its file (-1: none), and when it became visible to that reader: through the log, when the
batch's log file was written (its commit); raw, when its data file was last modified.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pgval.evidence.bundle import SINK_ROWS_SCHEMA
from pgval.records.parse import JOB_KEY

#: The file sink's metadata log, under its output directory.
METADATA_DIR = "_spark_metadata"


@dataclass
class LogEntry:
    """A data file the log names: the batch whose log file first names it, and that log
    file's mtime (when the file became visible to a reader through the log)."""

    batch: int
    committed_ms: int


@dataclass
class FileSinkRead:
    """Rows through the log, rows raw, and what the read could not use."""

    through_log: pa.Table
    raw: pa.Table
    #: Files per kind of problem (:data:`PROBLEMS`).
    problems: dict[str, list[str]] = field(default_factory=dict)
    batches: int = 0  # the highest batch id the log has, + 1

    def describe(self) -> dict[str, object]:
        return {"rows_through_log": self.through_log.num_rows, "rows_raw": self.raw.num_rows,
                "log_batches": self.batches, **describe_problems(self.problems)}


#: What can be wrong with a sink's files: the log names a file the folder lacks
#: (``missing``), or one that cannot be read (``unreadable_logged``: its rows are in the
#: table and pgval cannot see them); a file no log names cannot be read
#: (``unreadable_raw``: a torn file a failed write left, which only a raw reader trips on).
PROBLEMS = ("missing", "unreadable_logged", "unreadable_raw")


def describe_problems(problems: dict[str, list[str]]) -> dict[str, object]:
    """The problems as run.json keeps them: a count and the first names of each."""
    return {"problem_counts": {k: len(problems.get(k, [])) for k in PROBLEMS},
            "problems": {k: problems[k][:10] for k in PROBLEMS if problems.get(k)}}


def _local(path: str) -> str:
    """A log entry's path (``file:///...``, percent-encoded) as a local file name."""
    parsed = urlparse(path)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else path


def read_log(out_dir: Path) -> tuple[dict[str, LogEntry], int]:
    """Every data file the metadata log adds, with the batch that first names it; and the
    number of batches the log has. Deleted entries are dropped, as Spark's reader drops them."""
    log_dir = out_dir / METADATA_DIR
    entries: dict[str, LogEntry] = {}
    deleted: set[str] = set()
    if not log_dir.is_dir():
        return entries, 0
    files = []
    for f in log_dir.iterdir():
        stem = f.name[:-len(".compact")] if f.name.endswith(".compact") else f.name
        if stem.isdigit() and f.is_file():
            files.append((int(stem), f.name.endswith(".compact"), f))
    # Plain batch files first (each names exactly its batch's files), then compactions:
    # ``N.compact`` names batch N's files and repeats every earlier one, whose plain file
    # may be gone (Spark deletes them after a delay); those get N, the first batch whose
    # log file still names them.
    for batch, _compact, f in sorted(files, key=lambda t: (t[1], t[0])):
        committed = int(f.stat().st_mtime * 1000)
        lines = f.read_text(errors="replace").splitlines()
        for line in lines[1:]:
            try:
                status = json.loads(line)
            except ValueError:
                continue
            if not isinstance(status, dict) or not isinstance(status.get("path"), str):
                continue
            path = _local(status["path"])
            if status.get("action") == "delete":
                deleted.add(path)
            elif path not in entries:  # a compaction names its own batch's files too
                entries[path] = LogEntry(batch, committed)
    for path in deleted:
        entries.pop(path, None)
    top = max((b for b, _, _ in files), default=-1)
    return entries, top + 1


def data_files(out_dir: Path) -> list[Path]:
    """What a reader listing the directory finds: every file but Spark's hidden ones
    (names starting with ``_`` or ``.``, as Hadoop's input listing skips them)."""
    found = []
    for root, dirs, files in os.walk(out_dir):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        found += [Path(root) / f for f in files if not f.startswith(("_", "."))]
    return sorted(found)


def rows_of_file(path: Path, batch: int, visible_ms: int) -> pa.Table:
    """One data file's rows as :data:`SINK_ROWS_SCHEMA`."""
    table = pq.read_table(path, columns=[JOB_KEY, "ids"])
    n = table.num_rows
    return pa.table({
        "key": table.column(JOB_KEY).cast(pa.string()),
        "ids": table.column("ids").cast(pa.list_(pa.int64())),
        "written_ms": pa.array(np.full(n, visible_ms, dtype=np.int64)),
        "batch": pa.array(np.full(n, batch, dtype=np.int64)),
        "origin": pa.repeat(pa.scalar(path.name, pa.string()), n),
        "value": pa.nulls(n, pa.string()),
    }, schema=SINK_ROWS_SCHEMA)


def read_file_sink(out_dir: Path) -> FileSinkRead:
    """The file sink's rows through its log and raw (:class:`FileSinkRead`)."""
    entries, batches = read_log(out_dir)
    problems: dict[str, list[str]] = {k: [] for k in PROBLEMS}
    logged, raw = [], []
    for path in data_files(out_dir):
        entry = entries.get(str(path))
        try:
            mtime = int(path.stat().st_mtime * 1000)
            raw.append(rows_of_file(path, -1 if entry is None else entry.batch, mtime))
            if entry is not None:
                logged.append(rows_of_file(path, entry.batch, entry.committed_ms))
        except (OSError, pa.ArrowException, KeyError):
            problems["unreadable_raw" if entry is None else "unreadable_logged"].append(
                path.name)
    on_disk = {str(p) for p in data_files(out_dir)}
    problems["missing"] = sorted(Path(p).name for p in entries if p not in on_disk)

    def concat(parts: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(parts) if parts else SINK_ROWS_SCHEMA.empty_table()

    return FileSinkRead(concat(logged), concat(raw), problems, batches)
