"""The reduced soak (the full one is `pgval soak`, see docs/safety.md): a few real runs
killed at chosen moments must leave nothing behind, with nobody cleaning by hand, and
`pgval cleanup` running beside a live run must not hurt it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgval.soak import intact_runs, kill_one, live_run_with_cleanups

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("stage,sig,fault", [
    ("deploy", "SIGKILL", "none"),  # no finally runs: the reaper must clean up
    ("fault", "SIGTERM", "delay-lt-timeout"),  # a delay in force: teardown removes it
])
def test_a_killed_run_leaves_nothing(tmp_path: Path, stage: str, sig: str, fault: str) -> None:
    result = kill_one(0, stage, sig, fault, tmp_path, tmp_path / "soak.db", seed=3)
    assert result.reached, f"the run ended before reaching {stage}"
    assert result.left == {}, result
    assert result.clean_s is not None and result.clean_s < 30
    if sig == "SIGKILL":
        reaped = [json.loads(line) for line in
                  (tmp_path / f"kill-00-{stage}-sigkill" / "logs" / "reaper.log")
                  .read_text().splitlines() if line.startswith("{")]
        assert reaped and reaped[-1]["event"] == "reaped" and reaped[-1]["removed"]
    else:
        assert result.exit_code not in (0, None)  # interrupted, not a completed run


def test_cleanup_beside_a_live_run_spares_it(tmp_path: Path) -> None:
    code, valid, cleanups, reasons = live_run_with_cleanups(tmp_path, tmp_path / "soak.db",
                                                            seed=5)
    assert cleanups >= 3
    assert code == 0 and valid is True, reasons
    assert intact_runs(tmp_path / "soak.db") == (1, 1)
