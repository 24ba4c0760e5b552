"""Keep the evidence of one run per cell of the grid beside its database, within a size
budget, so that `pgval recheck RUN_ID --db experiments/grid-23/results.db` works from a
fresh clone (a run directory stays on the machine that made it; `pgval recheck` looks for
``evidence/run-<id>/`` beside the database once it is gone).

    .venv/bin/python experiments/grid-23/ship_evidence.py [--budget-mb 66] [--dry-run]

Run it after each cell: the grid spans sessions and machines, and a run directory not
copied before its machine goes is lost (runs 1-35 were). What is copied stays: a cell
keeps the run it shipped, and copies are never rewritten.

A cell is (topology, pg, fault, restart policy); its run is the first complete, valid
run whose evidence is still here. Which cells get a place is planned over the whole grid,
cells not yet run included (sized as the largest of their topology's runs so far), so a
cell run early cannot take the place of a more telling one run later. An MST run at 1,750
ev/s keeps about 5 MB, an SST run at 12,000 ev/s about 22 MB, so at about 60 MB one SST cell fits
beside about eight MST cells. Order: the MST a1 cell of every fault shape (a1 is `pgval
validate`'s default, and the flagship `--topology mst --fault delay-gt-timeout` is among
them), one SST cell (``SST_CELL``), then the other MST cells in run.sh's order. A cell
whose evidence is gone gets a place only if run.sh runs it again (a repetition more, its
fifth column: the flagship's cell); the others are listed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
from pathlib import Path

HERE = Path(__file__).resolve().parent
DB = HERE / "results.db"
OUT = HERE / "evidence"
GUESS_MB = {"mst": 5.0, "sst": 22.0}
# The one SST cell that fits beside the MST ones: the driver halted right after a sink
# write, whose at-least-once duplicates are the paper's SST finding.
SST_CELL = ("sst", "a1", "driver-crash@after-sink-write", "-")

Cell = tuple[str, str, str, str]


def cell_order() -> tuple[list[Cell], set[Cell]]:
    """(topology, pg, fault, restart) in run.sh's order (restart "-": the default), and the
    cells run.sh runs again with more repetitions (a fifth column)."""
    text = (HERE / "run.sh").read_text()
    block = text.split('cells="', 1)[1].split('"', 1)[0]
    cells: list[Cell] = []
    again: set[Cell] = set()
    for line in block.splitlines():
        if line.strip():
            words = line.split()
            cell = (words[0], words[1], words[2], words[3])
            if cell not in cells:
                cells.append(cell)
            if len(words) > 4:
                again.add(cell)
    return cells, again


def ranked(order: list[Cell]) -> list[Cell]:
    """MST a1 per fault shape, one SST cell, the other MST cells, the other SST cells; each
    in run.sh's order."""
    def rank(cell: Cell) -> tuple[int, int]:
        first = 0 if cell[:2] == ("mst", "a1") else 1 if cell == SST_CELL else \
            2 if cell[0] == "mst" else 3
        return first, order.index(cell)
    return sorted(order, key=rank)


def size_mb(evidence: Path) -> float:
    return sum(f.stat().st_size for f in evidence.iterdir()) / 1e6


def copies() -> list[Path]:
    """The run directories copied beside the database (``run-<id>``)."""
    return sorted(d for d in OUT.glob("run-*") if d.name[4:].isdigit()) if OUT.is_dir() else []


