"""No import cycles among pgval's modules.

A cycle makes a module's behaviour depend on which side is imported first and hides a
missing layer; ``pgval.report`` and its plots had one (plots imported report, report
imported plots inside a function). The check reads the source with :mod:`ast` — every
``.py`` of the installed packages, including the directories pyproject.toml maps to
``pgval.faults`` etc. — and builds the graph of imports between pgval modules: top-level
*and* function-level imports (a lazy import is still a dependency), but not those under
``if TYPE_CHECKING:`` (never executed). ``from P import x`` is an edge to ``P.x`` when
that is a module, else to ``P``; the implicit import of a module's parent packages is not
an edge (every package would otherwise be in a cycle with the submodules it re-exports).

Cycles are looked for twice: between modules, and between *units* — a subpackage of pgval
(``pgval.report``, ``pgval.host``, ``pgval.faults``, …) taken as one node, each plain
module of pgval (``pgval.run.experiment``) as its own — since two packages that import each
other through different modules are still tangled. Run ``python tests/test_imports.py``
to print the strongly connected components of both graphs.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

#: Packages that must be in no import cycle at all (reported by name when they are).
NO_CYCLE_EVER = ("pgval.report",)

Graph = dict[str, set[str]]


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Installed package name → its source directory, from [tool.setuptools] in pyproject."""
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setup.get("package-dir", {})
    out: dict[str, Path] = {}
    for package in setup["packages"]:
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):  # the longest mapped prefix wins
            prefix = ".".join(parts[:cut])
            if prefix in mapping:
                out[package] = root.joinpath(mapping[prefix], *parts[cut:])
                break
        else:
            out[package] = root.joinpath(*parts)
    return out


def modules(dirs: dict[str, Path]) -> dict[str, Path]:
    """Module name → file, for every ``.py`` directly inside an installed package."""
    out: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted(folder.glob("*.py")):
            out[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, at any depth, except ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]))
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from _imports(child)


def _known(name: str, known: set[str]) -> str | None:
    """``name`` or its longest prefix that is one of our modules (``a.b.func`` → ``a.b``)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        candidate = ".".join(parts[:cut])
        if candidate in known:
            return candidate
    return None


def import_graph(mods: dict[str, Path]) -> Graph:
    """Module → the pgval modules it imports (anywhere in its code, see the docstring)."""
    known = set(mods)
    graph: Graph = {m: set() for m in mods}
    for module, path in mods.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_known(alias.name, known) for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in known else _known(base, known))
            graph[module].update(t for t in targets if t is not None and t != module)
    return graph


def process_graph(mods: dict[str, Path]) -> Graph:
    """Module → the pgval modules it starts as processes (:func:`started_modules`)."""
    known = set(mods)
    return {m: {t for t in started_modules(path, known) if t != m} for m, path in mods.items()}


def layer_graph(root: Path = ROOT) -> Graph:
    """The unit graph the layers are checked on: imports, and the modules a module starts
    with ``python -m`` (a process boundary is no import, but it is a dependency all the
    same: the starter needs the started module's layer). Cycles are looked for in imports."""
    mods = modules(package_dirs(root))
    imports, started = import_graph(mods), process_graph(mods)
    return unit_graph({m: imports[m] | started[m] for m in imports})


def started_modules(path: Path, known: set[str]) -> set[str]:
    """Modules ``path`` starts as processes (``[..., "-m", "pgval.x.y", ...]``): a process
    started from a module is an arrow like an import, its layer the started module's."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, (ast.List, ast.Tuple)):
            continue
        items = node.elts
        for flag, name in zip(items, items[1:], strict=False):
            if (isinstance(flag, ast.Constant) and flag.value == "-m"
                    and isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and (found := _known(name.value, known))):
                out.add(found)
    return out


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def unit(module: str) -> str:
    """``pgval.report.plots.timeline`` → ``pgval.report``; ``pgval.run.experiment`` stays."""
    return ".".join(module.split(".")[:2])


def unit_graph(graph: Graph) -> Graph:
    """The module graph with each unit (see the module docstring) collapsed to one node."""
    out: Graph = {}
    for module, targets in graph.items():
        out.setdefault(unit(module), set()).update(
            unit(t) for t in targets if unit(t) != unit(module))
    return out


def pgval_graph(root: Path = ROOT) -> Graph:
    return import_graph(modules(package_dirs(root)))


def all_cycles(graph: Graph) -> list[list[str]]:
    """Cycles between modules, then cycles between units."""
    return cycles(graph) + cycles(unit_graph(graph))


def report_cycles(graph: Graph) -> list[list[str]]:
    """The cycles that touch a package of :data:`NO_CYCLE_EVER`."""
    return [c for c in all_cycles(graph)
            if any(m == p or m.startswith(p + ".") for m in c for p in NO_CYCLE_EVER)]


def _describe(components: list[list[str]]) -> str:
    return "\n".join("  {" + ", ".join(c) + "}" for c in components) or "  none"


def test_every_package_directory_is_installed() -> None:
    """A folder with ``__init__.py`` under a root pyproject.toml maps, but missing from its
    ``packages``, works in an editable install, is absent from a wheel and from this check."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {ROOT / folder for folder in setup["package-dir"].values()}
    on_disk = {init.parent for root in roots for init in root.rglob("__init__.py")}
    missing = sorted(str(d.relative_to(ROOT)) for d in on_disk - set(package_dirs().values()))
    assert not missing, f"package folders not in [tool.setuptools] packages: {missing}"


def test_the_graph_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    """The checker itself, on a made-up package: a cycle closed by an import inside a
    function is found; one closed only under ``if TYPE_CHECKING:`` is not."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from p.a import f\n")
    (pkg / "a.py").write_text("from . import b\n\ndef f():\n    from p import c\n")
    (pkg / "b.py").write_text("import os\n")
    (pkg / "c.py").write_text("import p.a.f\n")  # resolves to p.a: a ↔ c
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nfrom .b import x\n"
                              "if TYPE_CHECKING:\n    from p.e import y\n")
    (pkg / "e.py").write_text("def g():\n    from p.d import z\n")
    graph = import_graph(modules({"p": pkg}))
    assert graph["p.a"] == {"p.b", "p.c"} and graph["p.c"] == {"p.a"}
    assert graph["p.d"] == {"p.b"} and graph["p.e"] == {"p.d"}
    assert graph["p"] == {"p.a"}
    assert cycles(graph) == [["p.a", "p.c"]]


def test_a_module_started_with_python_m_is_an_arrow(tmp_path: Path) -> None:
    """``[sys.executable, "-m", "p.b", ...]`` in p.a is an arrow p.a → p.b of the layer
    graph (an argv in a list or a tuple), and no import."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import sys\nARGV = [sys.executable, '-m', 'p.b', '--x']\n"
                              "OTHER = ('python', '-m', 'p.c.main')\n")
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("")
    mods = modules({"p": pkg})
    assert process_graph(mods)["p.a"] == {"p.b", "p.c"}
    assert import_graph(mods)["p.a"] == set()


