"""The OIR search's policy (doubling, halving, bisection to a stated precision), its
stored result per machine, and `matrix --rate oir --rate-fraction` (no cluster)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.campaigns.oir import (
    MIN_RATE,
    OirResult,
    Trial,
    bracket,
    machine_id,
    next_rate,
    save_oir,
    stored_elsewhere,
    stored_oir,
)
from pgval.cli import main
from pgval.core.spec import ClusterSpec, RunSpec


def _trial(rate: float, passed: bool) -> Trial:
    return Trial(rate=rate, passed=passed, reason="", reliability=1.0 if passed else 0.9,
                 achieved_rate=rate, latency_first_s=1.0, latency_last_s=1.0, run_id=None)


def _search(threshold: float, start: float, precision: float, max_rate: float = 200_000.0,
            max_trials: int = 60) -> list[Trial]:
    """The policy against a job that keeps up below ``threshold`` and not from it on."""
    trials: list[Trial] = []
    while len(trials) < max_trials:
        rate = next_rate(trials, start, max_rate, precision)
        if rate is None:
            break
        trials.append(_trial(rate, rate < threshold))
    return trials


@settings(max_examples=300, deadline=None)
@given(threshold=st.floats(MIN_RATE * 2, 150_000.0), start=st.sampled_from([500.0, 1000.0,
                                                                              4000.0]),
       precision=st.sampled_from([0.02, 0.05, 0.1, 0.25]))
def test_the_search_brackets_the_threshold_within_the_precision(
        threshold: float, start: float, precision: float) -> None:
    trials = _search(threshold, start, precision)
    lo, hi = bracket(trials)
    assert lo is not None and hi is not None
    assert lo < threshold <= hi
    assert (hi - lo) / hi <= precision
    # Doubling or halving to the bracket, then one bisection step per halving of its width.
    bound = abs(math.log2(threshold / start)) + 2 + math.log2(1 / precision) + 2
    assert len(trials) <= bound
    res = OirResult("sst", "a1", lo, trials, upper=hi, precision=precision)
    assert res.bracketed and f"{lo:,.0f} passed" in res.describe()


def test_no_failure_up_to_the_maximum_is_a_lower_bound() -> None:
    trials = _search(threshold=math.inf, start=1000.0, precision=0.1, max_rate=12_000.0)
    assert [t.rate for t in trials] == [1000.0, 2000.0, 4000.0, 8000.0, 12_000.0]
    lo, hi = bracket(trials)
    res = OirResult("sst", "a1", lo, trials, upper=hi)
    assert (lo, hi) == (12_000.0, None) and not res.bracketed
    assert res.describe().startswith("at least 12,000 events/s")


def test_a_job_that_always_fails_stops_below_the_minimum_rate() -> None:
    trials = _search(threshold=0.0, start=1000.0, precision=0.1)
    assert all(not t.passed for t in trials) and min(t.rate for t in trials) >= MIN_RATE
    assert next_rate(trials, 1000.0, 1e6, 0.1) is None
    res = OirResult("sst", "a1", None, trials)
    assert res.describe().startswith("below ")


def test_a_noisy_pass_above_a_failure_does_not_raise_the_bracket() -> None:
    trials = [_trial(1000, True), _trial(2000, False), _trial(1500, True), _trial(3000, True)]
    assert bracket(trials) == (1500, 2000)
    assert next_rate(trials, 1000, 1e6, 0.1) == 1750


def test_the_oir_is_stored_per_machine(tmp_path: Path) -> None:
    db = tmp_path / "oir.db"
    assert stored_oir(db, "sst", "a1") is None and not db.exists()  # reading creates nothing
    here = OirResult("sst", "a1", 8000.0, [_trial(8000, True), _trial(9000, False)],
                     upper=9000.0, precision=0.2)
    save_oir(db, here)
    save_oir(db, OirResult("sst", "a1", 99_000.0, [], upper=None,
                           machine="elsewhere (64 cores)"))
    assert here.machine == machine_id()
    mine = stored_oir(db, "sst", "a1")  # not the other machine's, though newer
    assert mine is not None and (mine.rate, mine.upper, mine.bracketed) == (8000, 9000, True)
    assert "9,000 failed" in mine.describe()
    other = stored_oir(db, "sst", "a1", machine="elsewhere (64 cores)")
    assert other is not None and other.rate == 99_000.0 and not other.bracketed
    assert "a lower bound only" in other.describe()
    assert stored_oir(db, "mst", "a1") is None
    from pgval.store.results import ResultsStore

    row = next(iter(ResultsStore(db).db.query("select * from oir order by rowid limit 1")))
    assert (row["rate"], row["upper"], row["precision"], row["bracketed"]) == (8000, 9000,
                                                                             0.2, 1)


def test_m1_uses_a1s_oir_unless_its_own_was_measured(tmp_path: Path) -> None:
    db = tmp_path / "oir.db"
    save_oir(db, OirResult("sst", "a1", 8000.0, [], upper=9000.0, precision=0.2))
    stand_in = stored_oir(db, "sst", "m1")
    assert stand_in is not None and stand_in.rate == 8000 and stand_in.measured_as
    assert "measured as a1" in stand_in.describe()
    assert stored_oir(db, "sst", "e1") is None  # e1 has its own sink: no stand-in
    save_oir(db, OirResult("sst", "m1", 7000.0, [], upper=8000.0, precision=0.2))
    own = stored_oir(db, "sst", "m1")
    assert own is not None and own.rate == 7000 and own.measured_as is None


def test_an_oir_holds_for_the_run_shape_it_was_measured_with(tmp_path: Path) -> None:

    db = tmp_path / "oir.db"
    two = RunSpec(cluster=ClusterSpec(brokers=1, workers=2)).shape().oir()
    three = RunSpec(cluster=ClusterSpec(brokers=1, workers=3)).shape().oir()
    longer = RunSpec(phase_seconds=300, cluster=ClusterSpec(brokers=1,
                                                                                 workers=2)).shape().oir()
    assert two == longer  # the phase length judges a trial; it is not part of the shape
    save_oir(db, OirResult("sst", "a1", 8000.0, [], upper=9000.0, shape=two))
    assert stored_oir(db, "sst", "a1", shape=two).rate == 8000
    assert stored_oir(db, "sst", "a1", shape=three) is None
    assert stored_oir(db, "sst", "m1", shape=three) is None  # the stand-in's shape counts too
    assert stored_elsewhere(db, "sst", "m1", three) == "workers 2 (this run: 3)"
    assert stored_elsewhere(db, "sst", "a1", two) is None
    assert stored_oir(db, "sst", "a1").shape == two  # no shape asked: the newest of any
    save_oir(db, OirResult("sst", "a1", 5000.0, [], upper=6000.0))  # shape not recorded
    assert stored_oir(db, "sst", "a1", shape=three).rate == 5000  # counts for any shape



def test_a_shape_compares_effective_values_and_only_what_was_recorded(tmp_path: Path) -> None:
    """No --shuffle-partitions is one per Kafka partition, so an explicit equal value is the
    same shape; a field added to the shape later is not held against an older row; an
    external cluster is told apart by its addresses."""
    cluster = ClusterSpec(brokers=1, workers=2, partitions=3)
    default = RunSpec(cluster=cluster).shape().oir()
    assert default == RunSpec(shuffle_partitions=3, cluster=cluster).shape().oir()
    assert default != RunSpec(shuffle_partitions=6, cluster=cluster).shape().oir()
    db = tmp_path / "r.db"
    older = {k: v for k, v in default.items() if k not in ("spark_conf", "master")}
    save_oir(db, OirResult("sst", "a1", 8000.0, [], upper=9000.0, shape=older))
    assert stored_oir(db, "sst", "a1", shape=default).rate == 8000
    theirs = RunSpec(deploy="external", bootstrap="kafka:9092",
                                        master="spark://m:7077", cluster=cluster).shape().oir()
    assert stored_oir(db, "sst", "a1", shape=theirs) is None
    assert stored_elsewhere(db, "sst", "a1", theirs) == (
        "bootstrap None (this run: kafka:9092), deploy local (this run: external)")

@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def test_matrix_at_a_fraction_of_the_oir_is_refused_without_one(cwd: Path) -> None:
    res = CliRunner().invoke(main, ["matrix", "--topologies", "sst", "--pgs", "a1",
                                    "--faults", "none", "--rate", "oir", "--db", "r.db"])
    assert res.exit_code == 2 and "no optimum ingestion rate is stored for sst a1 on this " \
        f"machine ({machine_id()})" in res.output, res.output
    res = CliRunner().invoke(main, ["matrix", "--rate", "2000", "--rate-fraction", "0.5"])
    assert res.exit_code == 2 and "--rate-fraction applies to --rate oir only" in res.output
    assert os.listdir(cwd) == []  # neither created a database


def test_matrix_refuses_an_oir_measured_on_another_cluster_shape(cwd: Path) -> None:

    shape = RunSpec(cluster=ClusterSpec(brokers=1, workers=2)).shape().oir()
    save_oir(cwd / "r.db", OirResult("sst", "a1", 8000.0, [], upper=9000.0, shape=shape))
    args = ["matrix", "--topologies", "sst", "--pgs", "a1", "--faults", "none", "--rate", "oir",
            "--db", "r.db", "--brokers", "1", "--workers", "3", "--runs-dir", "runs"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "measured with another run shape: workers 2 (this run: 3)" in res.output
    assert not (cwd / "runs").exists()  # refused before anything ran
