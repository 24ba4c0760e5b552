"""The Spark oracle and checker (Algorithms 1 and 3 as DataFrame operations) against numpy's:
identical rows, counts, phase rows and anomaly sets on any run Hypothesis draws, built-in or a
job's fan-out, and the known answer on one run with every anomaly planted by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgval.checker.validator import validate
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.oracle import expected_outputs
from pgval.oracle.rows import expected_from_rows
from pgval.records.parse import ResourceTable
from pgval.records.phases import Phases
from pgval.scale.agreement import check_on_spark, differences, spark_call
from pgval.scale.checker import validate_on_spark
from pgval.scale.frames import write_frames
from pgval.scale.oracle import expected_on_spark
from tests.spark_local import local_session
from tests.strategies import to_inputs, to_outputs
from tests.test_oracle_rows import _flat, _out, _sliding
from tests.test_validator_properties import scenario


@pytest.fixture(scope="module")
def spark():
    yield from local_session("pgval-scale-checker")


def _judged_twice(spark, tmp: Path, expected, outputs, phases=None, wrong_value=None):
    frames = write_frames(expected, outputs, tmp / "frames", wrong_value)
    mine = validate(expected, outputs, phases, wrong_value=wrong_value)
    theirs = validate_on_spark(spark, frames, expected.topology, phases, tmp / "sets",
                               outputs.malformed, values_compared=wrong_value is not None)
    return mine, theirs


SLOW = settings(max_examples=8, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


@SLOW
@given(sc=scenario())
def test_the_spark_oracle_and_checker_agree_with_numpy_on_built_in_runs(
        spark, tmp_path_factory, sc) -> None:
    """Any SST or MST run (IDs retried into Kafka, outputs lost, doubled, misplaced, early),
    its expected outputs computed by the Spark oracle from the input events: the same rows,
    the same figures, phase rows and anomaly sets as numpy's oracle and checker."""
    events, outputs, topology, w, bounds = sc
    inputs = to_inputs(events)
    expected = expected_outputs(inputs, topology, w)
    produced = to_outputs(outputs, inputs.resources)
    folder = tmp_path_factory.mktemp("run")
    check = check_on_spark(expected, produced, Phases(*bounds) if bounds else None, None,
                           keep=folder, spark=spark, events=inputs)
    assert check.spark_oracle and check.differences == []
    made = spark.read.parquet(str(folder / "expected" / "rows")).orderBy("row").collect()
    assert [(r["window_start"], r["resource"], r["gets"], r["posts"]) for r in made] == list(
        zip(expected.window_start.tolist(), expected.resource.tolist(), expected.gets.tolist(),
            expected.posts.tolist(), strict=True))
    _, duplicates = expected_on_spark(spark, folder / "inputs.parquet", topology, w,
                                      folder / "again")
    assert duplicates == expected.duplicate_inputs


@SLOW
@given(rows=st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True),
                     min_size=1, max_size=5),
       picks=st.lists(st.tuples(st.integers(0, 5), st.integers(-1, 8), st.integers(0, 30)),
                      max_size=25),
       ingress=st.lists(st.integers(0, 30), min_size=8, max_size=8),
       wrong=st.lists(st.booleans(), min_size=25, max_size=25), compare=st.booleans(),
       bounds=st.lists(st.integers(0, 30), min_size=3, max_size=3))
def test_the_spark_checker_agrees_with_numpy_on_a_jobs_fan_out(
        spark, tmp_path_factory, rows, picks, ingress, wrong, compare, bounds) -> None:
    """Any rows (an input in several), outputs at any key with any IDs at any time (early
    ones among them), values wrong or not: the same figures and sets from both."""
    inputs = to_inputs([{"id": i, "type": "GET", "resource": "a", "event_ts": i,
                         "ingress_ts": ingress[i]} for i in range(8)])
    keys = [f'{{"k":{k}}}' for k in range(len(rows))]
    ids, offsets = _flat(rows)
    table = ResourceTable()
    expected = expected_from_rows(keys, ids, offsets, inputs, table)
    produced: dict[tuple[int, int], list[int]] = {}
    for row, i, at in picks:  # row 5 may be a key no row has
        key = keys[row] if row < len(rows) else '{"k":"other"}'
        produced.setdefault((row, at), [key]).append(i)
    outputs = to_outputs([_out(found[0], found[1:], at) for (_, at), found in produced.items()],
                         table)
    wrong_value = np.array(wrong[:len(outputs)], dtype=bool) if compare else None
    mine, theirs = _judged_twice(spark, tmp_path_factory.mktemp("run"), expected, outputs,
                                 Phases(*sorted(bounds)), wrong_value)
    assert differences(mine, theirs) == []


