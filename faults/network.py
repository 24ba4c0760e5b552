"""Packet delay on one Spark worker: every packet to and from its namespace is held PD ms.

The mechanism (netem where the kernel has it, an NFQUEUE packet holder where it
does not) lives in :mod:`pgval.faults.delay`; this class ties it to a worker and
to the time-out profile, and afterwards reads the logs to say which time-out
fired (the evidence that PD really was above, or below, the time-outs).
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgval.faults.timeouts import TimeoutProfile
from pgval.runtime.procs import RuntimeErrorPlain

if TYPE_CHECKING:
    from pgval.experiment import Experiment

#: Log lines that show a time-out fired, by who noticed.
TIMEOUT_PATTERNS = {
    "executor heartbeat (driver)": re.compile(r"Executor heartbeat timed out|"
                                              r"Lost executor .*(?:heartbeat|timed out)", re.I),
    "worker timeout (master)": re.compile(r"Removing worker .* because we got no heartbeat", re.I),
    "executor lost (driver)": re.compile(r"Lost executor \d+", re.I),
    "rpc timeout": re.compile(r"RpcTimeoutException|Futures timed out", re.I),
    "kafka client timeout": re.compile(r"TimeoutException: .*(?:Kafka|metadata|fetch)", re.I),
}


class WorkerDelay:
    def __init__(self, name: str, target: int, profile: TimeoutProfile) -> None:
        self.name = name
        self.target = target
        self.profile = profile
        self._delay: Any = None

    def inject(self, run: Experiment) -> dict[str, Any]:
        from pgval.faults.delay import PacketDelay

        worker = run.spark_worker(self.target)
        if worker.netns is None:
            raise RuntimeErrorPlain(
                "packet delay needs the workers in their own network namespaces "
                "(run as root, without --no-isolate)")
        assert self.profile.delay_ms is not None
        before = probe_connect_ms(worker.host, worker.webui_port)
        # Hard cap: the holder ends the delay by itself this long after T2 whatever
        # happens to pgval (the failure phase plus a margin for a late removal).
        cap_s = 1.5 * run.config.phase_seconds + 60
        self._delay = PacketDelay(worker.netns, self.profile.delay_ms, run.run_dir,
                                  max_seconds=cap_s)
        detail = self._delay.inject()
        after = probe_connect_ms(worker.host, worker.webui_port,
                                 timeout_s=max(5.0, 4 * self.profile.delay_ms / 1000))
        return {"target": worker.name, **detail, **self.profile.describe(),
                "probe_connect_ms_before": before, "probe_connect_ms_after": after}

    def remove(self, run: Experiment, restore: bool = True) -> dict[str, Any]:
        """End the delay (also at teardown: a delay is never left in place)."""
        if self._delay is None:
            return {}
        detail = self._delay.remove()
        self._delay = None
        return detail

    def problem(self) -> str | None:
        """Why the delay stopped acting before T3 (its holder died), or None."""
        return self._delay.problem() if self._delay is not None else None


def probe_connect_ms(host: str, port: int, timeout_s: float = 5.0) -> float | None:
    """Time of one TCP handshake to the worker: evidence that a delay is (not) in place."""
    t0 = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return round((time.perf_counter() - t0) * 1000, 2)
    except OSError:
        return None


def timeouts_fired(log_dir: Path, since_ms: int | None = None) -> dict[str, int]:
    """Count log lines per time-out kind across the run's logs (driver, master, workers)."""
    counts: dict[str, int] = {}
    for path in sorted(Path(log_dir).glob("*.log")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for kind, pattern in TIMEOUT_PATTERNS.items():
            n = len(pattern.findall(text))
            if n:
                counts[kind] = counts.get(kind, 0) + n
    return counts
