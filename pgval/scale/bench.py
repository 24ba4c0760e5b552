"""The Spark checker's benchmark beside the numpy checker's, on one synthetic SST run.

The run: EVENTS inputs (99.5 % GET, 16 resources, 100,000 ev/s of event time, 10 s windows)
and their expected outputs as produced outputs, a few lost and a few written twice so that
anomalies are found. Building them is not timed. Timed: numpy's oracle and checker; the
inputs and outputs written as Parquet; the Spark session's start; the Spark oracle and
checker. Each process's peak resident memory
is read from ``/proc`` (``VmHWM``): this Python process's, and the Spark driver JVM's.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pgval.checker.validator import validate
from pgval.core.errors import UserMistake
from pgval.oracle import expected_outputs
from pgval.oracle.expected import ExpectedOutputs
from pgval.records.parse import InputEvents, OutputRecords, ResourceTable
from pgval.scale.agreement import (
    DEFAULT_HEAP_MB,
    checker_session,
    differences,
    is_local,
    spark_call,
)
from pgval.scale.checker import validate_on_spark
from pgval.scale.frames import write_inputs, write_produced
from pgval.scale.oracle import expected_on_spark

WINDOW_MS = 10_000
RESOURCES = 16


@dataclass
class SparkCheckerBench:
    events: int
    outputs: int
    master: str
    stages_s: dict[str, float] = field(default_factory=dict)
    #: Peak resident memory (MiB) of this Python process and of the Spark driver's JVM.
    peak_mb: dict[str, float | None] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return not self.differences


def synthetic_run(n_events: int, seed: int = 7
                  ) -> tuple[InputEvents, ExpectedOutputs, OutputRecords]:
    """``n_events`` SST inputs, their expected outputs, and those outputs as produced: every
    997th lost, every 991st written twice."""
    rng = np.random.default_rng(seed)
    idx = np.arange(n_events, dtype=np.int64)
    event_ts = 1_700_000_000_000 + idx // 100
    table = ResourceTable(f"r{r}" for r in range(RESOURCES))
    events = InputEvents(idx, rng.random(n_events) < 0.995, (idx % RESOURCES).astype(np.int32),
                         event_ts, event_ts + rng.integers(1, 30, n_events), table)
    expected = expected_outputs(events, "sst", WINDOW_MS)
    rows = np.arange(len(expected))
    chosen = np.r_[rows[rows % 997 != 5], rows[rows % 991 == 3]]
    lengths = np.diff(expected.offsets)[chosen]
    starts = expected.offsets[:-1][chosen]
    offsets = np.zeros(len(chosen) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    window_start = expected.window_start[chosen]
    minus = np.full(len(chosen), -1, dtype=np.int64)
    outputs = OutputRecords(
        window_start=window_start, window_end=window_start + WINDOW_MS,
        resource=expected.resource[chosen], count=expected.gets[chosen], gets=minus,
        posts=minus, ingress_ts=window_start + WINDOW_MS + 1500 + np.arange(len(chosen)) % 17,
        position=np.arange(len(chosen), dtype=np.int64), ids=expected.ids[flat],
        offsets=offsets, resources=table)
    return events, expected, outputs


def peak_mb(pid: int | str = "self") -> float | None:
    """Peak resident memory of a process (``VmHWM``), MiB; None where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_spark_checker_bench(workdir: Path, n_events: int, master: str = "local[2]",
                            heap_mb: int = DEFAULT_HEAP_MB) -> SparkCheckerBench:
    """Time both checkers on one synthetic run of ``n_events`` inputs (tables in ``workdir``)."""
    if not is_local(master):
        raise UserMistake(f"the bench writes its tables on this machine's disk: run it with "
                          f"local[N], not {master}")
    events, _, outputs = synthetic_run(n_events)
    result = SparkCheckerBench(n_events, len(outputs), master)

    def timed(name: str, fn):  # noqa: ANN001, ANN202 - a local stopwatch
        t = time.perf_counter()
        value = fn()
        result.stages_s[name] = time.perf_counter() - t
        return value

    expected = timed("numpy oracle", lambda: expected_outputs(events, "sst", WINDOW_MS))
    mine = timed("numpy checker", lambda: validate(expected, outputs))
    result.peak_mb["python"] = peak_mb()
    inputs = timed("inputs, outputs → Parquet", lambda: (
        write_inputs(events, workdir / "inputs.parquet"),
        write_produced(outputs, workdir / "produced"))[0])
    produced = workdir / "produced"
    spark = timed("Spark session start", lambda: checker_session(master, heap_mb))
    try:
        made, _ = timed("Spark oracle", lambda: spark_call(master, lambda: expected_on_spark(
            spark, inputs, "sst", WINDOW_MS, workdir / "expected")))
        frames = {**made, "outputs": produced / "outputs.parquet",
                  "occurrences": produced / "occurrences.parquet"}
        theirs = timed("Spark checker", lambda: spark_call(master, lambda: validate_on_spark(
            spark, frames, "sst", None, workdir / "sets")))
        proc = getattr(spark.sparkContext._gateway, "proc", None)  # the local JVM
        result.peak_mb["spark driver JVM"] = peak_mb(proc.pid) if proc is not None else None
        result.differences = differences(mine, theirs)
    finally:
        spark.stop()
        (workdir / "inputs.parquet").unlink(missing_ok=True)
        for name in ("produced", "expected", "sets"):  # ~30 bytes an input in all
            shutil.rmtree(workdir / name, ignore_errors=True)
    if mine.duplicate == 0 or mine.unprocessed == 0:
        result.differences.append("the planted anomalies were not found")
    return result
