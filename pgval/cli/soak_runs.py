"""The soak: short runs killed at random moments, then count what they left behind.

Each killed run is a real ``pgval validate`` subprocess on the embedded cluster, sent
SIGINT, SIGTERM, SIGHUP or SIGKILL at one of five moments, found from the run
directory rather than guessed from the clock:

* ``deploy``  — ``state.json`` exists (the cluster is coming up), after a random pause;
* ``inject``  — the fault is being injected: the packet holder's pid file appears
  (delay), or T2 ± 1 s (crash);
* ``fault``   — the middle of the failure phase;
* ``drain``   — after T4, before the evidence is written;
* ``finish``  — the evidence directory appears (read-back and storing under way).

Then two runs whose directory no cluster of their own guards are SIGKILLed while a
delay is in force: a ``pgval matrix`` mid-cell (warm cluster, the cell's driver,
generators and packet holder running) and an external run (a ``pgval cluster up``
cluster used as the user's, a nemesis whose inject/remove commands write a marker): each
run's own reaper must stop what it started, and the external one run the remove command.

After each kill nothing is cleaned by hand: the run's own teardown (INT/TERM/HUP) or
its reaper (KILL) must remove everything. The soak then waits up to ``settle_s`` and
scans the host (:mod:`pgval.host.leftovers`). One more run is left to finish while
``pgval cleanup`` runs against it several times: it must end valid. Finally every run
the database calls complete must be intact (three phase rows, its evidence manifest).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pgval.core.errors import EnvironmentFailure
from pgval.core.schema import Fault
from pgval.faults.descriptor import descriptor
from pgval.host.leftovers import HostSnapshot

STAGES = ("deploy", "inject", "fault", "drain", "finish")
SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGKILL")
#: Long enough on 2 shared cores for the first window to land inside control (a run
#: without outputs in a phase is unknown, and the live run must end valid).
WARMUP_S, PHASE_S = 10, 8
#: Pause between the concurrent `pgval cleanup` calls (each costs ~1 s of CPU).
CLEANUP_EVERY_S = 6.0


@dataclass
class KillResult:
    index: int
    stage: str
    signal: str
    fault: Fault
    reached: bool  # the stage's marker was seen before the run ended by itself
    exit_code: int | None
    exit_s: float | None  # signal -> pgval exited
    clean_s: float | None  # signal -> nothing of the run left on the host
    left: dict[str, list[str]] = field(default_factory=dict)
    #: What the reapers said they removed (their ``logs/reaper.log``), for SIGKILLs.
    reaped: list[str] = field(default_factory=list)


@dataclass
class SoakReport:
    kills: list[KillResult]
    live_run_valid: bool | None
    live_run_exit: int | None
    live_run_reasons: list[str]
    cleanups_during_live_run: int
    cleanup_removed_at_end: list[str]
    complete_runs: int
    intact_runs: int
    left_at_end: dict[str, list[str]]

    def problems(self) -> list[str]:
        """What the soak found wrong, one phrase each (none: cleanup held)."""
        out = []
        if self.left_at_end or any(k.left for k in self.kills):
            out.append("something was left behind")
        if self.live_run_valid is not True:
            out.append("the run beside the cleanups was not valid")
        if self.intact_runs != self.complete_runs:
            out.append(f"{self.complete_runs - self.intact_runs} of {self.complete_runs} "
                       "complete runs were not intact")
        return out

    def ok(self) -> bool:
        return not self.problems()

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok()}


def _validate_argv(run_dir: Path, db: Path, fault: Fault, seed: int) -> list[str]:
    # A crash needs a second worker to fail over to; otherwise one keeps the CPU free.
    workers = "2" if fault is Fault.CRASH else "1"
    return [sys.executable, "-m", "pgval.cli", "validate", "--topology", "sst",
            "--fault", fault, "--brokers", "1", "--workers", workers, "--rate", "300",
            "--phase-seconds", str(PHASE_S), "--warmup-seconds", str(WARMUP_S),
            # A warm-up of exactly WARMUP_S: the kills are timed from T1 (_reach).
            "--warmup-max-seconds", str(WARMUP_S),
            "--window-ms", "2000", "--watermark-ms", "1000", "--trigger-ms", "500",
            "--seed", str(seed), "--run-dir", str(run_dir), "--db", str(db), "--json"]


def _wait_for(cond: Callable[[], bool], proc: subprocess.Popen[bytes],
              timeout_s: float) -> bool:
    """Poll ``cond``; False if the run ended or the time-out passed first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def _reach(stage: str, fault: Fault, run_dir: Path, proc: subprocess.Popen[bytes],
           rng: random.Random) -> bool:
    if stage == "deploy":
        ok = _wait_for(lambda: (run_dir / "state.json").exists(), proc, 60)
        time.sleep(rng.uniform(0, 8))
        return ok and proc.poll() is None
    if stage == "finish":
        return _wait_for(lambda: (run_dir / "evidence").is_dir(), proc, 240)
    if not _wait_for(lambda: (run_dir / "progress.jsonl").exists(), proc, 240):
        return False
    t1 = time.monotonic()
    t2 = t1 + WARMUP_S + PHASE_S
    if stage == "inject":
        if descriptor(fault).delay:
            return _wait_for(lambda: any((run_dir / "pids").glob("delay-holder-*.json")),
                             proc, WARMUP_S + PHASE_S + 60)
        time.sleep(max(0.0, t2 - time.monotonic() + rng.uniform(-1, 1)))
    elif stage == "fault":
        time.sleep(max(0.0, t2 - time.monotonic() + PHASE_S / 2))
    elif stage == "drain":
        time.sleep(max(0.0, t2 - time.monotonic() + 2 * PHASE_S + rng.uniform(1, 3)))
    return proc.poll() is None


