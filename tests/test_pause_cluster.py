"""The pause above the time-outs on the real cluster (1 broker, 2 workers, its own: the
lowered time-outs are the daemons'): SIGSTOP took effect (state T), the driver declared the
paused executor lost, nothing is left stopped or running, the run is valid evidence and
nothing is lost. What Spark does with the paused JVM (killed by its worker while stopped,
or resumed: a possible zombie) is in the log. The pause below the time-outs runs in a
schedule with a broker crash and a partition (tests/test_faults_beyond_cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgval.config import resolve
from pgval.core.spec import ClusterSpec, RunSpec
from pgval.run.experiment import Experiment, ExperimentResult
from tests.test_faults_cluster import check_consistent, check_nothing_left, check_timeline

pytestmark = pytest.mark.cluster


def config(fault: str, target: int | str | None) -> RunSpec:
    return RunSpec(
        topology="sst", pg="a1", fault=fault, target=target, rate=300, resources=4,
        phase_seconds=16, warmup_seconds=4, warmup_max_seconds=6, window_ms=2000,
        watermark_ms=1000, trigger_ms=500, drain_timeout_s=150,
        cluster=ClusterSpec(brokers=1, partitions=3, workers=2))


def run(tmp_path: Path, fault: str, target: int | str | None = None) -> ExperimentResult:
    cfg = resolve(config(fault, target))
    result = Experiment(cfg, tmp_path / "run", db=tmp_path / "r.db").run()
    check_consistent(result)
    check_timeline(result, cfg)
    check_nothing_left(tmp_path / "run")
    s = {e["step"]: e for e in result.fault_log}
    print(fault, target, result.summary()["guarantee"], result.validity.reasons,
          s["inject"], s["remove"], s["timeouts"].get("fired"))
    return result


def steps(result: ExperimentResult) -> dict[str, dict]:
    return {e["step"]: e for e in result.fault_log}


def test_a_pause_above_the_time_outs_loses_the_executor(tmp_path: Path) -> None:
    """The lowered time-outs are the daemons' own: a cluster of its own. What became of
    the paused executor is in the log, each pid in exactly one of: killed while stopped,
    ended on resume, running after resume (docs/faults.md, "Pauses")."""
    result = run(tmp_path, "pause-gt-timeout", target=1)
    s = steps(result)
    assert s["inject"]["stopped"], s["inject"]
    assert s["timeouts"]["fired"].get("executor lost (driver)"), s["timeouts"]
    fates = [s["remove"][k] for k in ("killed_while_stopped", "ended_on_resume",
                                      "running_after_resume")]
    assert sorted(p for fate in fates for p in fate) == sorted(s["inject"]["stopped"]), fates
    assert result.validity.valid, result.validity.reasons
    assert result.evaluation.validation.unprocessed == 0  # Kafka replays what it lost
