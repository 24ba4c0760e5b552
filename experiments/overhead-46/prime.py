"""Priming volume against a run's overhead: four runs on one warm cluster with the fault
module's settings (tests/test_faults_cluster.py), no fault, 8 s phases, 20,000 and 2,000
priming events alternately; each run's timings printed."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pgval.config import resolve  # noqa: E402
from pgval.deploy.warm import WarmDeployments  # noqa: E402
from pgval.run.experiment import Experiment  # noqa: E402
from tests.test_faults_cluster import config  # noqa: E402


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pgval-prime")
    root.mkdir(parents=True, exist_ok=True)
    with WarmDeployments(root, label="prime") as warm:
        for i, prime in enumerate([20000, 2000, 20000, 2000]):
            cfg = resolve(dataclasses.replace(config("sst", "a1", "none"),
                                              prime_events=prime, phase_seconds=8))
            result = Experiment(cfg, root / f"run{i}", db=root / "r.db",
                                deployment=warm.for_run(cfg)).run()
            print(prime, {k: round(v, 1) for k, v in result.timings.items()},
                  result.warmup.get("seconds"), flush=True)


if __name__ == "__main__":
    main()
