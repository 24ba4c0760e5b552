"""Fresh memory on a virtual machine that hands free memory back: huge pages off, and
freed memory kept in the process while a run's records are turned into a verdict.

numpy advises the kernel to back every array of 4 MiB or more with transparent huge pages
(``madvise(MADV_HUGEPAGE)``). A huge page is a free 2 MiB block, and on a virtual machine
whose balloon reports free pages to its host (virtio's free page reporting), those blocks
are exactly what the guest has handed back: the host discarded their memory, and each
huge-page fault waits while the host supplies and zeroes 2 MiB again. Small pages come
first from memory the guest freed a moment ago and never reported. Measured on the 2-core
machine here (docs/performance.md, "Huge pages on a reporting guest"): a fresh 1 GB array
filled in 5.0 s with the advice and 0.4 s without; the kernel never stalled on compaction
(``compact_stall`` 0), so the cost is the host's. The read-back, the decoding of inputs and
the validation allocate a few GB of short-lived arrays, so pgval runs them without the
advice where the guest reports; elsewhere numpy keeps its own setting.

Small pages are cheap only while the guest has memory it freed a moment ago: a read-back of
10M inputs holds ~2 GB and its validation allocates ~6 GB of arrays of 40–160 MB, which
glibc maps fresh for each and unmaps at once (above its 32 MiB ceiling for keeping
memory), so most of them come from reported pages too (8–28 µs a 4 KiB page here, against
~1.7 µs for a page freed a moment ago). :func:`kept_memory` has glibc serve them from its
heap and keep what is freed for the next array (a fault is then paid once per page the
process holds, not once per array); memory goes back to the system when it ends.
:func:`one_arena` has every thread allocate from the arena the main thread reuses.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

BALLOONS = Path("/sys/bus/virtio/drivers/virtio_balloon")
#: The virtio balloon's feature bit for free page reporting (VIRTIO_BALLOON_F_REPORTING).
REPORTING_BIT = 5


#: pyarrow's choice of allocator, read once, when pyarrow is imported.
ARROW_POOL_VAR = "ARROW_DEFAULT_MEMORY_POOL"


def arrow_on_glibc(balloons: Path = BALLOONS) -> bool:
    """Where the guest reports free pages, pyarrow in this process allocates with glibc's
    ``malloc`` (its "system" pool); returns whether it does. It must run before pyarrow is
    imported, which fixes the pool for the process (later, it returns False and changes
    nothing). A pool the user chose (``ARROW_DEFAULT_MEMORY_POOL``) stays. Only this
    process: the variable is gone again once pyarrow has read it, so the processes pgval
    starts (Spark's daemons and executors, the job's driver) keep the allocator they would
    have had, and what a run measures is not changed by it.

    Why: the allocator pyarrow bundles (mimalloc) hands freed memory back to the kernel in
    large blocks within milliseconds, the blocks a reporting guest hands on to its host, so
    its next allocations fault in pages the host must supply again; and memory it holds,
    numpy cannot reuse. On glibc, a parsed block freed within :func:`kept_memory` is the
    next array's memory. Measured (docs/performance.md, "Arrow's memory on glibc"): the
    system time of the read-back and of records → columns of 10M inputs fell by 0.8–1.6 s
    each; the validation then sometimes pays for the fresh memory instead."""
    if ARROW_POOL_VAR in os.environ or not reports_free_pages(balloons):
        return False
    os.environ[ARROW_POOL_VAR] = "system"
    try:
        import pyarrow as pa

        return bool(pa.default_memory_pool().backend_name == "system")
    finally:
        del os.environ[ARROW_POOL_VAR]


def reports_free_pages(balloons: Path = BALLOONS) -> bool:
    """Whether a virtio balloon of this machine hands free pages back to its host: each
    device's ``features`` file is its feature bits as a string of 0s and 1s, bit 0 first."""
    try:
        devices = list(balloons.glob("virtio*"))
    except OSError:
        return False
    for device in devices:
        with contextlib.suppress(OSError):
            bits = (device / "features").read_text().strip()
            if len(bits) > REPORTING_BIT and bits[REPORTING_BIT] == "1":
                return True
    return False


def _advice_switch() -> Callable[[bool], bool] | None:
    """numpy's switch of its huge-page advice (returns the old value), where it has one."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        with contextlib.suppress(ImportError, AttributeError):
            return importlib.import_module(module)._set_madvise_hugepage  # type: ignore[no-any-return]
    return None


@contextlib.contextmanager
def small_pages(balloons: Path = BALLOONS) -> Iterator[bool]:
    """Within: numpy gives no huge-page advice where the guest reports free pages (yields
    whether it turned the advice off); numpy's own setting is back after."""
    switch = _advice_switch()
    if switch is None or not reports_free_pages(balloons):
        yield False
        return
    before = switch(False)
    try:
        yield True
    finally:
        switch(before)


#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -3, -4, -8
#: What glibc's own thresholds reach after the first large block is freed (a mallopt
#: freezes them, so they are set to where they would have settled): blocks up to 32 MiB
#: from the heap, its top given back above 64 MiB; and its default count of mappings.
_SETTLED_MMAP, _SETTLED_TRIM, _DEFAULT_MMAP_MAX = 32 << 20, 64 << 20, 65536
#: The largest trim threshold mallopt takes (a C int): the heap's top is never given back.
_KEEP_ALL = 2 ** 31 - 1


def _glibc() -> ctypes.CDLL | None:
    """This process's glibc, where its allocator is glibc's (mallopt and malloc_trim)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


def one_arena() -> bool:
    """Threads that start from now on allocate from glibc's main arena, as the main thread
    does (returns whether it could); for the rest of the process. A thread of its own arena
    keeps what it freed for itself: the Java reader's frame thread holds a read's values
    (~750 MB for 10M inputs), and once they were let go the validation on the main thread
    could not use that memory and faulted in ~1 GB afresh (docs/performance.md). The cost,
    threads waiting for one arena's lock, was not measured: pgval's process has few threads
    that allocate at once (Kafka clients' threads, the reader's frame thread).
    It holds where no thread has had an arena of its own yet: one that has keeps it, and
    its arena passes to a later thread when it ends. So the CLI sets this first thing;
    :func:`kept_memory` sets it too, and neither undoes it (one arena holds no memory
    back)."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(_M_ARENA_MAX, 1))


@contextlib.contextmanager
def kept_memory() -> Iterator[bool]:
    """Within: glibc serves large blocks from its heap instead of fresh mappings and keeps
    what is freed for the next request (yields whether it could); after, it maps large
    blocks again and hands the free memory back to the system."""
    libc = _glibc()
    if libc is None:
        yield False
        return
    one_arena()  # the reader's thread, started within, frees into the arena that reuses it
    kept = bool(libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_ALL))
    try:
        yield kept
    finally:  # also after half of it took: never left without mappings
        libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
        libc.mallopt(_M_MMAP_THRESHOLD, _SETTLED_MMAP)
        libc.mallopt(_M_TRIM_THRESHOLD, _SETTLED_TRIM)
        libc.malloc_trim(0)


@contextlib.contextmanager
def bulk_arrays() -> Iterator[None]:
    """:func:`small_pages` and :func:`kept_memory`: how pgval turns millions of records
    into a verdict (the read-back, the decoding, the validation)."""
    with small_pages(), kept_memory():
        yield
