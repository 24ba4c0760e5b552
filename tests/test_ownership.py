"""Owners, cleanup that spares live runs, locks that cannot be planted, signals during
teardown — without a cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pgval.cluster.cleanup import cleanup
from pgval.core.errors import PgvalError
from pgval.host import registry
from pgval.host.identity import Owner


def test_an_owner_is_its_pid_and_its_start_time() -> None:
    me = Owner.me()
    assert me.alive()
    assert not dataclasses.replace(me, start=me.start + 1).alive()  # a reused pid
    assert not dataclasses.replace(me, boot="another-boot").alive()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert Owner.from_dict({"pid": child.pid, "start": 1}) is not None
    assert Owner.from_dict({"pid": "x"}) is None and Owner.from_dict(None) is None


def _run_dir(root: Path, name: str, owner: Owner, held: bool = False) -> Path:
    d = root / name
    (d / "pids").mkdir(parents=True)
    (d / "state.json").write_text(json.dumps({"owner": owner.as_dict(), "held": held}))
    return d


# Runs `pgval cleanup`: its sweep of dead owners' networks must not meet the other test worker's.
@pytest.mark.alone
def test_cleanup_spares_live_runs_and_held_clusters(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pgval.cluster import cleanup as cleanup_mod

    me = Owner.me()
    dead = dataclasses.replace(me, start=me.start + 1)
    live = _run_dir(tmp_path, "live", me)
    gone = _run_dir(tmp_path, "gone", dead)
    held = _run_dir(tmp_path, "held", dead, held=True)
    report = cleanup(tmp_path)
    assert (live / "state.json").exists() and (held / "state.json").exists()
    assert not (gone / "state.json").exists()
    assert any("live run" in s and str(live) in s for s in report.spared)
    assert any("pgval cluster down" in s for s in report.spared)
    # --force would also sweep every pgval network on this host: keep it to the run dirs.
    monkeypatch.setattr(cleanup_mod, "sweep_host", lambda force=False: [])
    report = cleanup(tmp_path, force=True)
    assert not (live / "state.json").exists() and not (held / "state.json").exists()


# Runs `pgval cleanup`: its sweep of dead owners' networks must not meet the other test worker's.
@pytest.mark.alone
def test_cleanup_honours_pgval_runs(tmp_path: Path) -> None:
    dead = dataclasses.replace(Owner.me(), start=Owner.me().start + 1)
    gone = _run_dir(tmp_path / "elsewhere", "gone", dead)
    env = {**os.environ, "PGVAL_RUNS": str(tmp_path / "elsewhere")}
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "cleanup"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (gone / "state.json").exists()


# Runs `pgval cleanup`: its sweep of dead owners' networks must not meet the other test worker's.
@pytest.mark.alone
def test_run_roots_other_users_can_write_to_are_refused(tmp_path: Path) -> None:
    from pgval.cluster import guard as cluster

    root = tmp_path / "shared"
    dead = dataclasses.replace(Owner.me(), start=Owner.me().start + 1)
    planted = _run_dir(root, "planted", dead)
    root.chmod(0o777)
    with pytest.raises(PgvalError, match="writable by other users"):
        cleanup(root)
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "cleanup", "--runs", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "writable by other users" in proc.stdout + proc.stderr
    assert (planted / "state.json").exists()
    with pytest.raises(PgvalError, match="writable by other users"):
        registry.check_run_dir(root / "new-run")
    # A root that is fine, a run directory in it that is not: skipped, named, untouched.
    root.chmod(0o755)
    planted.chmod(0o777)
    report = cleanup(root)
    assert (planted / "state.json").exists()
    assert any("not trusted" in s for s in report.spared)
    with pytest.raises(PgvalError, match="writable by other users"):
        cluster.force_down(planted)  # `pgval cluster down`, the reaper: refused, untouched
    assert (planted / "state.json").exists()
    registry.check_run_dir(Path("/tmp") / "pgval-test-run")  # sticky root-owned /tmp: fine


def test_the_lock_directory_refuses_a_planted_link(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run-pgval"
    monkeypatch.setattr(registry, "RUN_ROOT", root)
    with registry.host_lock("t", timeout_s=1):
        assert (root / "t.lock").exists()
        assert (root.stat().st_mode & 0o777) == 0o700
    (root / "t.lock").unlink()
    target = tmp_path / "victim"
    (root / "t.lock").symlink_to(target)
    with pytest.raises(PgvalError, match="symlink"), registry.host_lock("t", 1):
        pass
    assert not target.exists()  # root did not create a file through the link
    (root / "t.lock").unlink()
    root.rmdir()
    root.symlink_to(tmp_path)
    with pytest.raises(PgvalError, match="not a directory owned"):
        registry.run_root()


def test_a_held_lock_times_out_with_a_sentence(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "RUN_ROOT", tmp_path / "r")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom pathlib import Path\nfrom pgval.host import registry\n"
        f"registry.RUN_ROOT = Path({str(tmp_path / 'r')!r})\n"
        "with registry.host_lock('t'):\n    print('held', flush=True)\n    time.sleep(30)\n")],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(PgvalError, match="held .* for more than 1 s"), \
                registry.host_lock("t", timeout_s=1):
            pass
    finally:
        holder.kill()
        holder.wait()


TEARDOWN = """
import os, signal, sys, time
from pgval.host import signals
with signals.handled():
    try:
        with signals.shielded():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            print("teardown finished", flush=True)
        print("not reached", flush=True)
    except signals.Interrupted as exc:
        print(f"then {exc}", flush=True)
