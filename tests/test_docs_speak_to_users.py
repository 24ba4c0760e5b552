"""The repository's text speaks to its readers, not to its tracker.

A user reads README.md, docs/, the experiments' notes and the code's comments without the
project's issue tracker: a pointer such as "the model of issue N" tells them nothing, where
saying what the thing is or why it is so does. This test scans every tracked text file
(Markdown, Python, shell, TOML, YAML, plain text; binary files and the experiments' copied
evidence aside) and lists each line that points at a numbered issue. Upstream projects'
bug numbers ("pumba #147") name something a reader can look up and are not matched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".md", ".py", ".sh", ".toml", ".yml", ".txt"}
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")


def _tracked_text_files() -> list[str]:
    """Tracked files with a text suffix, outside experiments/**/evidence/ (stored runs)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode("utf-8", "surrogateescape")
    out = []
    for name in filter(None, listed.split("\0")):
        path = PurePosixPath(name)
        if path.suffix not in SUFFIXES:
            continue
        if path.parts[0] == "experiments" and "evidence" in path.parts[1:-1]:
            continue
        out.append(name)
    return out


def issue_pointers(text: str) -> list[int]:
    """The 1-based numbers of the lines of ``text`` that point at a numbered issue."""
    return [n for n, line in enumerate(text.splitlines(), 1) if ISSUE.search(line)]


def test_the_pattern_finds_issue_pointers_only() -> None:
    said = "\n".join(["made under the model of issue " + "23", "fixed (Issue #" + "9)",
                      "issues " + "22 and 24", "pumba #147 delayed every container",
                      "this issues a command", "tissue 5 samples"])
    assert issue_pointers(said) == [1, 2, 3]


def test_no_tracked_text_points_at_an_issue_number() -> None:
    hits = []
    for name in _tracked_text_files():
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary, whatever its name
            continue
        text = data.decode("utf-8", "replace")
        lines = text.splitlines()
        hits += [f"{name}:{n}: {lines[n - 1].strip()}" for n in issue_pointers(text)]
    assert not hits, ("say what the thing is or why, not which issue it came from:\n  "
                      + "\n  ".join(hits))
