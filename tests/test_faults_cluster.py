"""Every fault on a real cluster (1 broker, 2 workers, short phases): it took effect, it was
removed, nothing is left, and the validator's counts are consistent. What Spark did is
reported, not prescribed — except where a guarantee is claimed (e1 must not duplicate)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pgval.cluster.local import ClusterConfig
from pgval.config import ExperimentConfig
from pgval.experiment import Experiment, ExperimentResult
from tests.conftest import processes_mentioning, wait_until

pytestmark = pytest.mark.cluster
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="packet delay needs root "
                                "(network namespaces and iptables)")


def run(tmp_path: Path, topology: str, pg: str, fault: str,
        crash_point: str = "timed") -> ExperimentResult:
    cfg = ExperimentConfig(
        topology=topology, pg=pg, fault=fault, crash_point=crash_point, rate=300,
        resources=4, phase_seconds=16, warmup_seconds=4, window_ms=2000, watermark_ms=1000,
        trigger_ms=500,
        get_share=0.9 if topology == "mst" else 0.995, drain_timeout_s=150,
        target=None if crash_point == "during-sink-write" else 1,
        cluster=ClusterConfig(brokers=1, partitions=3, workers=2))
    result = Experiment(cfg, tmp_path / "run", db=tmp_path / "r.db").run()
    check_consistent(result)
    check_nothing_left(tmp_path / "run")
    print(fault, topology, pg, {k: result.summary()[k] for k in (
        "expected", "processed", "duplicate", "incorrect", "unprocessed", "guarantee")},
        result.evaluation.recovery, result.fault_log, result.validity.reasons)
    return result


def check_consistent(result: ExperimentResult) -> None:
    v = result.evaluation.validation
    assert v.expected > 1000
    assert v.processed + v.unprocessed == v.expected
    assert v.malformed == 0 and v.incorrect == 0  # Spark never misplaces an ID
    phases = v.phases.values()
    assert sum(p.expected for p in phases) <= v.expected
    assert sum(p.duplicate for p in phases) <= v.duplicate
    assert all(p.processed + p.unprocessed == p.expected for p in phases)


def check_nothing_left(run_dir: Path) -> None:
    """No process of the run survives; rules, holders and namespaces: tests/conftest.py."""
    wait_until(lambda: not processes_mentioning(str(run_dir)), 15, "the run's processes")


def steps(result: ExperimentResult) -> dict[str, dict]:
    return {e["step"]: e for e in result.fault_log}


@pytest.mark.parametrize("topology,pg", [("sst", "a1"), ("mst", "e1")])
def test_worker_crash(tmp_path: Path, topology: str, pg: str) -> None:
    r = run(tmp_path, topology, pg, "crash")
    s = steps(r)
    assert s["inject"]["executor_pids"], "the target worker had an executor to kill"
    assert s["inject"]["left_alive"] == []
    assert s["remove"]["restarted_pid"] and "error" not in s["remove"]
    assert s["timeouts"]["fired"].get("executor lost (driver)", 0) >= 1
    if pg == "e1":
        assert r.evaluation.validation.duplicate == 0


def test_a_worker_crash_while_its_executor_writes_duplicates_a1(tmp_path: Path) -> None:
    """crash@during-sink-write, aimed: the executor halts in the sink's producer hook with one
    of its records in Kafka and its task unfinished; Spark re-runs that task
    (TaskSetManager.executorLost), so a1 writes the record again — every time, whichever
    worker the seed named (the writer's worker dies)."""
    r = run(tmp_path, "sst", "a1", "crash", crash_point="during-sink-write")
    inject = steps(r)["inject"]
    assert "error" not in inject, inject
    assert inject["crash_point"] == "during-sink-write" and inject["batch"] is not None
    assert inject["record"] and inject["executor_id"] not in (None, "?")
    assert inject["left_alive"] == [] and "error" not in steps(r)["remove"]
    assert r.validity.valid, r.validity.reasons
    assert r.evaluation.validation.duplicate > 0
    assert r.summary()["guarantee"] == "at-least-once"


@pytest.mark.parametrize("pg", ["a1", "e1"])
def test_driver_crash_restarts_from_checkpoint(tmp_path: Path, pg: str) -> None:
    r = run(tmp_path, "sst", pg, "driver-crash")
    s = steps(r)
    assert s["inject"]["driver_pid"] and s["remove"]["query_restarted_s"] > 0
    assert r.evaluation.validation.unprocessed == 0  # Kafka is replayable: nothing is lost
    if pg == "e1":
        assert r.evaluation.validation.duplicate == 0


@needs_root
@pytest.mark.parametrize("topology", ["sst", "mst"])
def test_delay_below_timeout(tmp_path: Path, topology: str) -> None:
    r = run(tmp_path, topology, "a1", "delay-lt-timeout")
    s = steps(r)
    inj = s["inject"]
    assert inj["mechanism"] in ("netem", "nfqueue") and inj["delay_ms"] == 500
    # The handshake to the worker took at least one delayed round trip.
    assert inj["probe_connect_ms_after"] >= 400 > (inj["probe_connect_ms_before"] or 0)
    assert "removed_ms" in s["remove"]
    assert r.evaluation.validation.unprocessed == 0


@needs_root
def test_delay_above_timeout(tmp_path: Path) -> None:
    r = run(tmp_path, "sst", "a1", "delay-gt-timeout")
    s = steps(r)
    assert s["inject"]["delay_ms"] > 1000 * s["inject"]["timeout_s"]
    fired = s["timeouts"]["fired"]
    assert fired, "a delay above the time-outs must make Spark declare something lost"
    assert "removed_ms" in s["remove"]
