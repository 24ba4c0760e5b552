"""Private files: what pgval writes that the reaper, cleanup or a re-check later trusts, or
that holds a credential.

One writer, so that every such file gets the same guarantees: mode 0600 from its first
byte (not after a chmod), never written through a link a local user planted
(``O_NOFOLLOW`` on a temporary name in the same folder), replaced whole (a reader never
sees half a file), and on disk before the call returns when ``fsync`` is asked for.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_private(path: Path | str, data: str | bytes, *, fsync: bool = False) -> Path:
    """Replace ``path`` with ``data`` (text is UTF-8), mode 0600; its folder is made 0700
    when missing."""
    path = Path(path)
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a leftover temporary file keeps its mode through O_CREAT
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)  # the rename itself
        finally:
            os.close(dir_fd)
    return path


def write_private_json(path: Path | str, value: Any, *, indent: int | None = None,
                       fsync: bool = False) -> Path:
    """:func:`write_private` of ``value`` as JSON."""
    return write_private(path, json.dumps(value, indent=indent), fsync=fsync)


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
