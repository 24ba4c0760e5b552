"""The CI gate (``--expect``, ``--junit``): which verdict meets which expectation, the exit
statuses of every gated command on constructed runs, and JUnit XML a CI system can read
whatever a run's reasons say."""

from __future__ import annotations

import functools
import json
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.checker.gate import (
    EXPECTATIONS,
    FAILED,
    MET,
    UNKNOWN,
    WEAKER,
    Case,
    exit_status,
    junit,
    meets,
)
from pgval.cli import main
from tests.test_evidence_seal import stored_sealed_run

VERDICTS = ("exactly-once", "at-least-once", "at-most-once", "none")


def test_meets_is_the_guarantee_lattice() -> None:
    """Written out, not derived: exactly-once meets all; the two weaker guarantees meet
    only themselves; none meets nothing."""
    table = {
        "exactly-once": {"exactly-once", "at-least-once", "at-most-once"},
        "at-least-once": {"at-least-once"},
        "at-most-once": {"at-most-once"},
        "none": set(),
    }
    for verdict in VERDICTS:
        for expected in EXPECTATIONS:
            assert meets(verdict, expected) == (expected in table[verdict]), (verdict, expected)
    with pytest.raises(ValueError, match="--expect must be one of"):
        meets("exactly-once", "exactly-twice")


def _run(guarantee: str = "exactly-once", valid: bool = True, **kw: Any) -> Case:
    return Case("r", "pgval.test", guarantee=guarantee, valid=valid, **kw)


def test_outcomes_and_the_status_the_worst_one_sets() -> None:
    met, weaker = _run(), _run("at-most-once")
    unknown = _run(valid=False, reasons=("the read-back did not reach the end offsets",))
    failed = Case.failed("r", "pgval.test", "Kafka: broker down")
    assert [c.outcome("at-least-once") for c in (met, weaker, unknown, failed)] == [
        MET, WEAKER, UNKNOWN, FAILED]
    # An unknown run is unknown whatever its verdict, and with no --expect only validity
    # and completion count.
    assert _run("none", valid=False).outcome("at-most-once") == UNKNOWN
    assert weaker.outcome(None) == MET
    assert exit_status([met, met], "exactly-once") == 0
    assert exit_status([met, unknown], "exactly-once") == 3
    assert exit_status([unknown, failed], "exactly-once") == 4
    assert exit_status([failed, unknown, weaker], "exactly-once") == 1
    assert exit_status([], "exactly-once") == 3  # nothing judged is no pass
    # A matrix cell is its weakest repetition.
    cell = Case.cell("sst a1 crash", "pgval.campaigns.matrix.sst.a1", [met, unknown, weaker])
    assert cell.outcome("at-least-once") == WEAKER
    assert cell.outcome("at-most-once") == UNKNOWN  # the weaker run meets at-most-once


def test_junit_counts_and_elements() -> None:
    cases = [_run(numbers={"duplicate": 0, "unprocessed": 0, "incorrect": 0, "expected": 9}),
             Case("r7", "pgval.test", guarantee="at-least-once", valid=True,
                  numbers={"duplicate": 3, "unprocessed": 0, "incorrect": 0, "expected": 9,
                           "run_id": 7}),
             _run(valid=False, reasons=("no output at all",)),
             Case.failed("r", "pgval.test", "Spark did not start")]
    root = junit(cases, "exactly-once", "pgval test").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "2")
    tcs = suite.findall("testcase")
    assert tcs[0].find("failure") is None and tcs[0].find("error") is None
    failure = tcs[1].find("failure")
    assert failure is not None and failure.get("message") == (
        "expected exactly-once, got at-least-once (3 duplicate, 0 unprocessed, 0 incorrect "
        "of 9 IDs), valid")
    assert not [tc for tc in tcs if tc.find("properties") is not None]  # the suite's
    props = {p.get("name"): p.get("value") for p in suite.find("properties").iter("property")}  # type: ignore[union-attr]
    name = tcs[1].get("name")
    assert props[f"{name}.run_id"] == "7" and props[f"{name}.guarantee"] == "at-least-once"
    assert props[f"{name}.valid"] == "true" and props["expect"] == "exactly-once"
    assert props["r.error"] == "Spark did not start"
    junit_schema().validate(ET.tostring(root, encoding="unicode"))
    assert [tc.find("error").get("type") for tc in tcs[2:]] == ["unknown", "failed"]  # type: ignore[union-attr]
    assert "no output at all" in tcs[2].find("error").get("message")  # type: ignore[union-attr,operator]


@functools.cache
def junit_schema() -> xmlschema.XMLSchema:
    """The JUnit schema CI systems check (tests/data/junit.xsd)."""
    return xmlschema.XMLSchema(Path(__file__).with_name("data") / "junit.xsd")


