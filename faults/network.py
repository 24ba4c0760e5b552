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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.core.clock import now_ms
from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import Deploy, Fault
from pgval.faults.container import ContainerDelay
from pgval.faults.delay import MECHANISMS, PacketDelay
from pgval.faults.descriptor import CONTAINERS, NEMESIS, WORKER_NETNS, FaultDescriptor, Maker
from pgval.faults.log import (
    EXECUTOR_LOST,
    Entries,
    finding,
    first,
    probe_reasons,
    timeout_reasons,
)
from pgval.faults.nemesis import NemesisDelay
from pgval.faults.timeouts import TimeoutProfile, delay_below, short_timeouts

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

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.DELAY_LT_TIMEOUT,
                                                     Fault.DELAY_GT_TIMEOUT})
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
        effective = in_place if isinstance(in_place, int) else now_ms()
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


def _delay_check(cfg: Any) -> str | None:
    """On a cluster that is the user's, only the user's own commands can delay a worker."""
    if cfg.deploy is Deploy.EXTERNAL and not cfg.nemesis_inject:
        return (f"--fault {cfg.fault} on an external cluster needs your own nemesis: "
                "--nemesis-inject ARGV and --nemesis-remove ARGV (see docs/deploy.md)")
    return None


#: The ways each deployment delays a worker's packets: its namespace (the embedded
#: cluster), pumba's netem on its container (compose), the user's nemesis (external).
_DELAY_MAKERS: tuple[tuple[str, Maker], ...] = (
    (WORKER_NETNS, lambda dep, cfg, t, p, ctx: dep.worker_delay(cfg, t, p, ctx)),
    (CONTAINERS, lambda dep, cfg, t, p, ctx: dep.container_delay(cfg, t, p, ctx)),
    (NEMESIS, lambda dep, cfg, t, p, ctx: dep.nemesis_delay(cfg, t, p, ctx)))

DESCRIPTORS = (
    FaultDescriptor(
        Fault.DELAY_LT_TIMEOUT, "every packet to and from one worker held PD ms, PD below "
        "Spark's time-outs (500 ms)", network=True, delay=True, above_timeouts=False,
        drawn=True, profile=delay_below, rules=(WorkerDelay, NemesisDelay, ContainerDelay),
        makers=_DELAY_MAKERS, check=_delay_check),
    FaultDescriptor(
        Fault.DELAY_GT_TIMEOUT, "every packet to and from one worker held PD ms, PD above "
        "Spark's time-outs (lowered to fit the failure phase)", network=True, delay=True,
        above_timeouts=True, loses_executors=True, profile=short_timeouts,
        rules=(WorkerDelay, NemesisDelay, ContainerDelay), makers=_DELAY_MAKERS,
        check=_delay_check),
)
#: The packet-delay faults (below and above the time-outs).
DELAY_FAULTS: frozenset[Fault] = frozenset(d.kind for d in DESCRIPTORS)
