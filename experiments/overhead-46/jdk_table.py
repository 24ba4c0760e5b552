"""One row per run (`pgval validate --json` files): its own overhead and the parts of it,
the warm-up until steady (windows), the control phase's p50 latency."""

import json
import sys
from pathlib import Path

KEYS = ["overhead_s", "cluster_start_s", "driver_start_s", "prime_s", "drain_s", "read_back_s",
        "validate_s", "teardown_s", "class_dump_s"]


def main(paths: list[str]) -> None:
    head = " | ".join(k.removesuffix("_s") for k in KEYS)
    print(f"| run | {head} | warm-up (windows) | control p50 | verdict |")
    print("|---|" + "---:|" * (len(KEYS) + 3))
    for path in map(Path, paths):
        try:
            d = json.loads(path.read_text())
        except ValueError:  # a run that failed: its .err says why
            continue
        t, w = d["timings"], d.get("warmup", {})
        cells = " | ".join(f"{t[k]:.1f} s" if k in t else "–" for k in KEYS)
        warm = f"{w.get('seconds', 0):.1f} s ({len(w.get('windows', []))})"
        p50 = d["latency"]["control"]["p50_s"]
        print(f"| {path.stem} | {cells} | {warm} | {p50:.2f} s | {d['guarantee']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
