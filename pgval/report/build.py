"""``pgval report``'s entry point: load the runs, build the tables, draw the plots, render.

This is the one module that ties the others together (data → tables → formats, plus
plots); none of them imports it, so the package has no import cycle. The plots are
imported only when a report draws them: matplotlib takes a second to import and the
terminal, Markdown and CSV formats without ``plots_dir`` do not need it.
"""

from __future__ import annotations

import contextlib
import io
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from pgval.core.files import write_public
from pgval.report.data import (
    DASH,
    ReportError,
    RunData,
    Selection,
    group_runs,
    load_runs,
    opened,
    stored_run_columns,
)
from pgval.report.formats import (
    FORMATS,
    Format,
    render_csv,
    render_html,
    render_json,
    render_markdown,
    render_terminal,
)
from pgval.report.machines import machines_note
from pgval.report.tables import GROUP_KEYS, Column, ReportTable, Row, build_tables
from pgval.store.dbfile import plain_error


def build_report(db_path: Path | str, runs: Selection | Sequence[int] | None = None,
                 fmt: Format = "terminal", out: Path | None = None,
                 plots_dir: Path | None = None, *, console: Console | None = None,
                 run_plots: bool = True, width: int = 160,
                 progress: Callable[[str], None] | None = None) -> str | Path:
    """Render the report; returns the text, or ``out`` once the text is written there.

    ``runs``: a :class:`Selection` (default: all complete runs) or explicit run ids.
    ``plots_dir``: also write PNGs there (matrix + one per run unless ``run_plots`` is
    False; a run's figure already there and unchanged is kept) and link them (Markdown
    and HTML); without it, HTML inlines its plots (one self-contained page), rendering
    them in a temporary directory. ``console``: for ``terminal``, also print the tables
    there with colours. ``progress``: gets a line per plot drawn.
    """
    if fmt not in FORMATS:
        raise ReportError(f"unknown report format {fmt!r}; choose from {', '.join(FORMATS)}")
    selection = (runs if isinstance(runs, Selection) else
                 Selection() if runs is None else Selection(run_ids=tuple(runs)))
    try:
        with opened(db_path) as conn:
            text = _build(conn, str(db_path), selection, fmt, out, plots_dir, console,
                          run_plots, width, progress)
    except sqlite3.Error as exc:  # a damaged file, a table without a column pgval reads, …
        raise ReportError(str(plain_error(db_path, exc))) from exc
    except OSError as exc:  # the --plots folder cannot be made or written
        raise ReportError(f"cannot write the plots to {plots_dir}: {exc.strerror or exc} "
                          f"({exc.filename or plots_dir})") from exc
    if out is None:
        return text
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_public(out, text)
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out}: {exc.strerror or exc} "
                          f"({exc.filename or out})") from exc
    return out


