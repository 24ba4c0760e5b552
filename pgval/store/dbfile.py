"""Opening a results database file: literal paths, one-line errors, WAL, a long busy time-out.

Why a module of its own: the store (which writes), the report and ``recheck`` (which only
read) must agree on how a path is opened. A path is always passed to SQLite as an absolute
file name, never as a URI unless percent-encoded, so ``a#b.db`` is the file ``a#b.db`` and
not the file ``a`` with a fragment. A file that is not SQLite, or a path that cannot be
opened, is one plain sentence (:class:`StoreError`), never a traceback.

Why WAL and 60 s: a matrix, a second matrix and a ``pgval report`` share one file. In WAL
mode readers never block the writer, and a writer waits up to :data:`BUSY_TIMEOUT_S` for
another writer's transaction (they last milliseconds) instead of failing after SQLite's
default 5 s.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pgval.core.errors import UserMistake
from pgval.core.files import copy_private, create_private

#: How long a writer waits for another writer's lock before giving up.
BUSY_TIMEOUT_S = 60.0
_NOTADB = 26
_CORRUPT = 11


class StoreError(UserMistake):
    """A results database that cannot be used, said in one sentence: the ``--db`` given
    (another program's file, a damaged or newer one, a place it cannot be written)."""


def plain_error(path: Path | str, exc: BaseException) -> StoreError:
    """The one sentence for a sqlite3 (or OS) error met while opening ``path``."""
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    if code == _NOTADB or "file is not a database" in text:
        return StoreError(f"{path} is not a SQLite database")
    if code == _CORRUPT or "malformed" in text:
        return StoreError(f"{path} is a damaged SQLite database ({text})")
    return StoreError(f"cannot use the results database {path}: {text}")


def connect(path: Path | str) -> sqlite3.Connection:
    """A read-write connection in WAL mode; creates the file (and its folder) if missing.
    Another program's database (:func:`foreign_problem`) is refused before anything is
    written to it.

    ``isolation_level=None``: the driver never opens a transaction behind our back, so
    every transaction is an explicit ``BEGIN IMMEDIATE`` (see ``ResultsStore.transaction``).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _create_private(path)
        conn = sqlite3.connect(str(path.resolve()), timeout=BUSY_TIMEOUT_S,
                               isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise plain_error(path, exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        problem = foreign_problem(conn, path)  # before WAL: that would write to it
        if problem is None:
            _enable_wal(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise plain_error(path, exc) from exc
    if problem is not None:
        conn.close()
        raise StoreError(problem)
    return conn


def _create_private(path: Path) -> None:
    """A database pgval creates is 0600 (its runs' parameters and fault logs are nobody
    else's); SQLite gives its ``-wal`` and ``-shm`` the database's mode. A file that exists
    keeps the mode its owner chose. (An empty file is an empty SQLite database.)"""
    create_private(path)


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL, retrying: the switch needs a moment of exclusive access, and SQLite
    answers "database is locked" at once (without the busy handler) when another process
    is opening the same fresh file."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def connect_readonly(path: Path | str, newest: int | None = None) -> sqlite3.Connection:
    """A connection that never writes and never creates the file; a database that is not
    pgval's (:func:`foreign_problem`) is refused, and so is one of a schema newer than
    ``newest`` (a newer pgval's tables may mean what this one would misread).

    Missing file: ``no results database at X``. When the file and its folder are writable
    the connection is an ordinary one with ``query_only`` (so the last reader to close a
    WAL database removes its ``-wal``/``-shm`` files, as a writer would; a ``mode=ro``
    reader would leave them behind). Otherwise (read-only storage, another user's folder)
    it is a ``mode=ro`` URI with the path percent-encoded, which reads a WAL database as
    long as its ``-shm`` exists; when SQLite cannot open it so (it would have to create the
    ``-shm``: "unable to open" on a read-only mount, "attempt to write a readonly database"
    in a folder this user may not write), :func:`_read_only_fallback` reads it without one.
    """
    path = Path(path)
    try:
        is_file = path.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte, …
        is_file = False
    if not is_file:
        raise StoreError(f"no results database at {path}")
    full = path.resolve()
    try:
        if os.access(full, os.W_OK) and os.access(full.parent, os.W_OK):
            conn = sqlite3.connect(str(full), timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute("PRAGMA query_only = ON")
        else:
            conn = _uri(full, "mode=ro")
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError as exc:
                conn.close()
                if _primary(exc) not in (_CANTOPEN, _READONLY):
                    raise
                conn = _read_only_fallback(full)
    except sqlite3.Error as exc:
        raise plain_error(path, exc) from exc
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        problem = foreign_problem(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise plain_error(path, exc) from exc
    if problem is None and newest is not None:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > newest:
            problem = (f"{path} was written by a newer pgval (schema version {version}; this "
                       f"pgval reads up to {newest})")
    if problem is not None:
        conn.close()
        raise StoreError(problem)
    return conn


_CANTOPEN = 14
#: SQLITE_READONLY: for a reader that may not write the folder SQLite says "attempt to
#: write a readonly database" (SQLITE_READONLY_DIRECTORY: it cannot create the ``-shm``)
#: where a read-only mount gives SQLITE_CANTOPEN.
_READONLY = 8


def _primary(exc: BaseException) -> int | None:
    """SQLite's primary result code of ``exc`` (the low byte of an extended one)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _uri(full: Path, query: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{quote(str(full))}?{query}", uri=True,
                           timeout=BUSY_TIMEOUT_S, isolation_level=None)


def _read_only_fallback(full: Path) -> sqlite3.Connection:
    """A WAL database on read-only storage without its ``-shm`` file (SQLite cannot create
    one there, so ``mode=ro`` fails). Without a ``-wal`` (or an empty one) the main file is
    the whole database, read with ``immutable=1`` (nothing can change it: no locks needed).
    With a ``-wal``, ``immutable`` would ignore the transactions in it, so the database
    and its ``-wal`` are copied to a private temporary folder, opened there (SQLite
    rebuilds the index) and copied into memory; the folder is gone before this returns."""
    import tempfile

    wal = full.with_name(full.name + "-wal")
    if not wal.is_file() or wal.stat().st_size == 0:
        return _uri(full, "mode=ro&immutable=1")
    with tempfile.TemporaryDirectory(prefix="pgval-ro-") as tmp:
        copy = Path(tmp) / "copy.db"
        copy_private(full, copy)
        copy_private(wal, copy.with_name("copy.db-wal"))
        src = sqlite3.connect(str(copy), isolation_level=None)
        try:
            mem = sqlite3.connect(":memory:", isolation_level=None)
            src.backup(mem)
        finally:
            src.close()
    mem.execute("PRAGMA query_only = ON")
    return mem


#: Columns every pgval ``runs`` table has had, before the schema had a version and since.
PGVAL_RUN_COLUMNS = ("id", "kind", "status", "topology")


def foreign_problem(conn: sqlite3.Connection, path: Path | str) -> str | None:
    """Why the database at ``path`` is not pgval's, or None (it is, or it is empty).

    pgval's databases have a ``runs`` table with :data:`PGVAL_RUN_COLUMNS` (unversioned
    ones too); a database with tables but no such ``runs`` belongs to another program, and
    pgval must neither add its tables to it nor read it as results."""
    tables = sorted(name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"))
    if not tables:
        return None
    if "runs" in tables:
        columns = {row[1] for row in conn.execute("PRAGMA table_info([runs])")}
        missing = [c for c in PGVAL_RUN_COLUMNS if c not in columns]
        if not missing:
            return None
        why = f"its runs table lacks {', '.join(missing)}"
    else:
        shown = ", ".join(tables[:4]) + (", …" if len(tables) > 4 else "")
        why = f"it has tables ({shown}) but no runs table"
    return f"{path} is not a pgval results database ({why}); give a new file"


def json_cell(text: object) -> object:
    """A database cell's JSON; None for no cell, an empty one, or one that is not JSON (a
    damaged or foreign row must not end a read in a traceback)."""
    try:
        return json.loads(text) if isinstance(text, str) and text else None
    except (ValueError, RecursionError):
        return None


def json_object_cell(text: object) -> dict[str, Any]:
    """A stored JSON object, or {} for anything else (NULL, not JSON, a list, bytes)."""
    value = json_cell(text)
    return value if isinstance(value, dict) else {}
