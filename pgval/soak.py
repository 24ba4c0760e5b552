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

After each kill nothing is cleaned by hand: the run's own teardown (INT/TERM/HUP) or
its reaper (KILL) must remove everything. The soak then waits up to ``settle_s`` and
scans the host (:mod:`pgval.runtime.leftovers`). One more run is left to finish while
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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pgval.runtime.leftovers import HostSnapshot

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
    fault: str
    reached: bool  # the stage's marker was seen before the run ended by itself
    exit_code: int | None
    exit_s: float | None  # signal -> pgval exited
    clean_s: float | None  # signal -> nothing of the run left on the host
    left: dict[str, list[str]] = field(default_factory=dict)


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

    def ok(self) -> bool:
        return (not self.left_at_end and all(not k.left for k in self.kills)
                and self.live_run_valid is True and self.intact_runs == self.complete_runs)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok()}


def _validate_argv(run_dir: Path, db: Path, fault: str, seed: int) -> list[str]:
    # A crash needs a second worker to fail over to; otherwise one keeps the CPU free.
    workers = "2" if fault == "crash" else "1"
    return [sys.executable, "-m", "pgval.cli", "validate", "--topology", "sst",
            "--fault", fault, "--brokers", "1", "--workers", workers, "--rate", "300",
            "--phase-seconds", str(PHASE_S), "--warmup-seconds", str(WARMUP_S),
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


def _reach(stage: str, fault: str, run_dir: Path, proc: subprocess.Popen[bytes],
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
        if fault.startswith("delay"):
            return _wait_for(lambda: any((run_dir / "pids").glob("delay-holder-*.json")),
                             proc, WARMUP_S + PHASE_S + 60)
        time.sleep(max(0.0, t2 - time.monotonic() + rng.uniform(-1, 1)))
    elif stage == "fault":
        time.sleep(max(0.0, t2 - time.monotonic() + PHASE_S / 2))
    elif stage == "drain":
        time.sleep(max(0.0, t2 - time.monotonic() + 2 * PHASE_S + rng.uniform(1, 3)))
    return proc.poll() is None


def kill_one(index: int, stage: str, sig: str, fault: str, root: Path, db: Path,
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
        clean_s, left = None, {}
        deadline = sent + settle_s
        while True:
            left = HostSnapshot.take().new_since(before)
            if not left:
                clean_s = time.monotonic() - sent
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return KillResult(index, stage, sig, fault, reached, code, round(exit_s, 2),
                      None if clean_s is None else round(clean_s, 2), left)


def live_run_with_cleanups(root: Path, db: Path,
                           seed: int) -> tuple[int | None, bool | None, int, list[str]]:
    """A run left to finish while ``pgval cleanup`` runs against it again and again:
    (exit code, valid, cleanups run, validity reasons)."""
    run_dir = root / "live"
    proc = subprocess.Popen(_validate_argv(run_dir, db, "none", seed), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    cleanups = 0
    env = {**os.environ, "PGVAL_RUNS": str(root)}
    while proc.poll() is None:
        subprocess.run([sys.executable, "-m", "pgval.cli", "cleanup"], env=env,
                       capture_output=True, timeout=120)
        cleanups += 1
        time.sleep(CLEANUP_EVERY_S)
    out = proc.stdout.read() if proc.stdout else b""
    try:
        summary = json.loads(out)
        valid, reasons = bool(summary.get("valid")), list(summary.get("validity_reasons", []))
    except ValueError:
        valid, reasons = None, ["no JSON summary"]
    return proc.returncode, valid, cleanups, reasons


def intact_runs(db: Path) -> tuple[int, int]:
    """(complete runs, of which intact: three phase rows and their evidence manifest)."""
    from pgval.store import ResultsStore

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
    """``runs`` killed runs (stages and signals cycled, faults drawn), one live run with
    concurrent cleanups, then the final scan and cleanup."""
    root.mkdir(parents=True, exist_ok=True)
    db = root / "soak.db"
    before = HostSnapshot.take()
    rng = random.Random(seed)
    kills = []
    for i in range(runs):
        stage = STAGES[i % len(STAGES)]
        sig = SIGNALS[(i // len(STAGES) + i) % len(SIGNALS)]
        fault = rng.choice(["delay-lt-timeout", "crash"] if stage in ("inject", "fault")
                           else ["none", "crash", "delay-lt-timeout"])
        result = kill_one(i, stage, sig, fault, root, db, seed + i)
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
