"""The machine a run was made on, kept with the run.

Timings are the machine's as much as Spark's: the same warm matrix cell, same code, cost
25.4–25.7 s on one 2-core machine and 20.0–22.8 s on a new one of the same size
(docs/performance.md, "A warm cluster"). So every stored run says where it ran, and a report
whose runs come from more than one machine says so: their numbers do not compare like for
like. The machine is named by its boot (the kernel's boot id, hashed): a machine id may be
baked into an image that many machines share, and a reboot may land on other hardware.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pgval.core.redact import REDACTED
from pgval.host.identity import boot_id


def _cpu_model(cpuinfo: Path) -> str:
    """The first ``model name`` of /proc/cpuinfo ("" when the file has none)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model"):
            return " ".join(value.split())
    return ""


def _memory_gib(meminfo: Path) -> float | None:
    """MemTotal of /proc/meminfo in GiB, one decimal (None when unreadable)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cores() -> int:
    """The cores this process may run on (a cgroup or taskset may give fewer than exist)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


#: The variables every JVM reads options from (the VM's and the launcher's). Set where
#: pgval runs, they reach each JVM pgval starts on this machine (the driver, the batch
#: oracle; with the embedded cluster its broker, daemons and executors too, not the
#: containers of ``--deploy compose`` nor a cluster started elsewhere) and change its
#: timings: C1 alone (``-XX:TieredStopAtLevel=1``) took about 30 % of a short run's CPU
#: away (docs/performance.md, "C1 alone in the tests' JVMs").
JVM_OPTION_VARS = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")


def _shown(word: str) -> str:
    """One option as kept: a VM flag (``-X…``, ``-XX:…``) as it is; anything else with a
    value (a system property, an agent's arguments) without it: it may hold a secret."""
    if word.startswith("-X") or "=" not in word:
        return word
    return f"{word.split('=', 1)[0]}={REDACTED}"


def jvm_options(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The JVM options set in ``env`` (this process's environment), by variable, each
    value redacted but a VM flag's (:func:`_shown`); split as the JVM splits them
    (quotes group words)."""
    env = os.environ if env is None else env
    found = {}
    for var in JVM_OPTION_VARS:
        text = env.get(var) or ""
        try:
            words = shlex.split(text)
        except ValueError:  # an unbalanced quote: nothing of it is shown
            words = [f"<{var} unreadable>"] if text.strip() else []
        if words:
            found[var] = " ".join(_shown(w) for w in words)
    return found


def describe_machine(proc: Path = Path("/proc"), boot: str | None = None,
                     env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{"boot", "cpu", "cores", "memory_gib", "kernel"}`` of this machine, and
    ``jvm_options`` where the environment (``env``) sets any; ``boot`` is a 12-hex-digit
    hash of the boot id ("" when the kernel gives none)."""
    raw = boot_id() if boot is None else boot
    options = jvm_options(env)
    return {"boot": hashlib.sha256(raw.encode()).hexdigest()[:12] if raw else "",
            "cpu": _cpu_model(proc / "cpuinfo"), "cores": _cores(),
            "memory_gib": _memory_gib(proc / "meminfo"), "kernel": os.uname().release,
            **({"jvm_options": options} if options else {})}


def machine_label(machine: dict[str, Any]) -> str:
    """One line for a machine: ``AMD EPYC, 2 cores, 23.4 GiB (boot 1a2b3c4d5e6f)``."""
    parts = [str(machine.get("cpu") or "unknown CPU")]
    if machine.get("cores"):
        parts.append(f"{machine['cores']} cores")
    if machine.get("memory_gib"):
        parts.append(f"{machine['memory_gib']} GiB")
    parts += [f"{var}={value}" for var, value in (machine.get("jvm_options") or {}).items()]
    boot = machine.get("boot") or "?"
    return f"{', '.join(parts)} (boot {boot})"


def setting_of(machine: dict[str, Any]) -> str:
    """What makes two runs' machines the same for their timings: the boot, and the JVM
    options the environment set."""
    options = machine.get("jvm_options") or {}
    return " ".join([str(machine.get("boot") or ""), *(f"{k}={v}" for k, v in
                                                       sorted(options.items()))])


def heap_mb(base_mb: int, items: int, bytes_per_item: int, share: float,
            machine_mb: int | None = None) -> int:
    """A JVM heap (MiB) that grows with what it holds: ``base_mb`` plus ``bytes_per_item``
    for each of ``items``, within ``share`` of this machine's memory (``machine_mb``;
    read from the system when not given), never below ``base_mb``."""
    if machine_mb is None:
        try:
            machine_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
        except (OSError, ValueError):
            machine_mb = 4 * base_mb
    want = base_mb + (max(0, items) * bytes_per_item >> 20)
    return max(base_mb, min(want, int(machine_mb * share)))
