"""A user's job's oracle for one run: its ``build`` run as a batch over the run's evidence.

The batch runs in a ``local[1]`` Spark process of its own (``python -m
pgval.topologies.batch_oracle``), started like every other process of the run (its own
group, a pid file the reaper and ``pgval cleanup`` read), after the read-back: it reads the input
records exactly as the evidence keeps them and writes ``evidence/expected.parquet``, which
is sealed with the rest. So the expectation is fixed once, from what Kafka held, and a
re-check reads it instead of running Spark again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pgval.core.driver_spec import SPARK_CONF_ENV
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.host.machine import heap_mb
from pgval.host.procs import spawn

#: The batch oracle's own allowance, plus this per input event: a local[1] session reads,
#: parses and aggregates well over 20,000 events a second on the 2-core machine.
BASE_TIMEOUT_S = 300.0
PER_EVENT_S = 1 / 20_000


#: The batch oracle's heap: this much at least, plus this per input event, at most this
#: share of the machine's memory. Measured (docs/performance.md, "Where MST's time goes"):
#: a 1 GiB heap carried a run of 21M inputs (MST's rows as a job, 128,000 ev/s) and ran
#: out at ~33M (200,000 ev/s); 64 bytes an event gives that run 2 GiB.
BASE_HEAP_MB = 1024
HEAP_BYTES_PER_EVENT = 64
MAX_HEAP_SHARE = 0.5


#: The replay of a run's micro-batches (where its watermark dropped rows) may take this
#: much more per batch (measured about 0.6 s a batch with state).
PER_BATCH_S = 5.0


def batch_timeout_s(events: int, batches: int = 0) -> float:
    """How long the batch oracle of a run with ``events`` inputs and ``batches``
    micro-batches may take (its replay of them included)."""
    return BASE_TIMEOUT_S + events * PER_EVENT_S + batches * PER_BATCH_S


def batch_heap_mb(events: int, machine_mb: int | None = None) -> int:
    """The batch oracle's heap (MiB) for a run with ``events`` inputs: it holds the run's
    records and the job's rows, so it grows with them, within half the machine."""
    return heap_mb(BASE_HEAP_MB, events, HEAP_BYTES_PER_EVENT, MAX_HEAP_SHARE, machine_mb)


def run_batch_oracle(job: str, run_dir: Path, spark_conf: dict[str, str],
                     timeout_s: float, heap_mb: int = BASE_HEAP_MB,
                     inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the batch oracle of ``job`` over ``run_dir``'s evidence in a heap of ``heap_mb``
    (a ``spark.driver.memory`` among the user's settings wins); its summary (rows, IDs,
    seconds). A job that cannot be judged, a failure or a time-out is one sentence
    (:class:`PgvalError`) naming the log."""
    argv = [sys.executable, "-m", "pgval.topologies.batch_oracle", "--job", job,
            "--run-dir", str(run_dir), "--heap-mb", str(heap_mb)]
    if inputs:  # a job reading Kafka itself: its inputs' names and the run's topics
        argv += ["--inputs", ",".join(f"{n}={t}" for n, t in inputs.items())]
    return _oracle_process("batch-oracle", argv, run_dir / "logs" / "batch-oracle.log",
                           spark_conf, timeout_s, f"the batch oracle of {job}",
                           "pgval-batch: ", heap_mb, pid_dir=run_dir / "pids")


def run_check_job(job: str, inputs: Path, outputs: Path, out_dir: Path,
                  spark_conf: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """``pgval check --job``'s Spark process (:mod:`pgval.topologies.check_job`): the job's
    batch oracle over recorded inputs and the recorded outputs keyed as the stream keys
    them, into ``out_dir``; its summary, or one sentence naming the log."""
    argv = [sys.executable, "-m", "pgval.topologies.check_job", "--job", job,
            "--inputs", str(inputs), "--outputs", str(outputs), "--out", str(out_dir)]
    return _oracle_process("check-job", argv, out_dir / "check-job.log", spark_conf,
                           timeout_s, f"the batch oracle of {job}", "pgval-check-job: ",
                           BASE_HEAP_MB, pid_dir=out_dir / "pids")


def _oracle_process(name: str, argv: list[str], log: Path, spark_conf: dict[str, str],
                    timeout_s: float, what: str, prefix: str, heap_mb: int,
                    pid_dir: Path | None) -> dict[str, Any]:
    """One oracle process to its end: its JSON summary line, or one sentence (a job it
    refused, exit 2; its heap run out; a failure; a time-out) naming ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = spawn(name, argv, log,
                 env={SPARK_CONF_ENV: json.dumps(spark_conf)} if spark_conf else None,
                 pid_dir=pid_dir)
    t0 = time.monotonic()
    try:
        rc = proc.popen.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.stop(grace_s=5.0)
        raise EnvironmentFailure(f"{what} did not finish within {timeout_s:.0f} s "
                                 f"(log: {log})") from None
    finally:
        # Always: the group's JVM may outlive its Python leader for a moment, and a group
        # still alive keeps the run's guard (and its reaper) past the run.
        proc.stop(grace_s=5.0)
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    if rc == 2:
        said = next((ln.split(prefix, 1)[1] for ln in reversed(lines) if prefix in ln),
                    "the job cannot be judged")
        raise UserMistake(f"the batch oracle refused the job: {said}")
    if rc != 0:
        if any("java.lang.OutOfMemoryError" in ln for ln in lines):
            raise EnvironmentFailure(
                f"{what} ran out of its {heap_mb} MiB heap; give it more with --spark-conf "
                f"spark.driver.memory=SIZE (log: {log})")
        # The JVM's own warnings (class sharing's among them) are not the failure.
        said = [ln for ln in lines if "][warning][" not in ln]
        last = said[-1] if said else "no output"
        raise EnvironmentFailure(f"{what} failed (exit {rc}): {last} (log: {log})")
    for line in reversed(lines):
        try:
            summary = json.loads(line)
        except ValueError:
            continue
        if isinstance(summary, dict) and "rows" in summary:
            summary["wall_s"] = round(time.monotonic() - t0, 3)
            return summary
    raise EnvironmentFailure(f"{what} said nothing of its result (log: {log})")
