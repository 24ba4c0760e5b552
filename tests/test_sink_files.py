"""Spark's file sink, as pgval reads it back (:mod:`pgval.run.sink_files`): a real streaming
query (local Spark, the example windowed job over file sources, several micro-batches)
writes Parquet through the file sink; pgval's read through the ``_spark_metadata`` log
must give exactly the rows Spark's own reader gives (it reads through the log too), and
its raw read the same while no batch ran twice. A data file no log entry names — what a
batch that was cut short and run again leaves behind — shows in the raw read only, and
the validator sees exactly its IDs duplicated there and nowhere else."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pgval.oracle.rows import expected_from_rows, rows_of
from pgval.records.parse import ResourceTable, job_outputs_from_rows
from pgval.run.sink_files import METADATA_DIR, data_files, read_file_sink, read_log
from pgval.topologies.job import load
from tests.spark_local import local_session
from tests.strategies import to_inputs
from tests.test_job_batch import EXAMPLES, _events
from tests.test_job_streaming import CLOSE, _closing
from tests.test_topology_streaming import RAW_DDL, write_batch


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    yield from local_session("pgval-file-sink", cores=2)


@pytest.fixture(scope="module")
def sunk(spark, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:  # noqa: ANN001
    """The windowed example job written by the file sink over four micro-batches."""
    from pgval.topologies.job_query import job_rows

    tmp = tmp_path_factory.mktemp("filesink")
    dirs = {t: tmp / t for t in ("GET", "POST")}
    for d in dirs.values():
        d.mkdir()
    raw = {t: spark.readStream.schema(RAW_DDL).json(str(d)) for t, d in dirs.items()}
    job = load(f"{EXAMPLES / 'per_type_window.py'}:build")
    rows = job_rows(spark, job, raw["GET"], raw["POST"])
    out = tmp / "out"
    query = (rows.writeStream.format("parquet").option("path", str(out)).outputMode("append")
             .option("checkpointLocation", str(tmp / "checkpoint")).start())
    events = _events(600)
    try:
        for k, batch in enumerate([events[:300], events[300:], _closing(-1, CLOSE),
                                   _closing(-100, CLOSE + 1)]):
            for t, d in dirs.items():
                write_batch(d, f"batch-{k}", [r for r in batch if r["type"] == t])
            query.processAllAvailable()
    finally:
        query.stop()
    return out, events


def test_the_log_read_is_sparks_own_read_and_raw_agrees_while_nothing_ran_twice(
        spark, sunk: tuple[Path, list[dict]]) -> None:  # noqa: ANN001
    out, _ = sunk
    entries, batches = read_log(out)
    assert batches >= 4 and entries  # a log file per batch, naming the data files
    read = read_file_sink(out)
    assert not any(read.problems.values()), read.problems
    spark_rows = spark.read.parquet(str(out)).select("_pgval_key", "ids").collect()
    want = sorted((r["_pgval_key"], sorted(r["ids"])) for r in spark_rows)
    mine = sorted(zip(read.through_log.column("key").to_pylist(),
                      (sorted(i) for i in read.through_log.column("ids").to_pylist()),
                      strict=True))
    assert mine == want and len(want) > 5
    assert sorted(read.raw.column("key").to_pylist()) == sorted(k for k, _ in want)
    # Through the log each row carries the batch that committed its file.
    assert min(read.through_log.column("batch").to_pylist()) >= 0


def test_a_file_no_log_names_is_seen_raw_only_and_its_ids_are_the_duplicates(
        spark, sunk: tuple[Path, list[dict]], tmp_path: Path) -> None:  # noqa: ANN001
    out, events = sunk
    # What a batch cut short before its log entry leaves: its data file, under another
    # name when the batch runs again (the file sink names files by a fresh UUID). The log
    # names files by their absolute paths, as Spark reads them: the orphan goes beside
    # them, and away again after.
    orphan_of = max(data_files(out), key=lambda p: pq.read_metadata(p).num_rows)
    orphan = orphan_of.with_name("part-00000-re-run-" + orphan_of.name.split("-", 2)[-1])
    shutil.copyfile(orphan_of, orphan)
    assert (out / METADATA_DIR).is_dir()
    try:
        read = read_file_sink(out)
    finally:
        orphan_rows = pq.read_table(orphan, columns=["ids"])
        orphan.unlink()
    orphan_ids = sorted(i for ids in orphan_rows.column("ids").to_pylist() for i in ids
                        if i >= 0)
    assert read.raw.num_rows == read.through_log.num_rows + orphan_rows.num_rows

    # Judged as pgval judges a run: the job's batch rows as the expectation.
    from pgval.topologies.batch import batch_sources, batch_table
    from tests.test_job_batch import _tables

    job = load(f"{EXAMPLES / 'per_type_window.py'}:build")
    rows = batch_table(job, spark, batch_sources(spark, _tables(events), tmp_path / "b"))
    from pgval.checker.validator import validate

    verdicts = {}
    for name, table in (("log", read.through_log), ("raw", read.raw)):
        keys = ResourceTable()
        expected = expected_from_rows(*rows_of(rows), to_inputs(events), keys)
        produced = job_outputs_from_rows(table.filter(np.asarray(
            [all(i >= 0 for i in ids) for ids in table.column("ids").to_pylist()])), keys)
        v = validate(expected, produced)
        verdicts[name] = (v.guarantee, sorted(int(i) for i in v.ids("duplicate")))
    assert verdicts["log"] == ("exactly-once", [])
    assert verdicts["raw"] == ("at-least-once", orphan_ids)


def test_a_compacted_log_names_each_file_with_its_batch(tmp_path: Path) -> None:
    """Every 10th log file is ``N.compact`` (batch N's files and all before); Spark deletes
    older plain files after a delay. Each file gets the batch whose log file first names
    it; a deleted entry is no file; a plain file of another writer's version is skipped."""
    import json
    import os

    log = tmp_path / METADATA_DIR
    log.mkdir()

    def entry(name: str, action: str = "add") -> str:
        return json.dumps({"path": f"file://{tmp_path}/{name}", "size": 1, "isDir": False,
                           "modificationTime": 0, "blockReplication": 1, "blockSize": 1,
                           "action": action})

    names = {b: f"part-{b:05d}.parquet" for b in range(12)}
    for b in range(9):
        if b != 3:  # batch 3's own log file was cleaned up after the compaction
            (log / str(b)).write_text("v1\n" + entry(names[b]) + "\n")
    (log / "9.compact").write_text("v1\n" + "\n".join(
        [entry(names[b]) for b in range(10)] + [entry(names[5], "delete")]) + "\n")
    (log / "10").write_text("v1\n" + entry(names[10]) + "\n")
    for f in log.iterdir():  # log file of batch b written at 1000 + b s
        b = int(f.name.removesuffix(".compact"))
        os.utime(f, (1_000 + b, 1_000 + b))
    entries, batches = read_log(tmp_path)
    assert batches == 11
    got = {Path(p).name: (e.batch, e.committed_ms) for p, e in entries.items()}
    want = {names[b]: (b, (1_000 + b) * 1000) for b in range(11) if b not in (3, 5)}
    want[names[3]] = (9, 1_009_000)  # its own file gone: the compaction names it first
    assert got == want  # batch 5's file deleted by the log: no file


def test_the_watch_counts_rows_not_files(tmp_path: Path) -> None:
    """Every micro-batch writes a file, an empty one when it has no rows (Spark's
    FileFormatWriter keeps the first partition's file for the schema): the crash point
    after-sink-write compares counts at a batch's start and end, so it must count rows."""
    import pyarrow as pa

    from pgval.run.sink_readback import FileSinkWatch

    out = tmp_path / "out"
    (out / METADATA_DIR).mkdir(parents=True)
    (out / METADATA_DIR / "0").write_text("v1\n")
    schema = pa.schema([("key", pa.string()), ("ids", pa.list_(pa.int64()))])
    watch = FileSinkWatch(out)
    pq.write_table(schema.empty_table(), out / "part-00000-a.c000.snappy.parquet")
    assert watch.count() == 0  # an empty batch's file: nothing written
    rows = pa.table({"key": ["a", "b", "c"], "ids": [[1], [2], [3, 4]]}, schema=schema)
    pq.write_table(rows, out / "part-00000-b.c000.snappy.parquet")
    (out / "part-00001-c.c000.snappy.parquet").write_bytes(b"PAR1 half-written")
    assert watch.count() == 3  # the half-written file is counted once it is whole
    pq.write_table(rows, out / "part-00001-c.c000.snappy.parquet")
    assert watch.count() == 6
