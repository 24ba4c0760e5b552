"""Every file pgval writes goes through :mod:`pgval.core.files`.

Private files (run.json, the evidence seal, pid files, undo records, state files, control
requests, …) must be 0600 from their first byte and never written through a link a local
user planted; a user's exports (``--out``, ``--anomalies``, ``--junit``) must not follow a
link at their path either. One writer gives both; the scan below finds any write of the
production code that bypasses it, and the behaviour tests hold the writer to its promise.
"""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgval.core import files
from tests.test_imports import ROOT, modules, package_dirs

#: The one module allowed to open files for writing.
WRITER = ROOT / "pgval" / "core" / "files.py"

#: Writes that are not pgval's files, each with why it needs no private writer:
#: (file relative to the repository, the function holding the write) → reason.
NOT_FILES: dict[tuple[str, str], str] = {
    ("pgval/host/netns.py", "_no_forwarding"):
        "a kernel setting under /proc/sys, not a file on a disk",
}

#: Writes of pgval's own files that still open them directly. Each is to go through
#: pgval.core.files (the fix named); the test fails once one is fixed, so the entry is removed.
DIRECT: dict[tuple[str, str], str] = {}

#: os.open flags that make or change a file.
WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_APPEND", "O_TRUNC"}
#: shutil functions that write their destination through any link there.
COPIES = {"copy", "copy2", "copyfile", "move"}


def _mode_writes(node: ast.expr | None) -> bool:
    """A mode argument that writes: a constant with w, a, x or +, or anything not a
    constant (the scan cannot tell)."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(c in node.value for c in "wax+")
    return True


def _arg(call: ast.Call, index: int, name: str) -> ast.expr | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def write_kind(call: ast.Call) -> str | None:
    """What kind of file write ``call`` is, or None for none."""
    func = call.func
    name = _dotted(func)
    attr = func.attr if isinstance(func, ast.Attribute) else name
    if name in ("open", "io.open") and _mode_writes(_arg(call, 1, "mode")):
        return f"{name}(..., mode)"
    if name == "os.open":
        flags = _arg(call, 1, "flags")
        used = {n.attr for n in ast.walk(flags) if isinstance(n, ast.Attribute)} if flags else set()
        used |= {n.id for n in ast.walk(flags) if isinstance(n, ast.Name)} if flags else set()
        return "os.open(O_CREAT/O_WRONLY...)" if used & WRITE_FLAGS else None
    mode = _arg(call, 0, "mode")
    if attr == "open" and isinstance(mode, ast.Constant) and _mode_writes(mode):
        return ".open(mode)"  # Path.open("w"); another object's open(x) is not a file's
    if attr in ("write_text", "write_bytes"):
        return f".{attr}()"
    if attr == "fdopen" and _mode_writes(_arg(call, 1, "mode")):
        return "os.fdopen(..., mode)"
    if name.startswith("shutil.") and attr in COPIES:
        return name
    return None


def _calls(tree: ast.Module) -> Iterator[tuple[str, ast.Call]]:
    """Every call with the qualified name of the function (or class.method) holding it."""
    def walk(node: ast.AST, scope: list[str]) -> Iterator[tuple[str, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from walk(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call):
                yield ".".join(scope) or "<module>", child
            yield from walk(child, scope)
    yield from walk(tree, [])


def writes(paths: list[Path], root: Path = ROOT) -> list[tuple[str, str, int, str]]:
    """(file, function, line, kind) of every file write in ``paths``."""
    found = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        for scope, call in _calls(ast.parse(path.read_text(), str(path))):
            kind = write_kind(call)
            if kind is not None:
                found.append((rel, scope, call.lineno, kind))
    return found


def production_writes() -> list[tuple[str, str, int, str]]:
    paths = sorted(p for p in modules(package_dirs()).values() if p != WRITER)
    return writes(paths)


def test_no_production_code_writes_a_file_but_the_writer() -> None:
    found = production_writes()
    bad = [f"{rel}:{line}: {kind} in {scope}" for rel, scope, line, kind in found
           if (rel, scope) not in NOT_FILES and (rel, scope) not in DIRECT]
    assert not bad, ("files written past pgval/core/files.py (use write_private, open_private, "
                     "append_private, private_temp_path or write_public/open_public; or "
                     "add the write to NOT_FILES with why it is no file of pgval's):\n  "
                     + "\n  ".join(bad))


def test_every_allowed_write_still_exists() -> None:
    """An entry of NOT_FILES or DIRECT that matches no write any more is removed."""
    seen = {(rel, scope) for rel, scope, _, _ in production_writes()}
    stale = sorted((set(NOT_FILES) | set(DIRECT)) - seen)
    assert not stale, f"allowed writes that no longer exist: {stale}"


def test_the_scan_finds_each_kind_of_write(tmp_path: Path) -> None:
    """The scanner itself, on a made-up module: every kind is found, reads are not."""
    code = tmp_path / "m.py"
    code.write_text(
        "import os, shutil\n"
        "from pathlib import Path\n"
        "def f(p, m):\n"
        "    open(p, 'w')\n"                       # 4
        "    open(p, mode='ab')\n"                 # 5
        "    open(p, m)\n"                         # 6: a mode the scan cannot read
        "    os.open(p, os.O_WRONLY | os.O_CREAT)\n"  # 7
        "    Path(p).write_text('x')\n"            # 8
        "    Path(p).write_bytes(b'x')\n"          # 9
        "    os.fdopen(3, 'w')\n"                  # 10
        "    Path(p).open('x')\n"                  # 11
        "    shutil.copyfile(p, p)\n"              # 12
        "class C:\n"
        "    def g(self, p):\n"
        "        open(p)\n"                        # 15: reads
        "        open(p, 'rb')\n"
        "        os.open(p, os.O_RDONLY)\n"
        "        Path(p).open()\n"
        "        Path(p).read_text()\n"
        "        p.write_text('y')\n")             # 20
    found = writes([code], tmp_path)
    assert [line for _, _, line, _ in found] == [4, 5, 6, 7, 8, 9, 10, 11, 12, 20]
    assert found[-1][1] == "C.g"


# --------------------------------------------------------------------------- behaviour


def _planted(tmp_path: Path) -> tuple[Path, Path]:
    """A victim file with known bytes and a link to it where pgval is about to write."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"the victim's bytes\n")
    link = tmp_path / "out" / "target"
    link.parent.mkdir()
    link.symlink_to(victim)
    return victim, link


