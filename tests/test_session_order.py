"""The order the two test workers take the modules in (tests/sharing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests import sharing


@dataclass
class FakeItem:
    nodeid: str
    marks: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_alone_modules_come_first_with_their_alone_tests_first_then_the_heaviest() -> None:
    items = [
        FakeItem("tests/test_small.py::a"),
        FakeItem("tests/test_validate.py::plain", {"cluster"}),
        FakeItem("tests/test_validate.py::cleanup", {"alone"}),
        FakeItem("tests/test_job_cluster.py::a", {"cluster"}),
        FakeItem("tests/test_faults_beyond_cluster.py::first", {"cluster"}),
        FakeItem("tests/test_faults_beyond_cluster.py::random", {"cluster", "alone"}),
        FakeItem("tests/test_delay.py::a", {"alone"}),
        FakeItem("tests/test_unmeasured.py::a", {"cluster"}),
        FakeItem("tests/test_unmeasured.py::b", {"cluster"}),
    ]
    sharing.session_order(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/test_delay.py::a",
        "tests/test_validate.py::cleanup", "tests/test_validate.py::plain",
        "tests/test_job_cluster.py::a",
        # kept in its file's order: its alone test runs on a cluster a run has warmed
        "tests/test_faults_beyond_cluster.py::first", "tests/test_faults_beyond_cluster.py::random",
        "tests/test_unmeasured.py::a", "tests/test_unmeasured.py::b",  # 2 cluster tests: 120 s
        "tests/test_small.py::a",
    ]
