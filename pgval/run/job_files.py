"""A user's job judged on recorded streams (``pgval check --job``): its batch oracle over
the recorded inputs, in a Spark process of its own (:mod:`pgval.topologies.check_job`),
and the recorded outputs judged by its rows, values included, as a run's are.

The Spark process runs in a private work folder guarded like a run's (``state.json`` and a
reaper: a kill of pgval does not leave it behind); the folder goes when the check ends.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pgval.checker.evaluate import Evaluation, evaluate
from pgval.cluster.guard import RunGuard
from pgval.core.errors import UserMistake
from pgval.evidence.bundle import value_check
from pgval.oracle.rows import (
    RowsError,
    expected_from_rows,
    key_by_single_id,
    rows_of,
    single_id_keys,
)
from pgval.oracle.values import DEFAULT_TOLERANCE
from pgval.records.parse import InputEvents, ResourceTable, job_outputs_from_rows
from pgval.records.phases import Phases
from pgval.run.job_oracle import batch_timeout_s, run_check_job


def judge_job_files(job: str, events: InputEvents, inputs: Path, outputs: Path,
                    window_ms: int, phases: Phases, spark_conf: dict[str, str] | None = None
                    ) -> Evaluation:
    """``job``'s recorded outputs judged by its batch run over the recorded inputs
    (``events``: the inputs as ``check`` read them)."""
    work = Path(tempfile.mkdtemp(prefix="pgval-check-job-"))
    guard = RunGuard(work, "check-job").start()
    try:
        said = run_check_job(job, inputs, outputs, work, dict(spark_conf or {}),
                             batch_timeout_s(len(events.id)))
        rows = pq.read_table(work / "expected.parquet")
        outs = pq.read_table(work / "outputs.parquet")
    finally:
        guard.stop()
        shutil.rmtree(work, ignore_errors=True)
    tolerance = said.get("tolerance")
    return _evaluate(rows, outs, events, window_ms, phases,
                     DEFAULT_TOLERANCE if tolerance is None else float(tolerance))


def _evaluate(rows: pa.Table, outs: pa.Table, events: InputEvents, window_ms: int,
              phases: Phases, tolerance: float) -> Evaluation:
    """The outputs (keyed and valued by Spark as the rows are) judged by the rows."""
    keys = ResourceTable()
    rows, by_id = key_by_single_id(rows)
    try:
        expected = expected_from_rows(*rows_of(rows), events, keys)
    except RowsError as exc:
        raise UserMistake(f"the job cannot be judged ID by ID: {exc}") from exc
    # An output without its IDs or its ingress time cannot be judged: malformed, counted.
    usable = pc.and_(pc.is_valid(outs.column("ids")), pc.is_valid(outs.column("ingress_ts")))
    malformed = outs.num_rows - int(pc.sum(usable.cast(pa.int64())).as_py() or 0)
    outs = outs.filter(usable)
    key = outs.column("key").combine_chunks()
    if by_id:
        key = single_id_keys(key, outs.column("ids").combine_chunks())
    n = outs.num_rows
    sunk = pa.table({"key": key, "ids": outs.column("ids"),
                     "written_ms": outs.column("ingress_ts"),
                     "batch": pa.array(np.full(n, -1, dtype=np.int64)),
                     "origin": pa.nulls(n, pa.string())})
    produced = job_outputs_from_rows(sunk, keys)
    produced = dataclasses.replace(produced, malformed=produced.malformed + malformed)
    written = (outs.column("value").combine_chunks().take(pa.array(produced.offset))
               if produced.offset is not None else None)
    values = value_check(rows, keys, produced, written, "all", tolerance)
    return evaluate(events, produced, "job", window_ms, phases, expected=expected,
                    values=values)
