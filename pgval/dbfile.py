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

import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from pgval.runtime.procs import RuntimeErrorPlain

#: How long a writer waits for another writer's lock before giving up.
BUSY_TIMEOUT_S = 60.0
_NOTADB = 26
_CORRUPT = 11


class StoreError(RuntimeErrorPlain):
    """A results database that cannot be used, said in one sentence."""


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

    ``isolation_level=None``: the driver never opens a transaction behind our back, so
    every transaction is an explicit ``BEGIN IMMEDIATE`` (see ``ResultsStore.transaction``).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path.resolve()), timeout=BUSY_TIMEOUT_S,
                               isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise plain_error(path, exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _enable_wal(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise plain_error(path, exc) from exc
    return conn


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


def connect_readonly(path: Path | str) -> sqlite3.Connection:
    """A connection that never writes and never creates the file.

    Missing file: ``no results database at X``. When the file and its folder are writable
    the connection is an ordinary one with ``query_only`` (so the last reader to close a
    WAL database removes its ``-wal``/``-shm`` files, as a writer would); otherwise it is a
    ``mode=ro`` URI with the path percent-encoded.
    """
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"no results database at {path}")
    full = path.resolve()
    try:
        if os.access(full, os.W_OK) and os.access(full.parent, os.W_OK):
            conn = sqlite3.connect(str(full), timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute("PRAGMA query_only = ON")
        else:
            conn = sqlite3.connect(f"file:{quote(str(full))}?mode=ro", uri=True,
                                   timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:
        raise plain_error(path, exc) from exc
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        conn.close()
        raise plain_error(path, exc) from exc
    return conn
