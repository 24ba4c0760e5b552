"""broker-crash without a cluster: the coordinator's partition is Kafka's, the target rule,
the rule that judges the fault's log, and the settings that are refused. On the real
cluster: tests/test_broker_crash_cluster.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgval.config import resolve
from pgval.core.errors import PgvalError
from pgval.core.schema import transactional_id
from pgval.core.spec import ClusterSpec, RunSpec
from pgval.faults.broker_crash import (
    BROKER_CRASH_NEMESIS,
    BROKER_CRASH_WHERE,
    TRANSACTION_STATE,
    BrokerCrash,
    choose_broker,
    coordinator_partition,
    java_string_hash,
    led_by,
    out_of_isr,
)
from pgval.faults.took_effect import fault_reasons
from pgval.kafka.admin import min_insync, replication_for


def java_hash_reference(text: str) -> int:
    """``s[0]*31^(n-1) + … + s[n-1]`` in Java's int arithmetic, written as the JDK's docs
    state it (a second derivation: powers, not Horner's rule)."""
    units = [int.from_bytes(text.encode("utf-16-be")[i:i + 2], "big")
             for i in range(0, 2 * len(text.encode("utf-16-be")) // 2, 2)]
    n = len(units)
    total = sum(u * pow(31, n - 1 - i, 1 << 32) for i, u in enumerate(units)) % (1 << 32)
    return total - (1 << 32) if total >= 1 << 31 else total


def test_java_string_hash_matches_the_jdk_on_known_values() -> None:
    # Values any JVM prints for "…".hashCode().
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello, World") == -505841268
    # The one string whose hash is Integer.MIN_VALUE: Kafka's Utils.abs makes it 0.
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert coordinator_partition("polygenelubricants", 50) == 0


@given(st.text(max_size=40))
def test_java_string_hash_agrees_with_the_definition(text: str) -> None:
    assert java_string_hash(text) == java_hash_reference(text)


@given(st.text(min_size=1, max_size=40), st.integers(1, 200))
def test_the_coordinator_partition_is_in_range(text: str, partitions: int) -> None:
    assert 0 <= coordinator_partition(text, partitions) < partitions


def state(leader: int, replicas: list[int], isr: list[int]) -> dict[str, Any]:
    return {"leader": leader, "replicas": replicas, "isr": isr}


STATES = {
    "out": {0: state(0, [0, 1, 2], [0, 1, 2]), 1: state(1, [1, 2, 0], [1, 2, 0]),
            2: state(1, [2, 0, 1], [1, 0])},
    TRANSACTION_STATE: {0: state(2, [2, 0, 1], [2, 0, 1]), 1: state(0, [0, 1, 2], [0, 1, 2]),
                        2: state(1, [1, 2, 0], [1, 2, 0])},
}


def test_the_target_is_the_output_leader_the_coordinator_or_the_id() -> None:
    assert choose_broker(STATES, "leader", "out", None, [0, 1, 2])[0] == 1  # leads 2 of 3
    tid = transactional_id("pgval-ab12cd34-sst-e1")
    broker, why = choose_broker(STATES, "coordinator", "out", tid, [0, 1, 2])
    partition = coordinator_partition(tid, 3)
    assert broker == STATES[TRANSACTION_STATE][partition]["leader"]
    assert f"{TRANSACTION_STATE}/{partition}" in why
    assert choose_broker(STATES, 2, "out", None, [0, 1, 2])[0] == 2
    with pytest.raises(ValueError, match="does not exist yet"):
        choose_broker({"out": STATES["out"]}, "coordinator", "out", tid, [0, 1, 2])


def test_leaders_and_in_sync_sets_are_read_per_partition() -> None:
    assert led_by(STATES, 1) == ["out/1", "out/2", f"{TRANSACTION_STATE}/2"]
    assert out_of_isr(STATES, 2) == ["out/2"]
    assert out_of_isr(STATES, 0) == []


def reasons(inject: dict[str, Any], remove: dict[str, Any] | None = None) -> list[str]:
    entries = [{"step": "inject", "mechanism": BrokerCrash.mechanisms[0], **inject}]
    if remove is not None:
        entries.append({"step": "remove", **remove})
    return [r.text for r in fault_reasons("broker-crash", entries)]


def test_the_rule_wants_a_kill_a_new_leader_and_a_broker_back_in_sync() -> None:
    good = {"broker": 1, "broker_pid": 42, "led_before": ["out/1"], "leadership_moved": True}
    assert reasons(good, {"in_sync": True}) == []
    assert reasons({**good, "broker_pid": None}, {"in_sync": True}) == [
        "broker-crash: no Kafka broker was killed"]
    assert "the broker-crash fault was never removed" in reasons(good)
    stuck = {**good, "leadership_moved": False, "led_after": ["out/1"]}
    assert reasons(stuck, {"in_sync": True}) == [
        "broker-crash: the partitions the killed broker led got no other leader: out/1"]
    assert reasons(good, {"in_sync": False, "out_of_isr": ["out/2"]}) == [
        "broker-crash: the restarted broker did not catch up: out of the in-sync replicas "
        "of out/2"]
    # Since the metadata's broker list is logged: the killed broker must leave it (the
    # only evidence of a crash through a user's nemesis, which pgval cannot see).
    nemesis = {"broker": 1, "killed": True, "led_before": [], "deregistered": False}
    assert reasons(nemesis, {"in_sync": True}) == [
        "broker-crash: Kafka broker 1 stayed in the cluster's broker list: no evidence it "
        "went down"]
    assert reasons({**nemesis, "deregistered": True}, {"in_sync": True}) == []
    assert reasons({**nemesis, "no_metadata": True, "deregistered": None},
                   {"in_sync": True}) == [
        "broker-crash: Kafka answered no metadata request after the kill: no evidence that "
        "leadership moved"]
    assert reasons({**nemesis, "deregistered": True},
                   {"broker": 1, "registered": False, "in_sync": True}) == [
        "broker-crash: Kafka broker 1 did not register with the cluster again after the "
        "remove command"]
    # A broker that led nothing has nothing to move; a teardown removal is not judged.
    assert reasons({**good, "led_before": [], "leadership_moved": False},
                   {"skipped": "teardown stops the cluster"}) == []


def test_replicas_and_min_insync_follow_the_brokers() -> None:
    assert [replication_for(b) for b in (1, 2, 3, 5)] == [1, 2, 3, 3]
    assert [min_insync(replication_for(b)) for b in (1, 2, 3, 5)] == [1, 1, 2, 2]


def config(**kw: Any) -> RunSpec:
    brokers = kw.pop("brokers", 3)
    return RunSpec(fault="broker-crash", cluster=ClusterSpec(brokers=brokers), **kw)


@pytest.mark.parametrize(("kw", "sentence"), [
    ({"brokers": 1}, "--fault broker-crash needs --brokers 2 or more"),
    ({"target": 3}, "--target must be a broker id from 0 to 2"),
    ({"target": "coordinator", "pg": "a1"}, "--target coordinator is the transaction "
                                           "coordinator of the e1 sink"),
    ({"target": "elsewhere"}, "--target elsewhere: a worker index; with --fault "
                              "broker-crash a broker id, leader or coordinator"),
    ({"deploy": "compose"}, BROKER_CRASH_WHERE),
    ({"deploy": "external", "bootstrap": "k:9092", "master": "spark://m:7077"},
     BROKER_CRASH_NEMESIS),
    ({"running_cluster": "/x", "target": -1}, "--target must be a broker id (0 or more)"),
])
def test_a_broker_crash_that_cannot_run_is_one_sentence(kw: dict[str, Any],
                                                        sentence: str) -> None:
    with pytest.raises(PgvalError) as err:
        resolve(config(**kw))
    assert str(err.value).startswith(sentence), str(err.value)


def test_a_cluster_pgval_did_not_start_is_counted_when_the_run_starts() -> None:
    """--cluster and external: the flags say nothing of their brokers (the deployment
    counts them: tests/test_deploy_cluster.py); external needs the nemesis."""
    resolve(config(running_cluster="/x", brokers=1, target=5))
    resolve(config(deploy="external", bootstrap="k:9092", master="spark://m:7077",
                   nemesis_inject="stop {broker}", nemesis_remove="start {broker}"))


def test_a_word_target_is_broker_crash_only_and_numbers_stay_numbers() -> None:
    resolve(config(target="coordinator", pg="e1"))
    resolve(config(target=2))
    with pytest.raises(PgvalError, match="a worker index; with --fault"):
        resolve({"fault": "crash", "target": "leader"})
    assert RunSpec(target="1").target == 1  # a stored "1" reads back as 1
    assert resolve(config()).restart_policy == "at-remove"


def test_a_grid_checks_a_target_word_per_cell() -> None:
    """`pgval matrix --faults broker-crash --target coordinator`: the base config (no fault
    yet) takes the word; each cell is checked with its fault."""
    from pgval.campaigns.matrix import cells, plan

    base = resolve({"target": "coordinator", "topology": "sst"}, fault_axis=True)
    left_out: list[str] = []
    grid = plan(base, cells(["sst"], ["e1", "a1"], ["broker-crash"], 1),
                lambda cell, why: left_out.append(why))
    assert [c.pg for c in grid] == ["e1"] and "coordinator" in left_out[0]
    with pytest.raises(PgvalError, match="--target coordinator"):
        plan(base, cells(["sst"], ["e1"], ["pause-lt-timeout"], 1), lambda c, w: None)


def test_a_fault_log_with_partition_keys_prints_as_json(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """`pgval validate --fault broker-crash --json`: the metadata snapshots are keyed by
    partition number, which orjson refused (found by tests/test_deploy_cluster.py)."""
    import json

    from pgval.cli.common import print_json

    print_json({"fault_log": [{"step": "inject", "before": STATES}]})
    out = json.loads(capsysbinary.readouterr().out)
    assert out["fault_log"][0]["before"]["out"]["2"]["isr"] == [1, 0]
