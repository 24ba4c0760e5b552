"""Matplotlib figures of stored runs (PNG, 150 dpi, Agg backend, no display needed).

* :func:`plot_run` (:mod:`.timeline`) — one run over time, like Figures 9/12/15;
* :func:`plot_matrix` (:mod:`.matrix`) — a matrix of runs, like Figures 8/11/14;
* :func:`plot_report` (:mod:`.batch`) — a report's figures in parallel, unchanged runs kept;
* :mod:`.png` — the DPI, style and PNG writing both share.

They read runs through :mod:`pgval.report.data` only, so the report's entry point can
draw them without an import cycle. The Agg backend is chosen here, before any submodule
imports pyplot: Python runs a package's ``__init__`` before any of its modules.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from pgval.report.plots.batch import plot_report  # noqa: E402
from pgval.report.plots.matrix import plot_matrix  # noqa: E402
from pgval.report.plots.png import save_png  # noqa: E402
from pgval.report.plots.timeline import plot_run, run_caption  # noqa: E402

__all__ = ["plot_matrix", "plot_run", "plot_report", "run_caption", "save_png"]
