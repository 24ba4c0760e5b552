"""One descriptor per fault (``faults/descriptor.py``): every name has one, in its own
module; the ``Fault`` properties, the evidence rules, the time-out profiles and the
deployments' makers are all read from it.

Why: a fault spread over many files drifts (a new one forgotten in a deployment's table, a
rule no registry knows); one descriptor per fault, found by the registry, cannot.
"""

from __future__ import annotations

from pathlib import Path

from pgval.core.schema import Deploy, Fault, Restart
from pgval.faults import profile_for
from pgval.faults import took_effect as evidence
from pgval.faults.descriptor import DESCRIPTORS, WORKER_NETNS, descriptor, descriptors


def test_every_fault_name_has_one_descriptor_in_its_own_module() -> None:
    assert list(descriptors()) == list(Fault) and len(DESCRIPTORS) == len(Fault)
    home = {Fault.CRASH: "process", Fault.DRIVER_CRASH: "process",
            Fault.DELAY_LT_TIMEOUT: "network", Fault.PAUSE_GT_TIMEOUT: "pause",
            Fault.PARTITION: "partition", Fault.BROKER_CRASH: "broker_crash",
            Fault.PACKET_LOSS: "loss", Fault.SCHEDULE: "composite"}
    for kind, module in home.items():
        assert descriptor(kind).rules[0].__module__ == f"pgval.faults.{module}", kind


def test_what_a_fault_is_is_its_descriptors() -> None:
    assert {f for f in Fault if descriptor(f).network} == {
        Fault.DELAY_LT_TIMEOUT, Fault.DELAY_GT_TIMEOUT, Fault.PARTITION, Fault.PACKET_LOSS}
    assert {f for f in Fault if descriptor(f).restarts} == {
        Fault.CRASH, Fault.DRIVER_CRASH, Fault.BROKER_CRASH, Fault.SCHEDULE}
    assert {f for f in Fault if descriptor(f).pause} == {Fault.PAUSE_LT_TIMEOUT,
                                                         Fault.PAUSE_GT_TIMEOUT}
    assert [f for f in Fault if descriptor(f).above_timeouts] == [Fault.DELAY_GT_TIMEOUT,
                                                                  Fault.PAUSE_GT_TIMEOUT]
    assert descriptor("driver-crash").restart is Restart.IMMEDIATE


def test_rules_and_profiles_come_from_the_descriptors() -> None:
    assert set(evidence.RULE_CLASSES) == {r for d in descriptors().values() for r in d.rules}
    assert profile_for("delay-gt-timeout", 40).name == "short"
    assert profile_for("packet-loss", 40).delay_ms is None


def test_a_deployment_makes_what_its_mechanisms_allow(tmp_path: Path) -> None:
    from pgval.deploy.external import ExternalDeployment

    ext = ExternalDeployment("h:1", "local[1]", 3)
    assert descriptor("packet-loss").maker_for(ext.mechanisms) is None
    assert descriptor("packet-loss").maker_for(frozenset({WORKER_NETNS})) is not None
    assert descriptor("pause-lt-timeout").where_problem(Deploy.LOCAL, attached=True)
    assert descriptor("crash").where_problem(Deploy.EXTERNAL, attached=False) is None


def test_a_fresh_process_loads_the_descriptors_before_anything_else() -> None:
    """The registry imports every fault module to find its descriptors: in a process where
    nothing of the faults was imported yet (the command line's), a module that reads the
    descriptors at import (the evidence registry) must not be among them. And a seed draws
    what it drew before faults were described: ``--seed 27``'s three parts."""
    import subprocess
    import sys

    code = ("from pgval.config import resolve\n"
            "s = resolve({'fault': 'random', 'fault_count': 3, 'seed': 27, 'pg': 'a1',\n"
            "             'phase_seconds': 16, 'cluster': {'workers': 2, 'brokers': 3}})\n"
            "print([(str(p.fault), p.target) for p in s.schedule_parts])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("[('partition', 1), ('crash', 0), "
                                   "('pause-lt-timeout', 1)]")
