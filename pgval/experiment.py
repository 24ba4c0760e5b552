"""One experiment, end to end: the paper's timeline (Fig. 4) on the embedded cluster.

T0 deploy (cluster, topics, driver) → T1 generators start → ε warm-up →
control [T1+ε, T2) → failure [T2, T3) → recovery [T3, …) → T4 generators stop →
closing events → drain until the query has processed everything → read what Kafka
holds, proving the read complete → evidence on disk → oracle, validator, metrics →
validity → SQLite.

Closing events: Spark closes a window only when the watermark passes it, and
the watermark moves only with new events. When the generators stop, the last
windows would stay open forever and their events would look unprocessed. So
after T4 the runner writes one event per resource and topic with a negative ID
and an event time past every real window; those events are not inputs of the
experiment (the oracle never sees negative IDs from a run) and only move the
watermark, like the paper's "first input of the next window".

Priming events: Spark's first micro-batches are slow (executors start, classes
load, state stores open). Before T1 the runner writes a few events with
negative IDs into an old window and waits until a batch has read them, so the
control phase measures a warm query. Exactly the range of negative IDs the runner wrote
is set aside before validation (:func:`pgval.evidence.set_aside_control`); any other ID
is judged.

A run is evidence only when it can show it: the read-back must reach every partition's
end offset and reconcile with what the generator delivered, the drain must end because
the query caught up, the fault must show it took effect. Otherwise the run is stored as
*unknown*, with the reasons (:mod:`pgval.validity`).

Faults plug in through :class:`FaultHooks`: ``inject`` at T2 and ``remove`` at
T3 (and always on the way out).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import Consumer, Producer, TopicPartition

from pgval.config import ExperimentConfig
from pgval.datasets import GeneratorConfig, KafkaSink, ProducerGroup
from pgval.evaluate import Evaluation, evaluate
from pgval.evidence import Manifest, save_progress, save_topic, streams_from_records
from pgval.explain import watermark_ms
from pgval.faults import (
    default_target,
    make_compose_fault,
    make_fault,
    profile_for,
    timeouts_fired,
)
from pgval.phases import Phases
from pgval.runtime import signals
from pgval.runtime.cluster import LocalCluster
from pgval.runtime.driver import DriverProcess, DriverSpec
from pgval.runtime.kafka import TopicRecords
from pgval.runtime.procs import RuntimeErrorPlain
from pgval.runtime.readback import read_topics
from pgval.schema import GET_TOPIC, OUTPUT_TOPIC, POST_TOPIC, resource_name
from pgval.store import ResultsStore
from pgval.validity import (
    Validity,
    evaluation_reasons,
    fault_reasons,
    generator_reasons,
    readback_reasons,
    reconcile_inputs,
)

#: IDs of planted late events (a self-test): far above any generator ID, so a test can
#: tell them apart; they are ordinary inputs for the oracle and the validator.
LATE_ID_BASE = 1 << 62


@dataclass
class Status:
    """What the live display shows; sent about once a second."""

    phase: str
    elapsed_s: float
    total_s: float
    generated: int
    input_rate: float
    outputs: int
    batches: int
    note: str = ""


class FaultHooks(Protocol):
    """A fault: injected at T2, removed at T3; ``remove`` must be safe to call twice, and
    after an interrupted ``inject``. ``restore=False`` (teardown) undoes what would
    outlive the run (a delay) without restoring what teardown stops anyway (no restart
    of a crashed worker just to stop it)."""

    name: str

    def inject(self, run: Experiment) -> dict[str, Any]: ...

    def remove(self, run: Experiment, restore: bool = True) -> dict[str, Any]: ...


class NoFault:
    name = "none"

    def inject(self, run: Experiment) -> dict[str, Any]:
        return {}

    def remove(self, run: Experiment, restore: bool = True) -> dict[str, Any]:
        return {}


@dataclass
class ExperimentResult:
    run_id: int | None
    evaluation: Evaluation
    timings: dict[str, float]
    phases: Phases
    generator: dict[str, Any]
    batches: list[dict[str, Any]]
    fault_log: list[dict[str, Any]]
    validity: Validity = field(default_factory=Validity)
    readback: dict[str, Any] = field(default_factory=dict)
    run_dir: Path | None = None

    def summary(self) -> dict[str, Any]:
        out = self.evaluation.summary()
        out.update(self.validity.as_dict())
        out.update({"run_id": self.run_id, "run_dir": str(self.run_dir), "timings": self.timings,
                    "readback": self.readback,
                    "phase_bounds_ms": {"start": self.phases.start, "t2": self.phases.t2,
                                        "t3": self.phases.t3},
                    "generator": {k: self.generator.get(k) for k in (
                        "sent", "delivered", "failed", "undelivered", "achieved_rate")},
                    "batches": len(self.batches), "fault_log": self.fault_log})
        return out


class Experiment:
    """Runs one experiment; everything started is stopped in :meth:`run`'s ``finally``."""

    def __init__(self, config: ExperimentConfig, run_dir: Path, db: Path | None = None,
                 fault: FaultHooks | None = None,
                 on_status: Callable[[Status], None] | None = None,
                 extra_params: dict[str, Any] | None = None, repeat: int | None = None,
                 run_id: int | None = None) -> None:
        """``run_id``: a ``running`` row already started for this run (a claimed matrix
        cell); without it :meth:`run` starts one."""
        config.validate()
        self.config = config
        self.run_dir = Path(run_dir).resolve()
        self.db = db
        self.profile = profile_for(config.fault, config.phase_seconds, config.delay_ms)
        self.target = (config.target if config.target is not None
                       else default_target(config.seed, config.cluster.workers))
        if fault is None and config.deploy == "compose":
            fault = make_compose_fault(config.fault, self.target, self.profile,
                                       config.phase_seconds)
        self.fault = fault or make_fault(config.fault, self.target, self.profile) or NoFault()
        if self.profile.daemon_conf:
            config.cluster.spark_daemon_conf = {**self.profile.daemon_conf,
                                                **config.cluster.spark_daemon_conf}
        self.on_status = on_status or (lambda s: None)
        self.extra_params = dict(extra_params or {})
        self.repeat = repeat
        self.run_id = run_id
        self.cluster: LocalCluster | None = None
        self.driver: DriverProcess | None = None
        self.generators: ProducerGroup | None = None
        self.timings: dict[str, float] = {}
        self.fault_log: list[dict[str, Any]] = []
        self._phase = "deploy"
        self._reasons = Validity()
        #: pgval's own events: the next free control ID and how many were written.
        self._next_control_id = -1
        self._own_events = 0
        self.planted: dict[str, Any] = {}
        self.manifest = Manifest(topology=config.topology, window_ms=config.window_ms,
                                 phases=[0, 0, 0], resources=config.resources,
                                 config=config.to_dict())

    # ------------------------------------------------------------------ timeline
    def run(self) -> ExperimentResult:
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
                self._preflight()
                result = self._run(run_id)
            except BaseException as exc:
                with signals.shielded():
                    self._teardown()
                    if store and run_id is not None:
                        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
                        store.fail_run(run_id, str(exc) or type(exc).__name__, status=status)
                raise
            with signals.shielded():
                self._teardown()
        if self.fault.name != "none":
            self.fault_log.append({"step": "timeouts", "fault": self.fault.name,
                                   "target": self.target, **self.profile.describe(),
                                   "fired": timeouts_fired(self.run_dir / "logs")})
        validity = result.validity
        validity.extend(evaluation_reasons(result.evaluation))
        validity.extend(fault_reasons(cfg.fault, self.fault_log))
        self.timings["total_s"] = time.monotonic() - wall0
        phase_total = cfg.warmup_seconds + 3 * cfg.phase_seconds
        self.timings["overhead_s"] = self.timings["total_s"] - phase_total
        self.manifest.valid, self.manifest.validity_reasons = validity.valid, validity.reasons
        self.manifest.run_id = run_id
        self.manifest.write(self.run_dir)
        if store and run_id is not None:
            extra = {"timings": self.timings, "generator": result.generator,
                     "readback": result.readback, "fault_log": self.fault_log,
                     "cluster": self._cluster_info(), "run_dir": str(self.run_dir)}
            store.finish_run(run_id, result.evaluation, extra=extra, validity=validity,
                             run_dir=self.run_dir, batches=result.batches,
                             fault_log=self.fault_log)
        if not cfg.keep_data:
            remove_run_data(self.run_dir)
        return result

    def _preflight(self) -> None:
        """Refuse, before anything is deployed, a run that could only fail at T2."""
        cfg = self.config
        if cfg.fault.startswith("delay") and cfg.deploy != "compose":
            if os.geteuid() != 0:
                raise RuntimeErrorPlain(f"--fault {cfg.fault} needs root (it puts the worker "
                                        "in a network namespace and changes its packet path)")
            if cfg.cluster.isolate is False:
                raise RuntimeErrorPlain(f"--fault {cfg.fault} needs the workers in their own "
                                        "network namespaces; drop --no-isolate")

    def _run(self, run_id: int | None) -> ExperimentResult:
        cfg = self.config
        t0 = time.monotonic()
        self._reasons = Validity()
        if cfg.deploy == "compose":
            from pgval.runtime.compose import ComposeDeployment

            deployment = ComposeDeployment(self.run_dir, cfg.cluster.partitions)
            self.cluster = deployment.start()  # type: ignore[assignment]
            where: dict[str, Any] = {
                "bootstrap": deployment.driver_bootstrap, "master": deployment.master_url,
                "driver_host": deployment.driver_host, "extra_env": {},
                "launcher": deployment.driver_launcher(), "python": "python",
                "path_map": deployment.container_path,
                "signal_argv": deployment.driver_signal_argv}
        else:
            self.cluster = LocalCluster(self.run_dir, cfg.cluster).start()
            spark = self.cluster.spark
            assert spark is not None
            where = {"bootstrap": self.cluster.bootstrap, "master": spark.master_url,
                     "driver_host": spark.driver_host, "extra_env": spark.driver_env()}
        self.timings.update(self.cluster.timings)
        spec = DriverSpec(
            topology=cfg.topology, pg=cfg.pg, checkpoint=self.run_dir / "checkpoint",
            progress_file=self.run_dir / "progress.jsonl", window_ms=cfg.window_ms,
            watermark_ms=cfg.watermark_ms, trigger_ms=cfg.trigger_ms,
            shuffle_partitions=cfg.shuffle_partitions or cfg.cluster.partitions,
            executor_memory=cfg.executor_memory,
            max_offsets_per_trigger=cfg.max_offsets_per_trigger,
            query_name=f"pgval-{cfg.topology}-{cfg.pg}", sabotage=cfg.sabotage,
            conf=dict(self.profile.driver_conf), **where)
        self.driver = DriverProcess(spec, self.run_dir / "logs", self.run_dir / "pids")
        self.timings["driver_start_s"] = self.driver.start()
        monitor = _OutputMonitor(self.cluster.bootstrap)
        try:
            self.timings["prime_s"] = self._prime(monitor)
        except BaseException:
            monitor.close()
            raise
        self.timings["deploy_s"] = time.monotonic() - t0

        gen_cfg = GeneratorConfig(
            resources=cfg.resources, get_share=cfg.get_share, producers=cfg.producers,
            rate=cfg.rate, duration_s=cfg.warmup_seconds + 3 * cfg.phase_seconds, seed=cfg.seed)
        # log_level 3: keep librdkafka's transient retry warnings off the live display.
        sink = KafkaSink(self.cluster.bootstrap, config={"log_level": 3})
        self.generators = ProducerGroup(gen_cfg, sink, pid_dir=self.run_dir / "pids")
        self.generators.start()
        t1_ms = self.generators.started_ms or _now_ms()
        start = t1_ms + int(cfg.warmup_seconds * 1000)
        t2 = start + int(cfg.phase_seconds * 1000)
        t3 = t2 + int(cfg.phase_seconds * 1000)
        t4 = t3 + int(cfg.phase_seconds * 1000)
        phases = Phases(start, t2, t3, t4)
        self.phase_bounds = {"t1": t1_ms, "start": start, "t2": t2, "t3": t3, "t4": t4}

        driver_died = False
        try:
            try:
                self._follow_timeline(t1_ms, t2, t3, t4, monitor)
            except _DriverDied as exc:
                driver_died = True
                self._reasons.add(f"the driver died at {self._phase}: {exc}")
            report = self.generators.join(timeout_s=60)
            self.generators.close()
            self._reasons.extend(generator_reasons(report.to_dict()))
            if not driver_died:
                closing_ts = self._write_closing_events()
                self._drain(closing_ts)
        finally:
            monitor.close()
        if not driver_died:
            try:
                self.driver.check()
            except RuntimeErrorPlain as exc:
                self._reasons.add(f"the driver died during the drain: {exc}")
        batches = self.driver.progress()

        t_read = time.monotonic()
        records = self._read_back(report.to_dict())
        self.timings["read_back_s"] = time.monotonic() - t_read
        streams = streams_from_records(records, records[OUTPUT_TOPIC], cfg.resources,
                                       self.manifest.control_ids)
        t_val = time.monotonic()
        evaluation = evaluate(streams.events, streams.outputs, cfg.topology, cfg.window_ms,
                              phases, progress=batches)
        self.timings["validate_s"] = time.monotonic() - t_val
        return ExperimentResult(
            run_id=run_id, evaluation=evaluation, timings=self.timings, phases=phases,
            generator=report.to_dict(), batches=batches, fault_log=self.fault_log,
            validity=self._reasons, readback=self.manifest.readback, run_dir=self.run_dir)

    def _follow_timeline(self, t1: int, t2: int, t3: int, t4: int,
                         monitor: _OutputMonitor) -> None:
        """Sleep through the phases, injecting/removing the fault, reporting status."""
        assert self.generators is not None and self.driver is not None
        injected = removed = False
        total_s = (t4 - t1) / 1000.0
        last_count, last_t = 0, time.monotonic()
        while True:
            now = _now_ms()
            if not injected and now >= t2:
                self._fault_step("inject", t2)
                injected = True
            if injected and not removed and now >= t3:
                self._fault_step("remove", t3)
                removed = True
            start = t2 - (t3 - t2)
            self._phase = ("warm-up" if now < start else "control" if now < t2 else
                           "failure" if now < t3 else "recovery")
            generated = sum(p.sent for p in self.generators.progress())
            mono = time.monotonic()
            rate = (generated - last_count) / max(mono - last_t, 1e-3)
            last_count, last_t = generated, mono
            self.on_status(Status(self._phase, (now - t1) / 1000.0, total_s, generated, rate,
                                  monitor.count(), len(self.driver.progress())))
            if self.generators.done() and now >= t4:
                return
            if now >= t4 + 60_000:
                raise RuntimeErrorPlain("the generators did not finish 60 s after T4")
            if (self.config.late_events and not self.planted
                    and now >= start + (t2 - start) // 2):
                self._plant_late_events()
            if self.fault.name != "driver-crash" or not injected or removed:
                try:
                    self.driver.check()
                except RuntimeErrorPlain as exc:
                    raise _DriverDied(str(exc)) from exc
            if injected and not removed:
                self._check_fault()
            time.sleep(1.0)

    def _check_fault(self) -> None:
        """Record (once) a fault that stopped acting before T3, e.g. a dead packet holder:
        the run then cannot claim the failure phase was delayed (a validity reason)."""
        problem = getattr(self.fault, "problem", None)
        why = problem() if callable(problem) else None
        if why and not any(e.get("step") == "holder-died" for e in self.fault_log):
            self.fault_log.append({"step": "holder-died", "fault": self.fault.name,
                                   "actual_ms": _now_ms(), "error": why})

    def _fault_step(self, step: str, intended_ms: int, restore: bool = True) -> None:
        """Inject or remove, logged as one step: the entry exists before the fault acts,
        so an interrupt at any point of ``inject`` still leads teardown to remove it."""
        if self.fault.name == "none":
            return
        entry: dict[str, Any] = {"step": step, "fault": self.fault.name,
                                 "intended_ms": intended_ms, "actual_ms": _now_ms()}
        if not restore:
            entry["teardown"] = True
        self.fault_log.append(entry)
        try:
            detail = (self.fault.inject(self) if step == "inject"
                      else self.fault.remove(self, restore=restore))
            entry.update(detail or {})
            entry["done_ms"] = _now_ms()
        except BaseException as exc:
            entry["error"] = str(exc) or type(exc).__name__
            raise

    def _write_control_events(self, event_ts: int, first_id: int, per_resource: int = 1,
                              step_ms: int = 0) -> int:
        """Negative-ID GET+POST pairs per resource from ``event_ts`` on, ``step_ms`` apart.

        Spread over windows (one pair per key), so MST's join stays one row per key.
        Returns the next free ID.
        """
        assert self.cluster is not None
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap,
                             "partitioner": "murmur2_random", "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5, "log_level": 3})
        ident = first_id
        lo = first_id - 2 * per_resource * self.config.resources + 1
        # Recorded before writing, so a crash mid-write is still covered; only grows.
        prev = self.manifest.control_ids[0] if self.manifest.control_ids else -1
        self.manifest.control_ids = [min(lo, prev), -1]
        for k in range(per_resource):
            for r in range(self.config.resources):
                name = resource_name(r)
                for topic, typ in ((GET_TOPIC, "GET"), (POST_TOPIC, "POST")):
                    value = json.dumps({"id": ident, "type": typ, "resource": name,
                                        "event_ts": event_ts + k * step_ms}).encode()
                    while True:
                        try:
                            producer.produce(topic, key=name.encode(), value=value)
                            break
                        except BufferError:
                            producer.poll(0.1)
                    ident -= 1
        if producer.flush(30) != 0:
            raise RuntimeErrorPlain("could not write pgval's control events to Kafka in 30 s")
        written = first_id - ident
        self._own_events += written
        self.manifest.control_events += written
        self._next_control_id = ident
        return ident

    def _prime(self, monitor: _OutputMonitor, timeout_s: float = 240.0) -> float:
        """Warm the query up on old-window control events; wait until it has read them all.

        One batch is not enough: the first batches over real volume run on cold JVMs
        (interpreted code, empty caches) and are several times slower than later ones.
        ``prime_events`` control events, in a window far in the past, make the query do
        that work before T1 so the control phase measures a warm system.
        """
        assert self.driver is not None
        t0 = time.monotonic()
        w = self.config.window_ms
        per_resource = max(1, self.config.prime_events // (2 * self.config.resources))
        old = _now_ms() - (per_resource + 100) * w
        self._write_control_events(old, -1, per_resource, step_ms=w)
        targets = monitor.end_offsets((GET_TOPIC, POST_TOPIC))
        while time.monotonic() - t0 < timeout_s:
            self.driver.check()
            progress = [p for p in self.driver.progress() if p.get("event") == "progress"]
            if _processed_past(progress, targets):
                return time.monotonic() - t0
            self.on_status(Status("prime", time.monotonic() - t0, timeout_s, 0, 0.0, 0,
                                  len(progress), note="warming up the query"))
            time.sleep(0.5)
        raise RuntimeErrorPlain(f"the streaming query did not read its warm-up events within "
                                f"{timeout_s:.0f} s (see {self.run_dir / 'logs'})")

    def _write_closing_events(self) -> int:
        """Negative-ID events past every real window, on both topics, to move the watermark."""
        cfg = self.config
        closing_ts = _now_ms() + cfg.window_ms + cfg.watermark_ms + 1_000
        self._write_control_events(closing_ts, self._next_control_id)
        return closing_ts

    def _plant_late_events(self) -> None:
        """SELF-TEST: write events whose window already closed, so Spark must drop them.

        Their event time is two windows behind the watermark the query last reported, so
        ``window end <= watermark`` holds for whichever batch reads them: Spark's late-row
        rule for windowed aggregations and for the window-equality join (see
        docs/semantics.md, "Why unprocessed"). They are ordinary inputs to the oracle, so
        they must come out *unprocessed*, attributed *late*. MST gets a GET and a POST per
        event, so the late key would have had an output.
        """
        assert self.cluster is not None and self.driver is not None
        cfg = self.config
        marks = [watermark_ms(p) for p in self.driver.progress() if p.get("event") == "progress"]
        wm = max(marks, default=0)
        if wm <= 0:
            self.planted = {"late_ids": [], "note": "no watermark reported yet"}
            return
        event_ts = wm - 2 * cfg.window_ms
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap,
                             "partitioner": "murmur2_random", "acks": "all",
                             "enable.idempotence": True, "log_level": 3})
        ids = []
        types = ("GET",) if cfg.topology == "sst" else ("GET", "POST")
        for k in range(cfg.late_events):
            name = resource_name(k % cfg.resources)
            for typ in types:
                ident = LATE_ID_BASE + len(ids)
                ids.append(ident)
                topic = GET_TOPIC if typ == "GET" else POST_TOPIC
                producer.produce(topic, key=name.encode(), value=json.dumps(
                    {"id": ident, "type": typ, "resource": name, "event_ts": event_ts}).encode())
        if producer.flush(30) != 0:
            raise RuntimeErrorPlain("could not write the planted late events to Kafka in 30 s")
        self._own_events += len(ids)
        self.planted = {"late_ids": ids, "event_ts": event_ts, "watermark_ms": wm,
                        "written_ms": _now_ms()}
        self.manifest.config["planted"] = self.planted

    def _drain(self, closing_ts: int) -> None:
        """Wait until the query has processed every input and emitted every real window.

        Done = the latest batch's end offsets reach the input topics' end offsets (closing
        events included) AND a batch has run with the watermark the closing events produce
        (``closing_ts - watermark_ms``, past every real window's end). Spark evicts — emits,
        in append mode — a window in the batch whose watermark reaches its end, and reports
        that batch's watermark in its progress, after the sink wrote it. So no "one more
        batch" and no quiet period are needed: the drain ends in the batch that finishes
        the work. A drain time-out makes the run unknown.
        """
        assert self.driver is not None and self.cluster is not None
        cfg = self.config
        t0 = time.monotonic()
        deadline = t0 + cfg.drain_timeout_s
        monitor = _OutputMonitor(self.cluster.bootstrap)
        try:
            targets = monitor.end_offsets((GET_TOPIC, POST_TOPIC))
            wm_target = closing_ts - cfg.watermark_ms
            while True:
                progress = [p for p in self.driver.progress() if p.get("event") == "progress"]
                caught = _processed_past(progress, targets)
                wm = max((watermark_ms(p) for p in progress), default=0)
                now = time.monotonic()
                if caught and "caught_up_s" not in self.timings:
                    self.timings["caught_up_s"] = now - t0
                if caught and wm >= wm_target:
                    self.timings["drain_timed_out"] = 0.0
                    break
                if now >= deadline:
                    self.timings["drain_timed_out"] = 1.0
                    self._reasons.add(
                        f"the drain timed out after {cfg.drain_timeout_s:.0f} s: "
                        + ("the query read every input but its watermark stayed at "
                           f"{wm} < {wm_target}" if caught else
                           "the query had not read every input"))
                    break
                try:
                    self.driver.check()
                except RuntimeErrorPlain as exc:
                    self._reasons.add(f"the driver died during the drain: {exc}")
                    break
                note = ("waiting for the query to read all inputs" if not caught else
                        "waiting for the watermark to close the last windows")
                self.on_status(Status("drain", now - t0, cfg.drain_timeout_s, 0, 0.0,
                                      monitor.count(), len(progress), note=note))
                time.sleep(0.25)
        finally:
            monitor.close()
        self.timings["drain_s"] = time.monotonic() - t0

    def _read_back(self, generator: dict[str, Any]) -> dict[str, TopicRecords]:
        """What Kafka holds, read to every partition's end and kept as evidence.

        Inputs and outputs are read read_committed (e1's aborted writes never count). A
        short read, an error or a time-out is recorded as a reason (the run becomes
        unknown), never raised: what was read is still stored and evaluated.
        """
        assert self.cluster is not None
        expected = int(generator.get("delivered") or 0) + self._own_events
        timeout_s = max(120.0, expected / 50_000)
        records = read_topics(self.cluster.bootstrap, (GET_TOPIC, POST_TOPIC, OUTPUT_TOPIC),
                              timeout_s=timeout_s, idle_timeout_s=30.0, strict=False)
        for recs in records.values():
            save_topic(self.run_dir, recs)
        save_progress(self.run_dir, self.run_dir / "progress.jsonl")
        readback = {t: r.describe() for t, r in records.items()}
        read = sum(len(records[t]) for t in (GET_TOPIC, POST_TOPIC))
        ends = sum(sum(records[t].end_offsets.values()) for t in (GET_TOPIC, POST_TOPIC))
        clean = not generator_reasons(generator)
        info, reasons = reconcile_inputs(read, ends, int(generator.get("delivered") or 0),
                                         self._own_events, clean)
        self._reasons.extend(readback_reasons(readback))
        self._reasons.extend(reasons)
        self.manifest.readback = {**readback, "inputs": info}
        self.manifest.phases = [self.phase_bounds["start"], self.phase_bounds["t2"],
                                self.phase_bounds["t3"]]
        self.manifest.t4 = self.phase_bounds["t4"]
        self.manifest.write(self.run_dir)
        return records

    def spark_worker(self, index: int) -> Any:
        """The handle of Spark worker ``index`` (for faults)."""
        if self.cluster is None or self.cluster.spark is None:
            raise RuntimeErrorPlain("the Spark cluster is not running")
        return self.cluster.spark.workers[index]

    # ------------------------------------------------------------------ cleanup
    def _teardown(self) -> None:
        """Remove the fault, stop generators, driver and cluster — whatever exists.

        Run under :func:`signals.shielded`. A fault whose injection began and that was
        not removed without error is removed (never restored: a crashed worker is not
        restarted just to be stopped); a failed removal is logged as such.
        """
        removed_ok = any(e["step"] == "remove" and not e.get("error") for e in self.fault_log)
        if any(e["step"] == "inject" for e in self.fault_log) and not removed_ok:
            with contextlib.suppress(Exception):
                self._fault_step("remove", _now_ms(), restore=False)
        if self.generators is not None:
            with contextlib.suppress(Exception):
                self.generators.close()
        if self.driver is not None:
            with contextlib.suppress(Exception):
                self.driver.stop()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.stop()

    def _cluster_info(self) -> dict[str, Any]:
        try:
            return self.cluster.describe() if self.cluster else {}
        except Exception:
            return {}