"""


def test_signals_during_teardown_are_noted_then_obeyed() -> None:
    proc = subprocess.run([sys.executable, "-c", TEARDOWN], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.splitlines() == ["teardown finished", "then stopped by SIGTERM"]
    assert "SIGTERM noted" in proc.stderr


def test_sighup_stops_a_command_like_ctrl_c() -> None:
    code = ("import os, signal, time\nfrom pgval.host import signals\n"
            "with signals.handled():\n"
            "    try:\n        os.kill(os.getpid(), signal.SIGHUP); time.sleep(5)\n"
            "    except KeyboardInterrupt as exc:\n        print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "stopped by SIGHUP"


# ---- cleanup that does not trust files -------------------------------------------------------

def _sleeper() -> subprocess.Popen[bytes]:
    """A real process pgval did not start (its own session, like a reused pid would be)."""
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_a_reused_pid_in_a_pid_file_is_spared(tmp_path: Path) -> None:
    from pgval.host.identity import boot_id, start_ticks
    from pgval.host.procs import kill_recorded, write_pid_file

    other = _sleeper()
    try:
        ticks = start_ticks(other.pid)
        assert ticks is not None
        pids = tmp_path / "pids"
        pids.mkdir()
        # What a dead run's file looks like once its pid went to someone else: same pid,
        # another start time. And an old-style file naming the basename, which the
        # argv[0] check of before accepted for any `sleep`.
        (pids / "driver.json").write_text(json.dumps(
            {"name": "driver", "pgid": other.pid, "start": ticks - 1, "boot": boot_id()}))
        (pids / "old.json").write_text(json.dumps(
            {"name": "old", "pgid": other.pid, "argv": ["/usr/bin/sleep", "60"]}))
        assert kill_recorded(pids) == []
        assert other.poll() is None, "an unrelated process was killed"
        write_pid_file(pids / "ours.json", "ours", other.pid)  # now it is the one recorded
        assert json.loads((pids / "ours.json").read_text())["start"] == ticks
        assert kill_recorded(pids) == ["ours"]
        assert other.wait(timeout=10) is not None
    finally:
        other.kill()
        other.wait()


def test_a_netns_prefix_counts_only_if_it_is_a_runs_and_registered_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgval.cluster import guard as cluster
    from pgval.host import netns

    monkeypatch.setattr(registry, "RUN_ROOT", tmp_path / "r")
    run, other = tmp_path / "run", tmp_path / "other"
    run.mkdir()
    registry.register_netns("a1b2c3", run)
    registry.register_netns("d4e5f6", other)
    assert registry.run_netns_prefix("pgval-a1b2c3-", run) == "pgval-a1b2c3-"
    for bad in ("pgval-", "pgval-a1b2c3", "pgval-A1B2C3-", "pgval-a1b2c3-w0", "pgval-probe1-",
                "pgval-d4e5f6-", "pgval-0f0f0f-", None, 7, ["pgval-a1b2c3-"]):
        assert registry.run_netns_prefix(bad, run) is None, bad
    # force_down with a planted `pgval-` (every run's namespaces) touches no namespace.
    removed: list[str] = []
    monkeypatch.setattr(netns, "cleanup_all", lambda prefix="pgval-": removed.append(prefix)
                        or [])
    (run / "state.json").write_text(json.dumps({"owner": {"pid": 1, "start": 0},
                                                "netns_prefix": "pgval-"}))
    cluster.force_down(run)
    assert removed == []


def test_a_holder_is_known_by_the_registry_not_by_its_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgval.faults import delay
    from pgval.host.identity import start_ticks

    monkeypatch.setattr(registry, "RUN_ROOT", tmp_path / "r")
    lookalike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                  "-m", delay.HOLDER_MODULE, "--target", "pgval-abcdef-w0"],
                                 start_new_session=True)
    registered = _sleeper()
    try:
        assert delay.holder_processes() == []  # the lookalike is nobody's holder
        me = Owner.me()
        ticks = start_ticks(registered.pid)
        assert ticks is not None
        registry.register_holder(registered.pid, ticks, me, "pgval-abcdef-w1", tmp_path)
        registry.register_holder(lookalike.pid, 1, me, "pgval-abcdef-w0", tmp_path)  # stale
        assert delay.holder_processes() == [(registered.pid, "pgval-abcdef-w1")]
        assert delay.holder_owner(registered.pid) == me
        assert delay.holder_owner(lookalike.pid) is None
        assert not (tmp_path / "r" / "holders" / f"{lookalike.pid}.json").exists()  # pruned
    finally:
        for p in (lookalike, registered):
            p.kill()
            p.wait()


def test_undo_records_are_private_and_run_once(tmp_path: Path) -> None:
    from pgval.host import undo

    marker = tmp_path / "removed"
    path = undo.record(tmp_path, "nemesis", {"argv": ["touch", str(marker)], "what": "rm"})
    assert (path.stat().st_mode & 0o777) == 0o600
    undo.record(tmp_path, "broken", {"argv": ["false"]})
    done = undo.run_pending(tmp_path)
    assert marker.exists()
    assert any("rm (exit 0)" in d for d in done) and any("exit 1" in d for d in done)
    assert [e["name"] for e in undo.pending(tmp_path)] == ["broken"]  # kept for a retry
    (tmp_path / "undo" / "broken.json").chmod(0o666)  # planted or tampered: not trusted
    assert undo.pending(tmp_path) == []


GUARDED = """
import sys, time
from pathlib import Path
from pgval.host import undo
from pgval.cluster.guard import RunGuard
from pgval.host.procs import spawn
run = Path(sys.argv[1])
guard = RunGuard(run, "external").start()
spawn("generator-0", ["sleep", "300"], run / "logs" / "g.log", pid_dir=run / "pids")
undo.record(run, "nemesis", {"argv": ["touch", str(run / "removed")],
                             "what": "the nemesis remove command"})
