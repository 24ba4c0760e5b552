"""The timeline's schedule as data (pgval/run/timeline.py): which operations are due when,
the removal a fault's inject makes due under each restart policy, and the order a run
goes through them, on a clock that moves only when the timeline sleeps.

The generators, driver and sink watch here are stand-ins that only count: what they do on
a real cluster is what tests/test_validate.py and the fault cluster tests judge; this file
holds the order of operations, which no cluster run can pin to the millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from pgval.config import resolve
from pgval.core.spec import RunSpec
from pgval.run.schedule import FaultSchedule
from pgval.run.timeline import Op, Timeline

T0 = 1_800_000_000_000


class FakeClock:
    """Epoch ms that advance only by :meth:`sleep`."""

    def __init__(self, at_ms: int = T0) -> None:
        self.ms = at_ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        return self.ms / 1000

    def sleep(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


@dataclass
class Steps:
    """A fault that records when each step was asked for, on the fake clock."""

    clock: FakeClock
    name: str = "crash"
    asked: list[tuple[str, int]] = field(default_factory=list)

    def inject(self) -> dict[str, Any]:
        self.asked.append(("inject", self.clock.ms))
        return {"effective_ms": self.clock.ms + 500}  # the kill took effect 0.5 s later

    def remove(self, restore: bool = True) -> dict[str, Any]:
        self.asked.append(("remove", self.clock.ms))
        return {"effective_ms": self.clock.ms + 1_000}  # back 1 s later


class Generators:
    def __init__(self) -> None:
        self.stop_requested = False

    def stop(self) -> None:
        self.stop_requested = True

    def done(self) -> bool:
        return self.stop_requested

    def progress(self) -> list[Any]:
        return []


def timeline(cfg: RunSpec, clock: FakeClock) -> tuple[Timeline, Steps]:
    cfg = resolve(cfg)  # as an Experiment's is: its restart policy decided
    fault = Steps(clock)
    handles = SimpleNamespace(
        schedule=FaultSchedule(fault), fault=cfg.fault_spec,
        driver=SimpleNamespace(check=lambda: None, progress=lambda: []),
        watch=SimpleNamespace(count=lambda: 0), control=None)
    t = Timeline(cfg, handles, SimpleNamespace(), lambda status: None,  # type: ignore[arg-type]
                 lambda: None, clock=clock)  # type: ignore[arg-type]
    t._generators = Generators()  # type: ignore[assignment]
    t.bounds = {"t1": clock.ms}
    t.start_control(clock.ms + 10_000, settled=True)
    return t, fault


def test_the_operations_are_the_fault_at_t2_and_the_stop_at_t4() -> None:
    cfg = RunSpec(fault="crash", phase_seconds=30, late_events=4)
    t, _ = timeline(cfg, FakeClock())
    start = T0 + 10_000
    assert t.operations() == [Op(start + 15_000, "plant-late"), Op(start + 30_000, "inject"),
                              Op(start + 90_000, "stop-generators")]
    assert [op.name for op in timeline(RunSpec(), FakeClock())[0].operations()] == [
        "inject", "stop-generators"]


def test_an_inject_makes_the_removal_due_as_the_restart_policy_says() -> None:
    start = T0 + 10_000
    at_remove, _ = timeline(RunSpec(fault="crash", phase_seconds=30), FakeClock())
    assert at_remove.do(Op(start + 30_000, "inject")) == Op(start + 60_000, "remove")
    clock = FakeClock(start + 30_000)
    immediate, _ = timeline(RunSpec(fault="driver-crash", phase_seconds=30,
                                    restart_delay_s=2.0), clock)
    # 2 s after the crash took effect (0.5 s after the inject began), not at T3.
    assert immediate.do(Op(start + 30_000, "inject")) == Op(start + 32_500, "remove")


def test_a_run_follows_its_operations_in_order_and_ends_after_t4() -> None:
    clock = FakeClock()
    t, fault = timeline(RunSpec(fault="crash", phase_seconds=30), clock)
    phases = []
    t.status = lambda now, total, note="": phases.append(t.phase)  # type: ignore[method-assign]
    t.follow(t.operations())
    start = T0 + 10_000
    assert fault.asked == [("inject", start + 30_000), ("remove", start + 60_000)]
    # The removal took effect 1 s after T3: recovery still gets its whole phase.
    assert t._generators.stop_requested and clock.ms == start + 91_000
    assert t.bounds["t4"] == start + 91_000
    assert [p for k, p in enumerate(phases) if k == 0 or phases[k - 1] != p] == [
        "control", "failure", "recovery"]
    t.judge_bounds()
    assert (t.bounds["t2"], t.bounds["t3"]) == (start + 30_500, start + 61_000)


def test_a_removal_that_acts_late_moves_t4_to_a_whole_recovery_phase_after_it() -> None:
    """A driver that needs 25 s to run its query again after a 10 s failure phase: without
    the move, the generators would stop before recovery began (no recovery inputs)."""
    clock = FakeClock()
    t, fault = timeline(RunSpec(fault="crash", phase_seconds=10), clock)
    fault.remove = lambda restore=True: (  # type: ignore[method-assign]
        clock.sleep(25.0), {"effective_ms": clock.ms})[1]
    t.status = lambda now, total, note="": None  # type: ignore[method-assign]
    t.follow(t.operations())
    start = T0 + 10_000
    t.judge_bounds()
    assert t.bounds["t3"] == start + 45_000
    assert t.bounds["t4"] == start + 55_000 and clock.ms == start + 55_000
    assert t._generators.stop_requested


def test_a_removal_in_time_leaves_t4_three_phases_after_control_starts() -> None:
    """A driver restarted at once (2 s after the crash, well before T3) changes nothing:
    only a removal later than a phase before T4 moves it."""
    clock = FakeClock()
    t, fault = timeline(RunSpec(fault="driver-crash", phase_seconds=30,
                                restart_delay_s=2.0), clock)
    t.status = lambda now, total, note="": None  # type: ignore[method-assign]
    t.follow(t.operations())
    start = T0 + 10_000
    assert [name for name, _ in fault.asked] == ["inject", "remove"]
    assert t.bounds["t4"] == start + 90_000 and clock.ms == start + 90_000
