"""``pgval lint``: a job tried on a sample, as a stream and as a batch, with no Kafka.

The comparison is tested on constructed rows; the operator table of docs/your-job.md is
tested row by row on real Spark (one local session for all of them: each job of
``tests/data/operators/`` must come out as the table says); the command and the check
before ``validate`` run as a user runs them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgval.datasets.models import model_from_toml
from pgval.run.lint import (
    LintFailed,
    LintReport,
    compare_ids,
    compare_rows,
    fan_out_note,
    judge,
    model_sample,
    weblog_sample,
)
from pgval.topologies.job import fan_out_operator, missing_package, operator_problem

ROOT = Path(__file__).resolve().parents[1]
OPERATORS = ROOT / "tests" / "data" / "operators"
DOC = ROOT / "docs" / "your-job.md"
PGVAL = [sys.executable, "-m", "pgval.cli"]


def _rows(*rows: tuple[str, list[int], str]) -> pa.Table:
    return pa.table({"key": [r[0] for r in rows], "ids": [r[1] for r in rows],
                     "value": [r[2] for r in rows]},
                    schema=pa.schema([("key", pa.string()), ("ids", pa.list_(pa.int64())),
                                      ("value", pa.string())]))


OWN = np.array([-1, -2], dtype=np.int64)


# ------------------------------------------------------------------ the comparison, planted
def test_equal_rows_have_no_problem_and_own_rows_are_set_aside() -> None:
    want = _rows(("a", [1, 2], '{"n":2}'), ("b", [3], '{"n":1}'), ("z", [-1], '{"n":1}'))
    got = _rows(("b", [3], '{"n":1.0000000000001}'), ("a", [2, 1], '{"n":2}'))
    assert compare_ids(want, got, OWN, 1e-9) == []


@pytest.mark.parametrize(("got", "needle"), [
    (_rows(("a", [1, 2], '{"n":2}')), "no row for 1 of the batch's 2 outputs (e.g. b)"),
    (_rows(("a", [1, 2], '{"n":2}'), ("b", [3], '{"n":1}'), ("c", [4], '{"n":1}')),
     "gave 1 rows the batch run does not have (e.g. c)"),
    (_rows(("a", [1], '{"n":2}'), ("b", [3], '{"n":1}')), "1 of the stream's rows list other"),
    (_rows(("a", [1, 2], '{"n":3}'), ("b", [3], '{"n":1}')),
     'other values than the batch\'s (e.g. a: stream {"n":3}, batch {"n":2})'),
    (_rows(("a", [1, 2], '{"n":2}'), ("a", [1, 2], '{"n":2}'), ("b", [3], '{"n":1}')),
     "wrote 1 keys more than once (e.g. a)"),
])
def test_each_planted_difference_is_one_sentence(got: pa.Table, needle: str) -> None:
    want = _rows(("a", [1, 2], '{"n":2}'), ("b", [3], '{"n":1}'))
    problems = compare_ids(want, got, OWN, 1e-9)
    assert len(problems) == 1 and needle in problems[0], problems


def test_a_key_in_two_rows_is_a_problem_and_an_input_in_two_rows_is_named() -> None:
    twice = _rows(("a", [1, 4], "{}"), ("a", [2], "{}"))  # not one ID a row: no ID keys
    [problem] = compare_ids(twice, twice, OWN, 1e-9)
    assert "the key does not identify an output" in problem and "e.g. a" in problem
    shared = _rows(("a", [1, 2], "{}"), ("b", [2, 3], "{}"), ("z", [-1], "{}"))
    assert compare_ids(shared, shared, OWN, 1e-9) == []  # judged pair by pair
    note = fan_out_note(shared, OWN, "explode (one input in each row it makes)")
    assert note.startswith("fan-out by explode") and "1 of 3 inputs" in note
    assert fan_out_note(_rows(("a", [1], "{}"), ("b", [2], "{}")), OWN, "explode") is None


def test_rows_of_one_id_whose_keys_repeat_are_keyed_by_their_id_as_a_run_keys_them() -> None:
    """A job with one output per input and no build.key: two orders may share every
    column; the run keys such rows by their ID, and so does lint."""
    want = _rows(("a", [1], "{}"), ("a", [2], "{}"), ("b", [3], "{}"))
    assert compare_ids(want, _rows(("a", [2], "{}"), ("b", [3], "{}"), ("a", [1], "{}")),
                       OWN, 1e-9) == []
    [problem] = compare_ids(want, _rows(("a", [1], "{}"), ("b", [3], "{}")), OWN, 1e-9)
    assert "no row for 1 of the batch's 3 outputs" in problem


def test_what_a_run_refuses_in_the_ids_is_refused_and_own_ids_leave_rows_as_in_a_run(
        ) -> None:
    inputs = np.array([1, 2, 3], dtype=np.int64)
    stray = _rows(("a", [1, 10**12], "{}"))
    [problem] = compare_ids(stray, stray, OWN, 1e-9, inputs)
    assert "lists 1 IDs that are no input (e.g. 1000000000000)" in problem
    nulls = pa.table({"key": ["a"], "ids": [[1, None]], "value": ["{}"]},
                     schema=_rows(("a", [1], "{}")).schema)
    [problem] = compare_ids(nulls, _rows(("a", [1], "{}")), OWN, 1e-9, inputs)
    assert problem.startswith("the batch run has a null among its ids")
    # A row of real and own IDs keeps its real ones (a run strips only pgval's own).
    mixed = _rows(("a", [1, 2, -1], "{}"))
    [problem] = compare_ids(mixed, _rows(("a", [1, -1], "{}")), OWN, 1e-9, inputs)
    assert "list other input IDs" in problem
    assert compare_ids(mixed, _rows(("a", [2, 1], "{}")), OWN, 1e-9, inputs) == []


def test_an_own_row_written_twice_is_set_aside_whatever_its_count() -> None:
    want = pa.table({"key": ["a", "o"], "value": ["1", "x"], "own": [False, True]})
    twice = pa.table({"key": ["a", "o", "o"], "value": ["1", "x", "x"]})
    assert compare_rows(want, twice) == ([], 1, 1)


def test_rows_are_compared_as_a_multiset_without_pgvals_own() -> None:
    want = pa.table({"key": ["a", "a", "o"], "value": ["1", "1", "x"], "own": [False, False, True]})
    same = pa.table({"key": ["a", "o", "a"], "value": ["1", "x", "1"]})
    assert compare_rows(want, same) == ([], 2, 2)
    once = pa.table({"key": ["a", "o"], "value": ["1", "x"]})
    problems, _, got = compare_rows(want, once)
    assert got == 1 and problems == ["the stream did not give 1 of the batch's 2 rows (e.g. a)"]


def test_drops_behind_the_watermark_alone_are_a_warning_and_with_more_a_problem() -> None:
    """A stream that only lacks inputs, with Spark's drops counted: Spark's own rule, which
    a run tells apart (dropped behind the watermark): a warning. With another difference besides:
    problems, the drops said with them."""
    from pgval.run.lint import Sample

    sample = Sample("weblog", {}, 1, 2, OWN, np.array([1, 2, 3], dtype=np.int64))
    progress = [{"batch": 0, "dropped": 0}, {"batch": 1, "dropped": 1}]
    lacking = LintReport("j.py:build")
    judge(lacking, {"problems": [], "expected": _rows(("a", [1, 2], '{"n":2}')),
                    "stream": _rows(("a", [1], '{"n":1}')), "tolerance": None,
                    "by_rows": False, "progress": progress}, sample)
    assert lacking.ok and lacking.dropped_behind_watermark == 1
    assert lacking.warnings[0].startswith("Spark dropped 1 rows behind the watermark")
    more = LintReport("j.py:build")
    judge(more, {"problems": [], "expected": _rows(("a", [1, 2], "{}")),
                 "stream": _rows(("a", [1, 3], "{}")), "tolerance": None, "by_rows": False,
                 "progress": progress}, sample)
    assert "other input IDs" in more.problems[0]
    assert more.problems[1].startswith("Spark dropped 1 rows behind the watermark")
    assert str(LintFailed(more)).startswith("lint, before the run: (1) ")


# --------------------------------------------------------------------------- the samples
def test_the_web_log_sample_is_one_file_per_batch_with_closing_events(tmp_path: Path) -> None:
    sample = weblog_sample(tmp_path, 500, 4)
    for name in ("get", "post"):
        files = sorted((tmp_path / name).glob("*.parquet"))
        assert len(files) == 6  # 4 batches and 2 of closing events
        stamps = [f.stat().st_mtime for f in files]
        assert stamps == sorted(stamps) and len(set(stamps)) == 6
        table = pa.concat_tables(pq.read_table(f) for f in files)
        assert table.column("offset").to_pylist() == list(range(table.num_rows))
    values = [json.loads(v) for name in ("get", "post") for f in
              sorted((tmp_path / name).glob("*.parquet"))
              for v in pq.read_table(f).column("value").to_pylist()]
    ids = sorted(v["id"] for v in values)
    assert ids == sorted([*range(500), *sample.own_ids.tolist()])
    assert len(sample.own_ids) == 2 * 16 * 2 and (sample.own_ids < 0).all()
    real = [v["event_ts"] for v in values if v["id"] >= 0]
    closing = [v["event_ts"] for v in values if v["id"] < 0]
    assert min(closing) > max(real) + 24 * 3_600_000


def test_a_models_sample_has_the_run_ids_and_its_own_records(tmp_path: Path) -> None:
    from pgval.core.record_ids import OWN_KEY, record_ids

    model = model_from_toml(ROOT / "examples" / "inputs" / "orders.toml")
    sample = model_sample(tmp_path, model, 300, 3)
    table = pa.concat_tables(pq.read_table(f) for f in sorted((tmp_path / "orders").glob("*")))
    assert table.num_rows == 302 and set(table.column("topic").to_pylist()) == {"orders"}
    own = np.array([k == OWN_KEY for k in table.column("key").to_pylist()])
    assert own.sum() == 2 and own[-2:].all()
    assert sample.own_ids.tolist() == record_ids(0, np.zeros(2), np.array([300, 301])).tolist()


# ----------------------------------------------------------------- plan rules, on Spark's text
def test_timers_are_refused_by_their_plan_text_and_no_timeout_is_not() -> None:
    timed = ("~FlatMapGroupsInPandasWithState f(id#3L, k#4L)#5, [k#4L], [k#6L, n#7L], "
             "[StructField(k,LongType,true)], Append, ProcessingTimeTimeout")
    assert "applyInPandasWithState uses ProcessingTimeTimeout" in operator_problem(timed)
    assert operator_problem(timed.replace("ProcessingTimeTimeout", "NoTimeout")) is None
    tws = ("~TransformWithStateInPySpark transformWithStateUDF(id#3L)#33, 1, [k#34L], Append, "
           "EventTime, pandas, false, 0")
    assert "transformWithState runs in TimeMode EventTime" in operator_problem(tws)
    assert operator_problem(tws.replace("EventTime", "NoTime")) is None
    assert fan_out_operator("+- ~Generate posexplode(xs#1), false, [p#2, x#3]").startswith(
        "posexplode")
    assert fan_out_operator("~Aggregate [window#18-T10000ms]\n+- ~Expand [[named_struct(start"
                            ", x)], [window#18-T10000ms, id#3L]]").startswith("a sliding")
    assert missing_package("ModuleNotFoundError: No module named 'scipy.stats'") == "scipy"
    assert missing_package("ImportError: cannot import name 'descriptor' from "
                           "'google.protobuf' (unknown location)") == "google.protobuf"
    assert missing_package("ImportError: cannot import name 'col2' from "
                           "'pyspark.sql.functions' (/x/functions.py)") is None
    semi = "~Project [id#1L]\n+- ~Join LeftSemi, (resource#2 = resource#9)"
    assert fan_out_operator(semi) is None
    both = ("~Join Inner, (a#1 = b#2)\n+- ~Generate explode(xs#3), false, [x#4]")
    assert fan_out_operator(both) is None  # two candidates: none named


# ------------------------------------------------------- the operator table, on real Spark
def _table() -> list[tuple[str, str, str]]:
    """(operator, outcome, tested with) of each row of docs/your-job.md's operator table."""
    text = DOC.read_text()
    start = text.index("<!-- operators:")
    rows = []
    for line in text[start:].splitlines()[3:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((cells[0], cells[1], cells[3].strip("`")))
    return rows


def test_the_table_names_every_operator_job_and_each_exists() -> None:
    rows = _table()
    named = {t for _, _, t in rows}
    assert {p.name for p in OPERATORS.glob("*.py")} <= named
    for _, outcome, tested in rows:
        assert outcome.split()[0] in ("judged", "refused")
        assert (OPERATORS / tested).is_file() or (ROOT / tested).is_file(), tested


@pytest.fixture(scope="module")
def lint_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, Path]]:
    """One ``pgval lint`` session and web-log sample for every operator of the table."""
    pytest.importorskip("pyspark.sql")
    from pgval.topologies.lint import lint_session

    work = tmp_path_factory.mktemp("lint")
    sample = weblog_sample(work / "sample", 600, 4)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = lint_session({})
    try:
        yield spark, work, sample
    finally:
        spark.stop()


