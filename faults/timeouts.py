"""Time-outs pgval sets, and the packet delays derived from them.

The paper's two delay faults are defined relative to the system's time-outs:
PD < TO (the worker stays a member, just slow) and PD > TO (Spark declares it
lost). Spark's defaults (spark.network.timeout 120 s, spark.worker.timeout
60 s) are longer than a short experiment's failure phase, so for
``delay-gt-timeout`` pgval lowers them to values that fit inside the phase and
derives PD from them. ``delay-lt-timeout`` keeps PD (500 ms, as in the paper)
far below Spark's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pgval.core.schema import Fault
from pgval.faults.descriptor import descriptor

DEFAULT_LT_DELAY_MS = 500
#: Spark's default for declaring a silent executor lost (``spark.network.timeout``, which
#: HeartbeatReceiver's executor time-out and the block manager's default to).
SPARK_EXECUTOR_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TimeoutProfile:
    """Spark settings for driver/executors, for master/workers, and the delay to inject."""

    name: str
    driver_conf: dict[str, str] = field(default_factory=dict)
    daemon_conf: dict[str, str] = field(default_factory=dict)
    delay_ms: int | None = None
    timeout_s: float | None = None  # the smallest time-out the delay is compared against

    def describe(self) -> dict[str, object]:
        return {"profile": self.name, "delay_ms": self.delay_ms, "timeout_s": self.timeout_s,
                "driver_conf": self.driver_conf, "daemon_conf": self.daemon_conf}


def profile_for(fault: Fault | str, phase_seconds: float, delay_ms: int | None = None,
                parts: Sequence[Fault] = ()) -> TimeoutProfile:
    """Time-outs and packet delay for ``fault`` (its descriptor's ``profile``); explicit
    ``delay_ms`` overrides the derived one. A schedule (``parts``: its faults' kinds) takes
    the profile of the part that sets the run's time-outs: one meant to outlast them lowers
    them for the whole run (a schedule cannot also hold a delay below them), else the first
    ``-lt-`` part's."""
    kind = Fault.parse(fault)
    if kind is Fault.SCHEDULE:
        governing = ([p for p in parts if descriptor(p).above_timeouts]
                     or [p for p in parts if descriptor(p).above_timeouts is False]
                     or [Fault.NONE])
        kind = governing[0]
    make = descriptor(kind).profile
    return make(phase_seconds, delay_ms) if make is not None else TimeoutProfile("default")


def short_timeouts(phase_seconds: float, delay_ms: int | None) -> TimeoutProfile:
    """Spark's time-outs lowered to fit inside the failure phase (time-out = phase/4,
    clamped to [4, 30] s), the delay 1.5 x that: a fault meant to outlast them."""
    timeout_s = max(4.0, min(30.0, phase_seconds / 4))
    heartbeat_s = max(1.0, timeout_s / 4)
    pd = delay_ms or int(timeout_s * 1000 * 1.5)
    t = f"{int(timeout_s)}s"
    return TimeoutProfile(
        name="short",
        driver_conf={
            "spark.network.timeout": t,
            "spark.executor.heartbeatInterval": f"{int(heartbeat_s * 1000)}ms",
            "spark.rpc.askTimeout": t,
            "spark.network.timeoutInterval": f"{int(heartbeat_s * 1000)}ms",
            "spark.storage.blockManagerHeartbeatTimeoutMs": str(int(timeout_s * 1000)),
        },
        daemon_conf={
            # Master: seconds without a worker heartbeat before the worker is lost.
            "spark.worker.timeout": str(int(timeout_s)),
            "spark.network.timeout": t,
        },
        delay_ms=pd, timeout_s=timeout_s)


def delay_below(phase_seconds: float, delay_ms: int | None) -> TimeoutProfile:
    """Spark's default time-outs and a delay far below them (500 ms, as in the paper)."""
    return TimeoutProfile(name="default", delay_ms=delay_ms or DEFAULT_LT_DELAY_MS,
                          timeout_s=60.0)


def pause_below(phase_seconds: float, delay_ms: int | None) -> TimeoutProfile:
    """Spark's default time-outs; the pause is the failure phase, below them."""
    return TimeoutProfile(name="default", timeout_s=SPARK_EXECUTOR_TIMEOUT_S)
