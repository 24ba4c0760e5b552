"""A report's figures at once: drawn in parallel, a run's skipped when already drawn.

A report of a grid has a hundred runs; each timeline takes about half a second of one core
to draw. So :func:`plot_report` reads every run in this process (cheap SQL), and draws only
the runs whose figure is not already in the folder — ``.plot-keys.json`` there maps each
PNG to the digest of what it shows (:meth:`RunPlot.key`), so a report made again after one
new run draws one figure — over a pool of worker processes (forked: matplotlib is already
imported), beside the matrix figures. ``progress`` gets one line per figure.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pgval.core.files import write_private_json
from pgval.report.data import Selection
from pgval.report.plots.matrix import plot_matrix
from pgval.report.plots.timeline import RunPlot, draw_run, load_run_plot

#: The folder's record of which figure each PNG holds.
KEYS_FILE = ".plot-keys.json"

Progress = Callable[[str], None]


def _read_keys(folder: Path) -> dict[str, str]:
    try:
        keys = json.loads((folder / KEYS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in keys.items()} if isinstance(keys, dict) else {}


def default_workers() -> int:
    """One drawing process per core (the report's own process reads and waits)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


def plot_report(db: Path | str, run_ids: Sequence[int], folder: Path,
                selection: Selection | None = None, progress: Progress | None = None,
                workers: int | None = None) -> tuple[list[Path], list[Path]]:
    """The matrix figures (:func:`plot_matrix` of ``selection``) and ``run-<id>.png`` for
    every run of ``run_ids`` (in that order) in ``folder``; ``db`` is a path, which each
    drawing process opens itself."""
    folder.mkdir(parents=True, exist_ok=True)
    known = _read_keys(folder)
    keys: dict[str, str] = {}
    todo: list[tuple[RunPlot, Path]] = []
    paths = []
    total = len(run_ids)
    for i, run_id in enumerate(run_ids, 1):
        data = load_run_plot(db, run_id)
        path = folder / f"run-{run_id}.png"
        key = keys[path.name] = data.key()
        paths.append(path)
        if known.get(path.name) == key and path.is_file():
            if progress:
                progress(f"plot {i}/{total}: {path.name} (unchanged, kept)")
        else:
            todo.append((data, path))
    done = total - len(todo)
    workers = min(workers or default_workers(), len(todo) + 1)
    with contextlib.ExitStack() as stack:
        pool = (stack.enter_context(ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("fork")))
            if workers > 1 else None)

        def submit(fn: Callable[..., Any], *args: Any) -> Future[Any]:
            if pool is not None:
                return pool.submit(fn, *args)
            future: Future[Any] = Future()
            future.set_result(fn(*args))
            return future

        # The matrix first: three wide figures, the longest job.
        matrix = submit(plot_matrix, db, folder / "matrix-", selection)
        futures = [submit(draw_run, d, p) for d, p in todo]
        for future in futures:
            path = future.result()
            done += 1
            if progress:
                progress(f"plot {done}/{total}: {path.name}")
        matrix_paths: list[Path] = matrix.result()
        if progress:
            for path in matrix_paths:
                progress(f"plot {path.name}")
    write_private_json(folder / KEYS_FILE, {**known, **keys}, indent=0)
    return matrix_paths, paths
