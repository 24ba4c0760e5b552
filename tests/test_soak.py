"""The reduced soak (the full one is `pgval soak`, see docs/safety.md): a few real runs
killed at chosen moments must leave nothing behind, with nobody cleaning by hand, and
`pgval cleanup` running beside a live run must not hurt it (checked beside the
command-line run of tests/test_validate.py::test_cli_json_and_cleanup)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgval.cli.soak_runs import (
    kill_external,
    kill_matrix,
    kill_one,
)
from pgval.core.schema import Fault
from pgval.host import leftovers
from tests import sharing

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _the_other_workers_things_are_theirs(request: pytest.FixtureRequest,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak looks at the whole host: what the other test worker runs beside it is that
    worker's to check (tests/sharing.py), everything else is still the soak's."""
    others = sharing.others(request.config)
    if others is None:
        return
    whole_host = leftovers.HostSnapshot.new_since
    monkeypatch.setattr(leftovers.HostSnapshot, "new_since",
                        lambda self, before, spared=(), _=None:
                        whole_host(self, before, spared, others))


@pytest.mark.parametrize("stage,sig,fault", [
    ("deploy", "SIGKILL", Fault.NONE),  # no finally runs: the reaper must clean up
    ("fault", "SIGTERM", Fault.DELAY_LT_TIMEOUT),  # a delay in force: teardown removes it
])
def test_a_killed_run_leaves_nothing(tmp_path: Path, stage: str, sig: str, fault: Fault) -> None:
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


def test_a_killed_matrix_is_reaped_cell_and_cluster(tmp_path: Path) -> None:
    """SIGKILL of `pgval matrix` mid-cell (delay in force): the cell's reaper stops its
    driver (whose pid file only the cell's directory holds), the warm
    cluster's reaper its JVMs and namespaces; nothing is left."""
    result = kill_matrix(0, tmp_path, tmp_path / "soak.db", seed=7)
    assert result.reached, "the matrix ended before its cell's delay was in force"
    assert result.left == {}, result
    assert result.clean_s is not None and result.clean_s < 45
    cell = [r for r in result.reaped if "-run" in r.split(":")[0]]
    # The driver outlives pgval until the reaper stops it (generators stop by themselves
    # once their parent is gone, the holder on its parent-death signal: either may be
    # gone before the reaper looks).
    assert any(": driver-" in r for r in cell), result.reaped
    assert any("-cluster-" in r.split(":")[0] for r in result.reaped), result.reaped


def test_a_killed_external_run_is_reaped_and_its_nemesis_removed(tmp_path: Path) -> None:
    """SIGKILL of an external run while the user's nemesis delay is in place: the run's
    reaper runs the persisted remove command and stops the driver and generators; the
    user's cluster stays up until it is brought down."""
    result = kill_external(0, tmp_path, tmp_path / "soak.db", seed=9)
    assert result.reached, "the run ended before its nemesis injected"
    assert result.left == {}, result
    assert result.clean_s is not None and result.clean_s < 45
    assert any("the nemesis remove command (exit 0)" in r for r in result.reaped), result
    assert any(r.startswith("driver-") for r in result.reaped), result.reaped
    undo = tmp_path / "external-00" / "run" / "undo"
    assert not any(undo.glob("*.json"))  # done, not pending
