"""The run's micro-batches replayed in the batch oracle's session: the job again as a stream
over exactly the records each batch of the run read (:mod:`pgval.oracle.replay` says why
and cuts the batches), one Parquet file per input and batch, read one file a batch
(``maxFilesPerTrigger`` 1, ``Trigger.AvailableNow``) into a memory table.

What it gives the batch oracle: the replay's rows (key, ids, value: the batch's columns)
and a summary — the batches replayed, the rows Spark dropped behind the watermark in the
replay, and whether the replay ran with the run's watermark at every batch the run
recorded (the proof that its batches were the run's).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pgval.oracle.replay import NoReplay, ReplayPlan, plan_replay, replay_mismatch, watermark_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pgval.topologies.job import Job

#: How long the replay may take: this much, plus this per batch (a local batch with state
#: takes well under a second on the 2-core machine; the batch oracle's own time-out allows
#: the same per batch: :func:`pgval.run.job_oracle.batch_timeout_s`).
BASE_TIMEOUT_S = 120.0
PER_BATCH_S = 5.0


def write_batches(folder: Path, tables: Mapping[str, pa.Table], plan: ReplayPlan) -> None:
    """Each input's records into one file per batch of the run (``NAME/batch-NNNNNN``),
    an empty file for a batch that read none, one second apart in batch order (the file
    source takes the oldest first); records no batch read are left out."""
    from pgval.core.files import private_temp_path

    stamp = time.time() - 2 * 86_400
    for name, table in tables.items():
        batch = plan.batch_of[name]
        order = np.argsort(batch, kind="stable")
        bounds = np.searchsorted(batch[order], np.arange(plan.batches + 1))
        (folder / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        for b in range(plan.batches):
            path = folder / name / f"batch-{b:06d}.parquet"
            with private_temp_path(path) as tmp:
                pq.write_table(table.take(pa.array(order[bounds[b]:bounds[b + 1]])), tmp)
            os.utime(path, (stamp + b, stamp + b))


def replay_run(spark: SparkSession, job: Job, tables: Mapping[str, pa.Table],
               positions: Mapping[str, tuple[str, np.ndarray, np.ndarray]],
               progress: list[dict[str, Any]], ddl: str, work: Path
               ) -> tuple[pa.Table | None, dict[str, Any]]:
    """The job replayed over the run's batches: (its keyed rows, or None when the replay
    cannot stand for the run; a summary with the reason). ``tables``: each input's records
    as the job reads them (``ddl``), ``positions`` their topic, partitions and offsets."""
    from pgval.topologies.batch import to_arrow
    from pgval.topologies.job_query import job_source
    from pgval.topologies.lint import keyed_rows, run_stream

    t0 = time.monotonic()
    try:
        plan = plan_replay(progress, positions)
    except NoReplay as exc:
        return None, {"used": False, "why": str(exc)}
    folder = work / "replay-batches"
    shutil.rmtree(folder, ignore_errors=True)  # a killed attempt's files
    write_batches(folder, tables, plan)
    frames = {name: spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1)
              .parquet(str(folder / name)) for name in tables}
    if job.reads_kafka:
        from pgval.job import KafkaInputs

        inputs: Any = KafkaInputs(spark, {n: positions[n][0] for n in tables}, {},
                                  recorded=frames)
    else:
        inputs = {name: job_source(frame) for name, frame in frames.items()}
    result = job.build(spark, inputs)
    # Every batch's progress is kept (the watermarks are compared), not the last 100.
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(plan.batches + 100))
    rows, batches = run_stream(spark, job, keyed_rows(job, result, True), work, "pgval_replay",
                               timeout_s=BASE_TIMEOUT_S + PER_BATCH_S * plan.batches,
                               over="the run's micro-batches replayed")
    table = to_arrow(rows)
    marks, dropped = {}, {}
    for b in batches:
        if isinstance(b.get("batch"), int):
            dropped[b["batch"]] = int(b.get("dropped") or 0)
            if b.get("watermark"):
                marks[b["batch"]] = watermark_ms({"eventTime": {"watermark": b["watermark"]}})
    said = {"batches": plan.batches, "dropping_batches": plan.dropping(),
            "replay_dropped": sum(dropped.values()),
            "seconds": round(time.monotonic() - t0, 3)}
    if why := replay_mismatch(plan, marks, dropped):
        return None, {"used": False, "why": f"the replay is not the run's batches: {why}",
                      **said}
    return table, {"used": True, **said}
