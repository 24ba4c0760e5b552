"""The warm-cell tables of docs/performance.md ("A warm cluster") from the databases of
warm.sh (by default) or warm_priming.sh (given as arguments: one column per run, headed by
its database's name)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

ROWS = [("cluster start", "cluster_start_s"), ("driver start", "driver_start_s"),
        ("of it: executors back (shared driver)", "driver_setup_s"),
        ("priming (first batches)", "prime_s"), ("drain", "drain_s"),
        ("read back", "read_back_s"), ("validation", "validate_s"),
        ("class dump", "class_dump_s"), ("teardown (driver stop, topics deleted)",
                                         "teardown_s")]


def cells(dbs: list[tuple[str, Path]]) -> list[tuple[str, dict, str | None]]:
    """(head, timings, guarantee) per complete run of each (label, database), in order."""
    out = []
    for label, db in dbs:
        if not db.exists():
            continue
        with sqlite3.connect(db) as con:
            for fault, summary, guarantee in con.execute(
                    "select fault, summary, guarantee from runs where status = 'complete' "
                    "order by id"):
                extra = json.loads(summary or "{}")
                timings = dict(extra.get("timings", {}))
                control = (extra.get("latency") or {}).get("control") or {}
                timings["control_p50_s"] = control.get("p50_s")
                out.append((f"{fault}, {label}", timings, guarantee))
    return out


def main(dbs: list[tuple[str, Path]]) -> None:
    runs = cells(dbs)
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
    print("| latency p50 in control | " + " | ".join(
        f"{t['control_p50_s']:.2f} s" if t.get("control_p50_s") is not None else "–"
        for _, t, _ in runs) + " |")
    print("| verdict | " + " | ".join(str(g) for _, _, g in runs) + " |")


if __name__ == "__main__":
    here = Path(__file__).parent
    main([(Path(a).stem.removeprefix("warm-"), Path(a)) for a in sys.argv[1:]] or
         [(f"sharing {word}", here / f"warm-sharing-{flag}.db")
          for flag, word in (("0", "off"), ("1", "on"))])
