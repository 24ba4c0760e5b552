"""The warm-cell table of docs/performance.md ("A warm cluster") from warm.sh's databases."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

ROWS = [("cluster start", "cluster_start_s"), ("driver start", "driver_start_s"),
        ("priming (first batches)", "prime_s"), ("drain", "drain_s"),
        ("read back", "read_back_s"), ("validation", "validate_s"),
        ("class dump", "class_dump_s"), ("teardown (driver stop, topics deleted)",
                                         "teardown_s")]


def cells(here: Path) -> list[tuple[str, dict, str | None]]:
    """(head, timings, guarantee) per run of both databases, sharing off first."""
    out = []
    for sharing in ("0", "1"):
        db = here / f"warm-sharing-{sharing}.db"
        if not db.exists():
            continue
        with sqlite3.connect(db) as con:
            for fault, summary, guarantee in con.execute(
                    "select fault, summary, guarantee from runs where status = 'complete' "
                    "order by id"):
                timings = json.loads(summary or "{}").get("timings", {})
                out.append((f"{fault}, sharing {'on' if sharing == '1' else 'off'}",
                            timings, guarantee))
    return out


def main(here: Path) -> None:
    runs = cells(here)
    print("| | " + " | ".join(h for h, _, _ in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for name, key in ROWS:
        print(f"| {name} | " + " | ".join(
            f"{t[key]:.1f} s" if isinstance(t.get(key), (int, float)) else "–"
            for _, t, _ in runs) + " |")
    print("| **overhead** (warm-up and phases excluded) | " + " | ".join(
        f"**{t.get('overhead_s', 0):.1f} s**" for _, t, _ in runs) + " |")
    print("| warm-up (until steady, capped at 12 s) | " + " | ".join(
        f"{t.get('warmup_s', 0):.1f} s" for _, t, _ in runs) + " |")
    print("| verdict | " + " | ".join(str(g) for _, _, g in runs) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
