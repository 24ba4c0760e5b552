"""Copy the evidence of one run per cell of the grid next to the example report, within a
size budget, so that `pgval recheck` works on those runs from a fresh clone.

    .venv/bin/python experiments/grid-23/ship_evidence.py [--budget-mb 60] [--dry-run]

A cell is (topology, pg, fault, crash point, restart policy). Its run is the first
complete, valid run whose run directory still has its evidence (the lowest id: the first
repetition). Cells are taken in the order of ``run.sh`` (the cells issue 23 changed first),
MST before SST within it (an MST run at 1,750 ev/s keeps about 2 MB, an SST run at 12,000
ev/s about 21 MB), until the next one would pass the budget; the README written beside
the copies lists what was shipped and what was not, with the command that re-checks each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DB = HERE / "results.db"
OUT = ROOT / "docs" / "example-report" / "evidence"


def cell_order() -> list[tuple[str, str, str, str]]:
    """(topology, pg, fault, restart) in run.sh's order; restart "-" is the default."""
    text = (HERE / "run.sh").read_text()
    block = text.split('cells="', 1)[1].split('"', 1)[0]
    return [tuple(line.split()) for line in block.splitlines() if line.strip()]  # type: ignore[misc]


def runs_by_cell(db: Path) -> dict[tuple[str, str, str, str], dict]:
    """The run to ship of every cell with one: complete, valid, evidence still on disk."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    rows = con.execute(
        "select id, topology, pg, fault, run_dir, "
        "coalesce(json_extract(params, '$.crash_point'), 'timed') as point, "
        "json_extract(params, '$.restart') as restart from runs "
        "where kind = 'validate' and status = 'complete' and valid = 1 order by id")
    out: dict[tuple[str, str, str, str], dict] = {}
    for r in rows:
        fault = r["fault"] if r["point"] == "timed" else f"{r['fault']}@{r['point']}"
        restart = r["restart"] if r["fault"] == "driver-crash" and r["restart"] == "at-remove" \
            else "-"
        key = (r["topology"], r["pg"], fault, restart)
        evidence = Path(r["run_dir"] or "") / "evidence"
        if key not in out and evidence.is_dir():
            out[key] = {"id": r["id"], "evidence": evidence,
                        "mb": sum(f.stat().st_size for f in evidence.iterdir()) / 1e6}
    con.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-mb", type=float, default=60.0)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    order = cell_order()
    have = runs_by_cell(DB)
    ranked = sorted(order, key=lambda c: (c[0] != "mst", order.index(c)))
    shipped, left, total = [], [], 0.0
    for cell in ranked:
        run = have.get(cell)
        if run is None:
            left.append((cell, "no complete valid run with its evidence on this machine"))
        elif total + run["mb"] > args.budget_mb:
            left.append((cell, f"run {run['id']}: {run['mb']:.1f} MB would pass the "
                               f"{args.budget_mb:g} MB budget"))
        else:
            shipped.append((cell, run))
            total += run["mb"]
    for cell, run in shipped:
        print(f"ship  {' '.join(cell):40} run {run['id']:>4}  {run['mb']:5.1f} MB")
    for cell, why in left:
        print(f"leave {' '.join(cell):40} {why}")
    print(f"{len(shipped)} cells, {total:.1f} MB")
    if args.dry_run:
        return
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    for _, run in shipped:
        shutil.copytree(run["evidence"], OUT / f"run-{run['id']}" / "evidence")
    (OUT / "shipped.json").write_text(json.dumps(
        {"budget_mb": args.budget_mb, "total_mb": round(total, 1),
         "shipped": [{"cell": " ".join(c), "run": r["id"], "mb": round(r["mb"], 1)}
                     for c, r in shipped],
         "left": [{"cell": " ".join(c), "why": w} for c, w in left]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
