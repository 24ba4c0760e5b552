"""Packet delay on one Spark worker: every packet to and from its namespace is held PD ms.

The mechanism (netem where the kernel has it, an NFQUEUE packet holder where it
does not) lives in :mod:`pgval.faults.delay`; this class ties it to a worker and
to the time-out profile, and afterwards reads the logs to say which time-out
fired (the evidence that PD really was above, or below, the time-outs). Whether the delay
took effect is a TCP handshake to the worker before and after injection (the probe).

The labels hold only with that evidence (:func:`timeout_reasons`, every delay mechanism's
rule): ``delay-gt-timeout`` needs an executor the driver reported lost, and
``delay-lt-timeout`` with one behaved as a delay above the time-outs; a log with no scan
of the logs says so, rather than pass.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.errors import EnvironmentFailure
from pgval.faults.delay import MECHANISMS, PacketDelay
from pgval.faults.log import Entries, finding, first
from pgval.faults.timeouts import TimeoutProfile
from pgval.schema import DELAY_FAULTS, Fault

#: The time-out scan's key for the driver's "Lost executor N": what a delay above the
#: time-outs does, and one below them must not.
EXECUTOR_LOST = "executor lost (driver)"
#: Log lines that show a time-out fired, by who noticed.
TIMEOUT_PATTERNS = {
    "executor heartbeat (driver)": re.compile(r"Executor heartbeat timed out|"
                                              r"Lost executor .*(?:heartbeat|timed out)", re.I),
    "worker timeout (master)": re.compile(r"Removing worker .* because we got no heartbeat", re.I),
    EXECUTOR_LOST: re.compile(r"Lost executor \d+", re.I),
    "rpc timeout": re.compile(r"RpcTimeoutException|Futures timed out", re.I),
    "kafka client timeout": re.compile(r"TimeoutException: .*(?:Kafka|metadata|fetch)", re.I),
}


@dataclass(frozen=True)
class NetworkPath:
    """The link a delay fault slows: a worker's network namespace, and an address on the
    other side of it to probe (a TCP handshake there must get slower while the delay acts)."""

    name: str
    netns: str | None
    host: str
    probe_port: int


class WorkerDelay:
    """Every packet to and from one worker's namespace held ``profile.delay_ms``."""

    kinds: ClassVar[frozenset[Fault]] = DELAY_FAULTS
    mechanisms: ClassVar[tuple[str, ...]] = MECHANISMS

    def __init__(self, name: str, path: NetworkPath, profile: TimeoutProfile, run_dir: Path,
                 max_seconds: float) -> None:
        self.name = name
        self.path = path
        self.profile = profile
        self.run_dir = run_dir
        #: Hard cap: the holder ends the delay by itself this long after T2, whatever
        #: happens to pgval (the failure phase plus a margin for a late removal).
        self.max_seconds = max_seconds
        self._delay: Any = None

    def inject(self) -> dict[str, Any]:
        path = self.path
        if path.netns is None:
            raise EnvironmentFailure(
                "packet delay needs the workers in their own network namespaces "
                "(run as root, without --no-isolate)")
        assert self.profile.delay_ms is not None
        before = probe_connect_ms(path.host, path.probe_port)
        self._delay = PacketDelay(path.netns, self.profile.delay_ms, self.run_dir,
                                  max_seconds=self.max_seconds)
        detail = self._delay.inject()
        # The delay acts from the moment its rules are in place. The probe that confirms it
        # waits one delayed round trip (67.5 s for the default delay above the time-outs):
        # judging T2 at the probe's end put that much of the fault into control.
        in_place = detail.get("injected_ms")
        effective = in_place if isinstance(in_place, int) else time.time_ns() // 1_000_000
        after = probe_connect_ms(path.host, path.probe_port,
                                 timeout_s=max(5.0, 4 * self.profile.delay_ms / 1000))
        return {"target": path.name, **detail, **self.profile.describe(),
                "probe_connect_ms_before": before, "probe_connect_ms_after": after,
                "effective_ms": effective}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """End the delay (also at teardown: a delay is never left in place)."""
        if self._delay is None:
            return {}
        detail = self._delay.remove()
        self._delay = None
        if isinstance(detail.get("removed_ms"), int):
            detail = {**detail, "effective_ms": detail["removed_ms"]}  # the rules are gone
        return detail

    def problem(self) -> str | None:
        """Why the delay stopped acting before T3 (its holder died), or None."""
        return self._delay.problem() if self._delay is not None else None

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """The probe saw the delay, the packet holder lived until T3, and the time-outs
        fired as the label says."""
        found = probe_reasons(first(entries, "inject"))
        if any(e.get("step") == "holder-died" for e in entries):
            found.append(finding("the packet holder died during the fault"))
        return found + timeout_reasons(entries)


