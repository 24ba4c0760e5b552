"""A user's foreachBatch sink (`--sink PATH.py:FUNCTION`): how it is loaded and refused, what
its reader must return, how the driver's writer records each write, and the two example
sinks on a local Spark session: the plain append stores a batch written twice twice, the
upsert keyed by batch id once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from pgval.topologies.job import JobError
from pgval.topologies.user_sink import SINK_DIR_ENV, SinkWriter, load_sink, read_back, rows_written
from tests.spark_local import local_session

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "sinks"


def test_a_sink_without_a_reader_or_function_is_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "no_read.py").write_text("def write(df, batch_id):\n    pass\n")
    with pytest.raises(JobError, match=r"needs a reader, read\(sink_dir\), beside write"):
        load_sink(f"{tmp_path / 'no_read.py'}:write")
    with pytest.raises(JobError, match="has no function put"):
        load_sink(f"{tmp_path / 'no_read.py'}:put")
    with pytest.raises(JobError, match="--sink 'x': expected PATH.py:FUNCTION"):
        load_sink("x")
    (tmp_path / "attr.py").write_text("def write(df, batch_id):\n    pass\n"
                                      "write.read = lambda d: []\n")
    assert load_sink(f"{tmp_path / 'attr.py'}:write").read(tmp_path) == []


@pytest.mark.parametrize(("returned", "needle"), [
    ("[{'ids': [1], 'written_ms': 5}]", "lack _pgval_key"),
    ("[{'_pgval_key': 'k', 'ids': 'x', 'written_ms': 5}]", "columns are not"),
    ("42", "not a pyarrow Table or a list of dicts"),
    ("1 / 0", "read(.*) failed: ZeroDivisionError"),
])
def test_a_reader_that_returns_something_else_is_one_sentence(tmp_path: Path, returned: str,
                                                               needle: str) -> None:
    (tmp_path / "s.py").write_text(f"def write(df, b):\n    pass\n\ndef read(d):\n"
                                   f"    return {returned}\n")
    with pytest.raises(JobError, match=needle):
        read_back(load_sink(f"{tmp_path / 's.py'}:write"), tmp_path)


def test_a_reader_may_return_an_arrow_table_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(
        "import pyarrow as pa\ndef write(df, b):\n    pass\n\ndef read(d):\n"
        "    return pa.table({'_pgval_key': ['a'], 'ids': [[1, 2]], 'written_ms': [7],"
        " 'extra': [0]})\n")
    table = read_back(load_sink(f"{tmp_path / 's.py'}:write"), tmp_path)
    # A column of the job's own the sink gives back is kept as the row's value text.
    assert table.to_pylist() == [{"key": "a", "ids": [1, 2], "written_ms": 7,
                                  "value": '{"extra":0}'}]
    (tmp_path / "e.py").write_text("def write(df, b):\n    pass\n\ndef read(d):\n"
                                   "    return []\n")
    empty = read_back(load_sink(f"{tmp_path / 'e.py'}:write"), tmp_path)
    assert empty.num_rows == 0 and empty.column_names == ["key", "ids", "written_ms", "value"]


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    yield from local_session("pgval-user-sink")


def _batch(spark, ids: list[int]):  # noqa: ANN001, ANN202
    return spark.createDataFrame([(json.dumps({"id": i}), [i], "r0001") for i in ids],
                                 "_pgval_key STRING, ids ARRAY<BIGINT>, resource STRING")


@pytest.mark.parametrize(("name", "stored"), [("sqlite_append", 2), ("sqlite_upsert", 1)])
def test_the_example_sinks_with_a_batch_written_twice(spark, tmp_path: Path,  # noqa: ANN001
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      name: str, stored: int) -> None:
    monkeypatch.delenv(SINK_DIR_ENV, raising=False)
    log: list[dict] = []
    sink = load_sink(f"{EXAMPLES / (name + '.py')}:write")
    writer = SinkWriter(sink, tmp_path / "sink",
                        lambda event, **fields: log.append({"event": event, **fields}))
    writer(_batch(spark, [1, 2, 3]), 0)
    writer(_batch(spark, [1, 2, 3]), 0)  # the same batch again: Spark's re-run after a crash
    writer(_batch(spark, [4]), 1)
    assert [e["event"] for e in log] == ["sink_write_start", "sink_write"] * 3
    assert [e["rows"] for e in log if e["event"] == "sink_write"] == [3, 3, 1]
    assert rows_written(log) == 7
    rows = read_back(sink, tmp_path / "sink").to_pylist()
    assert sorted(r["ids"][0] for r in rows) == sorted([1, 2, 3] * stored + [4])
    assert all(isinstance(r["written_ms"], int) and r["written_ms"] > 0 for r in rows)
    assert pa.Table.from_pylist(rows).num_rows == 3 * stored + 1