def test_a_junit_file_of_every_outcome_and_a_matrix_cell_is_valid_junit() -> None:
    """Met, weaker, unknown, not finished, not verified, and a matrix cell of three
    repetitions: one file the schema accepts, which a file with properties inside a
    test case (as pgval once wrote) is not."""
    runs = [_run(numbers={"run_id": 3, "expected": 9, "duplicate": 0, "unprocessed": 0,
                          "incorrect": 0}),
            _run("at-least-once"), Case.failed("#2", "", "interrupted")]
    cases = [_run(), _run("at-most-once"), _run(valid=False, reasons=("why",)),
             Case.failed("f", "pgval.test", "Spark did not start"),
             Case("d", "pgval.test", guarantee="exactly-once", valid=True, doubt="imported"),
             Case.cell("sst kafka a1 crash", "pgval.campaigns.matrix.sst.a1",
                       [Case(f"#{k}", "", guarantee=r.guarantee, valid=r.valid,
                             numbers=r.numbers, error=r.error, seconds=12.5)
                        for k, r in enumerate(runs)])]
    text = ET.tostring(junit(cases, "exactly-once", "pgval matrix").getroot(),
                       encoding="unicode")
    junit_schema().validate(text)
    root = ET.fromstring(text)
    cell = root.find("testsuite/testcase[@name='sst kafka a1 crash']")
    assert cell is not None and cell.get("time") == "37.500"
    names = {p.get("name") for p in root.iter("property")}
    assert {"sst kafka a1 crash.#0.run_id", "sst kafka a1 crash.#2.error"} <= names
    old_style = text.replace("<system-out>", "<properties /><system-out>", 1)
    assert not junit_schema().is_valid(old_style)


#: Every code point, lone surrogates too (st.text() leaves them out; a file name that is
#: not UTF-8 reaches Python as them).
ANY_TEXT = st.text(st.characters(exclude_categories=()))


@settings(max_examples=200, deadline=None)
@given(name=ANY_TEXT, reason=ANY_TEXT, error=ANY_TEXT)
def test_junit_is_well_formed_whatever_the_text(name: str, reason: str, error: str) -> None:
    """Names, reasons and errors come from users and processes: control characters XML
    cannot hold are dropped, everything else survives a parse."""
    cases = [Case(name, name, guarantee="none", valid=False, reasons=(reason,)),
             Case.failed(name, name, error)]
    text = ET.tostring(junit(cases, "exactly-once", name).getroot(), encoding="unicode")
    parsed = ET.fromstring(text)
    tcs = parsed.find("testsuite").findall("testcase")  # type: ignore[union-attr]

    def legal(s: str) -> str:
        kept = "".join(c for c in s if c in "\t\n\r" or (
            c >= " " and c not in "\ufffe\uffff" and not "\ud800" <= c <= "\udfff"))
        return kept.replace("\r\n", "\n").replace("\r", "\n")

    junit_schema().validate(text)
    assert tcs[0].get("name") == legal(name)
    assert legal(reason) in tcs[0].find("error").get("message")  # type: ignore[union-attr,operator]
    assert legal(error) in tcs[1].find("error").text  # type: ignore[union-attr,operator]


# ------------------------------------------------------------------ the commands, offline


def _check_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """30 GETs (one per 100 ms, 1 s windows) and three outputs: faithful, and the same
    with window [1 s, 2 s) emitted twice (10 IDs duplicated: at-least-once)."""
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(json.dumps({"id": i, "type": "GET", "resource": "a",
                                          "event_ts": 100 * i, "ingress_ts": 100 * i}) + "\n"
                              for i in range(30)))
    rows = [{"resource": "a", "window_start": 1000 * w, "window_end": 1000 * w + 1000,
             "count": 10, "ids": list(range(10 * w, 10 * w + 10)), "ingress_ts": 1000 * w + 1300}
            for w in range(3)]
    ok, dup = tmp_path / "ok.jsonl", tmp_path / "dup.jsonl"
    ok.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dup.write_text("".join(json.dumps(r) + "\n" for r in [*rows, rows[1]]))
    return inputs, ok, dup


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    assert "Traceback" not in res.output
    return res.exit_code, res.output


@pytest.mark.parametrize(("outputs", "expect", "status"), [
    ("ok", "exactly-once", 0), ("ok", "at-most-once", 0),
    ("dup", "exactly-once", 1), ("dup", "at-least-once", 0), ("dup", "at-most-once", 1)])