def runs_by_cell(db: Path) -> dict[Cell, dict]:
    """Each cell's run to ship: a complete, valid run already copied beside the database,
    else its first whose run directory still has its evidence, else its first (lost)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    rows = con.execute(
        "select id, topology, pg, fault, run_dir, "
        "coalesce(json_extract(params, '$.crash_point'), 'timed') as point, "
        "json_extract(params, '$.restart') as restart from runs "
        "where kind = 'validate' and status = 'complete' and valid = 1 order by id")
    out: dict[Cell, dict] = {}
    for r in rows:
        fault = r["fault"] if r["point"] == "timed" else f"{r['fault']}@{r['point']}"
        restart = r["restart"] if r["fault"] == "driver-crash" and r["restart"] == "at-remove" \
            else "-"
        key = (r["topology"], r["pg"], fault, restart)
        copied = OUT / f"run-{r['id']}" / "evidence"
        source = Path(r["run_dir"] or "") / "evidence"
        where = copied if copied.is_dir() else source if source.is_dir() else None
        rank = 0 if where == copied else 1 if where else 2
        if key in out and out[key]["rank"] <= rank:
            continue
        out[key] = {"id": r["id"], "evidence": where, "copied": where == copied, "rank": rank,
                    "mb": size_mb(where) if where else None}
    con.close()
    return out


def plan(order: list[Cell], again: set[Cell], have: dict[Cell, dict], budget_mb: float
         ) -> tuple[list[tuple[Cell, float]], list[tuple[Cell, str]]]:
    """The cells that get a place (with their size, known or guessed: the largest run of
    its topology so far), and the others. A cell whose evidence is lost gets one only if
    run.sh runs it again. Every copy already made counts against the budget, a cell's or
    not (a run discarded after it was copied)."""
    known: dict[str, list[float]] = {}
    for (topology, *_), run in have.items():
        if run["mb"] is not None:
            known.setdefault(topology, []).append(run["mb"])
    guess = {t: max(known[t]) if known.get(t) else mb for t, mb in GUESS_MB.items()}
    placed, left = [], []
    cells_copied = {run["id"] for run in have.values() if run["copied"]}
    total = sum(size_mb(d / "evidence") for d in copies() if int(d.name[4:]) not in cells_copied)
    for cell in ranked(order):
        run = have.get(cell)
        mb = run["mb"] if run and run["mb"] is not None else guess[cell[0]]
        if run and run["copied"]:  # a copy stays where it is
            placed.append((cell, mb))
            total += mb
    for cell in ranked(order):
        run = have.get(cell)
        if run and run["copied"]:
            continue
        if run and run["evidence"] is None and cell not in again:
            left.append((cell, f"run {run['id']}: its evidence went with the machine that "
                               "made it, and run.sh does not run the cell again"))
            continue
        mb = run["mb"] if run and run["mb"] is not None else guess[cell[0]]
        if total + mb > budget_mb:
            left.append((cell, f"{mb:.1f} MB would pass the {budget_mb:g} MB budget"))
        else:
            placed.append((cell, mb))
            total += mb
    return placed, left


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # The evidence budget, "under ~60 MB", with room for the guesses: a cell not yet run is sized as
    # its topology's largest run, so the plan's total runs ahead of what gets copied.
    ap.add_argument("--budget-mb", type=float, default=66.0)  # + the m1 cell
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    order, again = cell_order()
    have = runs_by_cell(DB)
    placed, left = plan(order, again, have, args.budget_mb)
    lines, shipped, total = [], [], 0.0
    for cell, mb in placed:
        run = have.get(cell)
        name = " ".join(cell)
        if run is None:
            lines.append(f"later  {name:40} not run yet (~{mb:.1f} MB)")
        elif run["evidence"] is None:
            lines.append(f"later  {name:40} run {run['id']}'s evidence is lost; run.sh "
                         f"runs the cell again (~{mb:.1f} MB)")
        else:
            state = "kept  " if run["copied"] else "copy  "
            lines.append(f"{state} {name:40} run {run['id']:>4}  {mb:5.1f} MB")
            shipped.append((cell, run))
            total += mb
    lines += [f"leave  {' '.join(cell):40} {why}" for cell, why in left]
    print("\n".join(lines))
    print(f"{len(shipped)} cells shipped or to copy now, {total:.1f} MB; "
          f"{len(placed)} cells planned within {args.budget_mb:g} MB")
    if args.dry_run:
        return
    OUT.mkdir(exist_ok=True)
    for _, run in shipped:
        if not run["copied"]:  # copied whole or not at all: a kept copy is never redone
            final = OUT / f"run-{run['id']}"
            part = OUT / f"{final.name}.partial"
            shutil.rmtree(part, ignore_errors=True)
            shutil.copytree(run["evidence"], part / "evidence")
            os.replace(part, final)
    (OUT / "shipped.json").write_text(json.dumps(
        {"budget_mb": args.budget_mb, "total_mb": round(total, 1),
         "shipped": [{"cell": " ".join(c), "run": r["id"],
                      "mb": round(size_mb(OUT / f"run-{r['id']}" / "evidence"), 1)}
                     for c, r in shipped],
         "planned": [" ".join(c) for c, _ in placed if c not in dict(shipped)],
         "left": [{"cell": " ".join(c), "why": w} for c, w in left]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
