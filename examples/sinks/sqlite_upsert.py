"""An idempotent foreachBatch sink into SQLite, keyed by batch id: each micro-batch in one
transaction that replaces whatever rows that batch id wrote before. Spark runs a batch
again after a crash with the same batch id and the same rows (its offset log), so a write
the crash cut short was rolled back and is done again, and a write that had committed is
replaced by the same rows: exactly-once (the recipe of Spark's foreachBatch
documentation: "use the batchId to deduplicate"). Rows are otherwise appended: an output
written twice by two different batches stays twice.

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
                   "(key TEXT, ids TEXT, batch INTEGER, written_ms INTEGER)")
    return db


def write(batch, batch_id):
    rows = batch.select("_pgval_key", "ids").collect()
    db = _connect(os.environ["PGVAL_SINK_DIR"])
    try:
        with db:  # one transaction: the batch's rows, all of them or none
            db.execute("DELETE FROM outputs WHERE batch = ?", (batch_id,))
            now = int(time.time() * 1000)
            db.executemany("INSERT INTO outputs VALUES (?, ?, ?, ?)",
                           [(r["_pgval_key"], json.dumps(r["ids"]), batch_id, now)
                            for r in rows])
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
