"""One experiment, end to end: the paper's timeline (Fig. 4) on a deployment.

T0 deploy (cluster, the run's topics, driver) → priming → T1 generators start → warm-up
until the pipeline is steady (:mod:`pgval.run.warmup`) → control [start, T2) → failure
[T2, T3) → recovery [T3, …) → T4 = start + 3 phases, generators stop → closing events →
drain until the query has processed everything → read what Kafka holds, proving the read
complete → evidence on disk → oracle, validator, metrics → validity → SQLite.

T2 and T3 are judged where the fault acted: the inject's and the removal's
``effective_ms`` (:mod:`pgval.run.schedule`), not the schedule's times, so outputs before
the fault took effect are control's. The removal runs at T3, or, under the restart policy
``immediate``, ``restart_delay_s`` after the crash took effect (docs/faults.md).

The parts live in :mod:`pgval.run` (pgval's own events, watching the query, the fault
schedule, read-back) and :mod:`pgval.deploy` (where Kafka and Spark come from); this module
only puts them in order and makes sure everything started is stopped.

A run is evidence only when it can show it: the read-back must reach every partition's
end offset and reconcile with what the generator delivered, the drain must end because
the query caught up, the fault must show it took effect. Otherwise the run is stored as
*unknown*, with the reasons (:mod:`pgval.checker.validity`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgval.checker.explain import watermark_ms
from pgval.checker.result import Reason
from pgval.checker.validity import Validity, evaluation_reasons, generator_reasons
from pgval.cluster.guard import RunGuard
from pgval.config import ExperimentConfig
from pgval.datasets import GeneratorConfig, KafkaSink, ProducerGroup
from pgval.deploy import Deployment, FaultContext, make_deployment
from pgval.deploy.shared_driver import SharedDrivers, SharedQuery, own_driver_reason
from pgval.errors import EnvironmentFailure, PgvalError
from pgval.evidence import (
    Manifest,
    keep_job_source,
    save_anomalies,
    seal,
    sha256_file,
)
from pgval.faults import default_target, profile_for
from pgval.faults.evidence import fault_reasons
from pgval.faults.hooks import crash_trigger, ensure_hooks_jar, sink_trigger
from pgval.faults.network import log_sizes, timeouts_fired
from pgval.host import cds, registry, signals, undo
from pgval.host.jars import ensure_delta_jars
from pgval.host.machine import describe_machine
from pgval.recheck import evaluate_run
from pgval.redact import private_dir, private_umask
from pgval.run.control import LATE_ID_BASE, ControlEvents
from pgval.run.job_oracle import batch_heap_mb, batch_timeout_s, run_batch_oracle
from pgval.run.monitor import OutputMonitor, batches, drain, wait_first_trigger, wait_primed
from pgval.run.readback import read_back
from pgval.run.result import ExperimentResult, Status
from pgval.run.schedule import FaultSchedule, NoFault, now_ms
from pgval.run.sinks import FileSinkWatch, UserSinkWatch, read_sink
from pgval.run.warmup import WarmUp
from pgval.schema import (
    BROKER_TARGETS,
    OUTPUT_TOPIC,
    CrashPoint,
    Deploy,
    Fault,
    FaultSpec,
    Guarantee,
    Restart,
    Topics,
    sink_kind,
    transactional_id,
)
from pgval.spark.driver import DriverProcess, DriverSpec
from pgval.store import ResultsStore, unstored_error
from pgval.topologies.job import source_file

__all__ = ["LATE_ID_BASE", "Experiment", "ExperimentConfig", "ExperimentResult", "Status",
           "default_run_dir", "remove_run_data"]

#: Seconds the query may take to read its priming events.
PRIME_TIMEOUT_S = 240.0
#: How far ahead of the last real event a user's job's closing events are (event time).
JOB_CLOSING_AHEAD_MS = 3_600_000


class _DriverDied(Exception):
    """The driver exited on its own during the timeline (outside a driver-crash fault)."""


class Experiment:
    """Runs one experiment; everything it started is stopped in :meth:`run`'s ``finally``.

    ``deployment``: a deployment already up (a warm cluster kept by a matrix or an OIR
    search); it is left running. Without one, the run starts its own in ``run_dir`` and
    stops it at the end. ``run_id``: a ``running`` row already started for this run (a
    claimed matrix cell); without it :meth:`run` starts one.
    """

    def __init__(self, config: ExperimentConfig, run_dir: Path, db: Path | None = None,
                 on_status: Callable[[Status], None] | None = None,
                 extra_params: dict[str, Any] | None = None, repeat: int | None = None,
                 run_id: int | None = None, deployment: Deployment | None = None,
                 drivers: SharedDrivers | None = None) -> None:
        config.validate()
        self.config = config
        self.run_dir = Path(run_dir).resolve()
        registry.check_run_dir(self.run_dir)  # the reaper and cleanup act on its files
        self.db = db
        #: The fault and where it lands, parsed once (every fault test below reads it).
        self.fault = FaultSpec(config.fault, config.crash_point)
        self.profile = profile_for(config.fault, config.phase_seconds, config.delay_ms,
                                   [p.fault for p in config.schedule_parts])
        self.owns_deployment = deployment is None
        if deployment is None:
            if self.profile.daemon_conf:
                config.cluster.spark_daemon_conf = {**self.profile.daemon_conf,
                                                    **config.cluster.spark_daemon_conf}
            deployment = make_deployment(config, self.run_dir)
        self.deployment = deployment
        #: A campaign's shared driver (``--driver shared``); None: every run its own.
        self.drivers = drivers
        self.on_status = on_status or (lambda s: None)
        self.extra_params = dict(extra_params or {})
        self.repeat = repeat
        self.run_id = run_id
        self.target: int | str | None = None
        self.topics: Topics | None = None
        self.driver: DriverProcess | SharedQuery | None = None
        self.generators: ProducerGroup | None = None
        self.schedule = FaultSchedule(NoFault())
        self.timings: dict[str, float] = {}
        #: t1, settled (None: never), start, the schedule's t2/t3 (``_intended``), the
        #: judged t2/t3 (when the fault took effect and ended), t4; epoch ms.
        self.phase_bounds: dict[str, int | None] = {}
        #: The warm-up's own measurement (:meth:`pgval.run.warmup.WarmUp.record`).
        self.warmup: dict[str, Any] = {}
        self._phase = "deploy"
        self._rate_mark = (0, time.monotonic())
        self._reasons = Validity()
        self._log_offsets: dict[str, int] = {}
        self.control: ControlEvents | None = None
        self.monitor: OutputMonitor | None = None
        #: What the sink holds, watched: the monitor (Kafka), or a file or user sink's watch.
        self.watch: OutputMonitor | FileSinkWatch | UserSinkWatch | None = None
        self.planted: dict[str, Any] = {}
        #: The SHA-256 of the job's file as the run started (None: no job, no single file).
        self._job_sha: str | None = None
        #: state.json + reaper of this run's own directory, when no cluster of its own
        #: guards it (see :meth:`_guard`).
        self.guard: RunGuard | None = None
        self.manifest = Manifest(topology=config.topology, window_ms=config.window_ms,
                                 phases=[0, 0, 0], resources=config.resources,
                                 config=config.to_dict())

    @property
    def fault_log(self) -> list[dict[str, Any]]:
        return self.schedule.log

    # ------------------------------------------------------------------ the run
    def run(self) -> ExperimentResult:
        """The run, in a 0700 run directory, writing under umask 077 (its evidence, logs,
        Kafka data and a new database 0600; nothing of it for other local users), the
        caller's umask back afterwards (:mod:`pgval.redact`)."""
        private_dir(self.run_dir)
        with private_umask():
            return self._run_and_store()

    def _run_and_store(self) -> ExperimentResult:
        cfg = self.config
        store = ResultsStore(self.db) if self.db else None
        run_id = self.run_id
        if store and run_id is None:
            run_id = store.start_run("validate", cfg.topology, cfg.window_ms, pg=cfg.pg,
                                     fault=cfg.fault, seed=cfg.seed, repeat=self.repeat,
                                     params={**cfg.to_dict(), **self.extra_params,
                                             "run_dir": str(self.run_dir)})
        wall0 = time.monotonic()
        with signals.handled():
            try:
                self._guard()
                self._preflight()
                result = self._run(run_id)
            except BaseException as exc:
                with signals.shielded():
                    self._teardown()
                    if store and run_id is not None:
                        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                        store.fail_run(run_id, cfg.scrubbed(str(exc) or type(exc).__name__),
                                       status=status)
                raise
            t_down = time.monotonic()
            with signals.shielded():
                self._dump_class_archives()
                self._teardown()
            self.timings["teardown_s"] = time.monotonic() - t_down
        if self.schedule.active:
            dirs = [self.run_dir / "logs", *self._driver_log_dirs, *self.deployment.log_dirs()]
            self.fault_log.append({"step": "timeouts", "fault": self.schedule.name,
                                   "target": self.target, **self.profile.describe(),
                                   "fired": timeouts_fired(list(dict.fromkeys(dirs)),
                                                           self._log_offsets)})
        validity = result.validity
        validity.add(evaluation_reasons(result.evaluation),
                     fault_reasons(self.fault.kind, self.fault_log))
        self.timings["total_s"] = time.monotonic() - wall0
        # T1 to T4: the warm-up is the pipeline settling, a finding, not pgval's overhead.
        bounds = self.phase_bounds
        phase_total = (bounds["t4"] - bounds["t1"]) / 1000 if "t4" in bounds else 0.0
        self.timings["overhead_s"] = self.timings["total_s"] - phase_total
        self.manifest.valid, self.manifest.validity_reasons = validity.valid, validity.texts
        self.manifest.validity = validity.records()
        self.manifest.run_id = run_id
        # What a re-check recomputes validity from (pgval.recheck.recompute_validity).
        self.manifest.generator = result.generator
        self.manifest.observed_reasons = [r.text for r in validity.reasons
                                          if r.kind == "observed"]
        # Hashed and on disk before the database says complete and before the broker data
        # (the only other copy of the records) is deleted.
        try:
            self.manifest.write(self.run_dir)
            save_anomalies(self.run_dir, result.evaluation.anomalies())  # sealed with the rest
            sealed = seal(self.run_dir, run_id)
        except OSError as exc:  # disk full, say: the broker data is kept, the row says why
            why = (f"writing the evidence of the run to {self.run_dir / 'evidence'} failed "
                   f"({exc.strerror or exc}); the run is not stored and its broker data is "
                   "kept")
            if store and run_id is not None:
                with contextlib.suppress(Exception):
                    store.fail_run(run_id, why)
            raise EnvironmentFailure(why) from exc
        if store and run_id is not None:
            extra = {"timings": self.timings, "generator": result.generator,
                     "readback": result.readback, "fault_log": self.fault_log,
                     "phase_bounds_ms": self.phase_bounds, "warmup": self.warmup,
                     "cluster": self._describe_deployment(), "run_dir": str(self.run_dir),
                     # Timings are the machine's too: a report says when runs' machines differ.
                     "machine": describe_machine(),
                     # A campaign's shared driver (or why this run had its own): it changes
                     # what a run's start costs (docs/deploy.md, "A shared driver").
                     **({"driver": self.manifest.config["driver"]}
                        if "driver" in self.manifest.config else {})}
            try:
                store.finish_run(run_id, result.evaluation, extra=extra, validity=validity,
                                 run_dir=self.run_dir, batches=result.batches,
                                 fault_log=self.fault_log, evidence=sealed)
            except sqlite3.Error as exc:  # the evidence is sealed: say how to import it
                if not cfg.keep_data:
                    self._remove_run_data()
                raise unstored_error(self.db, run_id, self.run_dir, exc, extra) from exc
        if not cfg.keep_data:
            self._remove_run_data()
        return result

    def _remove_run_data(self) -> None:
        """:func:`remove_run_data`; a shared driver's query's checkpoint a while later
        (:meth:`SharedDrivers.retire`: its state stores may still write into it)."""
        shared = isinstance(self.driver, SharedQuery)
        remove_run_data(self.run_dir, checkpoint=not shared)
        if shared and self.drivers is not None:
            self.drivers.retire(self.run_dir / "checkpoint")

    def _guard(self) -> None:
        """A reaper for this run's directory unless the cluster this run starts there has
        one already (an embedded cluster of its own). Matrix cells and OIR trials on a warm
        cluster, ``--cluster``, external and compose runs get their own: their drivers,
        generators, holders and nemesis undo live in the run's directory, not the cluster's.
        """
        if self.owns_deployment and self.deployment.owns_cluster:
            return
        self.guard = RunGuard(self.run_dir, self.deployment.kind or self.config.deploy).start()

    def _reaper_problem(self) -> str | None:
        """Why this run is no longer covered against SIGKILL (a reaper died), or None."""
        own = self.guard.problem() if self.guard is not None else None
        return own or self.deployment.reaper_problem()

    def _preflight(self) -> None:
        """Refuse, before anything is deployed, a run that could only fail at T2."""
        cfg = self.config
        point = self.fault.point
        if point is CrashPoint.DURING_SINK_WRITE and not self.deployment.owns_cluster:
            raise EnvironmentFailure("--crash-point during-sink-write needs a cluster pgval "
                                    "starts itself (drop --cluster): here a crash is an "
                                    "executor kill through the driver")
        if cfg.sink == "delta":
            ensure_delta_jars()  # resolved once; a failure is one sentence, now
        if point is not CrashPoint.TIMED:
            ensure_hooks_jar()  # built once (javac); a missing JDK is one sentence, now
            crash_trigger(self.run_dir).parent.mkdir(parents=True, exist_ok=True)
        network = self.fault.kind.is_network or any(p.fault.is_network
                                                     for p in cfg.schedule_parts)
        if network and cfg.deploy == Deploy.LOCAL:
            if os.geteuid() != 0:
                raise EnvironmentFailure(f"--fault {cfg.fault} needs root (it puts the worker "
                                        "in a network namespace and changes its packet path)")
            if cfg.cluster.isolate is False:
                raise EnvironmentFailure(f"--fault {cfg.fault} needs the workers in their own "
                                        "network namespaces; drop --no-isolate")

    def _run(self, run_id: int | None) -> ExperimentResult:
        cfg = self.config
        t0 = time.monotonic()
        self._reasons = Validity()
        self._deploy()
        monitor = OutputMonitor(self.deployment.client_config(), self._topics())
        self.monitor = monitor
        assert self.driver is not None
        kind = sink_kind(cfg.sink)
        self.watch = (monitor if kind.name == "kafka" else
                      FileSinkWatch(self._sink_dir()) if kind.raw_read
                      else UserSinkWatch(self.driver))
        try:
            self.timings["prime_s"] = self._prime(monitor)
            self.timings["deploy_s"] = time.monotonic() - t0
            report, driver_died = self._phases(monitor)
        finally:
            self.monitor = self.watch = None
            monitor.close()
        assert self.driver is not None
        if not driver_died:
            try:
                self.driver.check()
            except PgvalError as exc:
                self._reasons.add(Reason("observed", f"the driver died during the drain: {exc}"))
        progress = self.driver.progress()

        t_read = time.monotonic()
        assert self.control is not None
        back = read_back(self.deployment.client_config(), self._topics(), self.run_dir,
                         self.run_dir / "progress.jsonl", report, self.control.written)
        self._reasons.add(back.reasons)
        self.manifest.readback = back.describe
        bounds = self.phase_bounds
        self.manifest.phases = [bounds["start"], bounds["t2"], bounds["t3"]]
        self.manifest.t4 = bounds["t4"]
        # Under --restart immediate T3 is the job's own recovery, not a time pgval chose.
        self.manifest.removal_scheduled = self.config.restart_policy is not Restart.IMMEDIATE
        # The judged phases above are what a re-check uses; these say where they came from.
        self.manifest.config.update(phase_bounds_ms=bounds, warmup=self.warmup)
        self.manifest.write(self.run_dir)
        self.timings["read_back_s"] = time.monotonic() - t_read
        inputs = {k: v for k, v in back.records.items() if k != OUTPUT_TOPIC}
        if cfg.sink != "kafka":
            self._read_sink()
        if cfg.job is not None:
            self._job_oracle(sum(len(r) for r in inputs.values()))
        t_val = time.monotonic()
        phases = self.manifest.phase_bounds
        _, evaluation = evaluate_run(self.run_dir, self.manifest, inputs,
                                     back.records[OUTPUT_TOPIC], progress)
        self.timings["validate_s"] = time.monotonic() - t_val
        return ExperimentResult(
            run_id=run_id, evaluation=evaluation, timings=self.timings, phases=phases,
            generator=report, batches=progress, fault_log=self.fault_log,
            validity=self._reasons, readback=self.manifest.readback, run_dir=self.run_dir,
            bounds=bounds, warmup=self.warmup)

    def _read_sink(self) -> None:
        """A sink other than Kafka: its rows into the evidence, what the read showed into
        run.json, and a read that cannot show it is complete as a reason."""
        cfg = self.config
        kind = sink_kind(cfg.sink)
        sink_dir = self._sink_dir()
        assert sink_dir is not None
        back = read_sink(kind.name, cfg.sink, sink_dir, self.run_dir / "checkpoint",
                         self.run_dir)
        self._reasons.add(back.reasons)
        self.manifest.sink = {"kind": kind.name, "ref": cfg.sink, "clock": kind.clock,
                              "read": back.describe}
        self.manifest.write(self.run_dir)

    def _job_oracle(self, events: int) -> None:
        """A user's job: its source kept with the evidence, and its ``build`` run as a batch
        over the records just read back (:mod:`pgval.run.job_oracle`), before the evidence
        is sealed; what the oracle said goes into run.json."""
        cfg = self.config
        assert cfg.job is not None
        t0 = time.monotonic()
        source = source_file(cfg.job)
        sha = self._job_sha
        now = sha256_file(source) if source is not None and source.is_file() else None
        if sha is not None and now != sha:
            # A restarted driver imports the file again: it may have run another job.
            self._reasons.add(Reason("observed", f"the job's file {source} changed during "
                                     "the run: the evidence keeps the one it started with"))
        said = run_batch_oracle(cfg.job, self.run_dir, dict(cfg.spark_conf),
                                batch_timeout_s(events), batch_heap_mb(events))
        self.manifest.job = {"ref": cfg.job, "source": None if source is None else str(source),
                             "sha256": sha, "oracle": said}
        self.manifest.write(self.run_dir)
        self.timings["job_oracle_s"] = time.monotonic() - t0

    def _deploy(self) -> None:
        """The deployment up (or checked, when warm), the run's topics, the fault, the driver."""
        cfg = self.config
        dep = self.deployment
        t0 = time.monotonic()
        dep.start()
        if self.owns_deployment:
            self.timings.update(dep.timings)
        else:
            restored = dep.restore()
            if restored:
                self.manifest.config["restored_before_run"] = restored
            self.timings["cluster_start_s"] = time.monotonic() - t0
        self._log_offsets = log_sizes(dep.log_dirs())
        self.topics = dep.topics_for(self.run_dir)
        self.manifest.config["topic_prefix"] = self.topics.prefix
        dep.open_run(self.topics)
        self.control = ControlEvents(dep.client_config(), self.topics, cfg.resources,
                                     self.manifest)
        where = dep.driver_placement()
        spec = DriverSpec(
            topology=cfg.topology, pg=cfg.pg, checkpoint=self.run_dir / "checkpoint",
            progress_file=self.run_dir / "progress.jsonl", window_ms=cfg.window_ms,
            watermark_ms=cfg.watermark_ms, trigger_ms=cfg.trigger_ms,
            shuffle_partitions=cfg.shuffle_partitions or cfg.cluster.partitions,
            executor_memory=cfg.executor_memory,
            max_offsets_per_trigger=cfg.max_offsets_per_trigger,
            query_name=f"{self.topics.prefix}{cfg.topology}-{cfg.pg}", sabotage=cfg.sabotage,
            conf=dict(self.profile.driver_conf), bootstrap=where.bootstrap,
            master=where.master, driver_host=where.driver_host, extra_env=where.extra_env,
            launcher=where.launcher, python=where.python, path_map=where.path_map,
            signal_argv=where.signal_argv, topic_prefix=self.topics.prefix, job=cfg.job,
            sink=cfg.sink, sink_dir=self._sink_dir(),
            # The control channel (a thread polling the JVM twice a second) only where a
            # fault needs it: the executor kill on a cluster pgval does not own.
            control_dir=(self.run_dir / "control"
                         if self.fault.kind is Fault.CRASH and not dep.owns_cluster else None),
            # --spark-conf on every deployment: the driver's environment, then a properties
            # file in memory (topologies/driver.start_jvm), never a command line.
            kafka_options=where.kafka_options, user_conf=dict(cfg.spark_conf),
            crash_trigger=(crash_trigger(self.run_dir)
                           if self.fault.point is CrashPoint.AFTER_SINK_WRITE else None),
            sink_trigger=(sink_trigger(self.run_dir)
                          if self.fault.point is CrashPoint.DURING_SINK_WRITE else None),
            # Class-data sharing for a driver on this host (pgval.host.cds); the executors'
            # where the deployment has it (the embedded cluster).
            class_sharing=not where.launcher and cds.enabled(),
            executor_java_flags=where.executor_java_flags)
        self.driver = self._driver(spec)
        if where.signal_argv is not None:
            # A driver in a container outlives the `docker exec` the pid file names.
            undo.record(self.run_dir, "driver", {"argv": where.signal_argv("KILL"),
                                                 "what": "kill the driver in its container"})
        # A worker's index (chosen by the seed unless given); a broker crash's target is
        # its own (a broker id, or the role it plays: pgval.faults.broker).
        self.target = (cfg.target if cfg.target is not None
                       else BROKER_TARGETS[0] if self.fault.kind is Fault.BROKER_CRASH
                       else default_target(cfg.seed, max(1, dep.workers)))
        fault = dep.make_fault(cfg, self.target, self.profile,  # type: ignore[arg-type]
                               FaultContext(self.run_dir, cfg.phase_seconds, self.driver,
                                            cfg.seed, self._output_count, spec.checkpoint,
                                            spec.crash_trigger, spec.sink_trigger,
                                            topics=self.topics,
                                            transactional_id=transactional_id(
                                                spec.query_name)))
        self.schedule = FaultSchedule(fault or NoFault())
        if cfg.job is not None:  # what runs, kept before the driver imports it
            self._job_sha = keep_job_source(self.run_dir, source_file(cfg.job))
        self.timings["driver_start_s"] = self.driver.start()
        if isinstance(self.driver, SharedQuery) and self.driver.setup_s is not None:
            # Of it: waiting for the executors a previous cell's fault took to come back.
            self.timings["driver_setup_s"] = self.driver.setup_s

    def _driver(self, spec: DriverSpec) -> DriverProcess | SharedQuery:
        """The run's own driver, or its query in the campaign's shared driver when it can
        share one (pgval.deploy.shared_driver); which, and why, is kept in the config."""
        if self.drivers is None:
            return DriverProcess(spec, self.run_dir / "logs", self.run_dir / "pids")
        why = own_driver_reason(self.config, spec.launcher)
        if why is not None:
            # The shared driver's application holds the executors' cores: an application
            # started beside it would get none. The next run that can share starts a new one.
            self.drivers.close(why=f"a run needed its own driver ({why})")
            self.manifest.config["driver"] = {"mode": "fresh", "why": why}
            return DriverProcess(spec, self.run_dir / "logs", self.run_dir / "pids")
        query = self.drivers.query(spec)
        # Its log holds earlier cells too: the time-out scan reads this run's part only.
        self._log_offsets.update(log_sizes([query.shared.log_dir]))
        self.manifest.config["driver"] = query.describe()
        return query

    @property
    def _driver_log_dirs(self) -> list[Path]:
        """Log folders of a driver outside the run's directory (a shared driver's: the one
        that ran the query, should a poisoned one have been replaced at the start)."""
        return [self.driver.shared.log_dir] if isinstance(self.driver, SharedQuery) else []

    @property
    def _driver_is_target(self) -> bool:
        """Is the driver what the fault kills (a driver crash; a crash during a user's
        foreachBatch sink's write, which runs in the driver)? It is down until removed."""
        return self.fault.kind is Fault.DRIVER_CRASH or (
            self.fault == FaultSpec(Fault.CRASH, CrashPoint.DURING_SINK_WRITE)
            and sink_kind(self.config.sink).writer_is_driver)

    def _output_count(self) -> int:
        """Outputs the sink holds now (records in the output topic; a file sink's data
        files; rows a user's sink was given), -1 before the watch exists (crash points)."""
        return self.watch.count() if self.watch is not None else -1

    def _sink_dir(self) -> Path | None:
        """The folder a sink other than Kafka writes to (None: Kafka)."""
        return None if self.config.sink == "kafka" else self.run_dir / "sink"

    def _prime(self, monitor: OutputMonitor) -> float:
        """Warm the query up on old-window control events (:mod:`pgval.run.control`)."""
        assert self.control is not None and self.driver is not None
        t0 = time.monotonic()
        if self.config.pg == Guarantee.M1:
            # m1 reads from the latest offsets, fixed by the query's first trigger: what is
            # written before that trigger is never read (docs/semantics.md, "m1").
            wait_first_trigger(self.driver, PRIME_TIMEOUT_S, str(self.run_dir / "logs"))
        self.control.priming(now_ms(), self.config.window_ms, self.config.prime_events)
        wait_primed(self.driver, monitor, self.on_status, PRIME_TIMEOUT_S,
                    str(self.run_dir / "logs"))
        return time.monotonic() - t0

    def _phases(self, monitor: OutputMonitor) -> tuple[dict[str, Any], bool]:
        """T1, the warm-up until steady, control, failure and recovery with the fault, T4,
        then closing events and the drain. Returns the generator's report and whether the
        driver died on its own."""
        cfg = self.config
        assert self.driver is not None and self.control is not None
        # No count: the generators run until T4, which the warm-up's end decides.
        gen_cfg = GeneratorConfig(
            resources=cfg.resources, get_share=cfg.get_share, producers=cfg.producers,
            rate=cfg.rate, duration_s=None, seed=cfg.seed)
        client = self.deployment.client_config()
        topics = self._topics()
        # log_level 3: keep librdkafka's transient retry warnings off the live display.
        sink = KafkaSink(str(client["bootstrap.servers"]), topics=topics,
                         config={**{k: v for k, v in client.items()
                                    if k != "bootstrap.servers"}, "log_level": 3})
        self.generators = ProducerGroup(gen_cfg, sink, pid_dir=self.run_dir / "pids")
        self.generators.start()
        self.phase_bounds = {"t1": self.generators.started_ms or now_ms()}
        driver_died = False
        try:
            self._warm_up(monitor)
            self._follow_timeline(monitor)
        except _DriverDied as exc:
            driver_died = True
            self._reasons.add(Reason("observed", f"the driver died at {self._phase}: {exc}"))
            if "start" not in self.phase_bounds:
                self._start_control(now_ms(), settled=False)
            self.generators.stop()
        self._judged_bounds()
        report = self.generators.join(timeout_s=60).to_dict()
        self.generators.close()
        self._reasons.add(generator_reasons(report))
        if not driver_died:
            now = now_ms()
            if cfg.job is None:
                closing_ts = self.control.closing(now, cfg.window_ms, cfg.watermark_ms)
                delay = cfg.watermark_ms
            else:
                # A job's watermark and windows are its own: closing events an hour ahead
                # close every window of --window-ms whatever the job's watermark delay (up
                # to the hour less the window), and the drain waits for that.
                closing_ts = self.control.closing(now, JOB_CLOSING_AHEAD_MS, 0)
                delay = closing_ts - (now + cfg.window_ms + 1_000)
            outcome = drain(self.driver, monitor, closing_ts, delay,
                            cfg.drain_timeout_s, self.on_status)
            self.timings["drain_s"] = outcome.seconds
            self.timings["drain_timed_out"] = 1.0 if outcome.timed_out else 0.0
            if outcome.caught_up_s is not None:
                self.timings["caught_up_s"] = outcome.caught_up_s
            if outcome.reason:
                self._reasons.add(outcome.reason)
        return report, driver_died

    def _warm_up(self, monitor: OutputMonitor) -> None:
        """From T1 until the pipeline is steady (:mod:`pgval.run.warmup`), at least
        ``warmup_seconds`` and at most ``warmup_max_seconds``; then control starts."""
        cfg = self.config
        assert self.driver is not None
        t1 = self.phase_bounds["t1"]
        earliest = t1 + int(cfg.warmup_seconds * 1000)
        latest = t1 + int(cfg.warmup_max_seconds * 1000)
        warm = WarmUp(t1)
        self._phase = "warm-up"
        monitor.follow()
        untimed = 0  # outputs without a window_end (a user's job may have none)
        try:
            while True:
                now = now_ms()
                ends, stamps, seen = self.watch.new_outputs()
                untimed += seen - len(ends)
                warm.add(ends, stamps, max((watermark_ms(p) for p in batches(self.driver)),
                                           default=0))
                steady = warm.steady()
                if (steady and now >= earliest) or now >= latest:
                    break
                if untimed and not len(warm.window_end) and now >= earliest:
                    warm.untimed = untimed  # nothing the rule could judge: ε only
                    break
                self._status(now, (latest - t1) / 1000 + 3 * cfg.phase_seconds,
                             note=f"warming up: {warm.note()}")
                self._watch(driver_down=False)
                time.sleep(1.0)
        finally:
            monitor.unfollow()
        start = now_ms()
        self.warmup = warm.record(start, cfg.warmup_max_seconds)
        self._start_control(start, settled=steady)

    def _start_control(self, start: int, settled: bool) -> None:
        """The schedule from the end of the warm-up: control, failure, recovery, T4."""
        phase_ms = int(self.config.phase_seconds * 1000)
        self.phase_bounds.update(settled=start if settled else None, start=start,
                                 t2_intended=start + phase_ms,
                                 t3_intended=start + 2 * phase_ms, t4=start + 3 * phase_ms)
        self.timings["warmup_s"] = (start - self.phase_bounds["t1"]) / 1000

    def _judged_bounds(self) -> None:
        """T2 and T3 as the run judges them: when the fault took effect and when it ended
        (the schedule's times where nothing was injected or removed)."""
        b = self.phase_bounds
        b["t2"] = self.schedule.effective("inject") or b["t2_intended"]
        # Never before T2: a removal logged earlier than the fault's effect (clocks of two
        # processes) would leave the failure phase inverted.
        b["t3"] = max(self.schedule.effective("remove") or b["t3_intended"], b["t2"])

    def _follow_timeline(self, monitor: OutputMonitor) -> None:
        """Sleep through the phases, injecting and removing the fault, reporting status; the
        generators stop at T4."""
        assert self.generators is not None and self.driver is not None
        b = self.phase_bounds
        start, t2, t4 = b["start"], b["t2_intended"], b["t4"]
        total_s = (t4 - b["t1"]) / 1000.0
        injected = removed = False
        remove_at = t4
        while True:
            now = now_ms()
            if not injected and now >= t2:
                self.schedule.step("inject", t2)
                injected = True
                remove_at = self.schedule.removal_due(
                    self.config.restart_policy, self.config.restart_delay_s, b["t3_intended"])
            if injected and not removed and now_ms() >= remove_at:
                self.schedule.step("remove", remove_at)
                removed = True
            self._phase = ("control" if not injected else "failure" if not removed
                           else "recovery")
            if now >= t4 and not self.generators.stop_requested:
                self.generators.stop()
            self._status(now, total_s)
            if self.generators.done() and now >= t4:
                return
            if now >= t4 + 60_000:
                raise EnvironmentFailure("the generators did not finish 60 s after T4")
            if self.config.late_events and not self.planted and now >= start + (t2 - start) // 2:
                self._plant_late_events()
            self._watch(driver_down=self._driver_is_target and injected and not removed)
            if injected and not removed:
                self.schedule.check()
            time.sleep(1.0)

    def _status(self, now: int, total_s: float, note: str = "") -> None:
        """One live status line: the phase, time since T1, the input rate, outputs."""
        assert self.generators is not None and self.driver is not None
        generated = sum(p.sent for p in self.generators.progress())
        mono = time.monotonic()
        last_count, last_t = self._rate_mark
        rate = (generated - last_count) / max(mono - last_t, 1e-3)
        self._rate_mark = (generated, mono)
        self.on_status(Status(self._phase, (now - self.phase_bounds["t1"]) / 1000.0, total_s,
                              generated, rate, self._output_count(),
                              len(self.driver.progress()), note=note))

    def _watch(self, driver_down: bool) -> None:
        """Stop the run when the driver died on its own (not while a driver crash holds it
        down) or a reaper died (the run would no longer be covered against a SIGKILL)."""
        assert self.driver is not None
        if not driver_down:
            try:
                self.driver.check()
            except PgvalError as exc:
                raise _DriverDied(str(exc)) from exc
        problem = self._reaper_problem()
        if problem:
            raise EnvironmentFailure(problem)

    def _plant_late_events(self) -> None:
        assert self.driver is not None and self.control is not None
        wm = max((watermark_ms(p) for p in batches(self.driver)), default=0)
        self.planted = self.control.plant_late(self.config.late_events, wm,
                                               self.config.window_ms, self.config.topology,
                                               now_ms())
        if self.planted.get("late_ids"):
            self.manifest.config["planted"] = self.planted

    def _topics(self) -> Topics:
        assert self.topics is not None
        return self.topics

    # ------------------------------------------------------------------ cleanup
    def _dump_class_archives(self) -> None:
        """The first run of a kind of JVM on this machine leaves its class archive for the
        next (pgval.host.cds): after the read-back, so nothing measured waits for it. A
        failed dump costs the next run its speed-up, never this run its result."""
        t0 = time.monotonic()
        try:
            wanted = self.deployment.class_dumps()
            own = self.driver.class_dump() if self.driver is not None else None
            if own is not None:
                wanted.insert(0, own)
            if wanted:
                self.manifest.config["class_archives"] = cds.dump_all(
                    wanted, stop=signals.pending)
                self.timings["class_dump_s"] = time.monotonic() - t0
        except Exception as exc:
            self.manifest.config["class_archives"] = {"error": str(exc)}

    def _teardown(self) -> None:
        """Remove the fault, stop generators and driver, delete the run's topics on a
        cluster that stays up, stop the deployment if the run started it — whatever exists.

        Run under :func:`signals.shielded`. A fault whose injection began and that was
        not removed without error is removed (never restored: a crashed worker is not
        restarted just to be stopped); a failed removal is logged as such.
        """
        if self.schedule.needs_removal():
            with contextlib.suppress(Exception):
                self.schedule.step("remove", now_ms(), restore=False)
        if self.generators is not None:
            with contextlib.suppress(Exception):
                self.generators.close()
        if self.driver is not None:
            t0 = time.monotonic()
            with contextlib.suppress(Exception):
                self.driver.stop()
                undo.done(self.run_dir, "driver")
            self.timings["driver_stop_s"] = time.monotonic() - t0
            if isinstance(self.driver, SharedQuery):  # with the seconds of its steps
                self.manifest.config["driver"] = self.driver.describe()
        # The run's topics go with a cluster this run stops; on one that stays up (warm,
        # attached, compose, external) they are deleted unless --keep-topics.
        stays_up = not (self.owns_deployment and self.deployment.owns_cluster)
        if self.topics is not None and stays_up:
            try:
                self.manifest.config["topics_deleted"] = self.deployment.close_run(
                    self.topics, keep=self.config.keep_topics)
            except Exception as exc:
                self.manifest.config["topics_deleted_error"] = str(exc)
        if self.owns_deployment:
            t0 = time.monotonic()
            with contextlib.suppress(Exception):
                self.deployment.stop()
            self.timings["cluster_stop_s"] = time.monotonic() - t0
        if self.guard is not None:
            # Kept (with its reaper) while a recorded process runs or an undo is pending:
            # the reaper then finishes the job once this pgval exits.
            with contextlib.suppress(Exception):
                self.guard.stop()

    def _describe_deployment(self) -> dict[str, Any]:
        try:
            return self.deployment.describe()
        except Exception:
            return {}


