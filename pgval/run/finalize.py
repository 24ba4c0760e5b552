"""After the timeline: what Kafka (and a sink other than Kafka) holds read back completely,
a user's job's batch oracle run over it; then, once the machinery is stopped, the manifest
built once from what the setup, the timeline, the read-back and the teardown recorded, the
verdict, the validity, the evidence sealed and the run stored.

A run is evidence only when it can show it: the read-back must reach every partition's end
offset and reconcile with what the generator delivered, the drain must end because the
query caught up, the fault must show it took effect. Otherwise the run is stored as
*unknown*, with the reasons (:mod:`pgval.checker.validity`).
"""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgval.checker.evaluate import Evaluation
from pgval.checker.result import Reason
from pgval.checker.validity import Validity, evaluation_reasons, generator_reasons
from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.core.schema import OUTPUT_TOPIC, Fault, Restart, sink_kind
from pgval.core.spec import RunSpec
from pgval.deploy.driver_process import DriverProcess
from pgval.evidence.bundle import Manifest, save_anomalies, save_progress, seal, sha256_file
from pgval.evidence.recheck import evaluate_run
from pgval.faults.network import timeouts_fired
from pgval.faults.took_effect import fault_reasons
from pgval.host.machine import describe_machine
from pgval.kafka.topic_records import TopicRecords
from pgval.oracle.replay import dropped_by_run
from pgval.records.phases import Phases
from pgval.run.job_oracle import batch_heap_mb, batch_timeout_s, run_batch_oracle
from pgval.run.readback import ReadBack, read_back
from pgval.run.result import ExperimentResult
from pgval.run.setup import RunHandles, job_changed
from pgval.run.sink_readback import read_sink
from pgval.run.spark_judge import (
    CheckerChoice,
    SparkRun,
    agreement_reasons,
    choose_checker,
    judge_run,
)
from pgval.run.teardown import Teardown
from pgval.run.timeline import TimelineRecord
from pgval.scale.evaluation import as_evaluation
from pgval.store.results import ResultsStore, unstored_error


@dataclass(frozen=True)
class Collected:
    """What the run's records are, read back with their proof, and what the sink read and
    the job's batch oracle said; the driver's progress; the reasons found on the way."""

    back: ReadBack
    progress: list[dict[str, Any]]
    sink: dict[str, Any] | None
    job: dict[str, Any] | None
    reasons: tuple[Reason, ...]
    timings: dict[str, float]
    #: Who judged the run (--checker), and the run judged on Spark (None: numpy alone).
    checker: CheckerChoice
    spark: SparkRun | None = None

    def judged_by(self) -> dict[str, Any]:
        """run.json's and ``--json``'s record of who judged the run, and how Spark did."""
        return {**self.checker.as_dict(),
                **({"spark": self.spark.describe()} if self.spark is not None else {})}

    @property
    def inputs(self) -> dict[str, TopicRecords]:
        return {k: v for k, v in self.back.records.items() if k != OUTPUT_TOPIC}


