"""One error family: every error pgval's packages define or raise is of one of the three
kinds of :mod:`pgval.core.errors`, and ``pgval`` ends each with one line and its kind's status.

Why: an exception class outside the family, or a bare builtin raised for a user's mistake,
reaches the user as a traceback and exit 1 (or as the wrong status: a CI script cannot tell
a bad flag from a broker that died). The source is read with :mod:`ast` — every module of
the installed packages (tests/test_imports.py's ``package_dirs``/``modules``), functions'
nested classes too — so a new class or ``raise`` is held to the rule without running it.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgval.core.errors import KINDS, EnvironmentFailure, EvidenceInDoubt, PgvalError, UserMistake
from tests.test_imports import modules, package_dirs

ERRORS_MODULE = "pgval.core.errors"
KIND_NAMES = frozenset(k.__name__ for k in KINDS)

#: Exception classes outside the family, each private to its module and caught there by
#: name: control flow that never reaches the command line.
PRIVATE_CONTROL_FLOW = {
    # An artifact Maven Central lacks: an OSError like every other download failure (the
    # caller turns those into one EnvironmentFailure), told apart only to try a fallback.
    ("pgval.host.jars", "_NotFound"),
    # The delay holder lost its queue number to another run between check and bind: the
    # caller picks another number, or raises an EnvironmentFailure after three tries.
    ("pgval.faults.delay", "_BindFailed"),
}
#: Not errors: a signal unwinds as ``KeyboardInterrupt`` so that no ``except Exception``
#: swallows it; the command line maps it to 4 (:func:`pgval.cli.errors.as_error`).
SIGNALS = {("pgval.host.signals", "Interrupted")}
#: Not errors either: a verdict held as an assertion in a user's test suite fails the test
#: as an ``AssertionError`` (pytest shows it as a failure, not an error).
ASSERTIONS = {("pgval.api", "GuaranteeNotMet")}

#: Builtins a module may raise itself, and why none of them is a message for the user.
ALLOWED_BUILTINS = {
    # pgval's own code is wrong (an invariant, an unfinished branch).
    "AssertionError": "programming error", "NotImplementedError": "programming error",
    # A caller passed what the function refuses; user input is checked before it gets
    # there (and where a command passes it on, it turns the ValueError into a UserError).
    "TypeError": "internal misuse", "ValueError": "internal misuse",
    "KeyError": "internal misuse",
    "AttributeError": "a module's __getattr__ (the protocol's own error)",
    "SystemExit": "a script's exit status (__main__)",
    # The OS's own errors, raised where the caller already handles that class from the
    # OS (a download's checksum, setns, a planted directory, a process gone, a stream cut).
    "OSError": "with the OS's", "PermissionError": "with the OS's",
    "ProcessLookupError": "with the OS's", "EOFError": "with the OS's",
}


# --------------------------------------------------------------------------- the source


@dataclass(frozen=True)
class Source:
    """Every module's tree, and what each name a module binds at its top refers to."""

    trees: dict[str, ast.Module]
    #: module → name → ("module", name) (an import of a module) or (module, name).
    names: dict[str, dict[str, tuple[str, str]]]
    #: (module, class name) → its definition, at any depth of the module.
    classes: dict[tuple[str, str], ast.ClassDef]
    #: (module, function name) → its definition (top level only).
    functions: dict[tuple[str, str], ast.FunctionDef]


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")[:len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join([*parts, *([node.module] if node.module else [])])


def read_source() -> Source:
    files = modules(package_dirs())
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in files.items()}
    names: dict[str, dict[str, tuple[str, str]]] = {}
    classes: dict[tuple[str, str], ast.ClassDef] = {}
    functions: dict[tuple[str, str], ast.FunctionDef] = {}
    for module, tree in trees.items():
        bound = names.setdefault(module, {})
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault((module, node.name), node)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bound[alias.asname] = ("module", alias.name)
                    else:
                        root = alias.name.split(".")[0]
                        bound[root] = ("module", root)
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, node, files[module].name == "__init__.py")
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    bound[alias.asname or alias.name] = (
                        ("module", sub) if sub in trees else (base, alias.name))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                functions[(module, node.name)] = node
            elif isinstance(node, ast.ClassDef):
                bound[node.name] = (module, node.name)
    return Source(trees, names, classes, functions)


Ref = tuple[str, str] | type | None  # a project (module, name), a Python class, unknown


def resolve(src: Source, module: str, expr: ast.expr, depth: int = 0) -> Ref:
    """What ``expr`` (a name or a dotted name) in ``module`` refers to: a class or function
    of pgval's packages as (module, name), a class of Python or another package, or None."""
    if depth > 10:
        return None
    if isinstance(expr, ast.Name):
        if (module, expr.id) in src.classes and expr.id not in src.names.get(module, {}):
            return (module, expr.id)  # a class nested in a function
        target = src.names.get(module, {}).get(expr.id)
        if target is None:
            found = getattr(builtins, expr.id, None)
            return found if isinstance(found, type) else None
        return _follow(src, target, depth)
    if isinstance(expr, ast.Attribute):
        owner = expr.value
        if isinstance(owner, ast.Name):
            target = src.names.get(module, {}).get(owner.id)
            if target is not None and target[0] == "module":
                return _follow(src, (target[1], expr.attr), depth)
        return None
    return None