def default_run_dir(base: Path | None = None) -> Path:
    """``./runs/<timestamp>-<pid>`` unless the user names one."""
    root = base or Path(os.environ.get("PGVAL_RUNS", "runs"))
    path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return private_dir(path)  # the runs root too, when pgval creates it: 0700


def remove_run_data(run_dir: Path, checkpoint: bool = True) -> None:
    """Delete the machinery of a stored run (broker data, checkpoints, a file or user sink's
    folder, executors' jar copies), keeping its evidence (a sink's rows among it) and the
    process logs: 50-130 MB per run otherwise."""
    run_dir = Path(run_dir)
    for data in (run_dir / "kafka").glob("broker-*/data"):
        shutil.rmtree(data, ignore_errors=True)
    # The stopped cluster's credentials (0600, but dead weight that a copy of the run
    # directory would carry along): the Kafka login and the Spark secret.
    for secret in (run_dir / "kafka" / "client.properties", run_dir / "spark" / "auth-secret",
                   *(run_dir / "kafka").glob("broker-*/server.properties")):
        with contextlib.suppress(OSError):
            secret.unlink()
    if checkpoint:
        shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)
    shutil.rmtree(run_dir / "sink", ignore_errors=True)  # a file or user sink: rows kept
    for jar in (run_dir / "spark" / "work").rglob("*.jar"):
        with contextlib.suppress(OSError):
            jar.unlink()
