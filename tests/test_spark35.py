"""pgval on Spark 3.5 (the line most managed platforms still run): one real run from the
second venv that `.ci/setup` makes (`.venv35`, pyspark 3.5 and its own Kafka connector),
with a driver crash aimed after the sink's write. SST as a built-in job, so the one run
covers on 3.5 the driver and its restart, pgval's JVM hook (compiled against 3.5's
checkpoint file manager), Spark's Kafka sink writing a batch twice, the job interface and
the batch oracle, checked against pgval's own oracle on the same records."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
PGVAL35 = ROOT / ".venv35" / "bin" / "pgval"


def test_a_driver_crash_after_the_sink_write_on_spark_35(tmp_path: Path) -> None:
    assert PGVAL35.exists(), "no .venv35: run `bash .ci/setup` (it makes the Spark 3.5 venv)"
    version = subprocess.run([str(PGVAL35.parent / "python"), "-c",
                              "import pyspark; print(pyspark.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("3.5."), version
    job = tmp_path / "sst_small.py"
    job.write_text("from pgval.topologies.builtin import make_sst\n"
                   "build = make_sst(window_ms=2000, watermark_ms=1000)\n")
    run = subprocess.run(
        [str(PGVAL35), "validate", "--job", f"{job}:build", "--pg", "a1",
         "--fault", "driver-crash", "--crash-point", "after-sink-write",
         "--phase-seconds", "10", "--rate", "400", "--resources", "4", "--brokers", "1",
         "--workers", "2", "--warmup-seconds", "5", "--warmup-max-seconds", "8",
         "--window-ms", "2000", "--trigger-ms", "1000", "--prime-events", "2000",
         "--db", str(tmp_path / "r.db"), "--run-dir", str(tmp_path / "run"), "--json"],
        cwd=tmp_path, env={**os.environ, "PGVAL_RUNS": str(tmp_path / "runs")},
        capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["valid"], out["validity_reasons"]
    # Spark's Kafka sink writes the halted batch again: at-least-once, nothing lost.
    assert out["guarantee"] == "at-least-once" and out["duplicate"] > 0, out
    assert out["unprocessed"] == 0 and out["incorrect"] == 0
    assert out["oracles_agree"] is True, out.get("oracles_disagreement")
    started = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text()
               .splitlines() if '"started"' in line]
    assert started and all(s["spark_version"] == version for s in started), started
    inject = next(e for e in out["fault_log"] if e["step"] == "inject")
    assert inject["crash_point"] == "after-sink-write" and inject["outputs_written"] > 0
    assert not inject.get("error") and not inject["commit_logged"], inject