def _follow(src: Source, target: tuple[str, str], depth: int) -> Ref:
    where, name = target
    if where == "module":
        return None  # a module itself
    if where in src.trees:
        if (where, name) in src.classes or (where, name) in src.functions:
            return (where, name)
        again = src.names.get(where, {}).get(name)  # re-exported
        return _follow(src, again, depth + 1) if again and again != target else None
    try:  # another package's name (click.ClickException, sqlite3.Error)
        found = getattr(importlib.import_module(where), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


def is_exception(src: Source, ref: Ref) -> bool:
    if isinstance(ref, type):
        return issubclass(ref, BaseException)
    if ref is None or ref not in src.classes:
        return False
    module = ref[0]
    return any(is_exception(src, resolve(src, module, b)) for b in src.classes[ref].bases)


def in_family(src: Source, ref: Ref) -> bool:
    """Whether ``ref`` is one of the three kinds or a subclass of one."""
    if not isinstance(ref, tuple) or ref not in src.classes:
        return False
    if ref[0] == ERRORS_MODULE and ref[1] in KIND_NAMES:
        return True
    return any(in_family(src, resolve(src, ref[0], b)) for b in src.classes[ref].bases)


@pytest.fixture(scope="module")
def src() -> Source:
    return read_source()


def exception_classes(src: Source) -> Iterator[tuple[str, str]]:
    for ref in src.classes:
        if is_exception(src, ref):
            yield ref


# --------------------------------------------------------------------------- (a) classes


def test_every_exception_class_is_of_a_kind(src: Source) -> None:
    found = set(exception_classes(src))
    assert ("pgval.cli.errors", "UserError") in found  # the scan sees through click
    outside = sorted(f"{m}.{n}" for m, n in found
                     if not in_family(src, (m, n)) and (m, n) not in PRIVATE_CONTROL_FLOW
                     and (m, n) not in SIGNALS and (m, n) not in ASSERTIONS
                     and not (m == ERRORS_MODULE and n == PgvalError.__name__))
    assert not outside, ("exception classes outside pgval's error family (subclass "
                         "UserMistake, EvidenceInDoubt or EnvironmentFailure):\n  "
                         + "\n  ".join(outside))


def test_the_allowlisted_classes_are_private_and_caught_where_they_live(src: Source) -> None:
    for module, name in PRIVATE_CONTROL_FLOW:
        assert (module, name) in src.classes, f"{module}.{name} is gone: drop it here"
        assert name.startswith("_")
        caught = [h for h in ast.walk(src.trees[module]) if isinstance(h, ast.ExceptHandler)
                  and h.type is not None and name in ast.unparse(h.type)]
        assert caught, f"{module}.{name} is caught nowhere in its module"
        for other, tree in src.trees.items():
            if other != module:
                assert name not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}, \
                    f"{module}.{name} is used in {other}"
    for module, name in SIGNALS:
        assert (module, name) in src.classes and not in_family(src, (module, name))


def test_each_kind_has_its_status() -> None:
    assert [k.exit_status for k in KINDS] == [2, 3, 4]
    assert (UserMistake, EvidenceInDoubt, EnvironmentFailure) == KINDS


def test_a_kind_mixed_with_a_builtin_keeps_its_status() -> None:
    """The family's classes that are also a ValueError or LookupError for their callers:
    the kind decides the status (it comes first in the bases)."""
    from pgval.campaigns.oir import OirNotStored
    from pgval.cli.errors import UserError
    from pgval.datasets.generator import GeneratorConfigError
    from pgval.oracle.rows import RowsError
    from pgval.report import ReportError

    for cls in (ReportError, OirNotStored, RowsError, GeneratorConfigError, UserError):
        assert issubclass(cls, UserMistake) and cls.exit_status == 2, cls
    assert UserError("x").exit_code == 2 and str(UserError("x")) == "x"
    assert issubclass(OirNotStored, LookupError) and issubclass(ReportError, ValueError)


# --------------------------------------------------------------------------- (b) raises


def raised(src: Source) -> Iterator[tuple[str, int, ast.expr]]:
    """Every (module, line, what is called or named) of a ``raise X`` / ``raise X(...)``;
    ``raise A if c else B`` counts both."""
    for module, tree in src.trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            todo = [node.exc]
            while todo:
                exc = todo.pop()
                if isinstance(exc, ast.IfExp):
                    todo += [exc.body, exc.orelse]
                else:
                    yield module, node.lineno, exc.func if isinstance(exc, ast.Call) else exc


