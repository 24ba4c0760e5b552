"""The fault schedule's clocks (pgval/run/schedule.py): when each step took effect, and when
the removal is due under each restart policy. Fake faults: the real ones are timed on the
cluster (tests/test_restart_cluster.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pgval.core.clock import now_ms
from pgval.core.schema import Restart
from pgval.run.schedule import FaultSchedule


class Fake:
    """A fault whose steps take effect when it says (``effective``), or say nothing."""

    name = "crash"

    def __init__(self, effective: dict[str, int] | None = None, fail: bool = False) -> None:
        self.effective = effective or {}
        self.fail = fail

    def _step(self, step: str) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("it broke")
        return {"effective_ms": self.effective[step]} if step in self.effective else {}

    def inject(self) -> dict[str, Any]:
        return self._step("inject")

    def remove(self, restore: bool = True) -> dict[str, Any]:
        return self._step("remove")


def test_a_step_keeps_the_mechanisms_effective_time() -> None:
    s = FaultSchedule(Fake({"inject": 1_500, "remove": 9_700}))
    s.step("inject", 1_000)
    s.step("remove", 9_000)
    inject, remove = s.log
    assert (inject["intended_ms"], inject["effective_ms"]) == (1_000, 1_500)
    assert inject["actual_ms"] <= inject["done_ms"]
    assert (s.effective("inject"), s.effective("remove")) == (1_500, 9_700)


def test_without_one_the_effective_time_is_when_the_step_returned() -> None:
    s = FaultSchedule(Fake())
    before = now_ms()
    s.step("inject", 0)
    entry = s.log[0]
    assert before <= entry["effective_ms"] == entry["done_ms"] <= now_ms()


def test_a_teardown_removal_or_a_failed_step_is_no_effective_time() -> None:
    s = FaultSchedule(Fake({"inject": 5, "remove": 7}))
    s.step("inject", 1)
    s.step("remove", 2, restore=False)  # teardown: not the timeline's removal
    assert s.effective("inject") == 5 and s.effective("remove") is None
    broken = FaultSchedule(Fake(fail=True))
    with pytest.raises(RuntimeError):
        broken.step("inject", 1)
    assert broken.effective("inject") is None and "effective_ms" not in broken.log[0]


@pytest.mark.parametrize("restart,delay_s,due", [
    (Restart.IMMEDIATE, 0.0, 20_550),    # as soon as the crash took effect
    (Restart.IMMEDIATE, 2.5, 23_050),    # a supervisor's back-off after it
    (Restart.AT_REMOVE, 0.0, 60_000),    # the paper's T3
    (None, 0.0, 60_000),                 # a fault that does not restart: T3
])
def test_the_removal_is_due_by_the_restart_policy(restart: Restart | None, delay_s: float,
                                                  due: int) -> None:
    s = FaultSchedule(Fake({"inject": 20_550}))
    s.step("inject", 20_000)
    assert s.removal_due(restart, delay_s, t3_ms=60_000) == due