class _OutputMonitor:
    """Counts records in the output topic (sum of high watermarks), cheaply, once a second."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pgval-monitor",
                                  "enable.auto.commit": False})
        self._partitions: list[int] | None = None

    def count(self) -> int:
        try:
            if self._partitions is None:
                md = self.consumer.list_topics(OUTPUT_TOPIC, timeout=5)
                self._partitions = sorted(md.topics[OUTPUT_TOPIC].partitions)
            return sum(self.consumer.get_watermark_offsets(
                TopicPartition(OUTPUT_TOPIC, p), timeout=5, cached=False)[1]
                for p in self._partitions)
        except Exception:
            return -1

    def end_offsets(self, topics: tuple[str, ...]) -> dict[str, dict[int, int]]:
        """Current high watermarks of ``topics``, per partition."""
        out: dict[str, dict[int, int]] = {}
        for topic in topics:
            md = self.consumer.list_topics(topic, timeout=10)
            out[topic] = {p: self.consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in md.topics[topic].partitions}
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()


def _processed_past(progress: list[dict[str, Any]], targets: dict[str, dict[int, int]]) -> bool:
    """Has the latest batch's end offset reached ``targets`` for every topic it reads?"""
    if not progress:
        return False
    sources = progress[-1].get("sources") or []
    seen = False
    for src in sources:
        end = src.get("endOffset") or {}
        if not isinstance(end, dict):
            continue
        for topic, parts in end.items():
            if topic not in targets:
                continue
            seen = True
            for part, target in targets[topic].items():
                if int(parts.get(str(part), 0)) < target:
                    return False
    return seen


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _DriverDied(Exception):
    """The driver exited on its own during the timeline (outside a driver-crash fault)."""


def default_run_dir(base: Path | None = None) -> Path:
    """``./runs/<timestamp>-<pid>`` unless the user names one."""
    root = base or Path(os.environ.get("PGVAL_RUNS", "runs"))
    path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_run_data(run_dir: Path) -> None:
    """Delete the machinery of a stored run (broker data, checkpoints, executors' jar
    copies), keeping its evidence and the process logs: 50-130 MB per run otherwise."""
    run_dir = Path(run_dir)
    for data in (run_dir / "kafka").glob("broker-*/data"):
        shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)
    for jar in (run_dir / "spark" / "work").rglob("*.jar"):
        with contextlib.suppress(OSError):
            jar.unlink()
