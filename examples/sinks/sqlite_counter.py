"""A foreachBatch sink that keeps one row per output key and adds each batch's count to it
(``n = n + excluded.n``): the running-total upsert a dashboard table often is. Its IDs are
replaced on every write, so judged by IDs alone a batch written again after a crash looks
exactly-once; its counts then hold that batch twice. pgval compares the values the sink
gives back with the batch run's (docs/your-job.md, "Values"), and finds them.

For a job with a count column ``n``, e.g.:

    pgval validate --job examples/jobs/per_type_window.py:build \
        --sink examples/sinks/sqlite_counter.py:write --fault driver-crash \
        --crash-point after-sink-write
"""

import json
import os
import sqlite3
import time
from pathlib import Path


def _connect(sink_dir):
    db = sqlite3.connect(Path(sink_dir) / "counts.sqlite")
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS counts "
                   "(key TEXT PRIMARY KEY, ids TEXT, n INTEGER, written_ms INTEGER)")
    return db


def write(batch, batch_id):
    rows = batch.select("_pgval_key", "ids", "n").collect()
    db = _connect(os.environ["PGVAL_SINK_DIR"])
    try:
        with db:
            now = int(time.time() * 1000)
            db.executemany(
                "INSERT INTO counts VALUES (?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                "n = n + excluded.n, ids = excluded.ids, written_ms = excluded.written_ms",
                [(r["_pgval_key"], json.dumps(r["ids"]), r["n"], now) for r in rows])
    finally:
        db.close()


def read(sink_dir):
    """Every key's row: its key text, IDs, when it was last written, and its count."""
    if not (Path(sink_dir) / "counts.sqlite").exists():
        return []
    db = _connect(sink_dir)
    try:
        return [{"_pgval_key": key, "ids": json.loads(ids), "written_ms": written, "n": n}
                for key, ids, n, written in db.execute(
                    "SELECT key, ids, n, written_ms FROM counts ORDER BY rowid")]
    finally:
        db.close()
