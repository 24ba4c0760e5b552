"""A run's timeline, from priming to the drain, against the deployed run's handles and a
clock; what happened is returned as one :class:`TimelineRecord`.

Priming → T1 generators start → warm-up until the pipeline is steady
(:mod:`pgval.run.warmup`) → control [start, T2) → failure [T2, T3) → recovery [T3, T4) →
T4 generators stop → closing events → drain until the query has processed everything.

From the warm-up's end on, the timeline is a list of timed operations (:class:`Op`), as
Jepsen's generator is: inject the fault at T2, plant the self-test's late events mid-control,
stop the generators at T4; the removal is added when the inject has taken effect (at T3, or
``restart_delay_s`` after a crash under the restart policy ``immediate``). T2 and T3 are
then judged where the fault acted (the steps' ``effective_ms``, :mod:`pgval.run.schedule`),
and a removal that took effect late moves T4 to a whole phase after it
(:meth:`Timeline.full_recovery`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pgval.checker.explain import watermark_ms
from pgval.checker.result import Reason
from pgval.checker.validity import Validity, generator_reasons
from pgval.core.clock import Clock
from pgval.core.errors import EnvironmentFailure, PgvalError
from pgval.core.schema import Guarantee
from pgval.core.spec import RunSpec
from pgval.datasets import GeneratorConfig, KafkaSink, ProducerGroup
from pgval.run.monitor import batches, drain, wait_first_trigger, wait_primed
from pgval.run.result import Status
from pgval.run.setup import RunHandles, Started, driver_is_target
from pgval.run.warmup import WarmUp

#: Seconds the query may take to read its priming events.
PRIME_TIMEOUT_S = 240.0
#: How far ahead of the last real event a user's job's closing events are (event time).
JOB_CLOSING_AHEAD_MS = 3_600_000
#: Seconds between two ticks of the timeline (status line, schedule, watch).
TICK_S = 1.0


class DriverDied(EnvironmentFailure):
    """The driver exited on its own during the timeline (outside a driver-crash fault);
    caught by the timeline itself, which records it as a validity reason."""


@dataclass(frozen=True, order=True)
class Op:
    """One timed operation of the schedule: ``inject``, ``remove``, ``plant-late`` or
    ``stop-generators`` at ``at_ms`` (epoch ms)."""

    at_ms: int
    name: str


@dataclass(frozen=True)
class TimelineRecord:
    """What the timeline recorded: every bound (t1, settled, start, the schedule's
    t2/t3 ``_intended``, the judged t2/t3, t4; epoch ms), the warm-up's measurement, the
    generator's report, the self-test's planted events, its reasons and timings."""

    bounds: dict[str, int | None]
    warmup: dict[str, Any]
    generator: dict[str, Any]
    driver_died: bool
    reasons: tuple[Reason, ...]
    timings: dict[str, float]
    planted: dict[str, Any] = field(default_factory=dict)


class Timeline:
    """Runs the timeline of one deployed run; see the module docstring."""

    def __init__(self, cfg: RunSpec, handles: RunHandles, started: Started,
                 on_status: Callable[[Status], None], problem: Callable[[], str | None],
                 clock: Clock | None = None) -> None:
        self.cfg, self.h, self.started = cfg, handles, started
        self.on_status = on_status
        #: Why the run is no longer covered against a SIGKILL (a reaper died), or None.
        self.problem = problem
        self.clock = clock or Clock()
        self.phase = "priming"
        self.bounds: dict[str, int | None] = {}
        self.warmup: dict[str, Any] = {}
        self.planted: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self.reasons = Validity()
        self._rate_mark = (0, self.clock.monotonic())
        self._generators: ProducerGroup | None = None

    def run(self) -> TimelineRecord:
        self.timings["prime_s"] = self.prime()
        report, died = self.phases()
        return TimelineRecord(self.bounds, self.warmup, report, died,
                              tuple(self.reasons.reasons), self.timings, self.planted)

    # ------------------------------------------------------------------ before T1
    def prime(self) -> float:
        """Warm the query up on old-window control events (:mod:`pgval.run.own_events`)."""
        cfg, h = self.cfg, self.h
        t0 = self.clock.monotonic()
        logs = str(self.started.run_dir / "logs")
        self._prepare_generators()  # their start-up beside the query's, not at T1
        if cfg.pg == Guarantee.M1:
            # m1 reads from the latest offsets, fixed by the query's first trigger: what is
            # written before that trigger is never read (docs/semantics.md, "m1").
            wait_first_trigger(h.driver, PRIME_TIMEOUT_S, logs)
        h.control.priming(self.clock.now_ms(), cfg.window_ms, cfg.prime_events)
        wait_primed(h.driver, h.monitor, self.on_status, PRIME_TIMEOUT_S, logs)
        return self.clock.monotonic() - t0

    # ------------------------------------------------------------------ T1 to the drain
    def phases(self) -> tuple[dict[str, Any], bool]:
        """T1, the warm-up, the schedule, T4, then closing events and the drain. Returns
        the generator's report and whether the driver died on its own."""
        generators = self._start_generators()
        died = False
        try:
            self.warm_up()
            self.follow(self.operations())
        except DriverDied as exc:
            died = True
            self.reasons.add(Reason("observed", f"the driver died at {self.phase}: {exc}"))
            if "start" not in self.bounds:
                self.start_control(self.clock.now_ms(), settled=False)
            generators.stop()
        self.judge_bounds()
        report = generators.join(timeout_s=60).to_dict()
        generators.close()
        self.reasons.add(generator_reasons(report))
        if not died:
            self.close_and_drain()
        return report, died

    def _start_generators(self) -> ProducerGroup:
        """The generators, until T4 (which the warm-up's end decides): T1 is their start."""
        generators = self._generators or self._prepare_generators()
        generators.go()
        self.bounds = {"t1": generators.started_ms or self.clock.now_ms()}
        return generators

    def _prepare_generators(self) -> ProducerGroup:
        """The generators started with their sinks open, writing nothing until released."""
        cfg = self.cfg
        gen_cfg = GeneratorConfig(resources=cfg.resources, get_share=cfg.get_share,
                                  producers=cfg.producers, rate=cfg.rate, duration_s=None,
                                  seed=cfg.seed)
        client = self.h.deployment.client_config()
        # log_level 3: keep librdkafka's transient retry warnings off the live display.
        inputs = self.h.inputs
        sink = KafkaSink(str(client["bootstrap.servers"]), topics=self.h.topics,
                         config={**{k: v for k, v in client.items()
                                    if k != "bootstrap.servers"}, "log_level": 3},
                         # The user's records, where the run has an input model.
                         model=inputs.model if inputs is not None else None,
                         model_seed=cfg.seed)
        generators = ProducerGroup(gen_cfg, sink, pid_dir=self.started.run_dir / "pids")
        self.started.generators = self._generators = generators
        generators.prepare()
        return generators

    def warm_up(self) -> None:
        """From T1 until the pipeline is steady (:mod:`pgval.run.warmup`), at least
        ``warmup_seconds`` and at most ``warmup_max_seconds``; then control starts."""
        cfg, h = self.cfg, self.h
        t1 = self.bounds["t1"]
        assert t1 is not None
        earliest = t1 + int(cfg.warmup_seconds * 1000)
        latest = t1 + int(cfg.warmup_max_seconds * 1000)
        warm = WarmUp(t1)
        self.phase = "warm-up"
        h.monitor.follow()
        untimed = 0  # outputs without a window_end (a user's job may have none)
        steady = False
        try:
            while True:
                now = self.clock.now_ms()
                ends, stamps, seen = h.watch.new_outputs()
                untimed += seen - len(ends)
                warm.add(ends, stamps, max((watermark_ms(p) for p in batches(h.driver)),
                                           default=0))
                steady = warm.steady()
                if (steady and now >= earliest) or now >= latest:
                    break
                if untimed and not len(warm.window_end) and now >= earliest:
                    warm.untimed = untimed  # nothing the rule could judge: ε only
                    break
                self.status(now, (latest - t1) / 1000 + 3 * cfg.phase_seconds,
                            note=f"warming up: {warm.note()}")
                self.watch(driver_down=False)
                self.clock.sleep(TICK_S)
        finally:
            h.monitor.unfollow()
        start = self.clock.now_ms()
        self.warmup = warm.record(start, cfg.warmup_max_seconds)
        self.start_control(start, settled=steady)

    def start_control(self, start: int, settled: bool) -> None:
        """The schedule's bounds from the end of the warm-up: control, failure, recovery."""
        phase_ms = int(self.cfg.phase_seconds * 1000)
        self.bounds.update(settled=start if settled else None, start=start,
                           t2_intended=start + phase_ms, t3_intended=start + 2 * phase_ms,
                           t4=start + 3 * phase_ms)
        t1 = self.bounds["t1"]
        assert t1 is not None
        self.timings["warmup_s"] = (start - t1) / 1000

    def operations(self) -> list[Op]:
        """The schedule as data: the fault at T2, the self-test's late events mid-control,
        the generators' stop at T4 (the removal follows from the inject)."""
        b = self.bounds
        start, t2, t4 = b["start"], b["t2_intended"], b["t4"]
        assert start is not None and t2 is not None and t4 is not None
        ops = [Op(t2, "inject"), Op(t4, "stop-generators")]
        if self.cfg.late_events:
            ops.append(Op(start + (t2 - start) // 2, "plant-late"))
        return sorted(ops)

    def follow(self, pending: list[Op]) -> None:
        """Sleep through the phases doing each operation when due, reporting status,
        watching the driver and the reapers; returns once the generators are done after T4."""
        b = self.bounds
        t1, t4 = b["t1"], b["t4"]
        assert t1 is not None and t4 is not None
        total_s = (t4 - t1) / 1000.0
        injected = removed = False
        generators = self._generators
        assert generators is not None
        while True:
            while pending and pending[0].at_ms <= self.clock.now_ms():
                op = pending.pop(0)
                follow_up = self.do(op)
                if op.name == "inject":
                    injected = True
                elif op.name == "remove":
                    removed = True
                    pending = self.full_recovery(pending)
                    t4 = b["t4"]
                    assert t4 is not None
                    total_s = (t4 - t1) / 1000.0
                if follow_up is not None:
                    bisect.insort(pending, follow_up)
            now = self.clock.now_ms()
            self.phase = ("control" if not injected else "failure" if not removed
                          else "recovery")
            self.status(now, total_s)
            if generators.done() and now >= t4:
                return
            if now >= t4 + 60_000:
                raise EnvironmentFailure("the generators did not finish 60 s after T4")
            self.watch(driver_down=driver_is_target(self.cfg, self.h.fault)
                       and injected and not removed)
            if injected and not removed:
                self.h.schedule.check()
            self.clock.sleep(TICK_S)

    def full_recovery(self, pending: list[Op]) -> list[Op]:
        """A whole phase of load after the fault's removal took effect: a removal that acted
        late (a driver that took its time to run its query again) moves T4, and the
        generators' stop, on; without it a slow restart leaves recovery with no inputs."""
        b = self.bounds
        removed = self.h.schedule.effective("remove")
        phase_ms = int(self.cfg.phase_seconds * 1000)
        t4 = b["t4"]
        assert t4 is not None
        if removed is None or removed + phase_ms <= t4:
            return pending
        b["t4"] = removed + phase_ms
        return sorted([op for op in pending if op.name != "stop-generators"]
                      + [Op(b["t4"], "stop-generators")])

    def do(self, op: Op) -> Op | None:
        """One operation; returns the operation it makes due (the removal after an inject)."""
        cfg, schedule = self.cfg, self.h.schedule
        if op.name == "inject":
            schedule.step("inject", op.at_ms)
            t3 = self.bounds["t3_intended"]
            assert t3 is not None
            return Op(schedule.removal_due(cfg.restart_policy, cfg.restart_delay_s, t3),
                      "remove")
        if op.name == "remove":
            schedule.step("remove", op.at_ms)
        elif op.name == "stop-generators":
            assert self._generators is not None
            if not self._generators.stop_requested:
                self._generators.stop()
        elif op.name == "plant-late":
            self.plant_late_events()
        return None

    def judge_bounds(self) -> None:
        """T2 and T3 as the run judges them: when the fault took effect and when it ended
        (the schedule's times where nothing was injected or removed)."""
        b, schedule = self.bounds, self.h.schedule
        b["t2"] = schedule.effective("inject") or b["t2_intended"]
        # Never before T2: a removal logged earlier than the fault's effect (clocks of two
        # processes) would leave the failure phase inverted.
        b["t3"] = max(schedule.effective("remove") or b["t3_intended"] or 0, b["t2"] or 0)

    def close_and_drain(self) -> None:
        """Closing events past every window, then the drain until the query caught up."""
        cfg, h = self.cfg, self.h
        now = self.clock.now_ms()
        if cfg.job is None:
            closing_ts = h.control.closing(now, cfg.window_ms, cfg.watermark_ms)
            delay = cfg.watermark_ms
        else:
            # A job's watermark and windows are its own: closing events an hour ahead close
            # every window of --window-ms whatever the job's watermark delay (up to the hour
            # less the window), and the drain waits for that.
            closing_ts = h.control.closing(now, JOB_CLOSING_AHEAD_MS, 0)
            delay = closing_ts - (now + cfg.window_ms + 1_000)
        outcome = drain(h.driver, h.monitor, closing_ts, delay, cfg.drain_timeout_s,
                        self.on_status)
        self.timings["drain_s"] = outcome.seconds
        self.timings["drain_timed_out"] = 1.0 if outcome.timed_out else 0.0
        if outcome.caught_up_s is not None:
            self.timings["caught_up_s"] = outcome.caught_up_s
        if outcome.reason:
            self.reasons.add(outcome.reason)

    # ------------------------------------------------------------------ each tick
    def status(self, now: int, total_s: float, note: str = "") -> None:
        """One live status line: the phase, time since T1, the input rate, outputs."""
        generators = self._generators
        assert generators is not None
        generated = sum(p.sent for p in generators.progress())
        mono = self.clock.monotonic()
        last_count, last_t = self._rate_mark
        rate = (generated - last_count) / max(mono - last_t, 1e-3)
        self._rate_mark = (generated, mono)
        t1 = self.bounds["t1"] or now
        self.on_status(Status(self.phase, (now - t1) / 1000.0, total_s, generated, rate,
                              self.h.watch.count(), len(self.h.driver.progress()), note=note))

    def watch(self, driver_down: bool) -> None:
        """Stop the run when the driver died on its own (not while a driver crash holds it
        down) or a reaper died (the run would no longer be covered against a SIGKILL)."""
        if not driver_down:
            try:
                self.h.driver.check()
            except PgvalError as exc:
                raise DriverDied(str(exc)) from exc
        problem = self.problem()
        if problem:
            raise EnvironmentFailure(problem)

    def plant_late_events(self) -> None:
        """SELF-TEST: events behind the last reported watermark, which Spark must drop."""
        cfg = self.cfg
        wm = max((watermark_ms(p) for p in batches(self.h.driver)), default=0)
        self.planted = self.h.control.plant_late(cfg.late_events, wm, cfg.window_ms,
                                                 cfg.topology, self.clock.now_ms())