#: The jobs whose rows fan out, and how lint names it.
FAN_OUTS = {"sliding_window.py": "fan-out by a sliding window",
            "explode.py": "fan-out by explode",
            "stream_stream_join.py": "fan-out by a join"}
#: What each refusal must name (the operator or the reason), by the job's file.
REFUSALS = {
    "update_mode.py": "aggregates without withWatermark",
    "pandas_state_timeout.py": "applyInPandasWithState uses ProcessingTimeTimeout",
    "transform_with_state_timers.py": "transformWithState runs in TimeMode ProcessingTime",
    "first_value.py": "calls first()",
    "seeded_random.py": "calls rand()",
    "float_key.py": "build.key names mean_id, which is floating-point",
    "key_not_unique.py": "the key does not identify an output",
    "cut_dependent.py": "other values than the batch's",
    "missing_package.py": "imports pgval_no_such_package",
}


@pytest.mark.parametrize(("operator", "outcome", "tested"),
                         [pytest.param(*r, id=r[2].removesuffix(".py")) for r in _table()
                          if "/" not in r[2]])
def test_each_operator_is_judged_or_refused_as_the_table_says(
        lint_spark: tuple[object, Path, object], operator: str, outcome: str,
        tested: str) -> None:
    from pgval.topologies.lint import try_job

    spark, work, sample = lint_spark
    found = try_job(spark, f"{OPERATORS / tested}:build", work / "sample", work,
                    "q_" + tested.removesuffix(".py"))
    report = LintReport(tested)
    judge(report, found, sample)
    if outcome == "judged" or outcome.startswith("judged "):
        assert report.problems == [], (operator, report.problems)
        assert report.stream_rows == report.expected_rows > 0
        if tested in FAN_OUTS:  # judged pair by pair, and named
            assert report.fan_out and report.fan_out.startswith(FAN_OUTS[tested])
        else:
            assert report.fan_out is None, report.fan_out
    else:
        assert len(report.problems) == 1, (operator, report.problems)
        assert REFUSALS[tested] in report.problems[0], report.problems


