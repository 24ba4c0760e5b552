"""Each fault judges its own log: the registry of rules by fault kind and mechanism.

The logs here are written by the fault classes themselves (against stand-ins for a worker,
the driver and its control channel, the user's nemesis), through the schedule that writes
a run's fault log, so a rule and the entries it reads cannot drift apart unseen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pgval.checker.result import Reason
from pgval.core.schema import Fault
from pgval.faults import FaultHooks, delay
from pgval.faults import took_effect as evidence
from pgval.faults.container import ContainerDelay, ContainerKill
from pgval.faults.executor import ExecutorKill
from pgval.faults.nemesis import NemesisDelay
from pgval.faults.network import EXECUTOR_LOST, WorkerDelay
from pgval.faults.process import JVM_HALT, SIGKILL_GROUP, DriverCrash, WorkerCrash
from pgval.faults.took_effect import RULE_CLASSES, RULES, fault_reasons, rule_for
from pgval.run.schedule import FaultSchedule

NO_SCAN = ("no scan of the logs tells whether an executor was lost, so nothing shows the "
           "delay was on the side of the time-outs its name says")


class Worker:
    name, pid = "spark-worker-1", 4242

    def executor_pids(self) -> list[int]:
        return [4343]

    def group_pids(self) -> list[int]:
        return []

    def kill(self) -> None:
        pass

    def restart(self) -> None:
        pass


class Driver:
    def pid(self) -> int:
        return 777

    def alive(self) -> bool:
        return False  # never reaches a crash point: the entry says so

    def kill(self) -> None:
        pass

    def start(self) -> float:
        return 1.0


class Control:
    """The driver's control channel: executor 1 killed at 1000 ms, 2 replaces it."""

    def request(self, action: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return {"ok": True, "executor": "1", "executors_before": ["0", "1"], "kill_ts": 1000}

    def executor_events(self) -> list[dict[str, Any]]:
        return [{"ts": 1500, "ids": ["0"]}, {"ts": 2000, "ids": ["0", "2"]}]


def logged(fault: FaultHooks) -> list[dict[str, Any]]:
    """The fault log of ``fault`` injected and removed, as stored (JSON)."""
    schedule = FaultSchedule(fault)
    schedule.step("inject", 0)
    schedule.step("remove", 1)
    return json.loads(json.dumps(schedule.log))


def test_each_fault_class_logs_a_mechanism_its_own_rule_judges(tmp_path: Path) -> None:
    faults: list[tuple[FaultHooks, type, list[str]]] = [
        (WorkerCrash(Worker()), WorkerCrash, []),
        (DriverCrash(Driver()), DriverCrash, []),
        (DriverCrash(Driver(), trigger=tmp_path / "trigger", reach_timeout_s=0.1), DriverCrash,
         ["injecting driver-crash failed: the crash point after-sink-write was not reached: "
          "no batch with outputs came to its commit within 0 s (the driver was killed then)"]),
        (ExecutorKill(Control(), sleep=lambda _: None, gone_timeout_s=0, replace_timeout_s=0),
         ExecutorKill, []),
        # pgval cannot probe a link it does not own: a nemesis delay is no evidence. Nor is
        # a delay whose log has no scan of the time-outs (the experiment adds it after the
        # run; this log ends at the removal).
        (NemesisDelay("delay-lt-timeout", "true", "true", 0, 500), NemesisDelay,
         ["delay-lt-timeout: no probe evidence that the delay took effect",
          f"delay-lt-timeout: {NO_SCAN}"]),
    ]
    for fault, cls, expected in faults:
        log = logged(fault)
        inject = log[0]
        assert rule_for(fault.name, inject["mechanism"]) is cls, inject
        assert [r.text for r in fault_reasons(fault.name, log)] == expected, log
    assert logged(DriverCrash(Driver(), trigger=tmp_path / "t", reach_timeout_s=0.1))[0][
        "mechanism"] == JVM_HALT


def test_the_registry_covers_every_fault_and_mechanism() -> None:
    """Every fault but ``none`` has a rule for a log that names no mechanism, every
    mechanism a class logs has a rule for each fault the class injects, and the packet
    delay's mechanisms are exactly those :class:`PacketDelay` can log."""
    assert set(evidence.UNNAMED) == {f for f in Fault if f is not Fault.NONE}
    assert set(RULES) == {(kind, name) for cls in RULE_CLASSES for kind in cls.kinds
                          for name in cls.mechanisms}
    assert WorkerDelay.mechanisms == delay.MECHANISMS == ("netem", "nfqueue")
    for kind in (Fault.DELAY_LT_TIMEOUT, Fault.DELAY_GT_TIMEOUT):
        assert {name for k, name in RULES if k is kind} == {
            "netem", "nfqueue", "user nemesis", "pumba"}
    assert RULES[Fault.CRASH, SIGKILL_GROUP] is WorkerCrash
    assert RULES[Fault.DRIVER_CRASH, SIGKILL_GROUP] is DriverCrash  # same name, other rule
    assert RULES[Fault.CRASH, "pumba"] is ContainerKill
    assert RULES[Fault.DELAY_GT_TIMEOUT, "pumba"] is ContainerDelay


def test_two_rules_for_one_fault_and_mechanism_are_refused() -> None:
    class Twin:
        kinds = frozenset({Fault.CRASH})
        mechanisms = (SIGKILL_GROUP,)

        @staticmethod
        def reasons(entries: Any) -> list[Reason]:
            return []

    with pytest.raises(ValueError, match="both judge"):
        evidence._registry([WorkerCrash, Twin])


@pytest.mark.parametrize(("fault", "mechanism", "sentence"), [
    ("crash", "teleport", "crash: no rule knows mechanism 'teleport'"),
    ("driver-crash", "pumba", "driver-crash: no rule knows mechanism 'pumba'"),
    ("delay-lt-timeout", SIGKILL_GROUP,
     "delay-lt-timeout: no rule knows mechanism 'SIGKILL process group'"),
    ("crash", ["netem"], "crash: no rule knows mechanism ['netem']"),
    ("meteor", "pumba", "meteor: no rule knows mechanism 'pumba'"),
])
def test_a_mechanism_no_rule_knows_is_a_reason(fault: str, mechanism: object,
                                               sentence: str) -> None:
    """Never silently valid: a log pgval cannot judge (a stored run from a newer pgval, a
    damaged run.json) makes the run unknown and says why."""
    log = [{"step": "inject", "mechanism": mechanism, "worker_pid": 1, "driver_pid": 1,
            "status": "exited"}, {"step": "remove"}]
    assert fault_reasons(fault, log) == [Reason("fault", sentence)]


def test_a_log_without_a_mechanism_is_judged_by_the_embedded_rule() -> None:
    """A log written before mechanisms were told apart names none: the embedded cluster's
    rule judges it. An inject that failed before it acted names none either: its error is
    the reason, and no rule's findings are added (on compose, "no worker process was
    killed" would be the embedded cluster's finding, not this deployment's)."""
    legacy = [{"step": "inject", "worker_pid": None}, {"step": "remove"}]
    assert [r.text for r in fault_reasons(Fault.CRASH, legacy)] == [
        "crash: no worker process was killed"]
    failed = [{"step": "inject", "error": "container pgval-spark-worker-0 is exited"},
              {"step": "remove"}]
    assert [r.text for r in fault_reasons(Fault.CRASH, failed)] == [
        "injecting crash failed: container pgval-spark-worker-0 is exited"]
    assert fault_reasons(Fault.NONE, failed) == []


def test_a_damaged_time_out_scan_is_no_evidence_of_a_lost_executor() -> None:
    log = [{"step": "inject", "mechanism": SIGKILL_GROUP, "worker_pid": 5},
           {"step": "remove"}, {"step": "timeouts", "fired": "executor lost (driver)"}]
    assert [r.text for r in fault_reasons("crash", log)] == [
        "crash: the driver never reported an executor lost"]


def _delay_log(fault: str, mechanism: str, fired: object) -> list[dict[str, Any]]:
    """A delay's log as the experiment leaves it: inject (what each mechanism counts as
    having acted), remove, and the scan of the run's logs for time-outs that fired."""
    inject = {"step": "inject", "fault": fault, "mechanism": mechanism, "delay_ms": 500,
              "probe_connect_ms_before": 0.2, "probe_connect_ms_after": 1001.0,
              "qdisc": "qdisc netem 8001: root delay 500ms", "target": "worker-0"}
    return [inject, {"step": "remove", "fault": fault},
            {"step": "timeouts", "fault": fault, "fired": fired}]


@pytest.mark.parametrize("mechanism", ["nfqueue", "pumba", "user nemesis"])
def test_a_delay_label_needs_the_executor_loss_it_names(mechanism: str) -> None:
    """delay-gt-timeout is evidence only with an executor the driver reported lost;
    delay-lt-timeout with one behaved as above the time-out; no scan is said, not passed."""
    gt, lt = Fault.DELAY_GT_TIMEOUT, Fault.DELAY_LT_TIMEOUT
    lost = {EXECUTOR_LOST: 1, "rpc timeout": 4}
    quiet = {"rpc timeout": 2}

    def texts(fault: Fault, fired: object) -> list[str]:
        found = [r.text for r in fault_reasons(fault, _delay_log(fault, mechanism, fired))]
        # The user's nemesis has no probe: that reason comes first, whatever the time-outs.
        return [t for t in found if "no probe evidence" not in t]

    assert texts(gt, lost) == []
    assert texts(gt, quiet) == ["delay-gt-timeout: the driver reported no executor lost: the "
                                "delay did not act as one above the time-outs"]
    assert texts(lt, quiet) == []
    assert texts(lt, {EXECUTOR_LOST: 2}) == [
        "delay-lt-timeout: the driver reported an executor lost (2×): the delay behaved as "
        "one above the time-out"]
    for damaged in (None, "executor lost (driver)", [EXECUTOR_LOST]):
        assert texts(gt, damaged) == [f"delay-gt-timeout: {NO_SCAN}"]
        assert texts(lt, damaged) == [f"delay-lt-timeout: {NO_SCAN}"]
