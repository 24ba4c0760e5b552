"""CPU seconds by kind of process while something runs beside it: which JVM the machine's
cores go to during a test or a run.

    python3 experiments/overhead-46/cpu_by_process.py SECONDS > out.txt &
    .venv/bin/python -m pytest -n 0 \
        "tests/test_job_cluster.py::test_sst_as_a_builtin_job_agrees_with_pgvals_own_oracle"

Every second it reads each process's user + system time (/proc/PID/stat); a process seen
at the first look counts from there, one started later from its start. A process's last
second before it exits is missed (under 1 % of a run's figures here).
"""

from __future__ import annotations

import os
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")

KINDS = (  # (text in the command line, kind), the first match wins
    ("kafka.Kafka", "kafka-broker"),
    ("deploy.master.Master", "spark-master"),
    ("deploy.worker.Worker", "spark-worker"),
    ("CoarseGrainedExecutorBackend", "executor"),
    ("batch_oracle", "batch-oracle (python)"),
    ("SparkSubmit", "driver JVMs (streaming drivers, batch oracle)"),
    ("pyspark-shell", "driver JVMs (streaming drivers, batch oracle)"),
    ("topologies.driver", "driver (python)"),
    ("topologies.serve", "driver (python)"),
    ("pytest", "pytest"),
    ("reaper", "reaper"),
    ("java", "other JVMs"),
    ("python", "other python"),
)


def kind(cmdline: str) -> str:
    return next((k for text, k in KINDS if text in cmdline), "other")


def cpu_of(pid: str) -> tuple[str, float, str] | None:
    """(start ticks, CPU seconds, command line) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/cmdline") as fh:
            cmd = fh.read().replace("\0", " ")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19], (int(fields[11]) + int(fields[12])) / HZ, cmd


def main(seconds: float) -> None:
    first: dict[tuple[str, str], float] = {}
    last: dict[tuple[str, str], tuple[float, str]] = {}
    at_start = True
    end = time.time() + seconds
    while time.time() < end:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            seen = cpu_of(pid)
            if seen is None:
                continue
            start, cpu, cmd = seen
            key = (pid, start)
            first.setdefault(key, cpu if at_start else 0.0)
            last[key] = (cpu, kind(cmd))
        at_start = False
        time.sleep(1)
    totals: dict[str, float] = {}
    for key, (cpu, k) in last.items():
        totals[k] = totals.get(k, 0.0) + cpu - first[key]
    for k, v in sorted(totals.items(), key=lambda kv: -kv[1]):
        if v > 0.5:
            print(f"{v:8.1f} {k}")
    print(f"{sum(totals.values()):8.1f} total")


if __name__ == "__main__":
    main(float(sys.argv[1]))
