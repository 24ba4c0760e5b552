"""Did a fault take effect, and was it removed? Judged from the run's fault log alone, so a
re-check reaches the same answer from the stored evidence."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def fault_reasons(fault: str, log: Iterable[Mapping[str, Any]]) -> list[str]:
    """Did the fault take effect, and was it removed? Judged from the fault log only."""
    if fault == "none":
        return []
    entries = list(log)
    inject = next((e for e in entries if e.get("step") == "inject"), None)
    remove = next((e for e in entries if e.get("step") == "remove"), None)
    reasons = []
    if inject is None:
        return [f"the {fault} fault was never injected"]
    if inject.get("error"):
        reasons.append(f"injecting {fault} failed: {inject['error']}")
    if remove is None:
        reasons.append(f"the {fault} fault was never removed")
    elif remove.get("error"):
        reasons.append(f"removing {fault} failed: {remove['error']}")
    if fault == "crash" and str(inject.get("mechanism", "")).startswith("executor kill"):
        reasons.extend(_executor_kill_reasons(inject, remove))
    elif fault == "crash" and inject.get("mechanism") == "pumba":
        # Compose: pumba kills the worker's container; Docker's own state is the evidence
        # (there is no host pid to record).
        if inject.get("status") not in ("exited", "dead"):
            reasons.append(f"crash: container {inject.get('target')} was not seen stopped "
                           f"(status {inject.get('status')!r})")
    elif fault == "crash":
        if not inject.get("worker_pid"):
            reasons.append("crash: no worker process was killed")
        if inject.get("left_alive"):
            reasons.append(f"crash: processes survived the kill: {inject['left_alive']}")
        fired = next((e.get("fired") for e in entries if e.get("step") == "timeouts"), None)
        if fired is not None and not fired.get("executor lost (driver)"):
            reasons.append("crash: the driver never reported an executor lost")
    elif fault == "driver-crash":
        if not inject.get("driver_pid"):
            reasons.append("driver-crash: no driver process was killed")
    elif fault.startswith("delay"):
        delayed = _probe_saw_delay(inject)
        if delayed is False:
            reasons.append(f"{fault}: the probe saw no delay after injection")
        elif delayed is None:
            reasons.append(f"{fault}: no probe evidence that the delay took effect")
        if any(e.get("step") == "holder-died" for e in entries):
            reasons.append(f"{fault}: the packet holder died during the fault")
    return reasons


def _executor_kill_reasons(inject: Mapping[str, Any],
                           remove: Mapping[str, Any] | None) -> list[str]:
    """``crash`` as an executor kill through the driver (pgval.faults.executor): the
    evidence is the driver's own executor list, not a log line (on Kubernetes Spark logs
    such a kill at INFO as "killed by driver", which the WARN-level driver log omits)."""
    executor = inject.get("executor")
    if not executor:
        return ["crash: no executor was killed"]
    reasons = []
    removed = [e.get("removed_after_s") for e in (inject, remove) if e is not None]
    if all(r is None for r in removed):
        reasons.append(f"crash: executor {executor} never left the driver's executor list")
    if (remove is not None and not remove.get("teardown") and not remove.get("error")
            and not remove.get("replacement")):
        reasons.append(f"crash: no replacement for executor {executor} was seen")
    return reasons


def _probe_saw_delay(inject: Mapping[str, Any]) -> bool | None:
    """Did the TCP handshake to the worker slow down by about the delay? None: no data."""
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
