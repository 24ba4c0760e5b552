"""docs/design.md names every module of pgval: a module its layer table does not name is
one a newcomer cannot place. A module is named by its path or, in its unit's row, by its
file name without ``.py`` in backticks (``procs``, ``jvm_hooks/``)."""

from __future__ import annotations

import re

from tests.test_imports import ROOT, modules, package_dirs


def named_in_table(text: str) -> set[str]:
    """Every word named in backticks in a row of the layer table, paths split at ``/``."""
    table = "\n".join(line for line in text.splitlines() if line.startswith("|"))
    out: set[str] = set()
    for name in re.findall(r"`([^`\n]+)`", table):
        out.update(part.removesuffix(".py") for part in re.split(r"[ ,/]", name) if part)
    return out


def test_every_module_is_named_in_design_md() -> None:
    named = named_in_table((ROOT / "docs" / "design.md").read_text())
    missing = sorted(str(path.relative_to(ROOT)) for path in modules(package_dirs()).values()
                     if path.stem not in ("__init__", "__main__") and path.stem not in named)
    assert not missing, f"modules docs/design.md's layer table does not name: {missing}"


def test_the_check_sees_an_unnamed_module() -> None:
    text = "| **records** | `pgval/records/` | columns (`parse`); the phases (`phases`) |\n"
    assert {"parse", "phases", "records", "pgval"} <= named_in_table(text)
    assert "columns" not in named_in_table(text)
