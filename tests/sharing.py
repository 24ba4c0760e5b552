"""Two pytest workers on one host (pytest-xdist, ``-n 2`` in pyproject.toml).

The cluster runs spend most of their wall time waiting for their phases, so two of them
share the machine's cores well. What each worker starts carries its ``PYTEST_XDIST_WORKER``
in its environment and works under its own base temporary folder: a worker's leftover
check (tests/conftest.py) looks at its own things only, with its full strength, and never
at the other worker's (:func:`others`).

A test marked ``alone`` (one that times the host, or checks the whole host) runs with no
other test beside it: every test holds a shared lock while it runs, an ``alone`` test an
exclusive one, and a turnstile keeps the shared holders from starving it (:func:`turn`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.host.leftovers import Others

WORKER_VAR = "PYTEST_XDIST_WORKER"


def worker() -> str | None:
    """This process's xdist worker name (``gw0``), or None when tests run in one process."""
    return os.environ.get(WORKER_VAR)


def _session_root(config: pytest.Config) -> Path:
    """The folder every worker's base temporary folder lies in (``…/pytest-N``)."""
    return config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]


def others(config: pytest.Config) -> Others | None:
    """What belongs to the other workers of this session, or None without xdist."""
    me = worker()
    if me is None:
        return None
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    names = [f"gw{i}" for i in range(count) if f"gw{i}" != me]
    root = _session_root(config)
    return Others(dirs=tuple(str(root / f"popen-{n}") for n in names),
                  marks=tuple(f"{WORKER_VAR}={n}" for n in names))


@contextlib.contextmanager
def turn(item: pytest.Item) -> Iterator[None]:
    """Hold this test's turn: shared with the other worker's tests, or the host alone."""
    if worker() is None:
        yield
        return
    root = _session_root(item.config)
    alone = item.get_closest_marker("alone") is not None
    with open(root / "turnstile.lock", "a") as gate, open(root / "turn.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)  # an alone test waiting here holds new tests back
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def heaviest_modules_first(items: list[pytest.Item]) -> None:
    """Order the modules by how many cluster runs they hold, most first (each module stays
    whole, in its own order, on one worker): the long ones start early and the short ones
    fill in at the end, so both workers end at much the same time."""
    runs: dict[str, int] = {}
    for item in items:
        runs.setdefault(item.nodeid.split("::")[0], 0)
        if item.get_closest_marker("cluster") is not None:
            runs[item.nodeid.split("::")[0]] += 1
    order = {m: i for i, m in enumerate(sorted(runs, key=lambda m: -runs[m]))}
    items.sort(key=lambda item: order[item.nodeid.split("::")[0]])
