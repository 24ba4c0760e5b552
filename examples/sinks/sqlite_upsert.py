"""An idempotent foreachBatch sink into SQLite: each micro-batch in one transaction that
upserts its rows by output key and records the batch id; a batch id already recorded is
skipped. Spark runs a batch again after a crash with the same batch id and the same rows
(its offset log), so a write the crash cut short was rolled back and is done again, and a
write that had committed is not repeated: exactly-once (the recipe of Spark's
foreachBatch documentation: "use the batchId to deduplicate").

    pgval validate --job examples/jobs/filter.py:build --sink examples/sinks/sqlite_upsert.py:write
"""

import json
import os
import sqlite3
import time
from pathlib import Path


def _connect(sink_dir):
    db = sqlite3.connect(Path(sink_dir) / "outputs.sqlite")
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS outputs "
                   "(key TEXT PRIMARY KEY, ids TEXT, batch INTEGER, written_ms INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS batches (batch INTEGER PRIMARY KEY)")
    return db


def write(batch, batch_id):
    rows = batch.select("_pgval_key", "ids").collect()
    db = _connect(os.environ["PGVAL_SINK_DIR"])
    try:
        with db:  # one transaction: all of the batch, or none of it
            if db.execute("SELECT 1 FROM batches WHERE batch = ?", (batch_id,)).fetchone():
                return  # written before a crash, committed: not again
            now = int(time.time() * 1000)
            db.executemany("INSERT OR REPLACE INTO outputs VALUES (?, ?, ?, ?)",
                           [(r["_pgval_key"], json.dumps(r["ids"]), batch_id, now)
                            for r in rows])
            db.execute("INSERT INTO batches VALUES (?)", (batch_id,))
    finally:
        db.close()


def read(sink_dir):
    """Every row the table holds, with the key text, IDs and when it was written."""
    if not (Path(sink_dir) / "outputs.sqlite").exists():
        return []
    db = _connect(sink_dir)
    try:
        return [{"_pgval_key": key, "ids": json.loads(ids), "written_ms": written}
                for key, ids, written in db.execute(
                    "SELECT key, ids, written_ms FROM outputs ORDER BY rowid")]
    finally:
        db.close()