def collect(cfg: RunSpec, h: RunHandles, record: TimelineRecord,
            run_dir: Path) -> Collected:
    """The read-back of inputs and outputs (with its completeness proof), a sink other than
    Kafka read back, a user's job's batch oracle: all of it into the evidence folder."""
    reasons = Validity()
    timings: dict[str, float] = {}
    if not record.driver_died:
        try:
            h.driver.check()
        except PgvalError as exc:
            reasons.add(Reason("observed", f"the driver died during the drain: {exc}"))
    progress = h.driver.progress()
    save_progress(run_dir, h.spec.progress_file)
    delivered = int(record.generator.get("delivered") or 0)
    choice = choose_checker(cfg, delivered + h.control.written,
                            h.inputs is not None and h.inputs.reads_kafka,
                            dropped_by_run(progress))
    spark = None
    if choice.checker == "spark":  # nothing of the run read into this process
        spark = judge_run(cfg, h, run_dir, run_phases(cfg, record), choice.inputs)
        read = ({"complete": False, "problems": [str(spark.failure)]}
                if spark.judgement is None else spark.judgement.read.as_dict())
        back = ReadBack({}, {"spark": read, "inputs": {"delivered": delivered,
                                                       "control": h.control.written}})
        reasons.add(spark.reasons(delivered, h.control.written,
                                  generator_reasons(record.generator).valid))
        timings.update({f"spark_{k}": v for k, v in spark.timings.items()})
    else:
        if stops_early(cfg, h, record):
            h.driver.stop_soon()  # type: ignore[union-attr]
        t0 = time.monotonic()
        back = read_back(h.deployment.client_config(), h.topics, run_dir, record.generator,
                         h.control.written)
        reasons.add(back.reasons)
        timings["read_back_s"] = time.monotonic() - t0
        if choice.checker == "both":
            spark = judge_run(cfg, h, run_dir, run_phases(cfg, record), choice.inputs)
            timings.update({f"spark_{k}": v for k, v in spark.timings.items()})
            # The topics' records are the evidence here (and the numpy batch oracle's
            # rows); the sets stay beside them.
            for derived in ("read", "batch"):
                shutil.rmtree(spark.folder / derived, ignore_errors=True)
    sink = None
    if cfg.sink != "kafka":
        kind = sink_kind(cfg.sink)
        assert h.sink_dir is not None
        read = read_sink(kind.name, cfg.sink, h.sink_dir, run_dir / "checkpoint", run_dir)
        reasons.add(read.reasons)
        sink = {"kind": kind.name, "ref": cfg.sink, "clock": kind.clock,
                "read": read.describe}
    job = None
    if cfg.job is not None:
        t0 = time.monotonic()
        if changed := job_changed(h, sha256_file):
            reasons.add(Reason("observed", changed))
        reads = h.inputs.describe(h.topics) if h.inputs is not None else {}
        if choice.checker == "spark":  # its batch ran in the Spark checker, on the cluster
            judged = None if spark is None else spark.judgement
            said = {"on_spark": True, **((judged.job or {}) if judged is not None else {})}
        else:
            events = sum(len(r) for k, r in back.records.items() if k != OUTPUT_TOPIC)
            batches = len({p.get("batchId") for p in progress
                           if p.get("event") == "progress"})
            said = run_batch_oracle(cfg.job, run_dir, dict(cfg.spark_conf),
                                    batch_timeout_s(events, batches), batch_heap_mb(events),
                                    reads.get("inputs"))
        job = {"ref": cfg.job, "source": None if h.job_source is None else str(h.job_source),
               "sha256": h.job_sha, "oracle": said, **reads}
        timings["job_oracle_s"] = time.monotonic() - t0
    return Collected(back, progress, sink, job, tuple(reasons.reasons), timings, choice, spark)


def run_phases(cfg: RunSpec, record: TimelineRecord) -> Phases:
    """The run's phases as its manifest will hold them (:meth:`Manifest.phase_bounds`)."""
    b = record.bounds
    return Phases(int(b["start"] or 0), int(b["t2"] or 0), int(b["t3"] or 0), b["t4"],
                  removal_scheduled=cfg.restart_policy is not Restart.IMMEDIATE)


def stops_early(cfg: RunSpec, h: RunHandles, record: TimelineRecord) -> bool:
    """May the driver stop while the read-back runs? Once drained, with its progress kept,
    nothing more is asked of a driver of the run's own that writes to Kafka, unless a JVM
    of the run still records its class archive (the dump needs it alive), or a fault is still
    to be removed (the teardown removes it before it stops the driver)."""
    if record.driver_died or cfg.sink != "kafka" or not isinstance(h.driver, DriverProcess):
        return False
    if h.schedule.needs_removal():
        return False
    try:
        return h.driver.class_dump() is None and not h.deployment.class_dumps()
    except Exception:
        return False


def timeouts_step(h: RunHandles, run_dir: Path) -> dict[str, Any]:
    """The fault log's last entry: which of Spark's time-outs fired in this run's logs."""
    dirs = [run_dir / "logs", *h.driver_log_dirs, *h.deployment.log_dirs()]
    return {"step": "timeouts", "fault": h.schedule.name, "target": h.target,
            **h.profile.describe(),
            "fired": timeouts_fired(list(dict.fromkeys(dirs)), dict(h.log_offsets))}


