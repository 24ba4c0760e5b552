"""Every fault on a real cluster (1 broker, 2 workers, short phases; one warm cluster the
runs share, replaced once by one with lowered time-outs for the faults above them, as a
matrix replaces it): it took effect, it was removed, nothing is left, and the validator's counts are
consistent. What Spark did is reported, not prescribed — except where a guarantee is
claimed (e1 must not duplicate)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.config import resolve
from pgval.core.spec import ClusterSpec, RunSpec
from pgval.deploy.warm import WarmDeployments
from pgval.faults import delay
from pgval.faults.loss import NFQUEUE_LOSS
from pgval.host import netns
from pgval.host.machine import describe_machine
from pgval.run.experiment import Experiment, ExperimentResult
from tests.conftest import processes_mentioning, shared_cluster, wait_until
from tests.test_loss import our_rules

pytestmark = pytest.mark.cluster
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="packet delay needs root "
                                "(network namespaces and iptables)")


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmDeployments]:
    """One embedded cluster for the module's runs, as a warm matrix shares one (each run has
    its own topics, checkpoint and driver; a crashed worker is restarted by its fault's
    removal), up before the first test looks at what exists (its namespaces are not that
    test's leftovers). The faults above the time-outs need other daemon settings: the first
    of them (the delay) makes the warm cluster replace itself, the next (the pause) shares
    the new one; they come last."""
    with shared_cluster(tmp_path_factory.mktemp("faults"), "faults-cluster",
                        config("sst", "a1", "crash")) as shared:
        yield shared


#: The faults that act on packets in flight.
ON_PACKETS = ("delay-lt-timeout", "delay-gt-timeout", "packet-loss")


def config(topology: str, pg: str, fault: str, crash_point: str = "timed",
           **extra: object) -> RunSpec:
    return RunSpec(  # type: ignore[arg-type]
        topology=topology, pg=pg, fault=fault, crash_point=crash_point, rate=300,
        resources=4, phase_seconds=16, warmup_seconds=4, window_ms=2000, watermark_ms=1000,
        # A delay or a loss acts on the packets the triggers send: 0.5 s triggers give it
        # twice the traffic. Every other fault here is judged by its counts, at the
        # default's 1 s: half the batches, 15-23 % less CPU (docs/performance.md).
        trigger_ms=500 if fault in ON_PACKETS else 1000,
        # 2 s windows close every 2 s: the rule judges them quickly (these runs settled in
        # 12-22 s on 2 shared cores, and in CI every one reached the cap, at 10 s and at
        # 15 s before); the cap bounds the cost, and these tests judge the fault and the
        # counts, not the latency: a control phase still warming up serves them as well.
        warmup_max_seconds=6,
        get_share=0.9 if topology == "mst" else 0.995, drain_timeout_s=150,
        cluster=ClusterSpec(brokers=1, partitions=3, workers=2),
        **{"target": None if crash_point == "during-sink-write" else 1, **extra})


#: The faults whose time-outs are the daemons' own: only these may replace the warm cluster.
ABOVE_TIMEOUTS = ("delay-gt-timeout", "pause-gt-timeout")


def run(warm: WarmDeployments, tmp_path: Path, topology: str, pg: str, fault: str,
        crash_point: str = "timed", **extra: object) -> ExperimentResult:
    """One run on the module's warm cluster; a fault whose time-outs are the daemons' own
    (above the time-outs) gets a new one, as a matrix's cell does, which the next such
    fault shares."""
    cfg = resolve(config(topology, pg, fault, crash_point, **extra))
    started = warm.started
    result = Experiment(cfg, tmp_path / "run", db=tmp_path / "r.db",
                        deployment=warm.for_run(cfg)).run()
    if fault not in ABOVE_TIMEOUTS:  # these share the warm cluster, as a matrix's cells do
        assert warm.started == started, "a run that can share the warm cluster replaced it"
    if warm.started == started:
        assert result.timings["cluster_start_s"] < 5, result.timings
    check_consistent(result)
    check_timeline(result, cfg)
    with sqlite3.connect(tmp_path / "r.db") as con:  # the run names the machine it ran on
        (summary,) = con.execute("select summary from runs").fetchone()
    assert json.loads(summary)["machine"] == describe_machine()
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


def check_timeline(result: ExperimentResult, cfg: RunSpec) -> None:
    """Control starts when the warm-up ended (steady, or at its cap), at least ε after T1;
    the judged T2 and T3 are when the fault took effect and ended, never before the
    schedule's T2; recovery has a whole phase of load after T3."""
    b, warm, ph = result.bounds, result.warmup, result.phases
    # T4 three phases after control's start, or a whole phase after a late removal.
    assert b["start"] == ph.start and b["t4"] == max(ph.start + 3 * 16_000, ph.t3 + 16_000)
    assert cfg.warmup_seconds * 1000 <= ph.start - b["t1"] <= (cfg.warmup_max_seconds + 3) * 1000
    assert warm["seconds"] == (ph.start - b["t1"]) / 1000
    assert b["settled"] == (ph.start if warm["settled"] else None), warm
    assert warm["settled"] or warm["why"]
    print("warm-up", warm)
    steps = {e["step"]: e for e in result.fault_log}
    if "inject" in steps:
        assert ph.t2 == steps["inject"]["effective_ms"] >= b["t2_intended"]
        assert ph.t3 == steps["remove"]["effective_ms"] >= ph.t2


def check_nothing_left(run_dir: Path) -> None:
    """No process of the run survives; rules, holders and namespaces: tests/conftest.py."""
    wait_until(lambda: not processes_mentioning(str(run_dir)), 15, "the run's processes")


def steps(result: ExperimentResult) -> dict[str, dict]:
    return {e["step"]: e for e in result.fault_log}


def assert_worker_crashed_and_back(s: dict[str, dict]) -> None:
    """The worker's process group was killed, the driver declared the executor lost, and
    the worker was started again at T3."""
    assert s["inject"]["worker_pid"] and s["inject"]["left_alive"] == []
    assert s["remove"]["restarted_pid"] and "error" not in s["remove"]
    assert s["timeouts"]["fired"].get("executor lost (driver)", 0) >= 1


def test_worker_crash(warm: WarmDeployments, tmp_path: Path) -> None:
    """The timed worker crash (the paper's process crash) under MST e1: a stateful join
    whose state stores lived on the dead executor, a sink that must not duplicate. (SST a1
    under a worker crash is the next test, aimed at the sink's write; both topologies and
    guarantees under every crash: the example grid, experiments/grid-23.)"""
    r = run(warm, tmp_path, "mst", "e1", "crash")
    assert steps(r)["inject"]["executor_pids"], "the target worker had an executor to kill"
    assert_worker_crashed_and_back(steps(r))
    assert r.evaluation.validation.duplicate == 0


def test_a_worker_crash_while_its_executor_writes_duplicates_a1(warm: WarmDeployments,
                                                               tmp_path: Path) -> None:
    """crash@during-sink-write, aimed: the executor halts in the sink's producer hook with one
    of its records in Kafka and its task unfinished; Spark re-runs that task
    (TaskSetManager.executorLost), so a1 writes the record again — every time, whichever
    worker the seed named (the writer's worker dies). It is also the module's SST worker
    crash: killed, declared lost, started again (CI time: no timed SST crash of its own)."""
    r = run(warm, tmp_path, "sst", "a1", "crash", crash_point="during-sink-write")
    inject = steps(r)["inject"]
    assert "error" not in inject, inject
    assert inject["crash_point"] == "during-sink-write" and inject["batch"] is not None
    assert inject["record"] and inject["executor_id"] not in (None, "?")
    assert_worker_crashed_and_back(steps(r))
    assert r.validity.valid, r.validity.reasons
    assert r.evaluation.validation.duplicate > 0
    assert r.summary()["guarantee"] == "at-least-once"


def test_driver_crash_restarts_from_checkpoint_at_once(warm: WarmDeployments,
                                                       tmp_path: Path) -> None:
    """a1 under the default policy, immediate: the restart begins as soon as the kill took
    effect. The judged failure phase is the outage, from the kill to the query running
    again, and the failure cost follows it: the window closing at the kill waits for the
    restarted query, so its latency is at least the outage (less control's median and a
    window). The other policy, at-remove (a restart at the schedule's T3), under e1:
    tests/test_job_cluster.py (SST as a user's job, one run for both: CI time)."""
    r = run(warm, tmp_path, "sst", "a1", "driver-crash")
    s = steps(r)
    assert_driver_restarted(r, s)
    assert s["remove"]["actual_ms"] - s["inject"]["effective_ms"] < 2_000, s


def assert_driver_restarted(r: ExperimentResult, s: dict[str, dict]) -> None:
    """The driver was killed and its query came back from the checkpoint, nothing lost; the
    failure cost is at least the outage (less 10 s: control's median and a window)."""
    assert s["inject"]["driver_pid"] and s["remove"]["query_restarted_s"] > 0
    assert r.evaluation.validation.unprocessed == 0  # Kafka is replayable: nothing lost
    outage_s = (s["remove"]["effective_ms"] - s["inject"]["effective_ms"]) / 1000
    cost = r.summary()["failure_cost_s"]
    print("outage", outage_s, "failure cost", cost)
    assert cost >= outage_s - 10, (outage_s, cost)


def assert_delay_acts_from_its_rules(s: dict[str, dict]) -> None:
    """T2 is when the delay's rules were in place, after the schedule's T2 and before the
    probe's delayed handshake ended (which takes a whole added round trip: 67.5 s above the
    time-outs, all of it counted as control when T2 was the probe's end); T3 is when the
    rules were gone (judged by these times, check_timeline)."""
    inj, rem = s["inject"], s["remove"]
    assert inj["intended_ms"] < inj["effective_ms"] == inj["injected_ms"] < inj["done_ms"]
    assert inj["done_ms"] - inj["effective_ms"] >= 0.8 * inj["probe_connect_ms_after"]
    assert rem["effective_ms"] == rem["removed_ms"] <= rem["done_ms"]


@needs_root
def test_delay_below_timeout(warm: WarmDeployments, tmp_path: Path) -> None:
    """SST only: the delay is the worker's packet path, whatever query runs (MST under a
    fault runs in test_worker_crash; MST under the delay is in the example grid)."""
    r = run(warm, tmp_path, "sst", "a1", "delay-lt-timeout")
    s = steps(r)
    inj = s["inject"]
    assert inj["mechanism"] in ("netem", "nfqueue") and inj["delay_ms"] == 500
    # The handshake to the worker took at least one delayed round trip.
    assert inj["probe_connect_ms_after"] >= 400 > (inj["probe_connect_ms_before"] or 0)
    assert "removed_ms" in s["remove"]
    assert_delay_acts_from_its_rules(s)
    assert r.evaluation.validation.unprocessed == 0


@needs_root
def test_packet_loss(warm: WarmDeployments, tmp_path: Path) -> None:
    """packet-loss on worker 1: the run is valid, the holder dropped packets of the
    worker's link (about the share of those seen), and no holder, rule or namespace of the
    run is left (its unit checks: tests/test_loss.py)."""
    before = (set(delay.holder_processes()), set(our_rules()), set(netns.list_namespaces()))
    r = run(warm, tmp_path, "sst", "a1", "packet-loss", loss_share=0.3)
    inject, remove = steps(r)["inject"], steps(r)["remove"]
    print("packet-loss", {k: remove.get(k) for k in ("seen", "queued", "dropped",
                                                      "dropped_share", "holder")})
    assert r.validity.valid, r.validity.reasons
    assert inject["mechanism"] == NFQUEUE_LOSS and inject["share"] == 0.3
    # A merged packet is one to the kernel's counters and several to the holder, so the
    # measured share is near the asked one, not equal: not more than all, not nothing.
    assert remove["dropped"] > 0 and remove["seen"] > 0 and remove["queued"] > 0, remove
    assert 0.1 < remove["queued"] / remove["seen"] < 0.6, remove
    assert not set(delay.holder_processes()) - before[0], "a packet holder is still running"
    assert not set(our_rules()) - before[1]
    assert not set(netns.list_namespaces()) - before[2]


@needs_root
def test_delay_above_timeout(warm: WarmDeployments, tmp_path: Path) -> None:
    """Lowered time-outs are the daemons' own settings: the warm cluster is replaced by one
    with them (as a matrix replaces it), which the pause above the time-outs shares."""
    r = run(warm, tmp_path, "sst", "a1", "delay-gt-timeout")
    assert warm.started == 2
    s = steps(r)
    assert s["inject"]["delay_ms"] > 1000 * s["inject"]["timeout_s"]
    fired = s["timeouts"]["fired"]
    assert fired, "a delay above the time-outs must make Spark declare something lost"
    assert_delay_acts_from_its_rules(s)


def test_a_pause_above_the_time_outs_loses_the_executor(warm: WarmDeployments,
                                                        tmp_path: Path) -> None:
    """SIGSTOP took effect (state T), the driver declared the paused executor lost,
    nothing is left stopped or running, the run is valid and nothing is lost; on the
    cluster with lowered time-outs the delay above them started. What became of the
    paused executor is in the log, each pid in exactly one of: killed while stopped, ended
    on resume, running after resume (docs/faults.md, "Pauses"). The pause below the
    time-outs runs in a schedule (tests/test_faults_beyond_cluster.py)."""
    r = run(warm, tmp_path, "sst", "a1", "pause-gt-timeout")
    assert warm.started == 2
    s = steps(r)
    assert s["inject"]["stopped"], s["inject"]
    assert s["timeouts"]["fired"].get("executor lost (driver)"), s["timeouts"]
    fates = [s["remove"][k] for k in ("killed_while_stopped", "ended_on_resume",
                                      "running_after_resume")]
    assert sorted(p for fate in fates for p in fate) == sorted(s["inject"]["stopped"]), fates
    assert r.validity.valid, r.validity.reasons
    assert r.evaluation.validation.unprocessed == 0  # Kafka replays what it lost