def kill_one(index: int, stage: str, sig: str, fault: Fault, root: Path, db: Path,
             seed: int, settle_s: float = 30.0) -> KillResult:
    """One run of ``fault``, sent ``sig`` at ``stage``; what it left behind."""
    run_dir = root / f"kill-{index:02d}-{stage}-{sig.lower()}"
    before = HostSnapshot.take()
    rng = random.Random(seed)
    proc = subprocess.Popen(_validate_argv(run_dir, db, fault, seed), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        reached = _reach(stage, fault, run_dir, proc, rng)
        sent = time.monotonic()
        if proc.poll() is None:
            os.kill(proc.pid, getattr(signal, sig))
        try:
            code: int | None = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        exit_s = time.monotonic() - sent
        clean_s, left = _settle(before, sent, settle_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return KillResult(index, stage, sig, fault, reached, code, round(exit_s, 2),
                      clean_s, left)


def _reaper_logs(where: Path) -> list[dict[str, Any]]:
    """The ``reaped`` entries of every reaper log under ``where``."""
    out = []
    for log in sorted(where.glob("**/logs/reaper.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("event") == "reaped":
                    out.append({**entry, "log": str(log)})
    return out


AFTER_DOWN_S = 10.0  # how long what a stopped cluster's JVMs were starting may take to go


def _settle(before: HostSnapshot, sent: float, settle_s: float
            ) -> tuple[float | None, dict[str, list[str]]]:
    """Seconds from ``sent`` until nothing new is left on the host (None: still some)."""
    deadline = sent + settle_s
    while True:
        left = HostSnapshot.take().new_since(before)
        if not left:
            return round(time.monotonic() - sent, 2), {}
        if time.monotonic() > deadline:
            return None, left
        time.sleep(0.5)


def _sigkill_when(argv: list[str], ready: Callable[[], bool], timeout_s: float,
                  env: dict[str, str] | None = None
                  ) -> tuple[bool, float, subprocess.Popen[bytes]]:
    """Start ``argv``, SIGKILL it once ``ready()``; (reached, monotonic time of the kill)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    try:
        reached = _wait_for(ready, proc, timeout_s) and proc.poll() is None
    finally:
        sent = time.monotonic()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return reached, sent, proc


def _wait_until(cond: Callable[[], bool], deadline: float) -> float | None:
    """Monotonic time at which ``cond()`` first held, None if not by ``deadline``."""
    while True:
        if cond():
            return time.monotonic()
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)


#: The shortest run shape that still reaches a delay's holder: 1 broker, 1 worker.
SHORT_SHAPE = ["--topology", "sst", "--brokers", "1", "--workers", "1", "--rate", "300",
               "--phase-seconds", str(PHASE_S), "--warmup-seconds", str(WARMUP_S),
               "--warmup-max-seconds", str(WARMUP_S),
               "--window-ms", "2000", "--watermark-ms", "1000", "--trigger-ms", "500"]


def kill_matrix(index: int, root: Path, db: Path, seed: int,
                settle_s: float = 45.0) -> KillResult:
    """A `pgval matrix` SIGKILLed mid-cell: its warm cluster up, the cell's driver and
    generators running and its delay's packet holder in force. Two reapers must clean up:
    the cluster's (JVMs, namespaces) and the cell's own (driver, generators, holder)."""
    runs = root / f"matrix-{index:02d}"
    before = HostSnapshot.take()
    argv = [sys.executable, "-m", "pgval.cli", "matrix", "--topologies", "sst", "--pgs", "a1",
            "--faults", "delay-lt-timeout", "--repeat", "1", *SHORT_SHAPE[2:],
            "--seed", str(seed), "--db", str(db), "--runs-dir", str(runs)]
    reached, sent, proc = _sigkill_when(
        argv, lambda: any(runs.glob("*-run*/pids/delay-holder-*.json")), 300)
    clean_s, left = _settle(before, sent, settle_s)
    reaped = [f"{Path(e['log']).parent.parent.name}: {r}"
              for e in _reaper_logs(runs) for r in e["removed"]]
    return KillResult(index, "matrix-cell", "SIGKILL", "delay-lt-timeout", reached,
                      proc.returncode, 0.0, clean_s, left, reaped)


def kill_external(index: int, root: Path, db: Path, seed: int,
                  settle_s: float = 45.0) -> KillResult:
    """An external run (a `pgval cluster up` cluster used as the user's) SIGKILLed while
    its nemesis delay is in place: its reaper must run the persisted remove command (a
    marker script here) and stop the driver and generators; the cluster is left up,
    then brought down."""
    base = root / f"external-{index:02d}"
    cluster_dir = base / "cluster"
    run_dir = base / "run"
    marks = base / "nemesis.log"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pgval.cli", *args], capture_output=True,
                              text=True, timeout=300)

    before = HostSnapshot.take()
    base.mkdir(parents=True, exist_ok=True)
    try:
        up = cli("cluster", "up", "--run-dir", str(cluster_dir), "--brokers", "1",
                 "--partitions", "2", "--workers", "1")
        if up.returncode != 0:
            raise EnvironmentFailure(f"pgval cluster up failed: {up.stderr[-500:]}")
        info = json.loads(cli("cluster", "status", "--run-dir", str(cluster_dir),
                              "--json").stdout)
        during = HostSnapshot.take()
        conf = [a for k, v in (info.get("spark_conf") or {}).items()
                for a in ("--spark-conf", f"{k}={v}")]
        login = ([f"--kafka-config=@{info['kafka_config_file']}"]
                 if info.get("kafka_config_file") else [])
        nemesis = f"sh -c 'echo $0 >> {marks}'"
        argv = [sys.executable, "-m", "pgval.cli", "validate", "--deploy", "external",
                "--bootstrap", str(info["bootstrap"]), "--master", str(info["master"]),
                *login, *conf, "--fault", "delay-lt-timeout", *SHORT_SHAPE[:2],
                "--partitions", "2", *SHORT_SHAPE[6:],
                "--nemesis-inject", f"{nemesis} inject", "--nemesis-remove", f"{nemesis} remove",
                "--seed", str(seed), "--run-dir", str(run_dir), "--db", str(db), "--json"]
        reached, sent, proc = _sigkill_when(
            argv, lambda: marks.exists() and "inject" in marks.read_text(), 300)
        clean_s, left = _settle(during, sent, settle_s)
        # The reaper stops the processes first, then runs the undo records: the delay is
        # gone only once the remove command ran.
        removed = _wait_until(lambda: marks.exists() and "remove" in marks.read_text(),
                              sent + settle_s)
        if removed is None:
            left = {**left, "nemesis": ["the remove command did not run"]}
        elif clean_s is not None:
            clean_s = max(clean_s, round(removed - sent, 2))
    finally:
        cli("cluster", "down", "--run-dir", str(cluster_dir))
    # A JVM's process helper (jspawnhelper) may still be exiting the moment `cluster down`
    # returns: what goes by itself within a few seconds is not left behind.
    _, left_after_down = _settle(before, time.monotonic(), AFTER_DOWN_S)
    if left_after_down:
        left = {**left, **{f"after cluster down: {k}": v for k, v in left_after_down.items()}}
    reaped = [r for e in _reaper_logs(run_dir) for r in e["removed"]]
    return KillResult(index, "external-nemesis", "SIGKILL", "delay-lt-timeout", reached,
                      proc.returncode, 0.0, clean_s, left, reaped)


def live_run_with_cleanups(root: Path, db: Path,
                           seed: int) -> tuple[int | None, bool | None, int, list[str]]:
    """A run left to finish while ``pgval cleanup`` runs against it again and again:
    (exit code, valid, cleanups run, validity reasons)."""
    run_dir = root / "live"
    with tempfile.TemporaryFile() as stdout:
        proc = subprocess.Popen(_validate_argv(run_dir, db, Fault.NONE, seed), stdout=stdout,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        cleanups = cleanups_beside(proc, root)
        stdout.seek(0)
        out = stdout.read()
    try:
        summary = json.loads(out)
        valid, reasons = bool(summary.get("valid")), list(summary.get("validity_reasons", []))
    except ValueError:
        valid, reasons = None, ["no JSON summary"]
    return proc.returncode, valid, cleanups, reasons


def cleanups_beside(proc: subprocess.Popen[Any], runs_root: Path,
                    timeout_s: float = 900.0) -> int:
    """Run ``pgval cleanup`` over ``runs_root`` again and again until ``proc`` (a live
    run) ends: how many ran. What they must not do is hurt the run. A run still going
    after ``timeout_s`` is killed (its reaper cleans up) and the count returned."""
    cleanups = 0
    env = {**os.environ, "PGVAL_RUNS": str(runs_root)}
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            break
        subprocess.run([sys.executable, "-m", "pgval.cli", "cleanup"], env=env,
                       capture_output=True, timeout=120)
        cleanups += 1
        time.sleep(CLEANUP_EVERY_S)
    return cleanups


def intact_runs(db: Path) -> tuple[int, int]:
    """(complete runs, of which intact: three phase rows and their evidence manifest)."""
    from pgval.store.results import ResultsStore

    if not db.exists():
        return 0, 0
    store = ResultsStore(db)
    done = store.runs("status = 'complete'")
    ok = 0
    for run in done:
        phases = store.phase_results(run["id"])
        manifest = Path(run.get("run_dir") or "") / "evidence" / "run.json"
        ok += int(len(phases) == 3 and manifest.exists())
    return len(done), ok


def soak(root: Path, runs: int = 20, seed: int = 1,
         on_kill: Callable[[KillResult], None] | None = None) -> SoakReport:
    """``runs`` killed runs (stages and signals cycled, faults drawn), a matrix and an
    external run SIGKILLed mid-fault, one live run with concurrent cleanups, then the
    final scan and cleanup."""
    root.mkdir(parents=True, exist_ok=True)
    db = root / "soak.db"
    before = HostSnapshot.take()
    rng = random.Random(seed)
    kills = []
    for i in range(runs):
        stage = STAGES[i % len(STAGES)]
        sig = SIGNALS[(i // len(STAGES) + i) % len(SIGNALS)]
        fault = rng.choice([Fault.DELAY_LT_TIMEOUT, Fault.CRASH] if stage in ("inject", "fault")
                           else [Fault.NONE, Fault.CRASH, Fault.DELAY_LT_TIMEOUT])
        result = kill_one(i, stage, sig, fault, root, db, seed + i)
        kills.append(result)
        if on_kill:
            on_kill(result)
    # Runs whose directory no cluster of its own guards: a matrix cell, an external run.
    for kill in (kill_matrix, kill_external):
        result = kill(len(kills), root, db, seed + len(kills))
        kills.append(result)
        if on_kill:
            on_kill(result)
    code, valid, cleanups, reasons = live_run_with_cleanups(root, db, seed + runs)
    env = {**os.environ, "PGVAL_RUNS": str(root)}
    final = subprocess.run([sys.executable, "-m", "pgval.cli", "cleanup"], env=env,
                           capture_output=True, text=True, timeout=300)
    removed = [line for line in final.stdout.splitlines() if line.startswith("removed ")]
    complete, intact = intact_runs(db)
    return SoakReport(kills, valid, code, reasons, cleanups, removed, complete, intact,
                      HostSnapshot.take().new_since(before))