print(guard.reaper.pid, flush=True)
time.sleep(300)
"""


def test_a_killed_guarded_run_is_reaped(tmp_path: Path) -> None:
    """A run without a cluster of its own (external, --cluster, a matrix cell) SIGKILLed:
    its reaper stops what its pid files name and runs the persisted nemesis remove."""
    from pgval.cluster.guard import read_state
    from pgval.host.leftovers import processes_mentioning

    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", GUARDED, str(run)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    reaper_pid = int(proc.stdout.readline())
    state = read_state(run)
    assert state and state["owner"]["pid"] == proc.pid and state["reaper_pid"] == reaper_pid
    assert (run / "state.json").stat().st_mode & 0o077 == 0
    sleeper = json.loads((run / "pids" / "generator-0.json").read_text())["pgid"]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20
    while (run / "state.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (run / "state.json").exists()
    assert (run / "removed").exists()
    assert not Path(f"/proc/{sleeper}").exists() or b"sleep" not in Path(
        f"/proc/{sleeper}/cmdline").read_bytes()
    log = [json.loads(line) for line in (run / "logs" / "reaper.log").read_text().splitlines()
           if line.startswith("{")]
    assert log[-1]["event"] == "reaped"
    assert "generator-0" in log[-1]["removed"]
    assert any("the nemesis remove command (exit 0)" in r for r in log[-1]["removed"])
    assert processes_mentioning(str(run)) == []


def test_a_dead_reaper_is_noticed(tmp_path: Path) -> None:
    import signal

    from pgval.cluster.guard import RunGuard

    guard = RunGuard(tmp_path / "run", "local").start()
    assert guard.problem() is None and guard.reaper is not None
    guard.reaper.send_signal(signal.SIGKILL)
    guard.reaper.wait()
    assert guard.problem() == (f"the reaper (pid {guard.reaper.pid}) died: a kill of pgval "
                               "now would leave processes behind; stopping")
    assert guard.stop() and not (tmp_path / "run" / "state.json").exists()


def test_a_run_without_a_cluster_of_its_own_gets_a_guard_and_watches_it(
        tmp_path: Path) -> None:
    """An external run (nothing started yet): the setup's guard writes the owner and
    starts a reaper; once that reaper dies, the tick's check has the sentence that stops
    the run."""
    import signal

    from pgval.core.spec import RunSpec
    from pgval.run.experiment import Experiment
    from pgval.run.setup import reaper_problem, start_guard

    cfg = RunSpec(deploy="external", bootstrap="127.0.0.1:9", master="local[1]")
    exp = Experiment(cfg, tmp_path / "run")
    start_guard(exp.started, cfg.deploy)
    guard = exp.started.guard
    try:
        assert guard is not None and guard.reaper is not None
        state = json.loads((tmp_path / "run" / "state.json").read_text())
        assert state["owner"]["pid"] == os.getpid() and state["kind"] == "external"
        assert reaper_problem(exp.started) is None
        guard.reaper.send_signal(signal.SIGKILL)
        guard.reaper.wait()
        assert "died: a kill of pgval now would leave processes behind; stopping" in str(
            reaper_problem(exp.started))
    finally:
        guard.stop()
    assert not (tmp_path / "run" / "state.json").exists()


def test_a_failed_undo_never_quotes_its_argv(tmp_path: Path, monkeypatch) -> None:
    """The remove command may carry a token: a time-out or a missing program is reported by
    the program's name only (subprocess's own message quotes the whole argv)."""
    from pgval.host import undo

    monkeypatch.setattr(undo, "TIMEOUT_S", 0.2)
    undo.record(tmp_path, "slow", {"argv": ["sh", "-c", "sleep 5", "TOKEN-slow"],
                                     "what": "rm"})
    undo.record(tmp_path, "gone", {"argv": ["/nonexistent/nemesis", "TOKEN-gone"]})
    done = undo.run_pending(tmp_path)
    assert len(done) == 2 and all("failed" in line for line in done)
    assert not any("TOKEN" in line for line in done), done


def test_a_private_file_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    """pgval.core.files.write_private: 0600 from the start, whole, and a link planted at the
    temporary name or the file's own name is replaced, never followed."""
    import os

    from pgval.core.files import write_private

    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "state.json"
    os.symlink(victim, tmp_path / f".state.json.{os.getpid()}.tmp")
    write_private(target, "x")  # the temporary name is random, made O_EXCL | O_NOFOLLOW
    assert victim.read_text() == "keep"
    target.unlink()
    os.symlink(victim, target)
    write_private(target, "secret", fsync=True)
    assert victim.read_text() == "keep" and not target.is_symlink()
    assert target.read_text() == "secret" and target.stat().st_mode & 0o777 == 0o600


