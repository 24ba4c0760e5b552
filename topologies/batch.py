"""A user's job run as a batch over a run's inputs: the rows its streaming run must give.

Structured Streaming promises that a streaming query's result equals the same query run
as a batch over the same input, less what the watermark drops (``withWatermark`` does
nothing in a batch). :func:`batch_rows` takes that promise as the oracle: it gives the job's
``build`` the run's input events as batch DataFrames with the columns its streaming run
gets (:data:`pgval.topologies.job.SOURCE_COLUMNS`), and returns each output row's key —
``to_json`` of the key columns, the text the streaming query writes, in a session whose
time zone is UTC like the driver's — with its ``ids``, ready for
:func:`pgval.oracle.rows.expected_from_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgval.topologies.job import IDS, SOURCE_COLUMNS, SOURCES, Job, JobError, check_result

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The DDL of a source's columns (``event_ts`` a timestamp, as the streaming run gets it).
SOURCE_DDL = ", ".join(f"`{name}` {kind}" for name, kind in SOURCE_COLUMNS)
#: The column of the canonical key text, in the batch result and the driver's output.
KEY = "_pgval_key"


def key_column(key: tuple[str, ...]) -> Any:
    """``to_json(struct(key columns))``: one text per output key, the same in the
    streaming query and in the batch (both sessions in UTC)."""
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*[F.col(f"`{k}`") for k in key]))


def batch_sources(spark: SparkSession, tables: Mapping[str, pa.Table], workdir: Path
                  ) -> dict[str, DataFrame]:
    """Each source as a batch DataFrame of :data:`SOURCE_DDL` from an Arrow table with the
    columns ``id``, ``type``, ``resource``, ``event_ts`` (ms), ``partition``, ``offset``,
    through a Parquet file in ``workdir`` (no per-record Python, no pandas: the run's
    inputs may be millions of events)."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    schema = pa.schema([("id", pa.int64()), ("type", pa.string()), ("resource", pa.string()),
                        ("event_ts", pa.int64()), ("partition", pa.int32()),
                        ("offset", pa.int64())])
    out = {}
    workdir.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        table = tables.get(name)
        table = (schema.empty_table() if table is None
                 else table.select(schema.names).cast(schema))
        path = workdir / f"{name}.parquet"
        pq.write_table(table, path)
        raw = spark.read.schema("id BIGINT, type STRING, resource STRING, event_ts BIGINT, "
                                "partition INT, offset BIGINT").parquet(str(path))
        out[name] = raw.withColumn("event_ts", F.timestamp_millis("event_ts"))
    return out


def batch_rows(job: Job, spark: SparkSession, tables: Mapping[str, pa.Table], workdir: Path
               ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(keys, ids, offsets) of ``job`` run as a batch over ``tables`` (see
    :func:`batch_sources`); the job's output is checked as the streaming one is."""
    result = job.build(spark, batch_sources(spark, tables, workdir))
    key = check_result(job, result, streaming=None)
    table = result.select(key_column(key).alias(KEY), f"`{IDS}`").toArrow()
    keys = table.column(KEY).to_pylist()
    ids_col = table.column(IDS).combine_chunks()
    lengths = pc.list_value_length(ids_col).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = pc.list_flatten(ids_col)
    if flat.null_count:
        raise JobError(f"--job {job.ref}: the batch result has a null among its ids")
    return keys, flat.to_numpy(zero_copy_only=False).astype(np.int64), offsets
