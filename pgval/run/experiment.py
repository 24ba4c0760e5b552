"""One experiment, end to end: the paper's timeline (Fig. 4) on a deployment, as four steps
in order, each its own module of :mod:`pgval.run`:

1. **setup** (:mod:`pgval.run.setup`): the run's guard, the checks that refuse it before
   anything starts, the deployment, topics, driver and fault, returned as frozen handles;
2. **timeline** (:mod:`pgval.run.timeline`): priming, the warm-up until steady, control,
   failure and recovery with the fault's schedule as timed operations, T4, the drain;
3. **collect** (:func:`pgval.run.finalize.collect`): what Kafka holds read back completely,
   a sink other than Kafka, a job's batch oracle — then the **teardown**
   (:mod:`pgval.run.teardown`): everything the run started stopped, whatever happened;
4. **finalize** (:mod:`pgval.run.finalize`): run.json built once from what the steps
   recorded, the verdict and its validity, the evidence sealed, the run stored.

This module only puts them in order and makes sure everything started is stopped.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgval.config import resolve
from pgval.core.redact import private_dir, private_umask
from pgval.core.spec import RunSpec
from pgval.deploy import Deployment, make_deployment
from pgval.deploy.shared_driver import SharedDrivers
from pgval.faults import profile_for
from pgval.host import registry, signals
from pgval.host.memory import bulk_arrays
from pgval.run.finalize import (
    Collected,
    build_manifest,
    collect,
    judge,
    store_result,
    timeouts_step,
    with_verdict,
    write_evidence,
)
from pgval.run.own_events import LATE_ID_BASE
from pgval.run.result import ExperimentResult, Status
from pgval.run.setup import RunHandles, Started, preflight, reaper_problem, setup_run, start_guard
from pgval.run.teardown import (
    Teardown,
    dump_class_archives,
    remove_run_data,
    remove_stored_run_data,
    teardown,
)
from pgval.run.timeline import Timeline, TimelineRecord
from pgval.run.warmup import after_run
from pgval.store.results import ResultsStore

__all__ = ["LATE_ID_BASE", "Experiment", "RunSpec", "ExperimentResult", "Status",
           "default_run_dir", "remove_run_data"]


class Experiment:
    """Runs one experiment; everything it started is stopped, however it ends.

    ``deployment``: a deployment already up (a warm cluster kept by a matrix or an OIR
    search); it is left running. Without one, the run starts its own in ``run_dir`` and
    stops it at the end. ``run_id``: a ``running`` row already started for this run (a
    claimed matrix cell); without it :meth:`run` starts one. ``drivers``: a campaign's
    shared driver (``--driver shared``); None: every run its own.
    """

    def __init__(self, config: RunSpec, run_dir: Path, db: Path | None = None,
                 on_status: Callable[[Status], None] | None = None,
                 extra_params: dict[str, Any] | None = None, repeat: int | None = None,
                 run_id: int | None = None, deployment: Deployment | None = None,
                 drivers: SharedDrivers | None = None) -> None:
        # A spec from the command line is resolved once there; a library caller's here.
        config = config if config.resolved else resolve(config)
        self.run_dir = Path(run_dir).resolve()
        registry.check_run_dir(self.run_dir)  # the reaper and cleanup act on its files
        self.profile = profile_for(config.fault, config.phase_seconds, config.delay_ms,
                                   [p.fault for p in config.schedule_parts])
        owns = deployment is None
        if deployment is None and self.profile.daemon_conf:
            # The fault's time-outs for the daemons this run starts (the caller's config
            # stays as it was).
            cluster = dataclasses.replace(config.cluster, spark_daemon_conf={
                **self.profile.daemon_conf, **config.cluster.spark_daemon_conf})
            config = dataclasses.replace(config, cluster=cluster)
        self.config = config
        self.deployment = deployment or make_deployment(config, self.run_dir)
        self.started = Started(self.deployment, owns, self.run_dir)
        self.db, self.drivers, self.run_id, self.repeat = db, drivers, run_id, repeat
        self.on_status = on_status or (lambda s: None)
        self.extra_params = dict(extra_params or {})
        self.timings: dict[str, float] = {}
        #: What the timeline recorded (None until it ran).
        self.record: TimelineRecord | None = None
        self._sealed = False

    @property
    def planted(self) -> dict[str, Any]:
        """The self-test's planted late events (``--late-events``), once the run is over."""
        return self.record.planted if self.record is not None else {}

    def run(self) -> ExperimentResult:
        """The run, in a 0700 run directory, writing under umask 077 (its evidence, logs,
        Kafka data and a new database 0600; nothing of it for other local users), the
        caller's umask back afterwards (:mod:`pgval.core.redact`)."""
        private_dir(self.run_dir)
        with private_umask():
            return self._run_and_store()

    def _run_and_store(self) -> ExperimentResult:
        cfg = self.config
        store = ResultsStore(self.db) if self.db else None
        if store and self.run_id is None:
            self.run_id = store.start_run(
                "validate", cfg.topology, cfg.window_ms, pg=cfg.pg, fault=cfg.fault,
                seed=cfg.seed, repeat=self.repeat,
                params={**cfg.to_record(), **self.extra_params, "run_dir": str(self.run_dir)})
        wall0 = time.monotonic()
        with signals.handled():
            try:
                handles, got = self._deploy_and_follow()
            except BaseException as exc:
                with signals.shielded():
                    teardown(self.started, cfg.keep_topics)
                self._fail(store, exc)
                raise
            t_down = time.monotonic()
            with signals.shielded():
                archives = dump_class_archives(self.started)
                down = teardown(self.started, cfg.keep_topics)
            self.timings["teardown_s"] = time.monotonic() - t_down
        try:
            return self._finalize(store, handles, got, archives, down, wall0)
        except BaseException as exc:
            if not self._sealed:
                self._fail(store, exc)
            raise

    def _deploy_and_follow(self) -> tuple[RunHandles, Collected]:
        """Setup, timeline and collect, in order; the monitor closed before the read-back."""
        cfg = self.config
        start_guard(self.started, cfg.deploy)
        preflight(cfg, cfg.fault_spec, self.deployment, self.run_dir)
        t0 = time.monotonic()
        handles = setup_run(cfg, self.started, self.profile, self.drivers)
        setup_s = time.monotonic() - t0
        try:
            self.record = Timeline(cfg, handles, self.started, self.on_status,
                                   lambda: reaper_problem(self.started)).run()
        finally:
            handles.monitor.close()
        self.timings.update(handles.timings, **self.record.timings,
                            deploy_s=setup_s + self.record.timings["prime_s"])
        with bulk_arrays():  # the read-back: GBs of records and arrays at scale
            got = collect(cfg, handles, self.record, self.run_dir)
        self.timings.update(got.timings)
        return handles, got

    def _finalize(self, store: ResultsStore | None, handles: RunHandles, got: Collected,
                  archives: Teardown, down: Teardown, wall0: float) -> ExperimentResult:
        """The manifest once, the verdict, the evidence sealed, the run stored."""
        cfg, record, run_dir = self.config, self.record, self.run_dir
        assert record is not None
        self.timings.update(down.timings, **archives.timings)
        fault_log = self.started.schedule.log
        if self.started.schedule.active:
            fault_log.append(timeouts_step(handles, run_dir))
        both = Teardown({**archives.notes, **down.notes})
        manifest = build_manifest(cfg, handles, record, got, both)
        t_val = time.monotonic()
        with bulk_arrays():
            evaluation, validity = judge(manifest, got, record, cfg.fault_spec.kind,
                                         fault_log, run_dir)
        # Only the finished run can tell a cold plateau from a steady level (run/warmup.py).
        warmup = after_run(record.warmup, evaluation.metrics.control_unsettled)
        flipped = bool(record.warmup.get("settled")) and not warmup.get("settled")
        b = {**record.bounds, **({"settled": None} if flipped else {})}
        manifest = dataclasses.replace(manifest, config={
            **manifest.config, "warmup": warmup, "phase_bounds_ms": b})
        self.timings["validate_s"] = time.monotonic() - t_val
        self.timings["total_s"] = time.monotonic() - wall0
        # T1 to T4: the warm-up is the pipeline settling, a finding, not pgval's overhead.
        phase_total = ((b["t4"] or 0) - (b["t1"] or 0)) / 1000 if "t4" in b else 0.0
        self.timings["overhead_s"] = self.timings["total_s"] - phase_total
        manifest = with_verdict(manifest, validity, self.run_id)
        sealed = write_evidence(manifest, evaluation, run_dir)
        # Sealed: from here a failure is the store's, which says how to import the run.
        self._sealed = True
        result = ExperimentResult(
            run_id=self.run_id, evaluation=evaluation, timings=self.timings,
            phases=manifest.phase_bounds, generator=record.generator, batches=got.progress,
            fault_log=fault_log, validity=validity, readback=got.back.describe,
            run_dir=run_dir, bounds=b, warmup=warmup, judged_by=got.judged_by())
        try:
            if store is not None and self.run_id is not None and self.db is not None:
                store_result(store, result, manifest, sealed, self._describe(), self.db)
        finally:
            if not cfg.keep_data:
                remove_stored_run_data(self.started, self.drivers)
        return result

    def _fail(self, store: ResultsStore | None, exc: BaseException) -> None:
        """The run's row says why it did not finish (interrupted by a signal, or failed)."""
        if store is None or self.run_id is None:
            return
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        store.fail_run(self.run_id, self.config.scrubbed(str(exc) or type(exc).__name__),
                       status=status)

    def _describe(self) -> dict[str, Any]:
        try:
            return self.deployment.describe()
        except Exception:
            return {}


def default_run_dir(base: Path | None = None) -> Path:
    """``./runs/<timestamp>-<pid>`` unless the user names one."""
    root = base or Path(os.environ.get("PGVAL_RUNS", "runs"))
    path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return private_dir(path)  # the runs root too, when pgval creates it: 0700
