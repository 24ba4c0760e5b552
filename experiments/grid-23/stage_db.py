"""Stage results.db for a commit while the grid still writes it: a consistent snapshot
(SQLite's backup API) of the runs that have ended, staged in git's index without touching
the live file.

    .venv/bin/python experiments/grid-23/stage_db.py && git commit -m "..."

A run still running is left out of the snapshot (with its rows), so a clone made from
the commit resumes the grid at that repetition rather than finding a run nobody owns.
"""

from __future__ import annotations

import sqlite3
import subprocess
import tempfile
from pathlib import Path

from pgval.store.results import TABLES

HERE = Path(__file__).resolve().parent
DB = HERE / "results.db"


def snapshot(out: Path) -> list[int]:
    """Write the snapshot to ``out``; the ids of the running runs left out."""
    src = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    dst = sqlite3.connect(out)
    src.backup(dst)
    src.close()
    running = [r[0] for r in dst.execute("select id from runs where status = 'running'")]
    with dst:
        for table in TABLES:
            if table.per_run:
                dst.executemany(f"delete from {table.name} where run_id = ?",
                                [(i,) for i in running])
        dst.executemany("delete from runs where id = ?", [(i,) for i in running])
    dst.execute("pragma journal_mode = delete")  # one self-contained file
    dst.execute("vacuum")  # the left-out rows' pages go too
    ok = dst.execute("pragma integrity_check").fetchone()[0]
    dst.close()
    if ok != "ok":
        raise SystemExit(f"the snapshot failed its integrity check: {ok}")
    return running


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "results.db"
        running = snapshot(snap)
        root = HERE.parents[1]
        blob = subprocess.run(["git", "hash-object", "-w", str(snap)], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["git", "update-index", "--add", "--cacheinfo",
                        f"100644,{blob},{DB.relative_to(root)}"], cwd=root, check=True)
    left = f"; left out, still running: run {', '.join(map(str, running))}" if running else ""
    print(f"staged a snapshot of {DB.relative_to(root)} ({snap.name}, blob {blob[:10]}){left}")


if __name__ == "__main__":
    main()
