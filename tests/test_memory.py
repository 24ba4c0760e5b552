"""numpy's huge-page advice is off exactly where the guest hands free pages to its host."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgval.host import memory


def _balloon(root: Path, name: str, bits: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "features").write_text(bits + "\n")
    return root


def test_free_page_reporting_is_read_from_the_balloons_feature_bits(tmp_path: Path) -> None:
    # This machine's balloon: bits 1, 2, 5 (reporting) and 32 (version 1).
    here = "011001010000000000000000000000001" + "0" * 95
    assert memory.reports_free_pages(_balloon(tmp_path / "a", "virtio0", here))
    without = here[:5] + "0" + here[6:]
    assert not memory.reports_free_pages(_balloon(tmp_path / "b", "virtio0", without))
    two = _balloon(tmp_path / "c", "virtio0", without)
    assert memory.reports_free_pages(_balloon(two, "virtio3", here))
    assert not memory.reports_free_pages(_balloon(tmp_path / "d", "virtio0", "01100"))
    assert not memory.reports_free_pages(tmp_path / "no-balloon")


@pytest.mark.parametrize("numpy_before", [True, False])
def test_small_pages_turns_the_advice_off_and_gives_numpy_its_own_back(
        tmp_path: Path, numpy_before: bool) -> None:
    switch = memory._advice_switch()
    assert switch is not None, "numpy without its huge-page switch: the advice stays on"
    reporting = _balloon(tmp_path / "r", "virtio0", "000001")
    quiet = _balloon(tmp_path / "q", "virtio0", "000000")
    old = switch(numpy_before)
    try:
        with memory.small_pages(reporting) as off:
            assert off and switch(False) is False  # off within
        assert switch(numpy_before) is numpy_before  # numpy's own setting is back
        with memory.small_pages(quiet) as off:
            assert not off and switch(numpy_before) is numpy_before  # left alone
    finally:
        switch(old)


def _faults_of_two_arrays() -> tuple[int, int]:
    """Page faults of filling a 200 MB array, freeing it and filling another."""
    import resource

    import numpy as np

    counts = []
    for _ in range(2):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        a = np.ones(25_000_000)
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del a
    return counts[0], counts[1]


THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.mark.skipif(THP_ENABLED.is_file() and "[always]" in THP_ENABLED.read_text(),
                    reason="huge pages for every mapping: faults do not count pages here")
def test_kept_memory_serves_the_next_array_from_what_the_last_one_freed() -> None:
    """Within, the second array reuses the first's pages (few faults); after, large blocks
    are fresh mappings again, so a freed array's pages are given back."""
    switch = memory._advice_switch()
    assert switch is not None
    old = switch(False)  # small pages: faults count pages, whatever this machine does
    try:
        with memory.kept_memory() as kept:
            assert kept, "glibc's allocator is what pgval runs on here"
            first, second = _faults_of_two_arrays()
        assert first > 10_000 and second < first / 10, (first, second)
        first, second = _faults_of_two_arrays()
        assert second > first / 2, (first, second)
    finally:
        switch(old)


_THREAD_THEN_MAIN = """
import contextlib, resource, threading
import numpy as np
from pgval.host import memory
memory._advice_switch()(False)  # small pages: faults count pages

@contextlib.contextmanager
def heap_kept_only():  # kept_memory without one_arena: the control
    libc = memory._glibc()
    libc.mallopt(memory._M_MMAP_MAX, 0)
    libc.mallopt(memory._M_TRIM_THRESHOLD, memory._KEEP_ALL)
    yield

held = []
with memory.kept_memory() if {one} else heap_kept_only():
    t = threading.Thread(target=lambda: held.append(np.ones(25_000_000)))
    t.start(); t.join()
    held.clear()  # freed, into the arena the thread took it from
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(25_000_000)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(THP_ENABLED.is_file() and "[always]" in THP_ENABLED.read_text(),
                    reason="huge pages for every mapping: faults do not count pages here")
def test_one_arena_lets_the_main_thread_reuse_what_a_thread_freed() -> None:
    """A 200 MB array a thread made and let go: with one arena the main thread's next array
    reuses its pages; with glibc's arena per thread (the control) it faults them in afresh.
    A process of its own: an arena a thread already has is never given up.
    :func:`memory.kept_memory` takes one arena for the threads started within."""
    import subprocess
    import sys

    def faults(one: bool) -> int:
        out = subprocess.run([sys.executable, "-c", _THREAD_THEN_MAIN.format(one=one)],
                             capture_output=True, text=True, check=True, timeout=120)
        return int(out.stdout.split()[-1])

    pages = 200_000_000 // 4096
    assert faults(False) > pages / 2  # the control: the instrument sees fresh pages
    assert faults(True) < pages / 10


_ARROW_THEN_NUMPY = """
import resource, time
import numpy as np
import pyarrow as pa
from pgval.host import memory
memory._advice_switch()(False)  # small pages: faults count pages

