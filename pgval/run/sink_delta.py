"""What a Delta Lake table holds, read two ways: through its transaction log, and raw.

A Delta table is Parquet data files plus ``_delta_log/<version>.json``, one JSON action a
line: ``add`` (a data file joins the table), ``remove`` (it leaves), ``commitInfo`` (with
the commit's ``timestamp``), ``txn`` (``appId`` and ``version``: what an idempotent writer
recorded, ``txnAppId``/``txnVersion``). A reader sees the files added and not removed up to
the newest version; files a failed or repeated write left in the folder belong to no
commit — a reader that lists the folder sees them too ("raw"). Checkpoints
(``<version>.checkpoint.parquet``) only summarise the JSON files, which a run's short life
keeps (Delta deletes them after ``delta.logRetentionDuration``, 30 days), so they are not
read.

Rows come out as :data:`pgval.evidence.bundle.SINK_ROWS_SCHEMA`: through the log, each row's
batch is the ``txn`` version its commit recorded (-1: none) and its time the commit's;
raw, the data file's time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa

from pgval.evidence.bundle import SINK_ROWS_SCHEMA
from pgval.run.sink_files import PROBLEMS, data_files, describe_problems, rows_of_file

#: The transaction log's folder under the table.
DELTA_LOG = "_delta_log"


@dataclass
class Commit:
    """A data file's commit: the ``txn`` version recorded with it and the commit's time."""

    batch: int
    committed_ms: int


@dataclass
class DeltaRead:
    through_log: pa.Table
    raw: pa.Table
    #: Files per kind of problem (:data:`pgval.run.sink_files.PROBLEMS`).
    problems: dict[str, list[str]] = field(default_factory=dict)
    versions: int = 0  # the newest table version + 1

    def describe(self) -> dict[str, object]:
        return {"rows_through_log": self.through_log.num_rows, "rows_raw": self.raw.num_rows,
                "table_versions": self.versions, **describe_problems(self.problems)}


def read_delta_log(table: Path) -> tuple[dict[str, Commit], int]:
    """Every data file the log has added and not removed, with its commit; and the number
    of versions. Paths are relative to the table (percent-encoded), as Delta writes them."""
    log = table / DELTA_LOG
    commits = sorted((int(f.name.split(".")[0]), f) for f in log.glob("*.json")
                     if f.name.split(".")[0].isdigit()) if log.is_dir() else []
    files: dict[str, Commit] = {}
    for _, f in commits:
        actions = []
        for line in f.read_text(errors="replace").splitlines():
            try:
                action = json.loads(line)
            except ValueError:
                continue
            if isinstance(action, dict):
                actions.append(action)
        info = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), dict)),
                    {})
        txn = next((a["txn"] for a in actions if isinstance(a.get("txn"), dict)), {})
        when = info.get("timestamp")
        when = int(when) if isinstance(when, int) else int(f.stat().st_mtime * 1000)
        batch = txn.get("version") if isinstance(txn.get("version"), int) else -1
        for action in actions:
            for kind in ("add", "remove"):
                body = action.get(kind)
                if isinstance(body, dict) and isinstance(body.get("path"), str):
                    path = str((table / unquote(body["path"])).resolve())
                    if kind == "add":
                        files[path] = Commit(batch, when)
                    else:
                        files.pop(path, None)
    return files, (commits[-1][0] + 1) if commits else 0


def read_delta(table: Path) -> DeltaRead:
    """The table's rows through its log and raw (:class:`DeltaRead`)."""
    committed, versions = read_delta_log(table)
    problems: dict[str, list[str]] = {k: [] for k in PROBLEMS}
    logged, raw = [], []
    on_disk = data_files(table) if table.is_dir() else []
    for path in on_disk:
        entry = committed.get(str(path.resolve()))
        try:
            mtime = int(path.stat().st_mtime * 1000)
            raw.append(rows_of_file(path, -1 if entry is None else entry.batch, mtime))
            if entry is not None:
                logged.append(rows_of_file(path, entry.batch, entry.committed_ms))
        except (OSError, pa.ArrowException, KeyError):
            problems["unreadable_raw" if entry is None else "unreadable_logged"].append(
                path.name)
    present = {str(p.resolve()) for p in on_disk}
    problems["missing"] = sorted(Path(p).name for p in committed if p not in present)

    def concat(parts: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(parts) if parts else SINK_ROWS_SCHEMA.empty_table()

    return DeltaRead(concat(logged), concat(raw), problems, versions)
