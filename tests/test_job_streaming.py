"""Structured Streaming's promise, on which the oracle of a user's job rests: each example
job run as a stream over the records (three micro-batches, the last ones past every
window) writes exactly the rows it gives as a batch over the same records; and the
validator, with those batch rows as its expectation, calls the stream exactly-once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pgval.oracle.rows import expected_from_rows
from pgval.records.parse import ResourceTable, job_outputs_from_kafka
from pgval.topologies.job import load
from tests.spark_local import local_session
from tests.strategies import to_inputs
from tests.test_job_batch import EXAMPLES, T0, _events, _tables
from tests.test_topology_streaming import RAW_DDL, write_batch

CLOSE = T0 + 3_600_000  # an hour past every window: the watermark passes them all


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    yield from local_session("pgval-job-streaming", cores=2)


def _closing(first_id: int, ts: int) -> list[dict]:
    """One GET and one POST per partition far in event time (as `pgval generate` ends)."""
    return [{"id": first_id - 3 * k - p, "type": t, "resource": "close", "event_ts": ts,
             "partition": p, "offset": 100_000 + 3 * k + p}
            for k, t in enumerate(("GET", "POST")) for p in range(3)]


def _stream(spark, tmp: Path, name: str, events: list[dict]) -> list[bytes]:
    from pgval.topologies.job_query import job_plan

    dirs = {t: tmp / t for t in ("GET", "POST")}
    for d in dirs.values():
        d.mkdir(parents=True)
    raw = {t: spark.readStream.schema(RAW_DDL).json(str(d)) for t, d in dirs.items()}
    out = job_plan(spark, load(f"{EXAMPLES / (name + '.py')}:build"), raw["GET"], raw["POST"])
    table = f"pgval_job_{name}"
    query = (out.writeStream.format("memory").queryName(table).outputMode("append")
             .option("checkpointLocation", str(tmp / "checkpoint")).start())
    try:
        for k, batch in enumerate([events, _closing(-1, CLOSE), _closing(-100, CLOSE + 1)]):
            for t, d in dirs.items():
                write_batch(d, f"batch-{k}", [r for r in batch if r["type"] == t])
            query.processAllAvailable()
        rows = spark.table(table).collect()
    finally:
        query.stop()
    assert all(json.loads(r.value)["_pgval_key"] == r.key for r in rows)
    return [r.value.encode() for r in rows]


@pytest.mark.parametrize("name", ["per_type_window", "enrich", "filter"])
def test_a_job_streams_what_it_gives_as_a_batch(spark: object, tmp_path: Path,
                                                name: str) -> None:
    from pgval.topologies.batch import batch_rows

    events = _events()
    values = _stream(spark, tmp_path, name, events)
    keys, ids, offsets = batch_rows(load(f"{EXAMPLES / (name + '.py')}:build"),
                                    spark, _tables(events), tmp_path / "batch")  # type: ignore[arg-type]
    table = ResourceTable()
    expected = expected_from_rows(keys, ids, offsets, to_inputs(events), table)
    n = len(values)
    produced = job_outputs_from_kafka(pa.array(values, pa.binary()), np.arange(n) + CLOSE,
                                      np.zeros(n, int), np.arange(n), table)
    assert produced.malformed == 0
    streamed = sorted((table.names[c], sorted(produced.ids[produced.offsets[k]:
                                                           produced.offsets[k + 1]].tolist()))
                      for k, c in enumerate(produced.resource.tolist()))
    batched = sorted((k, sorted(ids[offsets[i]:offsets[i + 1]].tolist()))
                     for i, k in enumerate(keys))
    assert streamed == batched
    from pgval.checker.validator import validate

    v = validate(expected, produced)
    assert v.guarantee == "exactly-once" and v.processed == len(expected.id_sorted) > 0