def _build(conn: sqlite3.Connection, db_name: str, selection: Selection, fmt: str,
           out: Path | None, plots_dir: Path | None, console: Console | None,
           run_plots: bool, width: int, progress: Callable[[str], None] | None) -> str:
    every = load_runs(conn, replace(selection, include_unknown=True, include_unsealed=True))
    asked = selection.include_unsealed or selection.run_ids is not None
    apart = [r for r in every if r.held_apart is not None and not asked]
    listed = [r for r in every if asked or r.held_apart is None]
    loaded = [r for r in listed if selection.keeps(r)]
    left_out = len(listed) - len(loaded)
    if not every:
        raise ReportError(f"no runs in {db_name} match ({selection.describe()})")
    if not loaded:
        raise ReportError(_nothing_kept(db_name, selection, left_out, apart))
    tables = build_tables(loaded, stored_run_columns(conn), listed)
    if apart:
        tables.append(held_apart_table(apart))
    unknown = sum(not r.valid for r in loaded)
    trials = sum(r.oir_trial for r in loaded)
    cells = group_runs([r for r in loaded if not r.oir_trial])
    header = (f"{len(loaded) - trials} runs in {len(cells)} groups"
              + (f" and {trials} OIR trial{'s' if trials != 1 else ''}" if trials else "")
              + f" from {db_name} ({selection.describe()}); mean ± sample stdev over "
              f"repetitions, n = runs; generated {time.strftime('%Y-%m-%d %H:%M:%S')}")
    machines = machines_note(loaded)
    if machines:
        header += f"; {machines}"
    if left_out:
        header += (f"; {left_out} unknown run{'s' if left_out != 1 else ''} left out "
                   "(use --include-unknown)")
    elif unknown:
        header += f"; {unknown} unknown run{'s' if unknown != 1 else ''} included"
    if apart:
        header += (f"; {len(apart)} imported run{'s' if len(apart) != 1 else ''} held apart, "
                   "not in any table but the last (use --include-unsealed)")

    images: list[tuple[str, Path]] = []
    run_images: list[tuple[str, Path]] = []
    with contextlib.ExitStack() as stack:
        if plots_dir is not None or fmt == "html":
            from pgval.report.plots import plot_report, run_caption

            target = (Path(plots_dir) if plots_dir is not None else
                      Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgval-"))))
            # Every listed run, unknown ones too: their plot shows why they are unknown.
            shown = listed if run_plots else []
            matrix, paths = plot_report(db_name, [run.id for run in shown], target,
                                        selection, progress)
            images = [(f"matrix: {path.stem.removeprefix('matrix-')}", path)
                      for path in matrix]
            run_images = [(run_caption(run), path)
                          for run, path in zip(shown, paths, strict=True)]
        if fmt == "terminal":
            rec = Console(record=True, width=width, file=io.StringIO(), color_system=None)
            render_terminal(tables, rec, header)
            if console is not None:
                render_terminal(tables, console, header)
            if plots_dir is not None:
                note = f"plots: {len(images) + len(run_images)} PNGs in {plots_dir}"
                rec.print(note)
                if console is not None:
                    console.print(note)
            text = rec.export_text()
        elif fmt == "markdown":
            base = Path(out).parent if out is not None else None
            refs = [(c, _relative(p, base)) for c, p in [*images, *run_images]]
            text = render_markdown(tables, header, refs)
        elif fmt == "csv":
            text = render_csv(tables)
        elif fmt == "json":
            text = render_json(tables, header)
        else:  # with --plots, link the PNGs; else inline them before the folder goes
            base = Path(out).parent if out is not None else Path.cwd()
            text = render_html(tables, header, images, run_images,
                               link=(lambda p: _relative(p, base)) if plots_dir else None)
    return text


def _nothing_kept(db_name: str, selection: Selection, unknown: int,
                  apart: Sequence[RunData]) -> str:
    """Why a report has no run to show: every match unknown, imported, or both."""
    why = [f"{n} {what}" for n, what in (
        (unknown, "unknown, not evidence (--include-unknown)"),
        (len(apart), "imported, with no seal kept at the end of the run "
                     "(--include-unsealed)")) if n]
    return (f"all {unknown + len(apart)} runs in {db_name} that match "
            f"({selection.describe()}) are left out: {' and '.join(why)}")


def held_apart_table(runs: Sequence[RunData]) -> ReportTable:
    """The runs kept out of every other table for their evidence (imports), with why."""
    cols = [Column("verdict", "guarantee"), Column("validity", "validity"),
            Column("held apart because", "why")]
    rows = [Row({"run": str(r.id), "topology": r.row.get("topology") or DASH,
                 "pg": r.row.get("pg") or DASH, "fault": r.row.get("fault") or DASH},
                1, [r.row.get("guarantee") or DASH, r.validity_text, r.held_apart])
            for r in runs]
    return ReportTable("held_apart", "Runs held apart (not in the tables above)",
                       [("run", "run"), *GROUP_KEYS], cols, rows,
                       "Imported runs (`pgval recheck RUN_DIR --store`): no seal kept at the "
                       "end of the run vouches for their evidence. --include-unsealed puts "
                       "them in the tables; `pgval recheck RUN --db DB` re-checks one.")


def _relative(path: Path, base: Path | None) -> str:
    if base is None:
        return path.as_posix()
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()
