"""Copy this experiment's complete runs into the example report's database, as stored.

    .venv/bin/python experiments/faults-25/merge.py [--dry-run]

Why a copy and not a re-run or an import: the runs were measured here, on 3 brokers at
2,000 ev/s with 20 s phases; the example report shows them as a section of their own (the
report groups runs by shape, so they never mix with the 1-broker grid). Every table keyed
by a run id is copied with the run's new id in the example database (its ids continue
after the highest one there); a run already copied (same run directory) is skipped, so
the script can run again after more repetitions.
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "results.db"
# The example report's database: since the grid was remade, the grid's
# (experiments/grid-23/assemble.py copied these runs into it as runs 158-193).
TARGET = HERE.parents[1] / "experiments" / "grid-23" / "results.db"


def columns(con: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA {schema}.table_info("{table}")')]


def merge(source: Path, target: Path, dry_run: bool = False) -> list[tuple[int, int]]:
    """(source id, target id) of every run copied."""
    from pgval.store.results import ResultsStore

    with ResultsStore(target):  # the target's tables brought up to this pgval's schema
        pass
    con = sqlite3.connect(target)
    try:
        con.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro",))
    except sqlite3.OperationalError:
        con.execute("ATTACH DATABASE ? AS src", (str(source),))
    have = {r[0] for r in con.execute("SELECT run_dir FROM main.runs WHERE run_dir IS NOT NULL")}
    runs = [r for r in con.execute(
        "SELECT id, run_dir FROM src.runs WHERE status = 'complete' ORDER BY id")
        if r[1] not in have]
    next_id = (con.execute("SELECT max(id) FROM main.runs").fetchone()[0] or 0) + 1
    mapping = [(old, next_id + k) for k, (old, _) in enumerate(runs)]
    if dry_run or not mapping:
        return mapping
    tables = [r[0] for r in con.execute(
        "SELECT name FROM src.sqlite_master WHERE type = 'table' AND name != 'runs'")]
    with con:
        run_cols = [c for c in columns(con, "src", "runs") if c in columns(con, "main", "runs")]
        rest = ", ".join(f'"{c}"' for c in run_cols if c != "id")
        for old, new in mapping:
            con.execute(f'INSERT INTO main.runs ("id", {rest}) '
                        f'SELECT ?, {rest} FROM src.runs WHERE id = ?', (new, old))
            for table in tables:
                src_cols = columns(con, "src", table)
                if "run_id" not in src_cols:
                    continue
                shared = [c for c in src_cols if c in columns(con, "main", table)
                          and c != "run_id"]
                names = ", ".join(f'"{c}"' for c in shared)
                con.execute(f'INSERT INTO main."{table}" ("run_id", {names}) '
                            f'SELECT ?, {names} FROM src."{table}" WHERE run_id = ?',
                            (new, old))
    con.execute("DETACH DATABASE src")
    con.close()
    return mapping


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    mapping = merge(SOURCE, TARGET, args.dry_run)
    verb = "would copy" if args.dry_run else "copied"
    print(f"{verb} {len(mapping)} runs: " + ", ".join(f"{a}→{b}" for a, b in mapping))


if __name__ == "__main__":
    main()