#: Faults that cost an executor whatever the time-outs: in a schedule with one of them, a
#: ``-lt-`` part's "no executor lost" cannot be judged from the logs (the scan is per run).
LOSES_EXECUTORS: frozenset[Fault] = frozenset(
    {Fault.CRASH, Fault.DELAY_GT_TIMEOUT, Fault.PAUSE_GT_TIMEOUT, Fault.PARTITION})


def timeout_reasons(entries: Entries, what: str = "delay") -> list[Reason]:
    """Did the delay (or pause) act as its label says? ``-gt-timeout``: the driver reported
    an executor lost (the ``timeouts`` entry's ``fired``, a scan of the run's logs written
    after the run); ``-lt-timeout``: it did not, or the run measured one above the time-outs
    under the wrong name — unless it shared the run with a part that costs executors itself
    (``shared_with``, :func:`pgval.faults.composite.part_logs`). No scan, or a damaged one,
    tells nothing: a reason."""
    kind = first(entries, "inject").get("fault") or first(entries, "timeouts").get("fault")
    fired = first(entries, "timeouts").get("fired")
    if not isinstance(fired, Mapping):
        return [finding(f"no scan of the logs tells whether an executor was lost, so nothing "
                        f"shows the {what} was on the side of the time-outs its name says")]
    lost = fired.get(EXECUTOR_LOST)
    try:
        above = Fault(kind).above_timeouts
    except ValueError:
        above = None
    if above is True and not lost:
        return [finding(f"the driver reported no executor lost: the {what} did not act as "
                        "one above the time-outs")]
    if above is False and lost:
        shared = set(first(entries, "timeouts").get("shared_with") or ()) & {
            str(k) for k in LOSES_EXECUTORS}
        if shared:  # in a schedule, another part may have cost the executor
            return []
        return [finding(f"the driver reported an executor lost ({lost}×): the {what} "
                        "behaved as one above the time-out")]
    return []


def probe_reasons(inject: Mapping[str, Any]) -> list[Reason]:
    """Did the TCP handshake to the worker slow down by about the delay? No probe data is a
    reason too: without it nothing shows the delay acted."""
    delayed = _probe_saw_delay(inject)
    if delayed is False:
        return [finding("the probe saw no delay after injection")]
    if delayed is None:
        return [finding("no probe evidence that the delay took effect")]
    return []


def _probe_saw_delay(inject: Mapping[str, Any]) -> bool | None:
    """True: the handshake after injection took at least half the delay (or, without a
    delay, 50 ms more than before); None: no data."""
    before = inject.get("probe_connect_ms_before")
    after = inject.get("probe_connect_ms_after")
    delay = inject.get("delay_ms")
    if not isinstance(after, (int, float)):
        return None
    if isinstance(delay, (int, float)) and delay > 0:
        return after >= 0.5 * delay
    if isinstance(before, (int, float)):
        return after > before + 50
    return None


def probe_connect_ms(host: str, port: int, timeout_s: float = 5.0) -> float | None:
    """Time of one TCP handshake to the worker: evidence that a delay is (not) in place."""
    t0 = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return round((time.perf_counter() - t0) * 1000, 2)
    except OSError:
        return None


def log_sizes(log_dirs: list[Path]) -> dict[str, int]:
    """Current size of every ``*.log`` in ``log_dirs``: where a run's share of a shared
    cluster's logs begins (a warm cluster's logs hold earlier runs too)."""
    sizes = {}
    for d in log_dirs:
        for path in Path(d).glob("*.log"):
            with contextlib.suppress(OSError):
                sizes[str(path)] = path.stat().st_size
    return sizes


def timeouts_fired(log_dirs: Path | list[Path], since: dict[str, int] | None = None
                   ) -> dict[str, int]:
    """Count log lines per time-out kind across the logs (driver, master, workers), each
    file read from its offset in ``since`` (from :func:`log_sizes`) when given."""
    dirs = [log_dirs] if isinstance(log_dirs, Path) else list(log_dirs)
    counts: dict[str, int] = {}
    for path in sorted(p for d in dirs for p in Path(d).glob("*.log")):
        try:
            with open(path, "rb") as fh:
                fh.seek((since or {}).get(str(path), 0))
                text = fh.read().decode(errors="replace")
        except OSError:
            continue
        for kind, pattern in TIMEOUT_PATTERNS.items():
            n = len(pattern.findall(text))
            if n:
                counts[kind] = counts.get(kind, 0) + n
    return counts
