"""The one clock helper: wall time in epoch milliseconds, and a clock a run's timeline reads.

Epoch milliseconds are what Kafka's timestamps, Spark's progress events and the phase bounds
are compared in, so every part of pgval takes them from here. A timeline reads its time
through a :class:`Clock` so that its schedule of operations is a function of that clock.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall time, epoch milliseconds."""
    return time.time_ns() // 1_000_000


class Clock:
    """Wall time for a timeline: epoch ms to compare with the phase bounds, monotonic seconds
    to measure durations, and a sleep between ticks."""

    def now_ms(self) -> int:
        return now_ms()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