def test_the_real_graph_has_the_edges_it_should() -> None:
    """Spot checks that the graph of pgval is read right: mapped packages, lazy imports."""
    graph = pgval_graph()
    assert {"pgval.faults", "pgval.datasets", "pgval.oracle", "pgval.topologies",
            "pgval.report.plots.timeline"} <= set(graph)
    assert "pgval.report" in graph["pgval.cli.report"]  # imported inside the `report` command
    assert "pgval.report.plots" in graph["pgval.report.build"]  # imported when plotting
    assert graph["pgval.report.data"].isdisjoint(
        m for m in graph if m.startswith("pgval.report"))


def test_report_is_in_no_import_cycle() -> None:
    bad = report_cycles(pgval_graph())
    assert not bad, f"import cycles through {', '.join(NO_CYCLE_EVER)}:\n{_describe(bad)}"


def test_the_old_report_and_plots_cycle_would_be_found(tmp_path: Path) -> None:
    """An earlier layout had plots.py import report.py at the top and report.py import
    plots.py inside ``_build``: the same check on that layout fails."""
    root = tmp_path / "old"
    (root / "pgval").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.setuptools]\npackages = ["pgval"]\n')
    (root / "pgval" / "__init__.py").write_text("")
    (root / "pgval" / "plots.py").write_text("from pgval.report import DASH, opened\n")
    (root / "pgval" / "report.py").write_text(
        "def _build():\n    from pgval.plots import plot_run\n")
    assert report_cycles(pgval_graph(root)) == [["pgval.plots", "pgval.report"]] * 2


def test_no_import_cycle_at_all() -> None:
    """Neither between modules nor between units (the layer order below forbids most unit
    cycles already; one inside a layer, or between modules of one unit, only this finds)."""
    found = all_cycles(pgval_graph())
    assert not found, f"import cycles:\n{_describe(found)}"


