"""`pgval validate` end to end on the real embedded cluster (1 broker, 1 worker, short phases)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgval.config import ExperimentConfig
from pgval.experiment import Experiment
from pgval.runtime.cluster import ClusterConfig
from pgval.store import ResultsStore
from tests.conftest import processes_mentioning, wait_until

pytestmark = pytest.mark.cluster


def small_config(topology: str, pg: str) -> ExperimentConfig:
    # A control phase without outputs makes the run unknown (it measured nothing). On 2
    # shared cores MST's outputs come 10-17 s after their inputs (two stateful operators,
    # each waiting for the watermark), measured with spark.authenticate on and off alike
    # (4 runs: control empty in one of each). So MST gets a 10 s warm-up and 9 s phases:
    # the first outputs land inside control; SST (5-8 s) keeps 8 s and 6 s.
    mst = topology == "mst"
    return ExperimentConfig(
        topology=topology, pg=pg, rate=400, resources=4, phase_seconds=9 if mst else 6,
        warmup_seconds=10 if mst else 8,
        window_ms=2000, watermark_ms=1000, trigger_ms=500,
        # MST needs POSTs in most windows to have outputs at all: raise their share.
        get_share=0.9 if topology == "mst" else 0.995,
        cluster=ClusterConfig(brokers=1, partitions=3, workers=1))


def assert_nothing_left(run_dir: Path) -> None:
    """No process of the run survives (command line or working directory under run_dir);
    namespaces, links, rules and holders are checked for every cluster test by
    tests/conftest.py."""
    try:
        wait_until(lambda: not processes_mentioning(str(run_dir)), 15, "the run's processes")
    except AssertionError:
        raise AssertionError(f"still running: {processes_mentioning(str(run_dir))}") from None
    assert not (run_dir / "state.json").exists()


CONTRACT = ("expected", "processed", "duplicate", "incorrect", "unprocessed", "malformed",
            "reliability", "guarantee", "phases")


@pytest.mark.parametrize("topology,pg", [("sst", "a1"), ("sst", "e1"), ("mst", "a1"),
                                         ("mst", "e1")])
def test_no_fault_is_exactly_once(tmp_path: Path, topology: str, pg: str) -> None:
    run_dir = tmp_path / "run"
    db = tmp_path / "results.db"
    result = Experiment(small_config(topology, pg), run_dir, db=db).run()
    v = result.evaluation.validation
    assert v.expected > 500
    assert (v.unprocessed, v.duplicate, v.incorrect, v.malformed) == (0, 0, 0, 0), \
        result.summary()
    assert v.reliability == 1.0 and v.guarantee == "exactly-once"
    assert v.correctness == 1.0 and v.missing_outputs == 0
    assert result.generator["failed"] == 0
    # The run proved itself: complete read-back that reconciles with the generator, a drain
    # that ended because the query caught up (in seconds, not at its time-out).
    assert result.validity.valid, result.validity.reasons
    assert all(result.readback[t]["complete"] for t in ("get", "post", "output"))
    inputs = result.readback["inputs"]
    assert inputs["ok"] and inputs["read"] == inputs["delivered"] + inputs["control"]
    assert result.timings["drain_timed_out"] == 0.0 and result.timings["drain_s"] < 30
    # Every phase saw inputs; the store has the run, its phases and the batch progress.
    assert all(result.evaluation.validation.phases[p].expected > 0
               for p in ("control", "failure", "recovery"))
    store = ResultsStore(db)
    (run,) = store.runs()
    assert run["status"] == "complete" and run["guarantee"] == "exactly-once"
    assert run["valid"] == 1 and json.loads(run["validity_reasons"]) == []
    assert store.db["batches"].count > 3
    # The evidence is kept, the machinery is not.
    assert (run_dir / "evidence" / "output.parquet").exists()
    assert not list((run_dir / "kafka").glob("broker-*/data"))
    assert not (run_dir / "checkpoint").exists()
    assert_nothing_left(run_dir)


def test_recheck_and_export_of_a_real_run(tmp_path: Path) -> None:
    """Re-checking a stored real run gives what validate stored; its export, under
    `pgval check`, the same counts."""
    run_dir = tmp_path / "run"
    db = tmp_path / "results.db"
    cfg = small_config("mst", "a1")
    result = Experiment(cfg, run_dir, db=db).run()
    stored = json.loads(ResultsStore(db).runs()[0]["summary"])
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "recheck", str(result.run_id),
                           "--db", str(db), "--json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads(proc.stdout)
    for key in (*CONTRACT, "valid", "validity_reasons", "latency", "reliable_throughput",
                "witnesses", "recovery", "unprocessed_causes", "outputs", "correctness"):
        assert again[key] == stored[key], key
    out = tmp_path / "export"
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "export", str(run_dir),
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads((out / "run.json").read_text())
    assert info["topology"] == "mst" and info["window_ms"] == cfg.window_ms
    start, t2, t3 = info["phases"]
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "check", "--topology", "mst",
                           "--inputs", str(out / "inputs.jsonl"), "--outputs",
                           str(out / "outputs.jsonl"), "--window-ms", str(cfg.window_ms),
                           "--phases", f"{start},{t2},{t3}", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    checked = json.loads(proc.stdout)
    assert {k: checked[k] for k in CONTRACT} == {k: again[k] for k in CONTRACT}


def test_cli_json_and_cleanup(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pgval.cli", "validate", "--topology", "sst", "--brokers", "1",
         "--workers", "1", "--phase-seconds", "4", "--warmup-seconds", "4", "--rate", "200",
         "--window-ms", "2000", "--watermark-ms", "1000", "--trigger-ms", "500",
         "--run-dir", str(run_dir), "--db", str(tmp_path / "r.db"), "--json"],
        capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    for key in ("expected", "processed", "duplicate", "incorrect", "unprocessed", "malformed",
                "reliability", "guarantee", "phases", "timings"):
        assert key in out
    assert out["guarantee"] == "exactly-once"
    assert set(out["phases"]) == {"control", "failure", "recovery"}
    assert_nothing_left(run_dir)


def test_missing_java_is_one_plain_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)
    proc = subprocess.run(
        [sys.executable, "-m", "pgval.cli", "validate", "--topology", "sst", "--brokers", "1",
         "--workers", "1", "--run-dir", str(tmp_path / "run"), "--db", str(tmp_path / "r.db"),
         "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1
    assert "Java" in proc.stderr and "Traceback" not in proc.stderr
    assert_nothing_left(tmp_path / "run")
