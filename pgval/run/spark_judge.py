"""A run read back and judged on Spark instead of in this process (``--checker``).

The numpy path holds every ID of a run in pgval's own process (about
:data:`~pgval.core.spec.NUMPY_BYTES_PER_INPUT` bytes an input). Above ``--spark-above``
inputs in Kafka (``--checker auto``), or with ``--checker spark``, the read-back, the
oracle and the checker run as Spark jobs instead (:func:`pgval.scale.judge.judge_on_spark`),
on the run's own Spark cluster once its driver has stopped and freed the cluster's cores.
Their tables and anomaly sets stay in the run's evidence (``evidence/spark``), from which
``pgval recheck`` judges the run again. ``--checker both`` judges with numpy and holds
Spark's judgement of the same topics to it: a difference makes the run unknown.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgval.checker.evaluate import Evaluation
from pgval.checker.result import Reason
from pgval.core.clock import now_ms
from pgval.core.errors import UserMistake
from pgval.core.files import write_private
from pgval.core.schema import Deploy
from pgval.core.spec import SPARK_ABOVE, RunSpec
from pgval.deploy.base import DriverPlacement
from pgval.deploy.driver_process import DriverProcess
from pgval.evidence.bundle import evidence_dir
from pgval.host import signals
from pgval.host.machine import heap_mb
from pgval.host.procs import spawn
from pgval.records.phases import Phases
from pgval.run.job_oracle import batch_timeout_s
from pgval.run.setup import RunHandles
from pgval.run.teardown import dump_class_archives
from pgval.scale.checker import SparkValidation
from pgval.scale.evaluation import read_reasons, set_examples
from pgval.scale.judge import SparkJudgement
from pgval.spark.daemons import SECRET_FILE_ENV
from pgval.topologies.spark_checker import REFUSED, SECRETS_ENV

#: The Spark path's folder in the run's evidence: ``read`` (the tables read from Kafka),
#: ``sets`` (the anomaly sets); the expected rows are derived and not kept.
SPARK_EVIDENCE = "spark"
#: Where the Spark checker runs when the run's own cluster is not one to join.
LOCAL_MASTER = "local[2]"
#: The checker session's driver heap (the tables are Parquet; Spark spills the rest).
DRIVER_HEAP_MB = 1024
HEAP_BYTES_PER_INPUT = 40
#: The Spark checker's time: this much, plus this per input in Kafka.
BASE_TIMEOUT_S = 300.0
PER_INPUT_S = 1 / 40_000  # 25 µs


@dataclass(frozen=True)
class CheckerChoice:
    """Who judges the run (``numpy``, ``spark`` or ``both``), the inputs Kafka held when
    ``--checker auto`` counted them, and why, in words."""

    checker: str
    inputs: int
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"checker": self.checker, "inputs_in_kafka": self.inputs, "why": self.why}


def choose_checker(cfg: RunSpec, inputs_in_kafka: int, reads_kafka: bool = False,
                   dropped_rows: int = 0) -> CheckerChoice:
    """``--checker`` as given, or for ``auto`` by the inputs in Kafka (the records the
    generator had acknowledged, and pgval's own) against ``--spark-above``: planted late
    events, a job that reads Kafka itself (``reads_kafka``), a job writing to a sink
    other than Kafka and a job whose operators dropped rows behind the watermark
    (``dropped_rows``: only numpy replays the run's batches) stay with numpy, which alone
    judges them."""
    if cfg.checker != "auto":
        return CheckerChoice(cfg.checker, inputs_in_kafka, f"--checker {cfg.checker}")
    above = cfg.spark_above or SPARK_ABOVE
    said = f"{inputs_in_kafka:,} inputs in Kafka"
    if inputs_in_kafka <= above:
        return CheckerChoice("numpy", inputs_in_kafka, f"{said}, at most --spark-above "
                                                       f"{above:,}")
    what = ("planted late events" if cfg.late_events
            else "a job that reads Kafka itself" if cfg.job is not None and reads_kafka
            else f"a job writing to --sink {cfg.sink}" if cfg.job is not None
            and cfg.sink != "kafka"
            else f"a job whose watermark dropped {dropped_rows:,} rows" if cfg.job is not None
            and dropped_rows else None)
    if what is not None:
        return CheckerChoice("numpy", inputs_in_kafka,
                             f"{said}, above --spark-above {above:,}, but {what} is judged "
                             "by numpy alone")
    return CheckerChoice("spark", inputs_in_kafka, f"{said}, above --spark-above {above:,}")


@dataclass
class SparkRun:
    """The run judged on Spark: where, the judgement, and the seconds it took."""

    master: str
    #: None when the checker process failed or ran out of time (:attr:`failure` says how).
    judgement: SparkJudgement | None
    folder: Path
    input_topics: tuple[str, ...]
    timings: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    #: The class archives recorded before the driver stopped (run.json's ``class_archives``
    #: then says what became of them, not the teardown's second look).
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def validation(self) -> SparkValidation | None:
        """What the Spark checker counted; None when nothing was judged."""
        return None if self.judgement is None else self.judgement.validation

    def reasons(self, delivered: int, own_events: int, generator_valid: bool) -> list[Reason]:
        """Why the run is unknown by its Spark read
        (:func:`pgval.scale.evaluation.read_reasons`)."""
        if self.judgement is None:
            return [Reason("readback", f"the run could not be judged on Spark: {self.failure}")]
        if self.judgement.unjudged is not None:  # read in full, or not read at all
            said = [Reason("data", self.judgement.unjudged)]
            if not self.judgement.read.partitions:
                return said
            return said + read_reasons(self.judgement.read.as_dict(), list(self.input_topics),
                                       delivered, own_events, generator_valid)
        return read_reasons(self.judgement.read.as_dict(), list(self.input_topics), delivered,
                            own_events, generator_valid)

    def _examples(self) -> dict[str, list[int]]:
        """The first IDs of each anomaly set (none where a set cannot be read)."""
        if self.validation is None:
            return {}
        try:
            return set_examples(self.validation.sets)
        except (OSError, ValueError):
            return {}

    def describe(self) -> dict[str, Any]:
        """What run.json and ``--json`` keep of it (the read's proof per partition too)."""
        judged = {"failure": self.failure} if self.judgement is None else {
            **self.judgement.as_dict(), "examples": self._examples()}
        return {"master": self.master, "folder": str(self.folder),
                "input_topics": list(self.input_topics), **judged, **self.notes,
                "seconds": {k: round(v, 3) for k, v in self.timings.items()}}


@dataclass(frozen=True)
class CheckerSession:
    """Where the Spark checker runs: its master, its settings, and Kafka as its executors
    reach it."""

    master: str
    conf: dict[str, str]
    bootstrap: str


def session_settings(cfg: RunSpec, h: RunHandles) -> CheckerSession:
    """``--spark-master``; else the run's own embedded cluster, joined as its driver joins
    it (address, secret, the executors' class archive, Kafka as the executors see it),
    when the run's driver was its own (a shared driver keeps the cluster's cores); else
    :data:`LOCAL_MASTER`, whose executors surely read this machine's disk."""
    client = str(h.deployment.client_config()["bootstrap.servers"])
    if cfg.spark_master:
        return CheckerSession(cfg.spark_master, {}, client)
    if cfg.deploy is not Deploy.LOCAL or not isinstance(h.driver, DriverProcess):
        return CheckerSession(LOCAL_MASTER, {}, client)
    return _joining(h.deployment.driver_placement())


def _joining(placement: DriverPlacement) -> CheckerSession:
    conf: dict[str, str] = {}
    if placement.driver_host:
        conf.update({"spark.driver.host": placement.driver_host,
                     "spark.driver.bindAddress": placement.driver_host})
    if placement.executor_java_flags:
        conf["spark.executor.extraJavaOptions"] = placement.executor_java_flags
    secret_file = placement.extra_env.get(SECRET_FILE_ENV)
    if secret_file:
        conf.update({"spark.authenticate": "true",
                     "spark.authenticate.secret": Path(secret_file).read_text().strip()})
    return CheckerSession(placement.master, conf, placement.bootstrap)


def judge_timeout_s(inputs: int, job: bool = False) -> float:
    """How long the Spark checker may take for ``inputs``: from Kafka to the verdict it
    took ~26 µs of core time an input (docs/performance.md), ~13 µs of wall time on 2
    cores; this allows twice that, and a session's start. A user's job's batch run is
    the job's own cost, whatever pgval's: it gets what the local batch oracle would
    (:func:`pgval.run.job_oracle.batch_timeout_s`) on top."""
    return BASE_TIMEOUT_S + inputs * PER_INPUT_S + (batch_timeout_s(inputs) if job else 0.0)


def checker_heap_mb(inputs: int, machine_mb: int | None = None) -> int:
    """The checker process's heap (MiB): this much at least, plus this per input, within
    half the machine. In ``local[N]`` every task runs in it; 1 GiB judged 10M inputs once
    in two tries and 4 GiB judged 100M (docs/performance.md)."""
    return heap_mb(DRIVER_HEAP_MB, inputs, HEAP_BYTES_PER_INPUT, 0.5, machine_mb)


def judge_run(cfg: RunSpec, h: RunHandles, run_dir: Path, phases: Phases, inputs: int
              ) -> SparkRun:
    """Free the run's cluster for the checker (class archives recorded first, a fault still
    on removed, the driver stopped: its progress is kept), then read back, compute the
    expected outputs and classify every ID on Spark, in a process of its own
    (:mod:`pgval.topologies.spark_checker`), the tables and anomaly sets into the run's
    evidence. Whatever goes wrong on the way (a failure, a time-out of
    :func:`judge_timeout_s`) is the run's :attr:`SparkRun.failure`, in words without the
    run's secret values, and the half-written tables are not kept."""
    timings: dict[str, float] = {}
    notes: dict[str, Any] = {}
    folder = evidence_dir(run_dir) / SPARK_EVIDENCE
    master = cfg.spark_master or LOCAL_MASTER
    try:
        if isinstance(h.driver, DriverProcess):
            t0 = time.monotonic()
            archives = dump_class_archives(h)  # the JVMs that record them must be alive
            notes.update(archives.notes)
            timings.update(archives.timings)
            if h.schedule.needs_removal():
                h.schedule.step("remove", now_ms(), restore=False)
            h.driver.stop()
            timings["driver_stop_s"] = time.monotonic() - t0
        where = session_settings(cfg, h)
        master = where.master
        t0 = time.monotonic()
        record, failure = _checker_process(cfg, h, where, folder, run_dir, phases,
                                           judge_timeout_s(inputs, job=cfg.job is not None),
                                           checker_heap_mb(inputs))
        timings["checker_process_s"] = time.monotonic() - t0
        judged = None if record is None else SparkJudgement.from_record(record)
    except UserMistake:  # the job's: the run ends with it, as with the numpy batch oracle
        shutil.rmtree(folder, ignore_errors=True)
        raise
    except Exception as exc:  # noqa: BLE001 - the run is stored unknown, saying why
        judged, failure = None, f"{type(exc).__name__}: {exc}"
    if judged is None:
        shutil.rmtree(folder, ignore_errors=True)  # no table of a checker that did not end
    else:
        timings.update({f"{k.replace(' ', '_')}_s": v for k, v in judged.stages_s.items()})
        # The expected rows are derived (a re-check makes them again from the kept tables).
        shutil.rmtree(folder / "expected", ignore_errors=True)
    return SparkRun(master, judged, folder, tuple(h.topics.inputs), timings,
                    None if failure is None else cfg.scrubbed(failure), notes)


def _checker_process(cfg: RunSpec, h: RunHandles, where: CheckerSession, folder: Path,
                     run_dir: Path, phases: Phases, limit_s: float, heap_mb: int
                     ) -> tuple[dict[str, Any] | None, str | None]:
    """The checker process to its end: its judgement, or why there is none."""
    secret_keys = ("spark.authenticate.secret",)
    # Executors as big as the run's workers offer (the run's own executors are stopped).
    executor_memory = (cfg.cluster.worker_memory if where.master.startswith("spark://")
                       else cfg.executor_memory)
    spec = {"master": where.master, "heap_mb": heap_mb, "bootstrap": where.bootstrap,
            "conf": {"spark.executor.memory": executor_memory,
                     **{k: v for k, v in where.conf.items() if k not in secret_keys}},
            "driver_host": where.conf.get("spark.driver.host"),
            "inputs": {"get": h.topics.get, "post": h.topics.post},
            "output": h.topics.output, "topology": str(cfg.topology),
            "window_ms": cfg.window_ms, "folder": str(folder), "resources": cfg.resources,
            "phases": [phases.start, phases.t2, phases.t3, phases.t4,
                       phases.removal_scheduled],
            "control_ids": [int(i) for i in h.control.control_ids],
            "job": cfg.job, "run_dir": str(run_dir)}
    # The user's --spark-conf reaches this session as it reaches the run's driver (its
    # values may be secrets: in the environment, never on disk); pgval's own settings win.
    secrets = {"user": dict(cfg.spark_conf),
               "conf": {k: v for k, v in where.conf.items() if k in secret_keys},
               "kafka": {k: v for k, v in h.deployment.client_config().items()
                         if k != "bootstrap.servers"}}
    work = run_dir / "spark-checker"
    spec_file = write_private(work / "spec.json", json.dumps(spec))
    out = work / "judgement.json"
    log = run_dir / "logs" / "spark-checker.log"
    argv = [sys.executable, "-m", "pgval.topologies.spark_checker", "--spec", str(spec_file),
            "--out", str(out)]
    proc = spawn("spark-checker", argv, log, env={SECRETS_ENV: json.dumps(secrets)},
                 pid_dir=run_dir / "pids")
    try:
        rc = proc.popen.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        return None, (f"the Spark checker did not finish within {limit_s:.0f} s on "
                      f"{where.master} (log: {log})")
    finally:
        with signals.shielded():  # the group (its JVM) and the pid file, whatever ended it
            proc.stop(grace_s=5.0)
    lines = [ln for ln in log.read_text(errors="replace").splitlines()
             if ln.strip() and "][warning][" not in ln]
    if rc == 2:  # the user's job, in its batch run: one sentence, as the batch oracle's
        said = next((ln.split(REFUSED, 1)[1] for ln in reversed(lines) if REFUSED in ln),
                    "the job cannot be judged")
        raise UserMistake(f"the Spark checker refused the job: {said}")
    if rc != 0 or not out.is_file():
        return None, (f"the Spark checker failed on {where.master} (exit {rc}): "
                      f"{lines[-1][:300] if lines else 'no output'} (log: {log})")
    return json.loads(out.read_text()), None


def agreement_reasons(evaluation: Evaluation, run: SparkRun) -> list[Reason]:
    """``--checker both``: Spark's judgement of the run's topics held to numpy's, figure
    for figure, phase row for phase row and set for set (:func:`pgval.scale.agreement.
    differences`); any difference, or a Spark read that could not judge, is a reason the
    run is unknown. What was found is kept in the evaluation's ``spark_check``."""
    from pgval.scale.agreement import differences

    judged = run.judgement
    if judged is None:
        said = [f"the run could not be judged on Spark: {run.failure}"]
    elif judged.validation is None:
        said = [f"the Spark checker judged nothing: {judged.reason}"]
    else:
        said = differences(evaluation.validation, judged.validation,
                           duplicate_inputs=evaluation.expected.duplicate_inputs)
    evaluation.views["spark_check"] = {"master": run.master, "agrees": not said,
                                       "differences": said}
    if not said:
        return []
    shown = "; ".join(said[:5]) + (f" and {len(said) - 5} more" if len(said) > 5 else "")
    return [Reason("observed", f"--checker both: the Spark checker does not agree with "
                               f"numpy's on {len(said)} points: {shown}")]