def test_check_exits_by_its_verdict(tmp_path: Path, outputs: str, expect: str,
                                    status: int) -> None:
    inputs, ok, dup = _check_files(tmp_path)
    junit_path = tmp_path / "ci" / "check.xml"
    code, out = _cli("check", "--topology", "sst", "--inputs", str(inputs), "--outputs",
                     str(ok if outputs == "ok" else dup), "--window-ms", "1000",
                     "--expect", expect, "--junit", str(junit_path))
    assert code == status, out
    assert f"expect {expect}: 1 {'met' if status == 0 else 'weaker'} — exit {status}" in out
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == str(int(status == 1))
    # Without --expect a verdict is output, not a status (and --junit still writes).
    code, _ = _cli("check", "--topology", "sst", "--inputs", str(inputs), "--outputs",
                   str(dup), "--window-ms", "1000", "--junit", str(junit_path))
    assert code == 0 and ET.parse(junit_path).getroot().get("failures") == "0"


def test_check_with_nothing_to_judge_is_unknown_and_json_stays_clean(tmp_path: Path) -> None:
    inputs, _, _ = _check_files(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = CliRunner().invoke(main, [
        "check", "--topology", "sst", "--inputs", str(inputs), "--outputs", str(empty),
        "--window-ms", "1000", "--expect", "at-most-once", "--json"])
    assert res.exit_code == 3, res.output
    summary = json.loads(res.stdout)  # the gate's line went to stderr
    assert summary["valid"] is False
    assert "exit 3" in res.stderr


def test_a_junit_file_that_cannot_be_written_is_one_sentence(tmp_path: Path) -> None:
    inputs, ok, _ = _check_files(tmp_path)
    (tmp_path / "blocked").write_text("a file where a folder should be")
    code, out = _cli("check", "--topology", "sst", "--inputs", str(inputs), "--outputs",
                     str(ok), "--window-ms", "1000", "--junit", str(tmp_path / "blocked" / "x"))
    assert code == 2 and "cannot write the JUnit file" in out


def test_recheck_exits_by_the_stored_runs_verdict(tmp_path: Path) -> None:
    """The sealed run has one duplicated ID (at-least-once); a read-back that did not reach
    the end makes another unknown."""
    _, db, run_id = stored_sealed_run(tmp_path)
    assert _cli("recheck", str(run_id), "--db", str(db), "--expect", "at-least-once")[0] == 0
    code, out = _cli("recheck", str(run_id), "--db", str(db), "--expect", "exactly-once")
    assert code == 1 and "expect exactly-once: 1 weaker — exit 1" in out
    run_dir, db2, run2 = stored_sealed_run(tmp_path / "b", incomplete="output")
    code, out = _cli("recheck", str(run2), "--db", str(db2), "--expect", "at-least-once",
                     "--junit", str(tmp_path / "r.xml"))
    assert code == 3, out
    error = ET.parse(tmp_path / "r.xml").getroot().find("testsuite/testcase/error")
    assert error is not None and "validity unknown" in str(error.get("message"))
    code, out = _cli("recheck", str(run_dir), "--db", str(db2), "--store", "--expect",
                     "exactly-once")
    assert code == 2 and "import first" in " ".join(out.split())


def _matrix_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["matrix", "--topologies", "sst", "--pgs", "a1,e1", "--faults", "none",
            "--rate", "1000", "--repeat", "2", "--db", str(tmp_path / "r.db"),
            "--runs-dir", str(tmp_path / "runs"), *extra]


def test_matrix_judges_every_cell_from_the_database(tmp_path: Path) -> None:
    """A resumed matrix whose runs are all stored runs nothing and judges them all: a1
    at-least-once in one repetition, e1 exactly-once but one repetition unknown."""
    from pgval.campaigns.matrix import cells, matrix_key
    from pgval.cli.common import parse_rate
    from pgval.cli.options import build_config
    from pgval.store.results import ResultsStore

    ctx = main.commands["matrix"].make_context("matrix", _matrix_args(tmp_path)[1:])
    grid_keys = ("topologies", "pgs", "faults", "repeat", "rate_fraction", "runs_dir", "db",
                 "driver", "expect", "junit_path", "as_json", "lint", "profile")
    values = {k: v for k, v in ctx.params.items() if k not in grid_keys}
    key = matrix_key(build_config(values, rate=parse_rate(values["rate"])))
    store = ResultsStore(tmp_path / "r.db")
    verdicts = {("a1", 0): ("exactly-once", 1), ("a1", 1): ("at-least-once", 1),
                ("e1", 0): ("exactly-once", 1), ("e1", 1): ("exactly-once", 0)}
    for cell in cells(["sst"], ["a1", "e1"], ["none"], 2):
        rid = store.start_run("validate", cell.topology, 10_000, pg=cell.pg,
                              fault=cell.fault.kind, repeat=cell.repeat,
                              params={"matrix_key": key})
        guarantee, valid = verdicts[(str(cell.pg), cell.repeat)]
        store.db["runs"].update(rid, {
            "status": "complete", "guarantee": guarantee, "valid": valid,
            "validity_reasons": json.dumps([] if valid else ["the drain timed out"]),
            "expected": 100, "processed": 100, "duplicate": 0 if valid else 3,
            "incorrect": 0, "unprocessed": 0})
    store.close()
    junit_path = tmp_path / "m.xml"
    code, out = _cli(*_matrix_args(tmp_path, "--expect", "exactly-once", "--junit",
                                   str(junit_path)))
    assert "matrix: 0 run, 4 already complete" in out
    assert code == 1, out  # a1 is weaker: that wins over e1's unknown repetition
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert suite is not None
    tcs = {tc.get("name"): tc for tc in suite.findall("testcase")}
    assert set(tcs) == {"sst kafka a1 none", "sst kafka e1 none"}
    assert tcs["sst kafka a1 none"].find("failure") is not None
    error = tcs["sst kafka e1 none"].find("error")
    assert error is not None and "the drain timed out" in str(error.get("message"))
    assert _cli(*_matrix_args(tmp_path, "--expect", "at-least-once"))[0] == 3
    # --json: one object a cell on stdout, everything else on stderr.
    res = CliRunner().invoke(main, _matrix_args(tmp_path, "--json", "--expect",
                                                "exactly-once"))
    assert res.exit_code == 1
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    by_name = {c["name"]: c for c in lines}
    assert set(by_name) == {"sst kafka a1 none", "sst kafka e1 none"}
    a1, e1 = by_name["sst kafka a1 none"], by_name["sst kafka e1 none"]
    assert (a1["outcome"], e1["outcome"]) == ("weaker", "unknown")
    assert [r["guarantee"] for r in a1["runs"]] == ["exactly-once", "at-least-once"]
    assert e1["runs"][1]["duplicate"] == 3 and a1["runs"][1]["run_id"] > 0
    assert e1["runs"][1]["validity_reasons"] == ["the drain timed out"]
    assert "expect exactly-once" in res.stderr and "matrix: 0 run" in res.stderr
    with sqlite3.connect(tmp_path / "r.db") as con:  # the gate only read the database
        assert con.execute("select count(*) from runs").fetchone() == (4,)


def test_a_cell_is_judged_by_its_runs_at_the_cells_rate(tmp_path: Path) -> None:
    """As `completed` counts them: a stored run at another rate (an older OIR) is no run of
    the cell now; a repetition without a run is a run that did not finish, with the
    reason; a repetition that failed now carries its error."""
    from pgval.campaigns.matrix import cell_case_name, cell_cases, cells, matrix_key
    from pgval.core.spec import RunSpec
    from pgval.store.results import ResultsStore

    base = RunSpec(phase_seconds=5)
    grid = cells(["sst"], ["a1"], ["none"], 3)
    store = ResultsStore(tmp_path / "r.db")
    for cell, rate in zip(grid[:2], (1000.0, 2000.0), strict=True):
        rid = store.start_run("validate", cell.topology, 10_000, pg=cell.pg,
                              fault=cell.fault.kind, repeat=cell.repeat,
                              params={"matrix_key": matrix_key(base), "rate": rate})
        store.db["runs"].update(rid, {"status": "complete", "guarantee": "exactly-once",
                                      "valid": 1, "validity_reasons": "[]"})
    store.close()
    [case] = cell_cases(tmp_path / "r.db", base, grid, {grid[2]: "Spark did not start"},
                        rate_for=lambda cell: 1000.0, not_run="interrupted")
    assert case.name == cell_case_name(base, grid[0]) == "sst kafka a1 none"
    assert [r.verdict() for r in case.runs] == [
        "exactly-once, valid", "did not finish: interrupted",
        "did not finish: Spark did not start"]
    assert case.outcome("exactly-once") == FAILED


def test_a_case_is_named_the_same_from_build_to_build() -> None:
    """What ran, its sink, guarantee, fault and crash point: no run id, no checkout path
    (a CI machine clones to a new folder each build), no seed."""
    from pgval.config import resolve

    def name(**fields: object) -> str:
        return resolve({"topology": "job", "job": "/ci/build-1/jobs/orders.py:build",
                        "pg": "a1", "fault": "driver-crash",
                        "crash_point": "after-sink-write", **fields}).case_name()

    assert name() == "orders.py:build kafka a1 driver-crash@after-sink-write"
    assert name(job="/ci/build-2/jobs/orders.py:build", seed=9) == name()
    assert name(sink="/ci/build-2/sinks/upsert.py:write") == (
        "orders.py:build upsert.py:write a1 driver-crash@after-sink-write")
    assert name(pg="e1") != name() and name(crash_point="timed") != name()
    assert name(trigger="processing-time:2 seconds").endswith(
        "trigger=processing-time:2 seconds")
