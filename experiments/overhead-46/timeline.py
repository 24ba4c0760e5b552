"""Where the two test workers' time went, from a session's ``timeline.jsonl``
(tests/sharing.py writes a line per test: worker, test, alone, asked, began, ended).

    python3 experiments/overhead-46/timeline.py /tmp/pytest-of-root/pytest-N/timeline.jsonl

Per worker: its tests' time, its waits for a turn (the other worker's test in progress
before an ``alone`` test, or an ``alone`` test beside), its idle gaps between tests, and
its end; then every wait over a second, with what it waited for, and each module's time.
"""

from __future__ import annotations

import collections
import json
import sys


def main(path: str) -> None:
    with open(path) as fh:
        lines = [json.loads(ln) for ln in fh if ln.strip()]
    t0 = min(x["asked"] for x in lines)
    end = max(x["ended"] for x in lines)
    by_worker: dict[str, list[dict]] = collections.defaultdict(list)
    for x in lines:
        by_worker[x["worker"]].append(x)
    print(f"session: {(end - t0) / 60:.1f} min from the first turn to the last test's end")
    for w, tests in sorted(by_worker.items()):
        tests.sort(key=lambda x: x["asked"])
        ran = sum(x["ended"] - x["began"] for x in tests)
        waited = sum(x["began"] - x["asked"] for x in tests)
        gaps = sum(max(0.0, b["asked"] - a["ended"])
                   for a, b in zip(tests, tests[1:], strict=False))
        alone = sum(x["ended"] - x["began"] for x in tests if x["alone"])
        print(f"{w}: ran {ran / 60:.1f} min ({alone / 60:.1f} alone), waited for turns "
              f"{waited / 60:.1f} min, between tests {gaps / 60:.1f} min, started "
              f"{tests[0]['asked'] - t0:.0f} s in, ended {(end - tests[-1]['ended']):.0f} s "
              "before the last")
    print("waits over 1 s (worker, seconds, test, what ran beside it when it asked):")
    for x in sorted(lines, key=lambda x: x["asked"]):
        wait = x["began"] - x["asked"]
        if wait > 1:
            beside = [o["test"].split("/")[-1] for o in lines if o["worker"] != x["worker"]
                      and o["began"] <= x["asked"] < o["ended"]]
            print(f"  {x['worker']} {wait:6.1f} {x['test'].split('/')[-1]}  <- {beside}")
    modules: dict[str, float] = collections.defaultdict(float)
    for x in lines:
        modules[x["test"].split("::")[0].split("/")[-1]] += x["ended"] - x["began"]
    print("modules over 20 s (seconds on their worker, for tests/sharing.py's MEASURED_S):")
    print("  " + ", ".join(f'"{m}": {s:.0f}' for m, s in
                           sorted(modules.items(), key=lambda kv: -kv[1]) if s > 20))


if __name__ == "__main__":
    main(sys.argv[1])