with memory.kept_memory():
    buf = pa.allocate_buffer(200_000_000)
    np.frombuffer(buf, dtype=np.uint8)[:] = 1  # touched: its pages are the process's
    del buf  # freed into the pool it came from
    time.sleep(0.2)  # past any delay before an allocator hands memory back
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a = np.ones(25_000_000)
    print(pa.default_memory_pool().backend_name,
          resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _python(code: str, pool: str | None) -> str:
    """The last line ``code`` prints in a fresh interpreter, pyarrow's pool chosen by
    ``ARROW_DEFAULT_MEMORY_POOL`` (None: not set)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != memory.ARROW_POOL_VAR}
    if pool is not None:
        env[memory.ARROW_POOL_VAR] = pool
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120, env=env)
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(THP_ENABLED.is_file() and "[always]" in THP_ENABLED.read_text(),
                    reason="huge pages for every mapping: faults do not count pages here")
def test_on_glibc_numpy_reuses_what_arrow_freed() -> None:
    """200 MB pyarrow allocated and let go: on glibc (within :func:`memory.kept_memory`)
    numpy's next array of that size reuses its pages; with the allocator pyarrow bundles
    (the control, where it has one) they are fresh."""
    pages = 200_000_000 // 4096
    name, faults = _python(_ARROW_THEN_NUMPY, "system").split()
    assert name == "system" and int(faults) < pages / 10, (name, faults)
    name, faults = _python(_ARROW_THEN_NUMPY, None).split()
    if name != "system":
        assert int(faults) > pages / 2, (name, faults)


def test_the_command_line_puts_arrow_on_glibc_where_the_guest_reports() -> None:
    """``pgval`` (its package :mod:`pgval.cli`) chooses pyarrow's pool before pyarrow is
    imported: glibc's on a reporting guest, pyarrow's own elsewhere; the processes it
    starts do not inherit the choice; a pool the user chose stays, for them too."""
    code = ("import os, pgval.cli, pyarrow as pa; print(pa.default_memory_pool().backend_name,"
            f" os.environ.get({memory.ARROW_POOL_VAR!r}))")
    own = _python("import pyarrow as pa; print(pa.default_memory_pool().backend_name)", None)
    assert _python(code, None) == ("system" if memory.reports_free_pages() else own) + " None"
    assert _python(code, own) == f"{own} {own}"


_CHOOSE = """
import os
from pathlib import Path
from pgval.host import memory
early = {early}
if early:
    import pyarrow
chose = memory.arrow_on_glibc(Path({balloons!r}))
import pyarrow as pa
print(chose, pa.default_memory_pool().backend_name, os.environ.get(memory.ARROW_POOL_VAR))
"""


def test_arrow_on_glibc_only_on_a_reporting_guest_before_pyarrow_and_not_over_the_user(
        tmp_path: Path) -> None:
    """Each condition in a fresh interpreter (the pool is fixed when pyarrow is imported):
    a guest that does not report, one that does, pyarrow imported already, a user's
    pool."""
    device = tmp_path / "virtio3"
    device.mkdir()
    own = _python("import pyarrow as pa; print(pa.default_memory_pool().backend_name)", None)

    def choose(bits: str, early: bool = False, pool: str | None = None) -> str:
        (device / "features").write_text(bits + "\n")
        return _python(_CHOOSE.format(early=early, balloons=str(tmp_path)), pool)

    reporting = "000001" + "0" * 34  # bit 5: free page reporting
    assert choose("0" * 40) == f"False {own} None"
    assert choose(reporting) == "True system None"
    if own != "system":
        assert choose(reporting, early=True) == f"False {own} None"
        assert choose(reporting, pool=own) == f"False {own} {own}"