def test_a_process_reads_only_its_own_lines_of_a_log_used_again(tmp_path: Path) -> None:
    """A daemon started again in the same directory (a restarted worker, a cluster brought
    up in a folder used before) appends to the same log: what its start checks read (the
    master's port line) must be its own, not the earlier process's."""
    from pgval.host.procs import spawn

    log = tmp_path / "logs" / "daemon.log"
    first = spawn("daemon", [sys.executable, "-c", "print('port 18594')"], log)
    first.popen.wait(timeout=30)
    second = spawn("daemon", [sys.executable, "-c", "print('port 30208')"], log)
    second.popen.wait(timeout=30)
    assert "18594" in first.log_tail() and "30208" in first.log_tail()  # it ran first
    assert second.log_tail() == "port 30208"


def test_only_a_shared_cluster_started_since_is_spared_its_namespaces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test's leftovers spare the namespaces, links and registry entry of a shared
    cluster that started during it (its module replaced the warm one), never what appeared
    under a shared cluster that was already there, nor another run's."""
    from pgval.host import leftovers

    shared = str(tmp_path / "shared")
    monkeypatch.setattr(registry, "netns_entries", lambda: {
        "aaaaaa": {"run_dir": f"{shared}/cluster-1"},
        "bbbbbb": {"run_dir": f"{shared}/cluster-2"},
        "cccccc": {"run_dir": str(tmp_path / "run")}})

    def snap(namespaces: set[str], entries: set[str]) -> leftovers.HostSnapshot:
        return leftovers.HostSnapshot({}, namespaces, set(), set(), entries, set())

    before = snap({"pgval-aaaaaa-w0"}, {"aaaaaa.json"})
    after = snap({"pgval-aaaaaa-w0", "pgval-aaaaaa-w9", "pgval-bbbbbb-w0", "pgval-cccccc-w0"},
                 {"aaaaaa.json", "bbbbbb.json", "cccccc.json"})
    assert after.new_since(before, spared=[shared]) == {
        "namespaces": ["pgval-aaaaaa-w9", "pgval-cccccc-w0"], "registry": ["cccccc.json"]}
    assert after.new_since(before) == {
        "namespaces": ["pgval-aaaaaa-w9", "pgval-bbbbbb-w0", "pgval-cccccc-w0"],
        "registry": ["bbbbbb.json", "cccccc.json"]}


