"""Two pytest workers on one host (pytest-xdist, ``-n 2`` in pyproject.toml).

The cluster runs spend most of their wall time waiting for their phases, so two of them
share the machine's cores well. What each worker starts carries its ``PYTEST_XDIST_WORKER``
in its environment and works under its own base temporary folder: a worker's leftover
check (tests/conftest.py) looks at its own things only, with its full strength, and never
at the other worker's (:func:`others`).

A test marked ``alone`` (one whose timing another run could upset, or that runs ``pgval
cleanup``, whose sweep of dead owners' networks could remove the other worker's leftovers
before its check sees them) runs with no other test beside it (the other worker's shared
clusters stay up, idle): every test holds a shared lock while it runs, an ``alone`` test an
exclusive one (for its module's run of ``alone`` tests), and a turnstile keeps the shared
holders from starving it (:class:`Turns`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from pgval.host.identity import Owner
from pgval.host.leftovers import Others

WORKER_VAR = "PYTEST_XDIST_WORKER"
PID_FILE = "worker.json"


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
    pids = []
    for n in names:  # a worker's own environment lacks its mark (set after it started)
        with contextlib.suppress(OSError, ValueError):
            owner = Owner.from_dict(json.loads((root / f"popen-{n}" / PID_FILE).read_text()))
            if owner is not None and owner.alive():  # not a later process with its pid
                pids.append(owner.pid)
    return Others(dirs=tuple(str(root / f"popen-{n}") for n in names),
                  marks=tuple(f"{WORKER_VAR}={n}" for n in names), pids=tuple(pids))


def note_worker(config: pytest.Config) -> None:
    """Leave this worker's identity (pid and start) in its base temporary folder, for the
    other's checks."""
    if worker() is not None:
        base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        (base / PID_FILE).write_text(json.dumps(Owner.me().as_dict()))


class Turns:
    """This worker's turns: every test holds a shared lock while it runs, and a module of
    ``alone`` tests an exclusive one from its first such test to its last (one wait for
    the other worker's test in progress per module, not one per test)."""

    def __init__(self) -> None:
        self._files: tuple[IO[str], IO[str]] | None = None
        self._alone = False

    def _open(self, config: pytest.Config) -> tuple[IO[str], IO[str]]:
        if self._files is None:
            root = _session_root(config)
            # Open for the worker's life: a lock is held across tests, never across sessions.
            self._files = (open(root / "turnstile.lock", "a"),  # noqa: SIM115
                           open(root / "turn.lock", "a"))  # noqa: SIM115
        return self._files

    @contextlib.contextmanager
    def turn(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """Hold ``item``'s turn: shared with the other worker's tests, or the host alone
        (kept for ``nextitem`` when it is an ``alone`` test of the same module)."""
        if worker() is None:
            yield
            return
        gate, lock = self._open(item.config)
        alone = _alone(item)
        asked = time.time()
        if not (alone and self._alone):
            fcntl.flock(gate, fcntl.LOCK_EX)  # an alone test waiting here holds new tests back
            try:
                fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
            self._alone = alone
        began = time.time()
        try:
            yield
        finally:
            keep = (alone and nextitem is not None and _alone(nextitem)
                    and nextitem.module is item.module)  # type: ignore[attr-defined]
            if not keep:
                fcntl.flock(lock, fcntl.LOCK_UN)
                self._alone = False
            _note_turn(item, alone, asked, began)


#: Every test's turn, a line each (worker, test, alone, when it asked, began and ended), in
#: the session's folder: how long the workers waited for each other, and what ran beside what.
TIMELINE = "timeline.jsonl"


def _note_turn(item: pytest.Item, alone: bool, asked: float, began: float) -> None:
    line = {"worker": worker(), "test": item.nodeid, "alone": alone,
            "asked": round(asked, 3), "began": round(began, 3), "ended": round(time.time(), 3)}
    with contextlib.suppress(OSError), open(_session_root(item.config) / TIMELINE, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def _alone(item: pytest.Item) -> bool:
    return item.get_closest_marker("alone") is not None


#: Seconds each of the longest modules took on a worker (2 workers, 2 cores, 2026-12-06);
#: a module not named here counts 60 s per cluster test and 0.2 s per other test.
MEASURED_S = {
    "test_job_cluster.py": 1346, "test_faults_cluster.py": 724, "test_deploy_cluster.py": 552,
    "test_faults_beyond_cluster.py": 297, "test_validate.py": 263, "test_topologies.py": 236,
    "test_canary.py": 236, "test_spark35.py": 178, "test_lint.py": 155, "test_soak.py": 149,
    "test_scale_checker.py": 128, "test_kafka_runtime.py": 107, "test_your_job_doc.py": 91,
    "test_api.py": 84, "test_scale_kafka.py": 79, "test_cds.py": 71,
    "test_executor_kill.py": 64, "test_spark_runtime.py": 56, "test_check_job.py": 40,
    "test_rates.py": 34, "test_sink_delta.py": 34, "test_delay.py": 23, "test_partition.py": 22,
}


def heaviest_modules_first(items: list[pytest.Item]) -> None:
    """Order the modules by how long they take, longest first (each module stays whole, in
    its own order, on one worker): the long ones start early and the short ones fill in at
    the end, so both workers end at much the same time. (Taking the modules with ``alone``
    tests first instead was measured, and saved nothing: docs/performance.md.)"""
    cost: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        cluster = item.get_closest_marker("cluster") is not None
        cost[module] = cost.get(module, 0.0) + (60.0 if cluster else 0.2)
    for module in cost:
        cost[module] = MEASURED_S.get(module.rsplit("/", 1)[-1], cost[module])
    order = {m: i for i, m in enumerate(sorted(cost, key=lambda m: -cost[m]))}
    items.sort(key=lambda item: order[item.nodeid.split("::")[0]])
