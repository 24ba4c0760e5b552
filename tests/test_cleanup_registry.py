"""`pgval cleanup` sweeps only the networks its own registry records.

Why: two installations on one host (two ``PGVAL_RUN_ROOT``s: two CI runners, a user's and
root's) each keep their own registry of which run owns which namespaces. A cleanup that
swept every ``pgval-`` namespace its registry had no live owner for deleted the other
installation's live runs' namespaces, whose owners it cannot know. Real namespaces, bridges
and veths (root); no cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.cluster.cleanup import cleanup
from pgval.host import netns, registry
from pgval.host.identity import Owner

# They run `pgval cleanup`: its sweep of dead owners' networks must not meet the other
# test worker's.
pytestmark = pytest.mark.alone


@pytest.fixture
def layouts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Path, netns.NetLayout]]]:
    """(registry root, layout) of each network a test makes; all torn down afterwards."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    ok, why = netns.namespaces_supported()
    if not ok:
        pytest.skip(why)
    made: list[tuple[Path, netns.NetLayout]] = []
    yield made
    for root, layout in made:
        monkeypatch.setattr(registry, "RUN_ROOT", root)
        with contextlib.suppress(Exception):
            layout.teardown()


def _network(root: Path, run_dir: Path, made: list[tuple[Path, netns.NetLayout]],
             monkeypatch: pytest.MonkeyPatch) -> netns.NetLayout:
    """A bridge and one namespace registered (to this live process) in ``root``."""
    monkeypatch.setattr(registry, "RUN_ROOT", root)
    layout = netns.NetLayout(run_dir=run_dir)
    made.append((root, layout))
    layout.create()
    layout.add_namespace(0)
    return layout


def test_cleanup_leaves_another_installations_networks_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        layouts: list[tuple[Path, netns.NetLayout]]) -> None:
    theirs = _network(tmp_path / "their-root", tmp_path / "their-run", layouts, monkeypatch)
    mine = tmp_path / "my-root"
    dead_run = _network(mine, tmp_path / "dead-run", layouts, monkeypatch)
    me = Owner.me()
    registry.register_netns(dead_run.suffix, tmp_path / "dead-run",
                            owner=dataclasses.replace(me, start=me.start + 1))  # died
    report = cleanup(tmp_path / "runs")

    names, links = netns.list_namespaces(), netns.list_links()
    assert netns.ns_name(theirs.suffix, 0) in names, report.removed
    assert theirs.bridge in links and netns.host_veth_name(theirs.suffix, 0) in links
    assert any(theirs.suffix in line and "not in this installation's registry" in line
               for line in report.spared), report.spared
    # This installation's dead run is still swept, whole.
    assert netns.ns_name(dead_run.suffix, 0) not in names
    assert dead_run.bridge not in links
    assert dead_run.suffix not in registry.netns_entries()
    assert f"netns {netns.ns_name(dead_run.suffix, 0)}" in report.removed


def test_a_suffix_that_starts_another_takes_only_its_own_links(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        layouts: list[tuple[Path, netns.NetLayout]]) -> None:
    """Links are matched whole: ``pgv<suffix>h0`` of suffix ``ab`` is not ``abcdef``'s."""
    monkeypatch.setattr(registry, "RUN_ROOT", tmp_path / "root")
    long = netns.NetLayout(suffix=netns.new_suffix(), run_dir=tmp_path / "long")
    short = netns.NetLayout(suffix=long.suffix[:2], run_dir=tmp_path / "short")
    for layout in (long, short):
        layouts.append((tmp_path / "root", layout))
        layout.create()
        layout.add_namespace(0)
    removed = netns.cleanup_all(f"{netns.NS_PREFIX}{short.suffix}-")
    # (the veth may go with its namespace before cleanup gets to it)
    assert {netns.ns_name(short.suffix, 0), short.bridge} <= set(removed) <= {
        netns.ns_name(short.suffix, 0), short.bridge, netns.host_veth_name(short.suffix, 0)}
    links = [n.split("@")[0] for n in netns.list_links()]
    assert netns.host_veth_name(short.suffix, 0) not in links
    assert long.bridge in links and netns.host_veth_name(long.suffix, 0) in links
    assert netns.ns_name(long.suffix, 0) in netns.list_namespaces()
