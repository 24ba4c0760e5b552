"""Shared helpers: waiting, and scanning the host for what a test left behind.

Leftover checks look at what really exists (:mod:`pgval.host.leftovers`: processes,
namespaces, links, pgval rules in every namespace, qdiscs, ``/run/pgval`` registry
entries), never at pgval's own bookkeeping (pid files and ``state.json`` are deleted by a
clean stop, so a check built on them could never fail).

Every test marked ``cluster`` is wrapped by :func:`_nothing_left_behind`: whatever of
the above appeared during the test and is still there 15 s after it (its fixtures
torn down), fails it — except what belongs to a cluster the module's tests share (its
processes, and the namespaces, links and registry entry pgval's registry gives its
directory), which is checked gone, all of it, once the module stopped it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from pgval.core.spec import RunSpec
from pgval.deploy.warm import WarmDeployments
from pgval.host.leftovers import (
    HostSnapshot,
    leftovers,
    processes_mentioning,
    suffixes_under,
)
from tests import sharing

__all__ = ["HostSnapshot", "leftovers", "processes_mentioning", "shared_cluster",
           "wait_until"]

# Every JVM the tests start (broker, master, workers, executors, drivers, batch oracles)
# compiles with C1 only: these JVMs live a minute or two at a few hundred events a second,
# and without C2 a job run took about 30 % less CPU on two cores (143 core-seconds, 101
# with C1 alone: C2's compiling saved, less what C1's slower code costs). What the tests
# judge (verdicts, counts, evidence) is the same whichever compiler ran the code; latency
# and warm-up figures are not judged here (docs/performance.md measures them with the
# JVMs' own defaults).
os.environ["JAVA_TOOL_OPTIONS"] = " ".join(
    filter(None, [os.environ.get("JAVA_TOOL_OPTIONS", ""), "-XX:TieredStopAtLevel=1"]))

# Properties are judged by what they find, not by how fast an example runs: a time limit
# per example only measures how busy the two workers keep the machine.
settings.register_profile("pgval", deadline=None)
settings.load_profile("pgval")

#: Clusters that a module's tests share (:func:`shared_cluster`): their processes may
#: change during a test — a crashed worker restarted, the executors of the next run — so
#: each test's check spares what works under them, and the module checks, once it stopped
#: the cluster, that nothing of it is left.
SHARED_ROOTS: list[str] = []
#: The namespace suffixes each shared cluster's root had (a module's cluster may be replaced
#: by one with other daemon settings): none may be left once the module stopped it.
SHARED_SUFFIXES: dict[str, set[str]] = {}


def _note_shared_suffixes() -> None:
    for root in SHARED_ROOTS:
        SHARED_SUFFIXES.setdefault(root, set()).update(suffixes_under([root]))


def wait_until(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``cond`` until it is truthy, or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _nothing_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Cluster tests must leave no process, namespace, link, rule or registry entry (what the
    other test worker has is its own to check: tests/sharing.py)."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    before = HostSnapshot.take()
    yield
    _note_shared_suffixes()
    left = leftovers(before, spared=SHARED_ROOTS, others=sharing.others(request.config))
    assert not left, f"left behind by {request.node.name}: {left}"


_TURNS = sharing.Turns()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test (its fixtures' setup and teardown too) in its turn beside the other worker's."""
    with _TURNS.turn(item, nextitem):
        yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    sharing.heaviest_modules_first(items)


def pytest_sessionstart(session: pytest.Session) -> None:
    sharing.note_worker(session.config)



@contextlib.contextmanager
def shared_cluster(root: Path, label: str, first: RunSpec) -> Iterator[WarmDeployments]:
    """One embedded cluster for a module's runs (each run its own topics, checkpoint and
    driver, as a warm matrix's cells), started for ``first`` before any test snapshots the
    host, and checked gone, every process of it, once stopped."""
    root = Path(root).resolve()
    with WarmDeployments(root, label=label) as shared:
        SHARED_ROOTS.append(str(root))
        try:
            shared.for_run(first)
            _note_shared_suffixes()
            yield shared
        finally:
            shared.close()
            SHARED_ROOTS.remove(str(root))
    wait_until(lambda: not processes_mentioning(str(root)), 30, f"{label}'s processes to end")
    # Its namespaces, links and registry entries too (each test spared a cluster's own).
    ours = SHARED_SUFFIXES.pop(str(root), set())
    wait_until(lambda: not _named_by(HostSnapshot.take(), ours), 30,
               f"{label}'s namespaces, links and registry entries to go")


def _named_by(snapshot: HostSnapshot, suffixes: set[str]) -> list[str]:
    names = snapshot.namespaces | snapshot.links | snapshot.registry
    return sorted(n for n in names if any(s in n for s in suffixes))