def build_manifest(cfg: RunSpec, h: RunHandles, record: TimelineRecord,
                   got: Collected, down: Teardown) -> Manifest:
    """run.json, once, from what the run recorded (the verdict's fields come after)."""
    b = record.bounds
    config = {**cfg.to_record(), **h.notes, "phase_bounds_ms": b, "warmup": record.warmup,
              "judged_by": got.judged_by(),
              **({"planted": record.planted} if record.planted.get("late_ids") else {}),
              **down.notes}
    return Manifest(
        topology=cfg.topology, window_ms=cfg.window_ms, resources=cfg.resources,
        phases=[int(b["start"] or 0), int(b["t2"] or 0), int(b["t3"] or 0)], t4=b["t4"],
        control_ids=h.control.control_ids, control_events=h.control.control_events,
        readback=got.back.describe, config=config, sink=got.sink, job=got.job,
        generator=record.generator,
        # Under --restart immediate T3 is the job's own recovery, not a time pgval chose.
        removal_scheduled=cfg.restart_policy is not Restart.IMMEDIATE)


def judge(manifest: Manifest, got: Collected, record: TimelineRecord, fault: Fault,
          fault_log: list[dict[str, Any]], run_dir: Path) -> tuple[Evaluation, Validity]:
    """The verdict over the records read back (or Spark's, for a run judged on Spark), and
    every validity reason of the run."""
    validity = Validity()
    if got.checker.checker == "spark":
        assert got.spark is not None
        judged = got.spark.judgement
        evaluation = as_evaluation(got.spark.validation, manifest.topology,
                                   manifest.window_ms, manifest.phase_bounds,
                                   0 if judged is None else judged.read.malformed_inputs)
    else:
        inputs = got.inputs

        def release() -> None:  # the records are evidence on disk: the validation reuses
            inputs.clear()      # their memory (the output records are few, and kept)
            got.back.records = {OUTPUT_TOPIC: got.back.records[OUTPUT_TOPIC]}

        _, evaluation = evaluate_run(run_dir, manifest, inputs,
                                     got.back.records[OUTPUT_TOPIC], got.progress,
                                     release=release)
        if got.spark is not None:  # --checker both: Spark's judgement held to numpy's
            validity.add(agreement_reasons(evaluation, got.spark))
    validity.add(record.reasons, got.reasons, evaluation_reasons(evaluation),
                 fault_reasons(fault, fault_log))
    return evaluation, validity


def with_verdict(manifest: Manifest, validity: Validity, run_id: int | None) -> Manifest:
    """The manifest with the run's validity (and what a re-check recomputes it from)."""
    return dataclasses.replace(
        manifest, valid=validity.valid, validity_reasons=validity.texts,
        validity=validity.records(), run_id=run_id,
        observed_reasons=[r.text for r in validity.reasons if r.kind == "observed"])


def write_evidence(manifest: Manifest, evaluation: Evaluation, run_dir: Path
                   ) -> dict[str, str]:
    """run.json and the anomaly set on disk and sealed, before the database says complete
    and before the broker data (the only other copy of the records) is deleted."""
    try:
        manifest.write(run_dir)
        if evaluation.outputs is not None:  # judged on Spark: its sets are Parquet
            save_anomalies(run_dir, evaluation.anomalies())  # sealed with the rest
        return seal(run_dir, manifest.run_id)
    except OSError as exc:  # disk full, say: the broker data is kept, the row says why
        why = (f"writing the evidence of the run to {run_dir / 'evidence'} failed "
               f"({exc.strerror or exc}); the run is not stored and its broker data is kept")
        raise EnvironmentFailure(why) from exc


def store_result(store: ResultsStore, result: ExperimentResult, manifest: Manifest,
                 sealed: dict[str, str], describe: dict[str, Any], db: Path) -> None:
    """The run in the results database, complete with all its rows or not at all."""
    assert result.run_id is not None and result.run_dir is not None
    extra = {"timings": result.timings, "generator": result.generator,
             "readback": result.readback, "fault_log": result.fault_log,
             "phase_bounds_ms": result.bounds, "warmup": result.warmup,
             "judged_by": result.judged_by,
             "cluster": describe, "run_dir": str(result.run_dir),
             # Timings are the machine's too: a report says when runs' machines differ.
             "machine": describe_machine(),
             # A campaign's shared driver (or why this run had its own): it changes what a
             # run's start costs (docs/deploy.md, "A shared driver").
             **({"driver": manifest.config["driver"]} if "driver" in manifest.config else {})}
    try:
        store.finish_run(result.run_id, result.evaluation, extra=extra,
                         validity=result.validity, run_dir=result.run_dir,
                         batches=result.batches, fault_log=result.fault_log, evidence=sealed)
    except sqlite3.Error as exc:  # the evidence is sealed: say how to import it
        raise unstored_error(db, result.run_id, result.run_dir, exc, extra) from exc
