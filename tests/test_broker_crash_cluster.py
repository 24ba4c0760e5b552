"""broker-crash on the real cluster (3 brokers, 2 workers, one cluster the runs share): the
broker is killed, the partitions it led get other leaders, it comes back into every
in-sync set, nothing of the run is left, the run is valid evidence (the read-back proves
its completeness across the failover) and no acknowledged record is lost (replication 3,
min.insync.replicas 2, every writer at acks=all). e1 claims exactly-once: with its
transaction coordinator killed it must not duplicate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.cluster.local import ClusterConfig
from pgval.config import ExperimentConfig
from pgval.deploy.warm import WarmDeployments
from pgval.experiment import Experiment, ExperimentResult
from pgval.faults.broker import TRANSACTION_STATE, coordinator_partition
from pgval.schema import transactional_id
from tests.conftest import shared_cluster
from tests.test_faults_cluster import check_consistent, check_nothing_left, check_timeline

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmDeployments]:
    """Up before the first test snapshots the host (tests/conftest.py)."""
    with shared_cluster(tmp_path_factory.mktemp("brokers"), "broker-cluster",
                        config("a1", None)) as shared:
        yield shared


def config(pg: str, target: str | int | None) -> ExperimentConfig:
    return ExperimentConfig(
        topology="sst", pg=pg, fault="broker-crash", target=target, rate=300, resources=4,
        phase_seconds=16, warmup_seconds=4, warmup_max_seconds=15, window_ms=2000,
        watermark_ms=1000, trigger_ms=500, drain_timeout_s=150,
        cluster=ClusterConfig(brokers=3, partitions=3, workers=2))


def run(warm: WarmDeployments, tmp_path: Path, pg: str,
        target: str | int | None = None) -> ExperimentResult:
    cfg = config(pg, target)
    cfg.validate()
    result = Experiment(cfg, tmp_path / "run", db=tmp_path / "r.db",
                        deployment=warm.for_run(cfg)).run()
    check_consistent(result)
    check_timeline(result, cfg)
    check_nothing_left(tmp_path / "run")
    print(pg, target, result.summary()["guarantee"], result.validity.reasons,
          {k: v for k, v in steps(result)["inject"].items() if k not in ("before", "after")})
    return result


def steps(result: ExperimentResult) -> dict[str, dict]:
    return {e["step"]: e for e in result.fault_log}


def assert_failed_over_and_back(result: ExperimentResult) -> dict:
    s = steps(result)
    inject, remove = s["inject"], s["remove"]
    assert "error" not in inject, inject
    broker = inject["broker"]
    assert inject["broker_pid"] and inject["led_before"], inject
    assert inject["leadership_moved"] is True and inject["led_after"] == [], inject
    assert remove["restarted_pid"] != inject["broker_pid"] and remove["in_sync"] is True, remove
    assert result.validity.valid, result.validity.reasons
    assert result.evaluation.validation.unprocessed == 0  # replicated: nothing acked is lost
    assert all(result.readback[t]["complete"] for t in ("get", "post", "output"))
    assert f"kafka-broker-{broker}" == inject["target"]
    return inject


def test_the_output_leaders_broker_crashes_and_comes_back(warm: WarmDeployments,
                                                          tmp_path: Path) -> None:
    result = run(warm, tmp_path, "a1")
    inject = assert_failed_over_and_back(result)
    # The run's topics are the ones the log lists; its output led most by the one killed.
    leaders = [p["leader"] for name, parts in inject["before"].items()
               if name.endswith("output") for p in parts.values()]
    assert leaders.count(inject["broker"]) == max(leaders.count(b) for b in set(leaders))


def test_e1_with_its_transaction_coordinator_killed_stays_exactly_once(
        warm: WarmDeployments, tmp_path: Path) -> None:
    result = run(warm, tmp_path, "e1", target="coordinator")
    inject = assert_failed_over_and_back(result)
    txn = inject["before"][TRANSACTION_STATE]
    query = next(b for b in result.batches if b.get("event") == "started")["name"]
    partition = coordinator_partition(transactional_id(query), len(txn))
    coordinator = (txn.get(partition) or txn[str(partition)])["leader"]  # str: as stored
    assert inject["broker"] == coordinator, (inject["chosen"], txn)
    assert result.evaluation.validation.duplicate == 0
    assert result.summary()["guarantee"] == "exactly-once"
