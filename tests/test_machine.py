"""The machine a run or a benchmark ran on is kept with it, and a report whose runs come
from more than one machine says so (pgval.host.machine, pgval.report.machines)."""

from __future__ import annotations

import re
from pathlib import Path

from pgval.host.machine import describe_machine, machine_label
from pgval.report import build_report
from pgval.report.data import RunData
from pgval.report.machines import id_ranges, machines_note
from pgval.store.results import ResultsStore
from tests.test_report import W, synthetic_run

EPYC = {"boot": "aaaaaaaaaaaa", "cpu": "AMD EPYC", "cores": 2, "memory_gib": 23.4,
        "kernel": "6.1"}
XEON = {**EPYC, "boot": "bbbbbbbbbbbb", "cpu": "Intel Xeon"}


def test_a_machine_is_read_from_proc(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD  EPYC 7B13\n"
                                      "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    (tmp_path / "meminfo").write_text("MemTotal:       24576000 kB\nMemFree: 1 kB\n")
    one = describe_machine(tmp_path, boot="5c1e-boot")
    assert one["cpu"] == "AMD EPYC 7B13" and one["memory_gib"] == 23.4
    assert re.fullmatch(r"[0-9a-f]{12}", one["boot"])
    assert describe_machine(tmp_path, boot="5c1e-boot")["boot"] == one["boot"]
    assert describe_machine(tmp_path, boot="another")["boot"] != one["boot"]
    # Nothing readable: empty fields, never an exception.
    assert describe_machine(tmp_path / "none", boot="", env={}) | {"cores": 0, "kernel": ""} == {
        "boot": "", "cpu": "", "cores": 0, "memory_gib": None, "kernel": ""}


def test_this_machine_is_described() -> None:
    here = describe_machine()
    assert here["cores"] >= 1 and here["boot"] and here["memory_gib"] > 0
    assert here == describe_machine()  # the same boot, the same description
    assert machine_label(EPYC) == "AMD EPYC, 2 cores, 23.4 GiB (boot aaaaaaaaaaaa)"


def test_id_ranges() -> None:
    assert id_ranges([9, 1, 2, 3, 7, 10, 2]) == "1–3, 7, 9–10"
    assert id_ranges([]) == ""


def _run(run_id: int, machine: dict | None) -> RunData:
    return RunData(row={"id": run_id}, phases={},
                   summary={} if machine is None else {"machine": machine})


def test_the_note_names_each_machine_and_the_runs_made_there() -> None:
    assert machines_note([_run(1, None), _run(2, None)]) == ""  # older databases: unchanged
    assert machines_note([_run(1, EPYC), _run(2, EPYC)]) == (
        "every run on one machine: AMD EPYC, 2 cores, 23.4 GiB (boot aaaaaaaaaaaa)")
    note = machines_note([_run(1, EPYC), _run(2, EPYC), _run(3, XEON), _run(4, None),
                          _run(5, EPYC)])
    assert note.startswith("runs from more than one machine, so not like for like")
    assert "AMD EPYC, 2 cores, 23.4 GiB (boot aaaaaaaaaaaa): runs 1–2, 5" in note
    assert "Intel Xeon, 2 cores, 23.4 GiB (boot bbbbbbbbbbbb): runs 3" in note
    assert note.endswith("not recorded: runs 4")
    # One machine beside runs that recorded none is not "one machine".
    assert machines_note([_run(1, EPYC), _run(2, None)]).startswith("runs from more than")


def test_a_report_of_two_machines_says_so(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "r.db")
    for repeat, machine in enumerate((EPYC, XEON)):
        ev, _ = synthetic_run("crash", repeat)
        run_id = store.start_run("validate", "sst", W, pg="a1", fault="crash", repeat=repeat)
        store.finish_run(run_id, ev, extra={"machine": machine})
    md = build_report(tmp_path / "r.db", fmt="markdown")
    assert isinstance(md, str)
    header = md.split("\n\n", 2)[1]
    assert "runs from more than one machine" in header and "Intel Xeon" in header, header


def test_jvm_options_from_the_environment_are_kept_and_set_runs_apart() -> None:
    """Options every JVM reads from the environment change a run's timings as a machine
    does (C1 alone): kept with the machine, a system property's value redacted, named in
    the label, and runs on one boot with and without them are not like for like."""
    env = {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -Xmx1g '-Dpw=a b' -Dk=hunter2",
           "JDK_JAVA_OPTIONS": "-javaagent:agent.jar=token=s3cret", "PATH": "/bin"}
    here = describe_machine(env=env)
    assert here["jvm_options"] == {
        "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -Xmx1g -Dpw=<redacted> -Dk=<redacted>",
        "JDK_JAVA_OPTIONS": "-javaagent:agent.jar=<redacted>"}
    assert "hunter2" not in str(here) and "s3cret" not in str(here) and " b" not in str(here)
    assert "jvm_options" not in describe_machine(env={"JAVA_TOOL_OPTIONS": " "})
    assert describe_machine(env={"_JAVA_OPTIONS": "-Dx='open"})["jvm_options"] == {
        "_JAVA_OPTIONS": "<_JAVA_OPTIONS unreadable>"}
    c1 = {**EPYC, "jvm_options": {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1"}}
    assert machine_label(c1) == ("AMD EPYC, 2 cores, 23.4 GiB, "
                                 "JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1 (boot aaaaaaaaaaaa)")
    note = machines_note([_run(1, EPYC), _run(2, c1), _run(3, EPYC)])
    assert note.startswith("runs with more than one set of JVM options, so not like for"), note
    assert "23.4 GiB (boot aaaaaaaaaaaa): runs 1, 3" in note
    assert "TieredStopAtLevel=1 (boot aaaaaaaaaaaa): runs 2" in note