def test_every_raise_names_the_family_or_an_allowed_builtin(src: Source) -> None:
    bad = []
    for module, line, what in raised(src):
        ref = resolve(src, module, what)
        where = f"{module}:{line} raise {ast.unparse(what)}"
        if isinstance(ref, type):
            if ref.__name__ not in ALLOWED_BUILTINS or getattr(builtins, ref.__name__,
                                                               None) is not ref:
                bad.append(f"{where}: not one of pgval's errors")
        elif ref in src.functions:  # a factory: what it is declared to return
            returns = src.functions[ref].returns
            if returns is None or not in_family(src, resolve(src, ref[0], returns)):
                bad.append(f"{where}: returns no error of the family")
        elif (ref in src.classes and not in_family(src, ref)
              and ref not in PRIVATE_CONTROL_FLOW | SIGNALS | ASSERTIONS):
            bad.append(f"{where}: outside the family")
        # else: a variable (a caught error raised again, a future's exception)
    assert not bad, ("raise only the three kinds (pgval.core.errors) or, for a programming "
                     "error, a builtin of ALLOWED_BUILTINS:\n  " + "\n  ".join(sorted(bad)))


def test_no_raise_names_the_family_root(src: Source) -> None:
    """``PgvalError`` itself has no kind: its status would be a guess."""
    roots = [f"{m}:{line}" for m, line, what in raised(src)
             if resolve(src, m, what) == (ERRORS_MODULE, PgvalError.__name__)]
    assert not roots, f"raise a kind, not PgvalError: {roots}"


def test_the_check_sees_a_stray_raise(src: Source) -> None:
    """The rule itself, on a module that raises a bare RuntimeError, a foreign class and
    an error class of its own outside the family."""
    tree = ast.parse("import click\nfrom pgval.core.errors import UserMistake\n"
                     "class Bad(Exception): pass\nclass Good(UserMistake): pass\n"
                     "def f():\n    raise RuntimeError('x')\n"
                     "def g():\n    raise click.UsageError('x')\n"
                     "def h():\n    raise Bad() if f else Good()\n")
    src = Source(dict(src.trees), dict(src.names), dict(src.classes), dict(src.functions))
    src.trees["fake"] = tree
    src.names["fake"] = {"click": ("module", "click"),
                         "UserMistake": (ERRORS_MODULE, "UserMistake"),
                         "Bad": ("fake", "Bad"), "Good": ("fake", "Good")}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            src.classes[("fake", node.name)] = node
    assert not in_family(src, ("fake", "Bad")) and in_family(src, ("fake", "Good"))
    kinds = {ast.unparse(w): resolve(src, m, w) for m, _, w in raised(src) if m == "fake"}
    assert kinds["RuntimeError"] is RuntimeError
    assert kinds["click.UsageError"].__name__ == "UsageError"
    assert kinds["Bad"] == ("fake", "Bad") and kinds["Good"] == ("fake", "Good")


# --------------------------------------------------------------------------- (c) statuses


def test_foreign_errors_become_the_kind_they_are() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from pgval.cli.errors import as_error

    kafka = as_error(KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down")))
    assert isinstance(kafka, EnvironmentFailure) and str(kafka) == "Kafka: broker down"
    assert isinstance(as_error(KeyboardInterrupt()), EnvironmentFailure)
    assert isinstance(as_error(sqlite3.OperationalError("disk I/O error")), UserMistake)
    mistake = UserMistake("a flag")
    assert as_error(mistake) is mistake
    assert as_error(ValueError("a bug")) is None  # its traceback is wanted


def pgval(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgval.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single ``error: …`` line a failed command prints (and nothing else on stderr)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_a_users_mistake_exits_2(tmp_path: Path) -> None:
    proc = pgval("recheck", "no-such-run", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "neither a run directory nor a run id" in one_error_line(proc)


def test_evidence_in_doubt_exits_3(tmp_path: Path) -> None:
    from tests.test_evidence_seal import stored_sealed_run

    run_dir, db, run_id = stored_sealed_run(tmp_path)
    output = run_dir / "evidence" / "output.parquet"
    data = bytearray(output.read_bytes())
    data[len(data) // 2] ^= 0xFF
    output.write_bytes(bytes(data))
    for command in (["recheck", str(run_id), "--db", str(db)],
                    ["export", str(run_id), "--db", str(db), "--out", str(tmp_path / "x")]):
        proc = pgval(*command, cwd=tmp_path)
        assert proc.returncode == 3, proc.stderr
        assert "refusing to re-check edited evidence" in one_error_line(proc)


def test_the_environment_failing_exits_4(tmp_path: Path) -> None:
    proc = pgval("record", "--bootstrap", "127.0.0.1:9", "--inputs", "get,post", "--outputs",
                 "output", "--out", str(tmp_path / "rec"), "--timeout-s", "2", cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "no Kafka broker answered at 127.0.0.1:9" in one_error_line(proc)


def test_a_signal_outside_a_command_exits_4_in_one_line() -> None:
    """What ``run`` does with an interrupt that reaches it past the command group."""
    code = ("import pgval.cli.app as c\n"
            "def stop(**kw):\n"
            "    raise KeyboardInterrupt\n"
            "c.main = stop\n"
            "c.run()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 4
    assert one_error_line(proc) == "error: interrupted by a signal"