@pytest.mark.parametrize(("example", "named"), [
    ("sliding_windows.py", "fan-out by a sliding window"),
    ("post_after_get.py", "fan-out by a join"),
    ("rollups.py", "fan-out by explode")])
def test_the_fan_out_examples_are_judged_pair_by_pair(lint_spark: tuple, example: str,
                                                      named: str) -> None:
    from pgval.topologies.lint import try_job

    spark, work, sample = lint_spark
    found = try_job(spark, f"{ROOT / 'examples' / 'jobs' / example}:build", work / "sample",
                    work, "x_" + example.removesuffix(".py"))
    report = LintReport(example)
    judge(report, found, sample)
    assert report.problems == [] and report.stream_rows == report.expected_rows > 0
    assert report.fan_out.startswith(named), report.fan_out


# ------------------------------------------------------------------ the command, as run
def test_pgval_lint_on_a_kafka_job_with_late_records_names_the_drops(tmp_path: Path) -> None:
    """The orders job (10 s windows, 10 s watermark) on its model with records up to 40 s
    out of order: the stream drops those whose window ended before the previous batch's
    watermark, which the batch keeps; lint warns, exit 0: a run reports them apart (dropped
    behind the watermark). (Up to 25 s out of order drops nothing here: a window must have ended,
    not just the record's time.)"""
    t0 = time.monotonic()
    done = subprocess.run([*PGVAL, "lint", "examples/jobs/orders.py:build", "--replay",
                           "orders=examples/inputs/orders.jsonl", "--event-time-field", "ts",
                           "--disorder", "0.3:40000", "--records", "800", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    left = [p for p in tmp_path.glob("pgval-lint-*") if p.is_dir()]
    assert not left, f"the lint's work folder was left behind: {left}"
    report = json.loads(done.stdout)
    assert report["dropped_behind_watermark"] > 0 and report["ok"]
    assert any("behind the watermark" in w for w in report["warnings"])
    assert "warning: Spark dropped" in done.stderr and "Traceback" not in done.stderr
    assert seconds < 60, seconds


def test_validate_lints_the_job_before_any_cluster_starts(tmp_path: Path) -> None:
    t0 = time.monotonic()
    done = subprocess.run([*PGVAL, "validate", "--job", f"{OPERATORS / 'update_mode.py'}:build",
                           "--run-dir", str(tmp_path / "run"), "--db", str(tmp_path / "r.db")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.match(r"error: lint, before the run: --job .*update_mode.py:build: the job "
                    "aggregates without withWatermark", last), last
    assert "--no-lint runs anyway" in last
    assert not (tmp_path / "run").exists()  # no cluster, no run: nothing of it was made
    assert time.monotonic() - t0 < 90


def test_a_job_that_cannot_load_is_one_sentence_before_spark(tmp_path: Path) -> None:
    t0 = time.monotonic()
    done = subprocess.run([*PGVAL, "lint", f"{OPERATORS / 'missing_package.py'}:build"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "imports pgval_no_such_package" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - t0 < 20  # no Spark started
    kafka = subprocess.run([*PGVAL, "lint", "examples/jobs/orders.py:build"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert kafka.returncode == 2 and "input model" in kafka.stderr
