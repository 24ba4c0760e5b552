"""Private files: what pgval writes that the reaper, cleanup or a re-check later trusts, or
that holds a credential; and public ones (a user's exports, cached jars), which are not
private but are written the same careful way (:func:`write_public`).

One writer, so that every such file gets the same guarantees: mode 0600 from its first
byte (not after a chmod), never written through a link a local user planted (a new
temporary name in the same folder, opened ``O_CREAT | O_EXCL | O_NOFOLLOW``, then renamed
over the final name: a rename replaces a link there, it never writes through it), replaced
whole (a reader never sees half a file), and on disk before the call returns when
``fsync`` is asked for. The temporary name and the rename go through one descriptor of
the folder, so a folder swapped for a link in between cannot redirect the rename.

Files pyarrow writes (Parquet) cannot be handed a descriptor: :func:`private_temp_path`
gives pyarrow a name inside a fresh 0700 folder (``mkdtemp``) that nobody else can enter,
so nothing can be planted there and the file cannot be opened by anyone else before it
is made 0600 and renamed into place.

Appending (logs a child process writes, lock files) cannot replace a file whole:
:func:`append_private` opens with ``O_NOFOLLOW`` and refuses anything but a regular file.
``tests/test_private_files.py`` holds every write of pgval's code to these functions.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pgval.core.redact import private_dir

#: Mode of a private file.
PRIVATE_MODE = 0o600


@contextlib.contextmanager
def _replaced_whole(path: Path, *, private: bool, fsync: bool) -> Iterator[IO[bytes]]:
    """A binary file that becomes ``path`` when the block ends without an error; on an
    error the temporary file is removed and ``path`` is untouched."""
    if private:
        private_dir(path.parent)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = f".{path.name[:200]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     PRIVATE_MODE if private else 0o666, dir_fd=dir_fd)
        try:
            if private:
                os.fchmod(fd, PRIVATE_MODE)  # os.open's mode went through the umask
            with os.fdopen(fd, "wb") as fh:
                yield fh
                if fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        if fsync:
            os.fsync(dir_fd)  # the rename itself
    finally:
        os.close(dir_fd)


def write_private(path: Path | str, data: str | bytes, *, fsync: bool = False) -> Path:
    """Replace ``path`` with ``data`` (text is UTF-8), mode 0600; missing folders are made
    0700."""
    path = Path(path)
    with _replaced_whole(path, private=True, fsync=fsync) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    return path


def write_private_json(path: Path | str, value: Any, *, indent: int | None = None,
                       fsync: bool = False, **dumps: Any) -> Path:
    """:func:`write_private` of ``value`` as JSON (``dumps``: more of ``json.dumps``'s
    arguments, e.g. ``default``)."""
    return write_private(path, json.dumps(value, indent=indent, **dumps), fsync=fsync)


@contextlib.contextmanager
def open_private(path: Path | str, *, fsync: bool = False) -> Iterator[IO[bytes]]:
    """:func:`write_private` for a file written piece by piece: a binary file that
    replaces ``path`` (0600) when the block ends without an error."""
    with _replaced_whole(Path(path), private=True, fsync=fsync) as fh:
        yield fh


def copy_private(source: Path | str, path: Path | str, *, fsync: bool = False) -> Path:
    """Replace ``path`` with a copy of ``source`` (0600)."""
    with open(source, "rb") as src, open_private(path, fsync=fsync) as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return Path(path)


@contextlib.contextmanager
def private_temp_path(path: Path | str, *, fsync: bool = False) -> Iterator[Path]:
    """A name for a writer that wants a path, not a file (pyarrow): inside a fresh 0700
    folder beside ``path`` that nobody else can enter (so no link can be planted there and
    nobody can open the file before it is 0600); when the block ends without an error the
    file is made 0600 and renamed over ``path``, a link there replaced, not followed."""
    path = Path(path)
    private_dir(path.parent)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name[:200]}.", dir=path.parent))
    try:
        tmp = folder / "file"
        yield tmp
        os.chmod(tmp, PRIVATE_MODE, follow_symlinks=False)
        if fsync:
            _fsync(tmp)
        os.replace(tmp, path)
        if fsync:
            _fsync(path.parent)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                 | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_private(path: Path | str) -> bool:
    """Create ``path`` empty, 0600, unless anything is there already (``O_EXCL``: a link
    there is neither followed nor replaced); True when this call made it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     PRIVATE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_MODE)  # os.open's mode went through the umask
    finally:
        os.close(fd)
    return True


def append_private(path: Path | str) -> IO[bytes]:
    """``path`` opened to append (created 0600, missing folders 0700), never through a
    link and never anything but a regular file: a log a child process writes, a lock.
    A file that exists keeps its mode. OSError (``ELOOP`` for a link) otherwise."""
    path = Path(path)
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, PRIVATE_MODE)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a planted FIFO or device
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def write_public(path: Path | str, data: str | bytes) -> Path:
    """Write a file others may read: a user's output (``--out``, ``--anomalies``,
    ``--junit``), a cached jar, a namespace's resolv.conf. The umask's mode, but replaced
    whole and never written through a link at ``path`` (a link there is replaced by the
    file). The folder must exist."""
    path = Path(path)
    with _replaced_whole(path, private=False, fsync=False) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    return path


@contextlib.contextmanager
def open_public(path: Path | str) -> Iterator[IO[bytes]]:
    """:func:`write_public` piece by piece: a binary file that replaces ``path`` when the
    block ends without an error."""
    with _replaced_whole(Path(path), private=False, fsync=False) as fh:
        yield fh


def create_public(path: Path | str, buffering: int = -1) -> IO[bytes]:
    """A file others may read, opened to be written piece by piece and kept open (a
    producer's part file of ``generate --out``): created or truncated, never through a
    link and never anything but a regular file. The umask's mode."""
    fd = os.open(Path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                 | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def is_dir(path: Path) -> bool:
    """``path.is_dir()``, False where the OS cannot even look (a name too long, a NUL byte):
    a user's argument is a path or a run id, and neither may end in a traceback."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def key_value_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a KEY=VALUE file that count, stripped, each with its 1-based number:
    blank lines and ``#`` comments are skipped. One rule for every such file pgval reads
    (the embedded Kafka's client.properties, a ``--kafka-config @FILE``)."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.strip().startswith("#")]


def split_key_value(item: str) -> tuple[str, str] | None:
    """``KEY=VALUE`` → (KEY stripped, VALUE as written); None without ``=`` or a KEY."""
    key, sep, value = item.partition("=")
    return (key.strip(), value) if sep and key.strip() else None
