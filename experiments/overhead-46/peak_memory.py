"""Each process's peak resident memory and CPU time while a run goes on beside it: what a
long run costs each JVM and each Python process of pgval, Kafka and Spark.

    python3 experiments/overhead-46/peak_memory.py OUT.json &
    pgval validate ...; kill %1     # SIGTERM writes OUT.json and ends

Every second it reads each Java and Python process's peak resident set (VmHWM, the
kernel's own high-water mark, so a peak between two looks is not missed) and its CPU
time; a process is named by what it runs now (Spark's launch script execs its JVM), a
JVM by its parent where its command line does not say (the streaming driver's JVM and
the Spark checker's are both SparkSubmit), and a child forked but not yet exec'd (its
parent's command line) is not counted. Executors are one kind: the streaming query's
and the Spark checker's are told apart by their times in "processes". The generator is
"other python" (a multiprocessing child). The kinds' peaks are each
process's own, not a sum; OUT.json also has every process seen.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")

KINDS = (  # (text in the command line, kind), the first match wins
    ("kafka.Kafka", "kafka broker"),
    ("deploy.master.Master", "spark master"),
    ("deploy.worker.Worker", "spark worker"),
    ("CoarseGrainedExecutorBackend", "spark executor"),
    ("topologies.spark_checker", "spark checker (python)"),
    ("topologies.driver", "streaming driver (python)"),
    ("pyspark.daemon", "pyspark python worker"),
    ("pyspark.worker", "pyspark python worker"),
    ("pgval.cli validate", "pgval validate"),
    ("pgval validate", "pgval validate"),
    ("reaper", "reaper"),
)
PARENT_KINDS = {"spark checker (python)": "spark checker JVM",
                "streaming driver (python)": "streaming driver JVM"}


def read(pid: str) -> tuple[str, str, int, float, int] | None:
    """(command line, parent pid, peak RSS kB, CPU seconds, start ticks), or None."""
    try:
        with open(f"/proc/{pid}/cmdline") as fh:
            cmd = fh.read().replace("\0", " ").strip()
        with open(f"/proc/{pid}/status") as fh:
            status = fh.read()
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    hwm = next((int(ln.split()[1]) for ln in status.splitlines()
                if ln.startswith("VmHWM:")), 0)
    fields = stat[stat.rfind(")") + 2:].split()
    return cmd, fields[1], hwm, (int(fields[11]) + int(fields[12])) / HZ, int(fields[19])


def kind(cmd: str) -> str | None:
    found = next((k for text, k in KINDS if text in cmd), None)
    if found is None and ("java" in cmd.split(" ")[0] or "python" in cmd.split(" ")[0]):
        return "other " + ("JVM" if "java" in cmd.split(" ")[0] else "python")
    return found


def main(out: str) -> None:
    seen: dict[tuple[str, int], dict] = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    started = time.time()
    while not stop:
        now = time.time() - started
        looks = {pid: got for pid in filter(str.isdigit, os.listdir("/proc"))
                 if pid != str(os.getpid()) and (got := read(pid)) is not None and got[0]}
        kinds = {pid: kind(got[0]) for pid, got in looks.items()}
        for pid, (cmd, ppid, hwm, cpu, start) in looks.items():
            if ppid in looks and looks[ppid][0] == cmd:
                continue  # a child forked and not yet exec'd: its parent's image, not its own
            entry = seen.setdefault((pid, start), {
                "pid": int(pid), "ppid": int(ppid), "cmd": cmd[:300], "first_s": now,
                "kind": kinds[pid]})
            if entry["cmd"] != cmd[:300]:  # exec'd since (spark-class execs its JVM): the
                # kernel's high-water mark starts again with the new image, and so does ours
                entry.update(cmd=cmd[:300], kind=kinds[pid], peak_rss_mb=0.0)
            entry.update(last_s=now, peak_rss_mb=max(entry.get("peak_rss_mb", 0), hwm / 1024),
                         cpu_s=cpu)
        for entry in seen.values():  # a JVM named by the Python process that started it
            parent = kinds.get(str(entry["ppid"]))
            if entry["kind"] == "other JVM" and parent in PARENT_KINDS:
                entry["kind"] = PARENT_KINDS[parent]
        time.sleep(1)
    summary: dict[str, dict] = {}
    for entry in seen.values():
        if entry["kind"] is None:
            continue
        k = summary.setdefault(entry["kind"], {"processes": 0, "peak_rss_mb": 0.0,
                                               "cpu_s": 0.0})
        k["processes"] += 1
        k["peak_rss_mb"] = round(max(k["peak_rss_mb"], entry["peak_rss_mb"]), 1)
        k["cpu_s"] = round(k["cpu_s"] + entry["cpu_s"], 1)
    with open(out, "w") as fh:
        json.dump({"seconds": round(time.time() - started, 1), "kinds": summary,
                   "processes": [e for e in seen.values() if e["kind"] is not None]},
                  fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