def _write_parquet(path: Path) -> None:
    with files.private_temp_path(path) as tmp:
        pq.write_table(pa.table({"x": [1, 2, 3]}), tmp)


def _stream(opener: Callable[[Path], object]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with opener(path) as fh:  # type: ignore[attr-defined]
            fh.write(b"streamed\n")
    return write


PRIVATE_WRITERS: dict[str, Callable[[Path], object]] = {
    "write_private": lambda p: files.write_private(p, "secret\n"),
    "write_private_json": lambda p: files.write_private_json(p, {"k": 1}, fsync=True),
    "open_private": _stream(files.open_private),
    "copy_private": lambda p: files.copy_private(ROOT / "pyproject.toml", p),
    "private_temp_path (pyarrow)": _write_parquet,
}
PUBLIC_WRITERS: dict[str, Callable[[Path], object]] = {
    "write_public": lambda p: files.write_public(p, "report\n"),
    "open_public": _stream(files.open_public),
}


@pytest.mark.parametrize("name", [*PRIVATE_WRITERS, *PUBLIC_WRITERS])
def test_a_planted_link_is_not_followed(tmp_path: Path, name: str) -> None:
    """The link is replaced by the file; the file it pointed at keeps its bytes."""
    victim, link = _planted(tmp_path)
    (PRIVATE_WRITERS | PUBLIC_WRITERS)[name](link)
    assert victim.read_bytes() == b"the victim's bytes\n"
    assert not link.is_symlink() and link.is_file()
    assert [p.name for p in link.parent.iterdir()] == ["target"]  # no temporary left


@pytest.mark.parametrize("name", list(PRIVATE_WRITERS))
def test_a_private_file_is_0600_whatever_the_umask(tmp_path: Path, name: str) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "new" / "deeper" / "file"
        PRIVATE_WRITERS[name](path)
        again = tmp_path / "new" / "again"
        again.write_bytes(b"")
        os.chmod(again, 0o666)
        PRIVATE_WRITERS[name](again)  # a file replaced gets 0600 too
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(again.stat().st_mode) == 0o600
    for folder in (tmp_path / "new", tmp_path / "new" / "deeper"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_public_file_takes_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        files.write_public(tmp_path / "report.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = files.write_private(tmp_path / "state.json", "old")
    with pytest.raises(RuntimeError), files.open_private(path) as fh:
        fh.write(b"half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_append_refuses_a_link_and_a_fifo(tmp_path: Path) -> None:
    victim, link = _planted(tmp_path)
    with pytest.raises(OSError):
        files.append_private(link)
    assert victim.read_bytes() == b"the victim's bytes\n"
    fifo = tmp_path / "out" / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):  # no reader: ENXIO; with one: not a regular file
        files.append_private(fifo)
    log = tmp_path / "logs" / "x.log"
    for line in (b"one\n", b"two\n"):
        with files.append_private(log) as fh:
            fh.write(line)
    assert log.read_bytes() == b"one\ntwo\n" and stat.S_IMODE(log.stat().st_mode) == 0o600


def test_create_private_leaves_anything_there(tmp_path: Path) -> None:
    victim, link = _planted(tmp_path)
    assert not files.create_private(link) and link.is_symlink()
    assert victim.read_bytes() == b"the victim's bytes\n"
    assert files.create_private(tmp_path / "new.db")
    assert stat.S_IMODE((tmp_path / "new.db").stat().st_mode) == 0o600


def test_the_evidence_writers_do_not_follow_links(tmp_path: Path) -> None:
    """pgval's own callers: the manifest, the seal and a Parquet table of a run's
    evidence, and a user's export, each with a link planted at its name."""
    from pgval.checker.gate import write_junit
    from pgval.evidence import bundle as evidence
    from pgval.evidence.export import write_anomalies

    victim = tmp_path / "victim"
    victim.write_bytes(b"keep\n")
    ev = tmp_path / "run" / evidence.EVIDENCE_DIR
    ev.mkdir(parents=True)
    targets = [ev / evidence.MANIFEST, ev / evidence.SUMS, ev / evidence.ANOMALIES,
               tmp_path / "anomalies.jsonl", tmp_path / "junit.xml"]
    for t in targets:
        t.symlink_to(victim)
    evidence.Manifest(topology="sst", window_ms=1000, phases=[0, 1, 2]).write(ev.parent)
    evidence.save_anomalies(ev.parent, pa.table({"x": [1]}))
    evidence.seal(ev.parent, 1)
    write_anomalies(pa.table({"x": [1]}), tmp_path / "anomalies.jsonl")
    write_junit(tmp_path / "junit.xml", [], None, "pgval check")
    assert victim.read_bytes() == b"keep\n"
    for t in targets:
        assert not t.is_symlink()
    for t in targets[:3]:
        assert stat.S_IMODE(t.stat().st_mode) == 0o600
