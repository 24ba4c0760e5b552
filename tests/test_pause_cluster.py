"""The pauses on the real cluster (1 broker, 2 workers): SIGSTOP took effect (state T),
SIGCONT at T3 left nothing stopped, nothing of the run is left and the run is valid
evidence; below the time-outs no executor is declared lost and nothing is lost, above
them the driver declares the paused executor lost. What Spark then does with the paused
JVM (killed by its worker while stopped, or resumed and still writing: a zombie write) is
reported, not prescribed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.cluster.local import ClusterConfig
from pgval.config import ExperimentConfig
from pgval.deploy.warm import WarmDeployments
from pgval.experiment import Experiment, ExperimentResult
from tests.conftest import shared_cluster
from tests.test_faults_cluster import check_consistent, check_nothing_left, check_timeline

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmDeployments]:
    """Up before the first test snapshots the host (tests/conftest.py); the pause above
    the time-outs needs the daemons' lowered time-outs: its test stops this cluster first."""
    with shared_cluster(tmp_path_factory.mktemp("pauses"), "pause-cluster",
                        config("pause-lt-timeout", 1)) as shared:
        yield shared


def config(fault: str, target: int | str | None) -> ExperimentConfig:
    return ExperimentConfig(
        topology="sst", pg="a1", fault=fault, target=target, rate=300, resources=4,
        phase_seconds=16, warmup_seconds=4, warmup_max_seconds=15, window_ms=2000,
        watermark_ms=1000, trigger_ms=500, drain_timeout_s=150,
        cluster=ClusterConfig(brokers=1, partitions=3, workers=2))


def run(warm: WarmDeployments | None, tmp_path: Path, fault: str,
        target: int | str | None = None) -> ExperimentResult:
    cfg = config(fault, target)
    cfg.validate()
    result = Experiment(cfg, tmp_path / "run", db=tmp_path / "r.db",
                        deployment=warm.for_run(cfg) if warm is not None else None).run()
    check_consistent(result)
    check_timeline(result, cfg)
    check_nothing_left(tmp_path / "run")
    s = {e["step"]: e for e in result.fault_log}
    print(fault, target, result.summary()["guarantee"], result.validity.reasons,
          s["inject"], s["remove"], s["timeouts"].get("fired"))
    return result


def steps(result: ExperimentResult) -> dict[str, dict]:
    return {e["step"]: e for e in result.fault_log}


def test_a_pause_below_the_time_outs_only_slows_the_query(warm: WarmDeployments,
                                                         tmp_path: Path) -> None:
    result = run(warm, tmp_path, "pause-lt-timeout", target=1)
    s = steps(result)
    assert s["inject"]["stopped"] and s["inject"]["stopped"] == s["inject"]["pids"]
    assert s["remove"]["still_stopped"] == [] and s["remove"]["resumed"]
    assert result.validity.valid, result.validity.reasons
    assert result.evaluation.validation.unprocessed == 0


def test_a_pause_above_the_time_outs_loses_the_executor(warm: WarmDeployments,
                                                        tmp_path: Path) -> None:
    warm.close()  # the lowered time-outs are the daemons' own: a cluster of its own
    result = run(None, tmp_path, "pause-gt-timeout", target=1)
    s = steps(result)
    assert s["inject"]["stopped"], s["inject"]
    assert s["timeouts"]["fired"].get("executor lost (driver)"), s["timeouts"]
    assert result.validity.valid, result.validity.reasons
    assert result.evaluation.validation.unprocessed == 0  # Kafka replays what it lost
