"""`--sink delta`: a Delta Lake table written by pgval's foreachBatch writer with Delta's
idempotent writes (txnAppId/txnVersion), and read back by pgval through the transaction log
and raw. Real Delta (the jars for the installed Spark, resolved from Maven Central) on a
local Spark session in a process of its own (a JVM's jars are fixed at its start): a batch
id written twice lands once, Spark's own reader and pgval's log read give the same rows,
and a data file no commit names is seen raw only."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from pgval.run.sink_delta import DELTA_LOG, read_delta, read_delta_log
from pgval.run.sink_files import data_files

WRITE = '''
import json, sys
from pyspark.sql import SparkSession
from pgval.host.jars import ensure_delta_jars
from pgval.topologies.guarantee_sinks import DELTA_CONF, delta_write

table = sys.argv[1]
builder = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
           .config("spark.jars", ",".join(map(str, ensure_delta_jars())))
           .config("spark.sql.shuffle.partitions", "1"))
for k, v in DELTA_CONF.items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
write = delta_write(table, "pgval-test")

def batch(ids):
    return spark.createDataFrame([(json.dumps({"id": i}), [i], "r1") for i in ids],
                                 "_pgval_key STRING, ids ARRAY<BIGINT>, resource STRING")

write(batch([1, 2, 3]), 0)
write(batch([1, 2, 3]), 0)   # Spark's re-run of batch 0 after a crash: skipped
write(batch([4, 5]), 1)
rows = spark.read.format("delta").load(table).select("_pgval_key", "ids").collect()
print(json.dumps(sorted([r["_pgval_key"], r["ids"]] for r in rows)))
spark.stop()
'''


def test_delta_idempotent_writes_read_through_the_log_and_raw(tmp_path: Path) -> None:
    table = tmp_path / "table"
    done = subprocess.run([sys.executable, "-c", WRITE, str(table)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    sparks = json.loads(done.stdout.strip().splitlines()[-1])
    assert [ids[0] for _, ids in sparks] == [1, 2, 3, 4, 5]  # batch 0 once
    files, versions = read_delta_log(table)
    assert versions == 2 and {c.batch for c in files.values()} == {0, 1}  # txnVersion
    read = read_delta(table)
    assert not any(read.problems.values()), read.problems
    mine = sorted([k, ids] for k, ids in zip(read.through_log.column("key").to_pylist(),
                                             read.through_log.column("ids").to_pylist(),
                                             strict=True))
    assert mine == sparks
    assert read.raw.num_rows == read.through_log.num_rows
    # A write cut short before its commit leaves its data file in the table's folder: raw
    # only, with no batch; through the log it is no row.
    one = data_files(table)[0]
    shutil.copyfile(one, one.with_name("part-00000-cut-short.snappy.parquet"))
    again = read_delta(table)
    extra = pq.read_metadata(one).num_rows
    assert again.through_log.num_rows == read.through_log.num_rows
    assert again.raw.num_rows == read.raw.num_rows + extra
    assert again.raw.filter(again.raw.column("batch").to_numpy() == -1).num_rows == extra
    assert (table / DELTA_LOG).is_dir()
