"""Copy the evidence of every complete run of a results database beside it, so that
`pgval recheck RUN_ID --db DB` works from any clone: a run directory stays on the machine
that made it, and `pgval recheck` looks for ``evidence/run-<id>/`` beside the database
once it is gone. Copies already made are left as they are.

    .venv/bin/python experiments/ship_evidence.py experiments/real-time/results.db

(experiments/grid-23/ship_evidence.py does the same within a size budget, one run a cell.)
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path


def ship(db: Path) -> list[tuple[int, str]]:
    """(run id, what happened) for every complete run of ``db``."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT id, run_dir FROM runs WHERE status = 'complete' "
                           "ORDER BY id").fetchall()
    finally:
        con.close()
    out = []
    for run_id, run_dir in rows:
        target = db.resolve().parent / "evidence" / f"run-{run_id}" / "evidence"
        source = Path(run_dir or "") / "evidence"
        if target.is_dir():
            out.append((run_id, "already beside the database"))
        elif source.is_dir():
            shutil.copytree(source, target)
            out.append((run_id, f"copied from {source}"))
        else:
            out.append((run_id, f"lost: {source} is not on this machine"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    for run_id, what in ship(ap.parse_args().db):
        print(f"run {run_id}: {what}")


if __name__ == "__main__":
    main()
