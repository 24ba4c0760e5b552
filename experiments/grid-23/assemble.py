"""Make the example report's database once the grid is complete: this grid's database,
plus the runs of the old example database that the grid does not remake (the
faults beyond the paper, and the OIR searches with their trial runs), renumbered after the
grid's runs.

    .venv/bin/python experiments/grid-23/assemble.py OLD_DB NEW_DB [--dry-run]
    mv NEW_DB experiments/grid-23/results.db
    git rm docs/example-report/results.db

OLD_DB is the example database the grid replaces (docs/example-report/results.db before
it is replaced). NEW_DB then takes the grid database's place and is the example report's
database: the grid's runs keep their ids, so the evidence kept beside the grid's database
(``evidence/run-<id>/``) is still found by ``pgval recheck``, and the 130 MB of database
and evidence stay where the grid wrote them instead of being copied (no link either: a
symbolic link does not survive every checkout, and a copy doubles the largest file). A
copied run keeps everything it had; its ``summary`` gains ``copied_from`` (the old
database's path and git commit, and the run's old id), and each copied OIR row's trials
name the trials' new ids. Nothing is copied from a run twice: NEW_DB must not exist, and
a grid database already assembled is refused. A copied run's evidence (if its directory is
found again) names its old id, so it re-checks against the old database, at the commit
``copied_from`` names.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
from pathlib import Path

from pgval.store.results import TABLES

HERE = Path(__file__).resolve().parent
GRID_DB = HERE / "results.db"
# Faults the grid does not remake: those beyond the paper, run under the current
# measurement model (2026-11-27).
BEYOND_PAPER = ("broker-crash", "partition", "pause-gt-timeout", "pause-lt-timeout")


def git_commit(path: Path) -> str | None:
    """The commit that last changed ``path`` (where a reader finds the old database)."""
    done = subprocess.run(["git", "log", "-1", "--format=%H", "--", path.name],
                          cwd=path.parent, capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def runs_to_copy(old: sqlite3.Connection) -> list[int]:
    """The runs of the faults beyond the paper and every OIR trial run, in id order."""
    marks = ",".join("?" * len(BEYOND_PAPER))
    ids = {r[0] for r in old.execute(
        f"select id from runs where status = 'complete' and fault in ({marks})", BEYOND_PAPER)}
    for (trials,) in old.execute("select trials from oir"):
        ids |= {t["run_id"] for t in json.loads(trials) if t.get("run_id") is not None}
    return sorted(ids)


def columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"pragma table_info({table})")]


def assemble(old_db: Path, new_db: Path) -> dict[int, int]:
    """Write NEW_DB; the map old run id → new run id."""
    if new_db.exists():
        raise SystemExit(f"{new_db} exists; give a new path")
    src = sqlite3.connect(f"file:{GRID_DB}?mode=ro", uri=True)
    dst = sqlite3.connect(new_db)
    src.backup(dst)
    src.close()
    running = [r[0] for r in dst.execute("select id from runs where status = 'running'")]
    copied = dst.execute("select count(*) from runs where summary like '%\"copied_from\"%'"
                         ).fetchone()[0]
    if running or copied:
        dst.close()
        new_db.unlink()
        if running:
            raise SystemExit(f"the grid is still running (run {', '.join(map(str, running))})")
        raise SystemExit(f"{GRID_DB} holds {copied} copied runs already: it was assembled")
    old = sqlite3.connect(f"file:{old_db}?mode=ro", uri=True)
    if old.execute("pragma user_version").fetchone() != dst.execute(
            "pragma user_version").fetchone():
        raise SystemExit(f"{old_db} and {GRID_DB} have different schema versions")
    first = (dst.execute("select max(id) from runs").fetchone()[0] or 0) + 1
    ids = runs_to_copy(old)
    new_id = {old_id: first + k for k, old_id in enumerate(ids)}
    origin = {"database": str(old_db), "commit": git_commit(old_db.resolve())}
    with dst:
        cols = columns(old, "runs")
        for old_id in ids:
            row = dict(zip(cols, old.execute("select * from runs where id = ?",
                                             (old_id,)).fetchone(), strict=True))
            summary = json.loads(row["summary"] or "{}")
            summary["copied_from"] = {**origin, "run": old_id}
            row.update(id=new_id[old_id], summary=json.dumps(summary))
            dst.execute(f"insert into runs ({','.join(row)}) values "
                        f"({','.join('?' * len(row))})", list(row.values()))
        for table in TABLES:
            if not table.per_run:
                continue
            cols = columns(old, table.name)
            at = cols.index("run_id")
            marks = ",".join("?" * len(ids))
            for values in old.execute(f"select * from {table.name} where run_id in ({marks})",
                                      ids):
                values = list(values)
                values[at] = new_id[values[at]]
                dst.execute(f"insert into {table.name} ({','.join(cols)}) values "
                            f"({','.join('?' * len(cols))})", values)
        cols = columns(old, "oir")
        for values in old.execute("select * from oir"):
            row = dict(zip(cols, values, strict=True))
            trials = json.loads(row["trials"])
            for t in trials:
                if t.get("run_id") is not None:
                    t["run_id"] = new_id[t["run_id"]]
            row["trials"] = json.dumps(trials)
            dst.execute(f"insert into oir ({','.join(row)}) values "
                        f"({','.join('?' * len(row))})", list(row.values()))
    dst.execute("pragma journal_mode = delete")  # one self-contained file to commit
    dst.execute("vacuum")
    dst.close()
    old.close()
    return new_id


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old_db", type=Path)
    ap.add_argument("new_db", type=Path)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.dry_run:
        old = sqlite3.connect(f"file:{args.old_db}?mode=ro", uri=True)
        ids = runs_to_copy(old)
        print(f"would copy {len(ids)} runs: {ids}")
        return
    new_id = assemble(args.old_db, args.new_db)
    print(f"{args.new_db}: the grid's runs, and {len(new_id)} runs copied from "
          f"{args.old_db} as runs {min(new_id.values())}-{max(new_id.values())}")
    print("old → new: " + ", ".join(f"{o}→{n}" for o, n in new_id.items()))
    con = sqlite3.connect(args.new_db)
    print("integrity:", con.execute("pragma integrity_check").fetchone()[0],
          "· rows naming no run:", len(con.execute("pragma foreign_key_check").fetchall()))
    con.close()


if __name__ == "__main__":
    main()