#: The layers of docs/design.md, bottom first. A unit (see :func:`unit`) may import units of
#: its own layer or below, never above: the checker never reaches for a process, the store
#: never for a fault, a fault never for the experiment that schedules it. A new unit must be
#: placed here (and in docs/design.md) before it can be imported at all.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"pgval", "pgval.core"})),
    ("records", frozenset({"pgval.records"})),
    ("oracle", frozenset({"pgval.oracle"})),
    ("checker", frozenset({"pgval.checker"})),
    ("host", frozenset({"pgval.host"})),
    ("services", frozenset({"pgval.kafka", "pgval.spark"})),
    ("past one machine", frozenset({"pgval.scale"})),
    ("faults", frozenset({"pgval.faults"})),
    ("embedded cluster", frozenset({"pgval.cluster"})),
    ("what a run keeps", frozenset({"pgval.store", "pgval.evidence", "pgval.report"})),
    ("pipeline parts", frozenset({"pgval.config", "pgval.datasets", "pgval.topologies",
                                  "pgval.streams", "pgval.job"})),
    ("deployments", frozenset({"pgval.deploy"})),
    ("one run", frozenset({"pgval.run"})),
    ("campaigns", frozenset({"pgval.campaigns"})),
    ("library front", frozenset({"pgval.api", "pgval.pytest_plugin"})),
    ("command line", frozenset({"pgval.cli"})),
)


def layer_violations(graph: Graph) -> list[str]:
    """Every unit import that goes up the layers, and every unit no layer names."""
    rank = {u: i for i, (_, units) in enumerate(LAYERS) for u in units}
    names = [name for name, _ in LAYERS]
    out = [f"{u}: in no layer of LAYERS" for u in sorted(graph) if u not in rank]
    for u, targets in sorted(graph.items()):
        for t in sorted(targets):
            if u in rank and t in rank and rank[t] > rank[u]:
                out.append(f"{u} ({names[rank[u]]}) imports {t} ({names[rank[t]]})")
    return out


def test_imports_go_down_the_layers_only() -> None:
    bad = layer_violations(layer_graph())
    assert not bad, "imports against the layer order of docs/design.md:\n  " + "\n  ".join(bad)


def test_an_upward_import_is_found() -> None:
    """The rule itself: the checker importing the host runtime (as the evidence and the store
    once did for the error type) is reported; so is an unplaced unit."""
    graph = {"pgval.checker": {"pgval.host"}, "pgval.host": {"pgval.core"},
             "pgval.core": set(), "pgval.newthing": set()}
    assert layer_violations(graph) == [
        "pgval.newthing: in no layer of LAYERS",
        "pgval.checker (checker) imports pgval.host (host)"]


def test_design_md_names_every_layer_in_order() -> None:
    text = (ROOT / "docs" / "design.md").read_text()
    positions = [text.find(f"**{name}**") for name, _ in LAYERS]
    assert -1 not in positions and positions == sorted(positions), \
        "docs/design.md must name each layer of LAYERS, bold and in order"

def design_md_rows(text: str) -> list[tuple[str, str]]:
    """(layer, unit) for every path named in docs/design.md's layer table: a row's layer
    is the bold name of its first cell, or the last one above it."""
    roots = {"oracle": "pgval.oracle", "faults": "pgval.faults", "datasets": "pgval.datasets",
             "topologies": "pgval.topologies"}
    rows, layer = [], ""
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        layer = cells[0].strip("*") or layer
        for path in re.findall(r"`([a-z_]+/[a-z_/]*(?:\.py)?)`", cells[1]):
            parts = path.removesuffix(".py").strip("/").split("/")
            if parts[0] == "pgval":
                rows.append((layer, ".".join(parts[:2]) if len(parts) > 1 else "pgval"))
            elif parts[0] in roots:
                rows.append((layer, roots[parts[0]]))
    return rows


def test_design_md_places_each_unit_in_its_layer() -> None:
    """The table of docs/design.md says where each folder and module is; LAYERS enforces
    it. They must agree, and the table must name every unit of LAYERS."""
    layer_of = {u: name for name, units in LAYERS for u in units}
    rows = design_md_rows((ROOT / "docs" / "design.md").read_text())
    wrong = [f"{unit} is under {layer} in docs/design.md, under {layer_of.get(unit)} in LAYERS"
             for layer, unit in rows if layer_of.get(unit) != layer]
    missing = sorted(set(layer_of) - {"pgval"} - {unit for _, unit in rows})
    assert not wrong and not missing, "\n".join([*wrong, f"not in the table: {missing}"])


if __name__ == "__main__":
    graph = pgval_graph()
    sys.stdout.write("strongly connected components of pgval's imports\nbetween modules:\n"
                     + _describe(cycles(graph)) + "\nbetween units:\n"
                     + _describe(cycles(unit_graph(graph))) + "\n")
