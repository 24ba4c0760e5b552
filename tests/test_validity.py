"""Validity reasons: each way a run can fail to be evidence, constructed."""

from __future__ import annotations

import pytest

from pgval.checker.evaluate import evaluate
from pgval.checker.result import Reason, Result, reasons_from_records
from pgval.checker.validity import (
    Validity,
    evaluation_reasons,
    generator_reasons,
    readback_reasons,
    reconcile_inputs,
)
from pgval.faults.took_effect import fault_reasons
from pgval.records.parse import ResourceTable
from pgval.records.phases import Phases
from tests.strategies import to_inputs, to_outputs


def test_reconcile_inputs_counts_every_mismatch() -> None:
    info, result = reconcile_inputs(read=110, end_offsets_total=110, delivered=100,
                                    control=10, generator_clean=True)
    assert info["ok"] and result.valid and result.status == "valid"
    _, result = reconcile_inputs(105, 110, 100, 10, True)
    assert len(result.reasons) == 2  # short of the end offsets, and of delivered + control
    assert result.kinds() == {"reconcile"} and result.status == "unknown"
    _, result = reconcile_inputs(111, 111, 100, 10, True)
    assert result.reasons and "more than" in result.texts[0]
    # Unacknowledged sends may or may not be in Kafka: more is then not a reconciliation error
    # (the generator reason already makes the run unknown).
    _, result = reconcile_inputs(111, 111, 100, 10, False)
    assert result.valid


def test_readback_reasons_name_the_topic_and_why() -> None:
    reasons = readback_reasons({
        "get": {"complete": True},
        "output": {"complete": False, "problems": ["read time-out after 120 s",
                                                  "short partitions: 2 at 5 of 9"]}})
    assert reasons == Result((Reason("readback", "read-back of topic output incomplete: read "
                                     "time-out after 120 s; short partitions: 2 at 5 of 9"),))


def test_generator_reasons() -> None:
    assert generator_reasons({"failed": 0, "undelivered": 0}) == Result()
    failed = generator_reasons({"failed": 2, "undelivered": 3, "errors": ["boom"]})
    assert len(failed.reasons) == 3 and failed.kinds() == {"generator"}


def fault_texts(fault: str, log: list[dict[str, object]]) -> list[str]:
    """The sentences of ``fault_reasons``, each of kind ``fault``."""
    reasons = fault_reasons(fault, log)
    assert all(r.kind == "fault" for r in reasons), reasons
    return [r.text for r in reasons]


def test_fault_reasons_need_evidence() -> None:
    assert fault_texts("none", []) == []
    assert fault_texts("crash", []) == ["the crash fault was never injected"]
    ok_crash = [{"step": "inject", "worker_pid": 5, "left_alive": []}, {"step": "remove"},
                {"step": "timeouts", "fired": {"executor lost (driver)": 1}}]
    assert fault_texts("crash", ok_crash) == []
    no_loss = [*ok_crash[:2], {"step": "timeouts", "fired": {}}]
    assert fault_texts("crash", no_loss) == ["crash: the driver never reported an executor lost"]
    survived = [{"step": "inject", "worker_pid": 5, "left_alive": [7]}, {"step": "remove"}]
    assert "survived" in fault_texts("crash", survived)[0]
    failed_removal = [{"step": "inject", "driver_pid": 3}, {"step": "remove", "error": "x"}]
    assert fault_texts("driver-crash", failed_removal) == ["removing driver-crash failed: x"]
    delayed = [{"step": "inject", "delay_ms": 500, "probe_connect_ms_before": 0.2,
                "probe_connect_ms_after": 1000.8}, {"step": "remove"},
               {"step": "timeouts", "fired": {}}]
    assert fault_texts("delay-lt-timeout", delayed) == []
    not_delayed = [{"step": "inject", "delay_ms": 500, "probe_connect_ms_before": 0.2,
                    "probe_connect_ms_after": 0.3}, {"step": "remove"}, delayed[2]]
    assert fault_texts("delay-lt-timeout", not_delayed) == [
        "delay-lt-timeout: the probe saw no delay after injection"]
    no_probe = [{"step": "inject", "delay_ms": 500, "probe_connect_ms_after": None},
                {"step": "remove"}]
    assert "no probe evidence" in fault_texts("delay-gt-timeout", no_probe)[0]


