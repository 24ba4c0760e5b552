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


def test_modules_go_heaviest_first_each_whole_and_in_its_own_order() -> None:
    items = [
        FakeItem("tests/test_small.py::a"),
        FakeItem("tests/test_validate.py::plain", {"cluster"}),
        FakeItem("tests/test_validate.py::cleanup", {"alone"}),
        FakeItem("tests/test_job_cluster.py::a", {"cluster"}),
        FakeItem("tests/test_unmeasured.py::a", {"cluster"}),
        FakeItem("tests/test_small.py::b"),
        FakeItem("tests/test_unmeasured.py::b", {"cluster"}),
    ]
    sharing.heaviest_modules_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/test_job_cluster.py::a",  # measured: the longest
        "tests/test_validate.py::plain", "tests/test_validate.py::cleanup",
        "tests/test_unmeasured.py::a", "tests/test_unmeasured.py::b",  # 2 cluster tests: 120 s
        "tests/test_small.py::a", "tests/test_small.py::b",
    ]