def test_every_planted_anomaly_is_counted_by_the_spark_checker(spark, tmp_path: Path) -> None:
    """A sliding window's six pairs of four inputs, with one of each anomaly planted: the
    Spark checker's counts are the ones known by hand, not only numpy's."""
    table, expected = _sliding()  # w1 ← 1, 2; w2 ← 2, 3; w3 ← 3, 4; input i arrives at i
    outputs = to_outputs([
        _out('{"w":1}', [1, 2], at=10),   # both pairs processed
        _out('{"w":1}', [1], at=11),      # (1, w1) again: a duplicate
        _out('{"w":2}', [2, 3, 1, 99], at=12),  # 1 is in no w2 pair, 99 in no row: incorrect
        _out('{"w":3}', [4], at=3),       # before input 4 arrived: incorrect, early
        _out('{"w":3}', [3], at=13),      # (3, w3) with a wrong value: incorrect
    ], table)
    wrong = np.array([False, False, False, False, True])
    mine, theirs = _judged_twice(spark, tmp_path, expected, outputs, wrong_value=wrong)
    assert differences(mine, theirs) == []
    assert (theirs.expected, theirs.processed, theirs.unprocessed, theirs.duplicate,
            theirs.incorrect) == (6, 4, 2, 1, 4)
    assert (theirs.output_before_input, theirs.wrong_value, theirs.expected_inputs) == (1, 1, 4)
    assert theirs.ids("unprocessed").tolist() == [3, 4]  # (3, w3) and (4, w3)
    assert theirs.ids("duplicate").tolist() == [1]
    assert theirs.ids("incorrect").tolist() == [1, 3, 4, 99]
    assert theirs.guarantee == "none"
    # Reliable: (2, w1), (2, w2), (3, w2). The stray 1 in w2 is charged to 1's first processed
    # pair (1, w1), the early 4 and the wrong 3 to their own pairs (4, w3) and (3, w3).
    assert theirs.reliable == 3 and theirs.incorrect_ids == 3


def test_a_difference_between_the_checkers_is_named(spark, tmp_path: Path) -> None:
    """The comparison can fail: a Spark result with one ID left out of a set and one figure
    changed is told apart from numpy's, each in a sentence."""
    table, expected = _sliding()
    outputs = to_outputs([_out('{"w":1}', [1, 2]), _out('{"w":2}', [2, 3])], table)
    mine, theirs = _judged_twice(spark, tmp_path, expected, outputs)
    assert differences(mine, theirs) == []
    theirs.duplicate += 1
    theirs.sets["unprocessed"] = theirs.sets["duplicate"]  # an empty set in its place
    said = differences(mine, theirs)
    assert "duplicate: numpy 0, Spark 1" in said
    assert any(s.startswith("unprocessed IDs differ: 2 only in numpy's (e.g. 3, 4)")
               for s in said)


@pytest.mark.parametrize("args", [["--spark-out", "sets"], ["--spark-master", "local[1]"],
                                  ["--checker", "both", "--store", "--db", "r.db"]])
def test_the_spark_checkers_options_alone_are_refused_in_one_sentence(tmp_path: Path,
                                                                       args: list[str]) -> None:
    """Options of the Spark checker without it, or with an import (which judges nothing),
    end in one sentence and exit 2, before anything is read."""
    from click.testing import CliRunner

    from pgval.cli.app import main

    (tmp_path / "run" / "evidence").mkdir(parents=True)
    result = CliRunner().invoke(main, ["recheck", str(tmp_path / "run"), *args])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert ("go with --checker both" in said or "--checker judge a re-check" in said), said
    assert "Traceback" not in said


def test_retries_at_one_time_and_no_inputs_at_all_agree(spark, tmp_path: Path) -> None:
    """Fixed cases the drawn ones rarely reach: an ID retried at the same ingress time (the
    event read first is kept, in both oracles) in another window, and a run with no input."""
    events = [{"id": 7, "type": "GET", "resource": "r0", "event_ts": 5, "ingress_ts": 20},
              {"id": 7, "type": "GET", "resource": "r1", "event_ts": 95, "ingress_ts": 20},
              {"id": 8, "type": "GET", "resource": "r0", "event_ts": -3, "ingress_ts": 21}]
    for drawn, outputs in ((events, [{"window_start": 0, "resource": "r0", "count": 1,
                                      "ids": [7], "ingress_ts": 30}]), ([], [])):
        inputs = to_inputs(drawn)
        expected = expected_outputs(inputs, "sst", 10)
        check = check_on_spark(expected, to_outputs(outputs, inputs.resources), None, None,
                               keep=tmp_path / str(len(drawn)), spark=spark, events=inputs)
        assert check.differences == [], check.differences
        assert check.spark.duplicate_inputs == expected.duplicate_inputs == (1 if drawn else 0)
    assert check.spark.guarantee == "unknown"  # nothing expected: no verdict