def test_crash_as_executor_kill_needs_the_drivers_evidence() -> None:
    """``crash`` on a cluster pgval does not own (pgval.faults.executor): no worker pid and
    no log pattern; the driver's executor list must lose the executor and gain another."""
    from pgval.faults.executor import MECHANISM

    inject = {"step": "inject", "mechanism": MECHANISM, "executor": "1",
              "executors_before": ["0", "1"], "removed_after_s": 0.6}
    remove = {"step": "remove", "target": "executor 1", "removed_after_s": 0.6,
              "replacement": "2", "replaced_after_s": 3.1}
    # The log scan may find no "Lost executor" line (Kubernetes logs "killed by driver" at
    # INFO): the driver's own list is the evidence, so this is no reason.
    timeouts = {"step": "timeouts", "fired": {}}
    assert fault_texts("crash", [inject, remove, timeouts]) == []
    late = [{**inject, "removed_after_s": None}, remove]
    assert fault_texts("crash", late) == []  # left the list after inject stopped waiting
    never_left = [{**inject, "removed_after_s": None}, {**remove, "removed_after_s": None}]
    assert fault_texts("crash", never_left) == [
        "crash: executor 1 never left the driver's executor list"]
    no_replacement = [inject, {**remove, "replacement": None,
                               "error": "no replacement for executor 1 registered within 60 s"}]
    assert fault_texts("crash", no_replacement) == [
        "removing crash failed: no replacement for executor 1 registered within 60 s"]
    unseen = [inject, {**remove, "replacement": None}]
    assert fault_texts("crash", unseen) == ["crash: no replacement for executor 1 was seen"]
    teardown = [inject, {**remove, "replacement": None, "teardown": True}]
    assert fault_texts("crash", teardown) == []
    assert fault_texts("crash", [{**inject, "executor": None}, remove]) == [
        "crash: no executor was killed"]
    # A SIGKILL crash is still judged as before.
    assert fault_texts("crash", [{"step": "inject", "mechanism": "SIGKILL process group"},
                                   {"step": "remove"}]) == ["crash: no worker process was killed"]


def test_a_compose_crash_is_judged_by_the_containers_state() -> None:
    """pumba kills a container, not a host pid: a stopped container is the evidence (this
    was stored unknown as "no worker process was killed" before)."""
    base = {"step": "inject", "mechanism": "pumba", "target": "pgval-spark-worker-1",
            "argv": ["pumba", "kill"]}
    remove = {"step": "remove", "mechanism": "pumba", "restart": True}
    assert fault_texts("crash", [{**base, "status": "exited"}, remove]) == []
    assert fault_texts("crash", [{**base, "status": "running"}, remove]) == [
        "crash: container pgval-spark-worker-1 was not seen stopped (status 'running')"]


