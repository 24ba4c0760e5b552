"""The table of docs/performance.md ("Class-data sharing") from runs.jsonl (run.sh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROWS = [("cluster start", "cluster_start_s"), ("driver start", "driver_start_s"),
        ("priming", "prime_s"), ("warm-up (until steady)", "warmup_s"),
        ("drain", "drain_s"), ("read back", "read_back_s"), ("validation", "validate_s"),
        ("class dump (first run only)", "class_dump_s"), ("teardown", "teardown_s")]


def main(path: Path) -> None:
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    heads = [f"{r['label']} {'on' if r['class_sharing'] else 'off'}" for r in runs]
    print("| | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(runs))
    for name, key in ROWS:
        cells = [f"{r['timings'][key]:.1f} s" if key in r["timings"] else "–" for r in runs]
        print(f"| {name} | " + " | ".join(cells) + " |")
    without = [r["timings"].get("overhead_s", 0) for r in runs]  # pgval's: T1-T4 excluded
    print("| overhead without the warm-up | " + " | ".join(f"{v:.1f} s" for v in without)
          + " |")
    print("| **wall − 3 phases** (the overhead the 60 s goal counts) | " + " | ".join(
        f"**{r['wall_s'] - 3 * r['phase_s']:.0f} s**" for r in runs) + " |")
    print("| verdict | " + " | ".join(str(r["guarantee"]) for r in runs) + " |")
    if any("p50_s" in r for r in runs):  # how warm control was: its p50 against recovery's
        print("| latency p50 control / recovery | " + " | ".join(
            "{} / {}".format(*(f"{v:.1f} s" if isinstance(v, (int, float)) else "–"
                               for v in (r.get("p50_s", {}).get("control"),
                                         r.get("p50_s", {}).get("recovery"))))
            for r in runs) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("runs.jsonl"))