def test_another_workers_things_are_theirs_and_ours_are_still_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two test workers share the host: a leftover check spares the other's processes (by
    the mark in their environment or the folder they work in) and its namespaces, links,
    rules and qdiscs (by the registry's folder for their suffix), and still reports ours."""
    from pgval.host import leftovers

    theirs_dir = tmp_path / "popen-gw1"
    theirs_dir.mkdir()
    others = leftovers.Others(dirs=(str(theirs_dir),), marks=("PGVAL_TEST_WORKER=gw1",))
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    marked = subprocess.Popen(sleep, env={**os.environ, "PGVAL_TEST_WORKER": "gw1"})
    working_there = subprocess.Popen(sleep, cwd=theirs_dir)
    ours = subprocess.Popen(sleep, env={**os.environ, "PGVAL_TEST_WORKER": "gw0"})
    # Theirs by folder (dddddd) or by an owner of theirs elsewhere (ffffff); ours (eeeeee).
    # A dead owner's pid reused by one of theirs is not theirs (hhhhhh: the marked pid, a
    # start of its own).
    reused = dataclasses.replace(Owner.of(marked.pid), start=Owner.of(marked.pid).start + 1)
    monkeypatch.setattr(registry, "netns_entries", lambda: {
        "dddddd": {"run_dir": f"{theirs_dir}/run"},
        "eeeeee": {"run_dir": str(tmp_path / "me"), "owner": Owner.of(ours.pid).as_dict()},
        "ffffff": {"run_dir": "/elsewhere", "owner": Owner.of(marked.pid).as_dict()},
        "aaaaab": {"run_dir": None, "owner": reused.as_dict()}})
    try:
        # (Popen returns once each has exec'd: its environment is its own)
        procs = {p.pid: "python multiprocessing" for p in (marked, working_there, ours)}
        before = leftovers.HostSnapshot({}, set(), set(), set(), set(), set())
        after = leftovers.HostSnapshot(
            procs, {"pgval-dddddd-w0", "pgval-eeeeee-w0", "pgval-ffffff-w0", "pgval-aaaaab-w0",
                    "pgval-ddddddd-w0"},
            {"pgvddddddh0", "pgveeeeeeh0", "pgvbrffffff"},
            {"pgval-dddddd-w0/mangle: -A x --comment pgval-delay-1-pgval-dddddd-w0",
             "pgval-eeeeee-w0/mangle: -A x --comment pgval-delay-2-pgval-eeeeee-w0"},
            {"dddddd.json", "eeeeee.json", "ffffff.json"},
            {"pgval-dddddd-w0: qdisc netem 504d: root"})
        assert after.new_since(before, others=others) == {
            "processes": [f"{ours.pid}: python multiprocessing"],
            # (ddddddd: a longer hex string that holds dddddd is not its)
            "namespaces": ["pgval-aaaaab-w0", "pgval-ddddddd-w0", "pgval-eeeeee-w0"],
            "links": ["pgveeeeeeh0"],
            "rules": ["pgval-eeeeee-w0/mangle: -A x --comment pgval-delay-2-pgval-eeeeee-w0"],
            "registry": ["eeeeee.json"]}
        assert len(after.new_since(before)["processes"]) == 3  # without others: all three
    finally:
        for p in (marked, working_there, ours):
            p.kill()
            p.wait()
