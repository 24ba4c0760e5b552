"""Owners, cleanup that spares live runs, locks that cannot be planted, signals during
teardown — without a cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgval.runtime import ownership
from pgval.runtime.cleanup import cleanup
from pgval.runtime.owner import Owner
from pgval.runtime.procs import RuntimeErrorPlain


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


def test_cleanup_spares_live_runs_and_held_clusters(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pgval.runtime import cleanup as cleanup_mod

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


def test_cleanup_honours_pgval_runs(tmp_path: Path) -> None:
    dead = dataclasses.replace(Owner.me(), start=Owner.me().start + 1)
    gone = _run_dir(tmp_path / "elsewhere", "gone", dead)
    env = {**os.environ, "PGVAL_RUNS": str(tmp_path / "elsewhere")}
    proc = subprocess.run([sys.executable, "-m", "pgval.cli", "cleanup"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (gone / "state.json").exists()


def test_the_lock_directory_refuses_a_planted_link(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run-pgval"
    monkeypatch.setattr(ownership, "RUN_ROOT", root)
    with ownership.host_lock("t", timeout_s=1):
        assert (root / "t.lock").exists()
        assert (root.stat().st_mode & 0o777) == 0o700
    (root / "t.lock").unlink()
    target = tmp_path / "victim"
    (root / "t.lock").symlink_to(target)
    with pytest.raises(RuntimeErrorPlain, match="symlink"), ownership.host_lock("t", 1):
        pass
    assert not target.exists()  # root did not create a file through the link
    (root / "t.lock").unlink()
    root.rmdir()
    root.symlink_to(tmp_path)
    with pytest.raises(RuntimeErrorPlain, match="not a directory owned"):
        ownership.run_root()


def test_a_held_lock_times_out_with_a_sentence(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ownership, "RUN_ROOT", tmp_path / "r")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom pathlib import Path\nfrom pgval.runtime import ownership\n"
        f"ownership.RUN_ROOT = Path({str(tmp_path / 'r')!r})\n"
        "with ownership.host_lock('t'):\n    print('held', flush=True)\n    time.sleep(30)\n")],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        with pytest.raises(RuntimeErrorPlain, match="held .* for more than 1 s"), \
                ownership.host_lock("t", timeout_s=1):
            pass
    finally:
        holder.kill()
        holder.wait()


TEARDOWN = """
import os, signal, sys, time
from pgval.runtime import signals
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
    code = ("import os, signal, time\nfrom pgval.runtime import signals\n"
            "with signals.handled():\n"
            "    try:\n        os.kill(os.getpid(), signal.SIGHUP); time.sleep(5)\n"
            "    except KeyboardInterrupt as exc:\n        print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "stopped by SIGHUP"