def test_a_session_already_active_or_a_cluster_without_shared_tables_is_refused(
        spark, tmp_path: Path) -> None:
    """The checker never takes over a caller's session (it would stop it, on its master)
    and never writes a cluster's tables where only this machine reads them."""
    table, expected = _sliding()
    outputs = to_outputs([_out('{"w":1}', [1, 2])], table)
    with pytest.raises(UserMistake, match="already active"):
        check_on_spark(expected, outputs, None, None, master="local[1]", keep=tmp_path)
    with pytest.raises(UserMistake, match="storage every executor shares"):
        check_on_spark(expected, outputs, None, None, master="spark://elsewhere:7077")
    assert spark.range(3).count() == 3  # the caller's session still runs


def test_a_failure_of_spark_is_one_sentence() -> None:
    from py4j.protocol import Py4JError

    def fails() -> None:
        raise Py4JError("An error occurred while calling o12.parquet\nat org.apache...")

    with pytest.raises(EnvironmentFailure) as caught:
        spark_call("local[2]", fails)
    assert str(caught.value) == ("the Spark checker failed on local[2]: An error occurred "
                                 "while calling o12.parquet")


# ---------------------------------------------------------------- a user's job's tables
def _job_read(folder: Path, inputs: list[int], outputs: list[tuple[str, str, list[int]]]
              ) -> dict[str, Path]:
    """A job's read-back tables (as :func:`pgval.scale.kafka_read.read_back_on_spark` with
    ``job`` writes them): inputs at ingress 100 × their ID, outputs one a second."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    n = len(inputs)
    tables = {
        "inputs": pa.table({"id": pa.array(inputs, pa.int64()), "is_get": [True] * n,
                            "resource": pa.array([0] * n, pa.int32()),
                            "event_ts": pa.array([100 * i for i in inputs], pa.int64()),
                            "ingress_ts": pa.array([100 * i for i in inputs], pa.int64()),
                            "pos": pa.array(range(n), pa.int64())}),
        "outputs": pa.table({
            "output": pa.array(range(len(outputs)), pa.int64()),
            "ingress_ts": pa.array([10_000 + 1000 * k for k in range(len(outputs))],
                                   pa.int64()),
            "position": pa.array(range(len(outputs)), pa.int64()),
            "key": [k for k, _, _ in outputs], "value": [v for _, v, _ in outputs],
            "one_id": pa.array([i[0] if len(i) == 1 else None for _, _, i in outputs],
                               pa.int64()),
            "n_ids": pa.array([len(i) for _, _, i in outputs], pa.int64()),
            "wrong_value": [False] * len(outputs)}),
        "occurrences": pa.table({
            "output": pa.array([o for o, (_, _, i) in enumerate(outputs) for _ in i], pa.int64()),
            "k": pa.array([k for _, _, i in outputs for k in range(len(i))], pa.int64()),
            "id": pa.array([x for _, _, i in outputs for x in i], pa.int64())})}
    tables["staged_outputs"] = tables["outputs"].select(["value"])
    paths = {}
    for name, table in tables.items():
        (folder / name).mkdir()
        pq.write_table(table, folder / name / "part-0.parquet")
        paths[name] = folder / name
    return paths


def _batch(folder: Path, rows: list[tuple[str | None, list[int | None] | None, str]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    pq.write_table(pa.table({"key": pa.array([k for k, _, _ in rows], pa.string()),
                             "ids": pa.array([i for _, i, _ in rows], pa.list_(pa.int64())),
                             "value": [v for _, _, v in rows]}), folder / "part-0.parquet")
    return folder


def test_a_jobs_rows_keyed_by_id_with_a_wrong_value(spark, tmp_path: Path) -> None:
    """Rows whose key texts repeat, one ID each, are keyed by their ID (so are the outputs
    with one ID); a control-only row goes; an input retried into Kafka counts once; an
    output whose values differ beyond the tolerance is incorrect, its ID unprocessed."""
    from pgval.scale.checker import validate_on_spark
    from pgval.scale.job_rows import job_tables_on_spark

    a, b = '{"t":"a"}', '{"t":"b"}'
    batch = _batch(tmp_path / "batch", [(a, [1], '{"n":1}'), (a, [2], '{"n":1}'),
                                        (b, [3], '{"n":1.0}'), (a, [-5], '{"n":1}')])
    read = _job_read(tmp_path / "read", [1, 2, 3, 3], [
        (a, '{"n":1}', [1]), (a, '{"n":1}', [2]), (a, '{"n":1}', [2]),
        (b, '{"n":2.0}', [3])])
    made = job_tables_on_spark(spark, batch, read, (-10, -1), 1e-9, tmp_path / "tables")
    assert made.problem is None and made.by_id and made.values_compared
    assert (made.rows, made.duplicate_inputs) == (3, 1)
    v = validate_on_spark(spark, made.frames, "job", None, tmp_path / "sets", 0, True)
    assert (v.expected, v.processed, v.duplicate, v.incorrect, v.wrong_value) == (3, 2, 1, 1, 1)
    assert v.ids("unprocessed").tolist() == [3] and v.ids("duplicate").tolist() == [2]
    assert (v.expected_outputs, v.outputs, v.correct_outputs) == (3, 4, 3)  # a copy is right


def test_a_jobs_row_whose_ids_are_null_is_an_expected_output_of_no_input(
        spark, tmp_path: Path) -> None:
    """As the numpy path reads it (``fill_null``): the row stays, listing no input."""
    from pgval.scale.checker import validate_on_spark
    from pgval.scale.job_rows import job_tables_on_spark

    batch = _batch(tmp_path / "batch", [("k", [1, 2], "{}"), ("empty", None, "{}")])
    read = _job_read(tmp_path / "read", [1, 2], [("k", "{}", [1, 2])])
    made = job_tables_on_spark(spark, batch, read, None, 1e-9, tmp_path / "tables")
    assert made.problem is None and not made.by_id and made.rows == 2
    v = validate_on_spark(spark, made.frames, "job", None, tmp_path / "sets", 0, True)
    assert (v.expected, v.processed, v.expected_outputs, v.missing_outputs) == (2, 2, 2, 1)


@pytest.mark.parametrize("rows,said", [
    ([(None, [1], "{}")], "a row whose key is null"),
    ([("k", [1, 2], "{}"), ("k", [3], "{}")], "two rows with the key k"),
    ([("k", [1, 1], "{}")], "input ID 1 twice in one row"),
    ([("k", [1, 99], "{}")], "lists ID 99, which is no input"),
    ([("k", [1, None], "{}")], "a null among its ids"),
])
def test_a_jobs_rows_the_validator_cannot_use_are_one_sentence(
        spark, tmp_path: Path, rows: list, said: str) -> None:
    from pgval.scale.job_rows import NOT_JUDGEABLE, job_tables_on_spark

    read = _job_read(tmp_path / "read", [1, 2, 3], [("k", "{}", [1])])
    made = job_tables_on_spark(spark, _batch(tmp_path / "batch", rows), read, None, 1e-9,
                               tmp_path / "tables")
    assert made.problem is not None and made.problem.startswith(NOT_JUDGEABLE)
    assert said in made.problem and not made.frames


def test_the_reads_proof_and_counts_are_the_records_counted_by_hand(spark) -> None:
    """The Spark read-back's proof per partition and its counts, from one aggregation over
    both staged tables: each partition's records and last offset (a partition of the
    snapshot with none read: 0 and no offset), a topic read both as an input and as the
    output with both reads' records, malformed records (a null flag among them) and
    pgval's own records counted apart."""
    from pgval.scale.kafka_read import PartitionRead, _tallies

    columns = "topic STRING, partition INT, offset BIGINT, good BOOLEAN, {} BOOLEAN"
    staged_in = spark.createDataFrame([
        ("in0", 0, 0, True, False), ("in0", 0, 1, True, True), ("in0", 1, 5, False, None),
        ("both", 0, 0, True, False), ("both", 0, 1, True, False)], columns.format("control"))
    staged_out = spark.createDataFrame([
        ("out", 0, 0, True, False), ("out", 0, 3, False, None), ("both", 0, 7, True, True)],
        columns.format("dropped"))
    ends = {"in0": {0: 2, 1: 6, 2: 0}, "both": {0: 8}, "out": {0: 4}}
    proof, counts = _tallies(staged_in, staged_out, ends)
    assert proof == [PartitionRead("in0", 0, 2, 2, 1), PartitionRead("in0", 1, 6, 1, 5),
                     PartitionRead("in0", 2, 0, 0, None), PartitionRead("both", 0, 8, 3, 7),
                     PartitionRead("out", 0, 4, 2, 3)]
    assert counts == {"inputs": 3, "control_inputs": 1, "malformed_inputs": 1,
                      "outputs": 1, "control_outputs": 1, "malformed_outputs": 1}
