"""docs/your-job.md's first commands, run as they are written (from a folder holding the
repository's examples), on the real cluster: the stateless filter under a driver crash
after the sink's write is at-least-once with exactly the halted batch's outputs
duplicated, `--expect exactly-once` fails the build with a JUnit failure, and the re-check
of the stored run from its evidence meets at-least-once."""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "your-job.md"


def doc_commands(text: str) -> list[list[str]]:
    """The commands of the code block after the ``<!-- tested: ... -->`` marker, each as
    argv (backslash-newline continuations joined, as a shell would)."""
    block = re.search(r"<!-- tested:[^>]*-->\s*```bash\n(.*?)```", text, re.S)
    assert block, "docs/your-job.md lost its tested block"
    joined = block.group(1).replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip()]


def all_commands(text: str) -> list[list[str]]:
    """Every ``pgval`` command of the page's bash blocks, as argv."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("pgval "):
                out.append(shlex.split(line))
    return out


def test_every_command_of_the_page_is_accepted_as_written(monkeypatch) -> None:  # noqa: ANN001
    """Each ``pgval validate|matrix|recheck`` line parses, and a validate or matrix line
    passes every check its command makes before a cluster starts (its job loaded, its input
    model read, its trigger and grid checked): the page names real files and flags."""
    from pgval.campaigns.matrix import cells, plan
    from pgval.cli.app import main as cli
    from pgval.cli.campaigns import _matrix_base
    from pgval.cli.common import OIR_PENDING, parse_rate, resolve_job
    from pgval.cli.options import build_config, with_profile

    monkeypatch.chdir(ROOT)
    commands = all_commands(DOC.read_text())
    assert {c[1] for c in commands} >= {"validate", "matrix", "recheck"}
    left_out: list[tuple[object, str]] = []
    for argv in commands:
        command = cli.commands[argv[1]]
        with command.make_context(" ".join(argv[:2]), argv[2:]) as ctx:
            values = dict(ctx.params)
            if argv[1] in ("validate", "matrix"):
                values = with_profile(values, values.pop("profile"))
            if argv[1] == "validate":
                for name in ("run_dir", "db", "as_json", "lint", "expect", "junit_path"):
                    values.pop(name)
                rate = parse_rate(values["rate"])
                resolve_job(build_config(values, rate=OIR_PENDING if rate is None else rate))
            elif argv[1] == "matrix":
                axes = {name: values.pop(name) for name in (
                    "topologies", "pgs", "faults", "repeat", "rate_fraction", "runs_dir",
                    "db", "driver", "expect", "junit_path", "as_json", "lint")}
                base = resolve_job(_matrix_base(values, parse_rate(values["rate"]),
                                                axes["rate_fraction"]))
                grid = plan(base, cells(["job"], axes["pgs"], axes["faults"], axes["repeat"]),
                            on_left_out=lambda cell, why: left_out.append((cell, why)))
                assert grid and not left_out, (argv, left_out)


def test_the_tested_block_is_what_the_doc_shows() -> None:
    commands = doc_commands(DOC.read_text())
    assert [c[:2] for c in commands] == [["pgval", "validate"], ["pgval", "recheck"]]


@pytest.mark.cluster
def test_the_docs_first_verdict_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PGVAL_RUNS": str(tmp_path / "runs")}
    validate, recheck = doc_commands(DOC.read_text())
    run = subprocess.run([sys.executable, "-m", "pgval.cli", *validate[1:]], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=900)
    # at-least-once, not the exactly-once expected: 1, with the verdict said
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "at-least-once" in run.stdout and "validity: valid" in run.stdout, run.stdout
    case = ET.parse(tmp_path / "ci.xml").getroot().find(".//testcase")
    assert case is not None and case.find("failure") is not None
    assert "at-least-once" in case.find("failure").get("message", "")
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "evidence" / "expected.parquet").is_file()
    assert (run_dir / "evidence" / "job.py").read_bytes() == (
        ROOT / "examples" / "jobs" / "filter.py").read_bytes()
    again = subprocess.run([sys.executable, "-m", "pgval.cli", *recheck[1:]], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "at-least-once" in again.stdout
    # One ID per output: the duplicates are exactly the outputs the halted batch wrote
    # before the crash (its re-run writes them again, and nothing else twice).
    db = sqlite3.connect(tmp_path / "first.db")
    try:
        duplicate, unprocessed = db.execute(
            "SELECT duplicate, unprocessed FROM runs WHERE id = 1").fetchone()
        inject = json.loads(db.execute("SELECT detail FROM fault_log WHERE run_id = 1 AND "
                                       "step = 'inject'").fetchone()[0])
    finally:
        db.close()
    assert inject["crash_point"] == "after-sink-write" and inject["outputs_written"] > 0
    assert (duplicate, unprocessed) == (inject["outputs_written"], 0), inject
