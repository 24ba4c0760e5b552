"""The table docs/example-report/README.md shows for micro-batch against Real-time Mode, from
results.db beside this file: one row a run, and a row a mode and fault with the medians.

    .venv/bin/python experiments/real-time/table.py
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path

DB = Path(__file__).resolve().parent / "results.db"
PHASES = ("control", "failure", "recovery")


def runs(db: Path = DB) -> list[dict]:
    """Every complete run: its mode, fault, verdict, duplicated IDs, p50 latency a phase."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT id, fault, repeat, guarantee, valid, params, summary "
                           "FROM runs WHERE status = 'complete' ORDER BY id").fetchall()
    finally:
        con.close()
    out = []
    for run_id, fault, repeat, verdict, valid, params, summary in rows:
        p, s = json.loads(params), json.loads(summary)
        out.append({
            "run": run_id, "fault": fault, "repeat": repeat, "verdict": verdict,
            "valid": bool(valid),
            "mode": "real-time" if (p.get("trigger") or "").startswith("real-time")
            else "micro-batch",
            "dup_ids": sum(s["phases"][ph]["duplicated_ids"] for ph in PHASES),
            "cost": s.get("failure_cost_s"),
            "p50": {ph: s["latency"][ph]["p50_s"] for ph in PHASES}})
    return out


def cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def markdown(rows: list[dict]) -> str:
    lines = ["| mode | fault | verdict | dup IDs | p50 control s | p50 failure s | "
             "p50 recovery s | failure cost s | valid |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['fault']} | {r['verdict']} | {r['dup_ids']:,} | "
                     + " | ".join(cell(r["p50"][ph]) for ph in PHASES)
                     + f" | {cell(r['cost'])} | {'yes' if r['valid'] else 'no'} (run {r['run']}) |")
    return "\n".join(lines)


def medians(rows: list[dict]) -> dict[tuple[str, str], dict[str, float | None]]:
    """The median p50 latency a phase, per mode and fault (the repetitions' middle)."""
    out = {}
    for key in sorted({(r["mode"], r["fault"]) for r in rows}):
        mine = [r for r in rows if (r["mode"], r["fault"]) == key]
        out[key] = {ph: (statistics.median(v) if (v := [r["p50"][ph] for r in mine
                                                          if r["p50"][ph] is not None])
                         else None) for ph in PHASES}
    return out


if __name__ == "__main__":
    rows = runs()
    print(markdown(rows))
    print()
    for (mode, fault), m in medians(rows).items():
        print(f"{mode:12} {fault:13} median p50 " + " / ".join(cell(m[ph]) for ph in PHASES))
