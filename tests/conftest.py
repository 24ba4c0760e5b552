"""Shared helpers: waiting, and scanning the host for what a test left behind.

Leftover checks look at what really exists (:mod:`pgval.host.leftovers`: processes,
namespaces, links, pgval rules in every namespace, qdiscs, ``/run/pgval`` registry
entries), never at pgval's own bookkeeping (pid files and ``state.json`` are deleted by a
clean stop, so a check built on them could never fail).

Every test marked ``cluster`` is wrapped by :func:`_nothing_left_behind`: whatever of
the above appeared during the test and is still there 15 s after it (its fixtures
torn down), fails it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from pgval.host.leftovers import HostSnapshot, leftovers, processes_mentioning

__all__ = ["HostSnapshot", "leftovers", "processes_mentioning", "wait_until"]


def wait_until(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``cond`` until it is truthy, or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _nothing_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Cluster tests must leave no process, namespace, link, rule or registry entry."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    before = HostSnapshot.take()
    yield
    left = leftovers(before)
    assert not left, f"left behind by {request.node.name}: {left}"