def test_a_silent_phase_is_a_measurement_not_a_reason() -> None:
    """Every ID classified, the failure and recovery phases without outputs: the run is valid,
    those phases' throughput is 0 and their latency undefined, with the reason."""
    rt = ResourceTable()
    events = [{"id": i, "type": "GET", "resource": "a", "event_ts": 10 * i, "ingress_ts": 10 * i}
              for i in range(40)]
    # Windows of 100 ms; the one closing in the failure phase [150, 250) comes out only at 255.
    outputs = [{"window_start": w, "resource": "a", "count": 10,
                "ids": list(range(w // 10, w // 10 + 10)), "ingress_ts": at}
               for w, at in ((0, 120), (100, 255), (200, 310), (300, 395))]
    ev = evaluate(to_inputs(events, rt), to_outputs(outputs, rt), "sst", 100,
                  Phases(0, 150, 250, 400))
    assert ev.validation.guarantee == "exactly-once"
    assert evaluation_reasons(ev).valid
    m = ev.metrics
    assert m.throughput["failure"] == 0 and m.throughput["recovery"] > 0
    assert m.latency["failure"].p50 is None
    assert m.latency["failure"].undefined == "no output in this phase"
    assert m.latency["recovery"].p50 is not None and m.latency["recovery"].undefined is None
    summary = ev.summary()
    assert summary["latency"]["failure"] == {  # type: ignore[index]
        "n": 0, "p50_s": None, "p95_s": None, "p99_s": None, "max_s": None,
        "undefined": "no output in this phase"}
    assert "undefined" not in summary["latency"]["control"]  # type: ignore[index]
    assert summary["failure_cost_s"] == pytest.approx((55 - 20) / 1000)
    assert "failure_cost_undefined" not in summary and "failure_cost_bound" not in summary
    empty = evaluate(to_inputs([], rt), to_outputs([], rt), "sst", 100, Phases(0, 100, 200))
    assert evaluation_reasons(empty) == Result((Reason("data", "nothing was expected: no "
                                                       "usable inputs"),))
    # Without phases (a recorded stream) only "nothing expected" applies.
    whole = evaluate(to_inputs(events, rt), to_outputs(outputs, rt), "sst", 100)
    assert evaluation_reasons(whole).valid
    assert whole.metrics.latency["failure"].undefined == "no such phase (no phases given)"


def test_a_phase_without_inputs_and_duplicated_inputs_put_the_verdict_in_doubt() -> None:
    rt = ResourceTable()
    # Inputs only in control and recovery; the failure phase [100, 200) has none.
    events = [{"id": i, "type": "GET", "resource": "a", "event_ts": t, "ingress_ts": t}
              for i, t in enumerate((10, 20, 250, 260))]
    outputs = [{"window_start": 0, "resource": "a", "count": 2, "ids": [0, 1],
                "ingress_ts": 50},
               {"window_start": 200, "resource": "a", "count": 2, "ids": [2, 3],
                "ingress_ts": 290}]
    ev = evaluate(to_inputs(events, rt), to_outputs(outputs, rt), "sst", 100,
                  Phases(0, 100, 200, 300))
    assert evaluation_reasons(ev) == Result((Reason(
        "data", "the failure phase had no expected inputs: no load went through it, so the "
                "verdict says nothing about it"),))
    # Input 1 sent twice (two Kafka records): the output lists it twice, which looks like a
    # duplicate the job made. The verdict cannot tell, so the run is unknown.
    twice = [*events, {"id": 1, "type": "GET", "resource": "a", "event_ts": 20,
                       "ingress_ts": 120}]
    dup = evaluate(to_inputs(twice, rt), to_outputs([{**outputs[0], "ids": [0, 1, 1]},
                                                     outputs[1]], rt),
                   "sst", 100, Phases(0, 100, 200, 300))
    assert dup.validation.duplicate_inputs == 1
    reasons = evaluation_reasons(dup)
    assert reasons.kinds() == {"data"}
    assert reasons.texts[0] == ("1 input records repeat an ID already in the inputs: their "
                                "outputs show duplicates the job did not make")


def test_validity_composes_typed_reasons() -> None:
    """Each check's result composed in, like Jepsen's checker/compose: unknown if any part
    is, each reason once, in order; ``--json`` keeps plain sentences, the stored form adds
    the kinds."""
    a, b = Reason("generator", "a"), Reason("observed", "b")
    v = Validity()
    assert v.valid and v.status == "valid" and v.records() == []
    v.add(Result((a,)), [b, a])
    v.add(a)
    assert not v.valid and v.status == "unknown" and v.reasons == (a, b)
    assert v.kinds() == {"generator", "observed"}
    assert v.as_dict() == {"valid": False, "validity_reasons": ["a", "b"]}
    assert v.records() == [{"kind": "generator", "text": "a"}, {"kind": "observed", "text": "b"}]
    assert reasons_from_records(v.records()) == [a, b]
    assert Validity(Result((a,)), [b]).reasons == v.reasons
    with pytest.raises(TypeError):  # a sentence without a kind cannot be composed in
        v.add(["plain text"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        Reason("made-up", "x")  # type: ignore[arg-type]


def test_stored_records_are_read_back_only_when_whole() -> None:
    assert reasons_from_records([]) == []
    for damaged in (None, "x", [{"kind": "data"}], [{"kind": "nope", "text": "t"}],
                    [{"kind": "data", "text": 1}], ["the drain timed out"]):
        assert reasons_from_records(damaged) is None, damaged
