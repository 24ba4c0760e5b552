"""Every function of pgval's packages is under :data:`MAX_LINES` lines.

A function that long does several things at once and hides the names its steps deserve;
split it into helpers that say why each step exists. The scan reads the source with
:mod:`ast` — every module of the installed packages, as :mod:`tests.test_imports` finds
them (``faults/``, ``datasets/`` … included) — and measures every function and method,
nested ones too, from its ``def`` line to its last line (decorators not counted).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_imports import ROOT, modules, package_dirs

MAX_LINES = 80

#: (path from the repository root, function name) allowed to be :data:`MAX_LINES` or longer.
EXEMPT: frozenset[tuple[str, str]] = frozenset({
    # The checker's vectorised kernels: each is one pass over all occurrences at once, and
    # splitting it would scatter the paper's algorithm over helpers that share its arrays.
    ("pgval/checker/validator.py", "validate"),
    ("pgval/checker/recovery.py", "recovery_metrics"),
})


def long_functions(paths: list[Path], root: Path = ROOT,
                   limit: int = MAX_LINES) -> list[tuple[str, int, str, int]]:
    """(path, line, name, length) of every function or method in ``paths`` of ``limit``
    lines or more, sorted by path and line."""
    out = []
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        rel = path.resolve().relative_to(root.resolve()).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length >= limit:
                    out.append((rel, node.lineno, node.name, length))
    return sorted(out)


def _pgval_files() -> list[Path]:
    return sorted(set(modules(package_dirs()).values()))


def test_no_function_is_too_long() -> None:
    found = long_functions(_pgval_files())
    bad = [f"{path}:{line} {name} ({n} lines)" for path, line, name, n in found
           if (path, name) not in EXEMPT]
    assert not bad, (f"functions of {MAX_LINES} lines or more (split them into helpers):\n  "
                     + "\n  ".join(bad))


def test_every_exemption_is_still_needed() -> None:
    """An exempt function that was split or removed leaves its entry behind: drop it."""
    found = {(path, name) for path, _, name, _ in long_functions(_pgval_files())}
    stale = sorted(EXEMPT - found)
    assert not stale, f"exempt but no longer {MAX_LINES} lines or more: {stale}"


def test_the_scan_finds_long_methods_and_nested_functions(tmp_path: Path) -> None:
    """The scan itself, on a made-up module: a long method and a long nested function are
    found, a function of one line less than the limit is not."""
    body, deeper = "    x = 1\n", "        x = 1\n"
    source = ("def short():\n" + body * (MAX_LINES - 2)
              + "class C:\n    def long(self):\n" + deeper * (MAX_LINES - 1)
              + "def outer():\n    def inner():\n" + deeper * (MAX_LINES - 1))
    path = tmp_path / "m.py"
    path.write_text(source)
    found = [(line, name, n) for _, line, name, n in long_functions([path], tmp_path)]
    assert [name for _, name, _ in found] == ["long", "outer", "inner"]
    assert all(n >= MAX_LINES for _, _, n in found)
