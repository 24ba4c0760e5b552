"""`pip install pgval` without extras: the commands that need no cluster run with pyspark,
NetfilterQueue and the Docker SDK unimportable; the others say which extra to install in
one sentence before starting anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pgval.core.extras import EXTRAS, installed, require
from tests.test_evidence_seal import stored_sealed_run
from tests.test_gate import _check_files

#: Runs the pgval CLI with the extras' modules made unimportable, as on a machine that
#: installed only `pgval`.
WITHOUT_EXTRAS = f"""
import sys
class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(m for m, _ in EXTRAS.values())!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Missing())
from pgval.cli.app import run
sys.argv = ["pgval", *sys.argv[1:]]
run()
"""


def _bare(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_the_offline_commands_need_no_extra(tmp_path: Path) -> None:
    inputs, ok, _ = _check_files(tmp_path)
    run_dir, db, run_id = stored_sealed_run(tmp_path)
    runs = {
        "help": ["--help"],
        "check": ["check", "--topology", "sst", "--inputs", str(inputs), "--outputs", str(ok),
                  "--window-ms", "1000", "--expect", "exactly-once", "--junit", "ci.xml"],
        "oracle": ["oracle", "--topology", "sst", "--inputs", str(inputs),
                   "--window-ms", "1000"],
        "generate": ["generate", "--out", "gen.jsonl", "--rate", "0", "--events", "100"],
        "recheck": ["recheck", str(run_id), "--db", str(db)],
        "export": ["export", str(run_id), "--db", str(db), "--out", "exported"],
        # The sealed run's outputs precede their closing inputs (negative latencies): the
        # matrix plot once crashed on a whisker below zero.
        "report": ["report", "--db", str(db), "--format", "markdown", "--out", "report.md",
                   "--plots", "plots"],
    }
    for name, args in runs.items():
        proc = _bare(*args, cwd=tmp_path)
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-2000:])
    assert (tmp_path / "ci.xml").exists() and (tmp_path / "exported" / "inputs.jsonl").exists()
    assert any((tmp_path / "plots").iterdir())


@pytest.mark.parametrize("args", [
    ["validate", "--topology", "sst"],
    ["matrix", "--topologies", "sst", "--pgs", "a1", "--faults", "none", "--rate", "1000"],
    ["cluster", "up"],
])
def test_a_command_that_needs_spark_names_the_extra(tmp_path: Path, args: list[str]) -> None:
    proc = _bare(*args, "--run-dir" if args[0] != "matrix" else "--runs-dir", "runs",
                 cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr  # the environment
    assert proc.stderr.strip() == (
        "error: Spark (validate, matrix, oir, cluster, soak) needs the Python package pyspark, "
        "which "
        "is not installed here: pip install '.[spark]' in pgval's checkout")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results.db").exists()


def test_the_extras_are_installed_here_and_require_passes() -> None:
    """CI installs all of them (.ci/setup: `.[all,test]`): the real-cluster tests need them."""
    for extra in EXTRAS:
        assert installed(extra), extra
        require(extra)
