"""A plain append into SQLite, a row at a time (autocommit), as a foreachBatch sink often
starts out: every row a micro-batch gives is inserted, whatever batch it came from. A batch
Spark runs again after a crash is inserted again, so this sink is at-least-once: a crash
during a write duplicates the rows that write had already inserted.

    pgval validate --job examples/jobs/filter.py:build --sink examples/sinks/sqlite_append.py:write
"""

import json
import os
import sqlite3
import time
from pathlib import Path


def _connect(sink_dir):
    db = sqlite3.connect(Path(sink_dir) / "outputs.sqlite", isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS outputs "
               "(key TEXT, ids TEXT, batch INTEGER, written_ms INTEGER)")
    return db


def write(batch, batch_id):
    db = _connect(os.environ["PGVAL_SINK_DIR"])
    try:
        for row in batch.select("_pgval_key", "ids").collect():
            db.execute("INSERT INTO outputs VALUES (?, ?, ?, ?)",
                       (row["_pgval_key"], json.dumps(row["ids"]), batch_id,
                        int(time.time() * 1000)))
    finally:
        db.close()


def read(sink_dir):
    """Every row inserted, with the key text, IDs and when it was written."""
    if not (Path(sink_dir) / "outputs.sqlite").exists():
        return []
    db = _connect(sink_dir)
    try:
        return [{"_pgval_key": key, "ids": json.loads(ids), "written_ms": written}
                for key, ids, written in db.execute(
                    "SELECT key, ids, written_ms FROM outputs ORDER BY rowid")]
    finally:
        db.close()
