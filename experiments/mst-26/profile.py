"""Where MST's time goes, per variant and trial rate, from the driver's progress events.

    .venv/bin/python experiments/mst-26/profile.py runs/mst-26

For every trial run under the folder (``<variant>/oir-*-<rate>-run*``): the batches of its
last 30 s of progress (the control phase's steady state), their mean duration and how it
splits (addBatch: the batch's Spark jobs, sink included; queryPlanning; walCommit and
commitOffsets: the checkpoint's offset and commit logs), rows per batch, and the state
each stateful operator held at the end (rows, memory).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from statistics import mean


def profile(run: Path) -> dict | None:
    lines = [json.loads(x) for x in (run / "progress.jsonl").read_text().splitlines() if x]
    batches = [x for x in lines if x.get("event") == "progress" and x.get("numInputRows")]
    if not batches:
        return None
    end = batches[-1]["wall_ms"]
    tail = [b for b in batches if b["wall_ms"] >= end - 30_000] or batches[-3:]
    dur = {k: mean(b["durationMs"].get(k, 0) for b in tail)
           for k in ("triggerExecution", "addBatch", "queryPlanning", "walCommit",
                     "commitOffsets")}
    state = {op["operatorName"]: (op["numRowsTotal"], op["memoryUsedBytes"])
             for op in batches[-1].get("stateOperators") or []}
    return {"batches": len(tail), "rows": mean(b["numInputRows"] for b in tail),
            "in/s": mean(b["inputRowsPerSecond"] or 0 for b in tail),
            "done/s": mean(b["processedRowsPerSecond"] or 0 for b in tail), **dur,
            "state": state}


def main(root: Path) -> None:
    print("| variant | rate | batches | rows/batch | in ev/s | processed ev/s | batch ms | "
          "addBatch | planning | wal+commit | state at the end (rows, MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for variant in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = [r for r in variant.iterdir() if (r / "progress.jsonl").is_file()]
        for run in sorted(runs, key=lambda r: float(re.findall(r"-(\d+(?:\.\d+)?)-run",
                                                                 r.name)[0])):
            p = profile(run)
            if p is None:
                continue
            rate = re.findall(r"-(\d+(?:\.\d+)?)-run", run.name)[0]
            state = ", ".join(f"{k} {n:,} / {m / 2**20:.1f}" for k, (n, m) in p["state"].items())
            print(f"| {variant.name} | {float(rate):,.0f} | {p['batches']} | {p['rows']:,.0f} | "
                  f"{p['in/s']:,.0f} | {p['done/s']:,.0f} | {p['triggerExecution']:,.0f} | "
                  f"{p['addBatch']:,.0f} | {p['queryPlanning']:,.0f} | "
                  f"{p['walCommit'] + p['commitOffsets']:,.0f} | {state} |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/mst-26"))
