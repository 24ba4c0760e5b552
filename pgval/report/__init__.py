"""``pgval report``: aggregate stored runs over repetitions into the paper's tables.

Runs are grouped by topology × PG × fault and run shape (rate, phase length, window,
crash point, deployment: runs of different shapes are different experiments, never
averaged together; a "run shape" column names what differs). Every number is the mean
over the group's repetitions with the sample standard deviation beside it. OIR trials
(rate probes) have a table of their own and stay out of the fault tables. The same table
model renders to a terminal (rich), GitHub Markdown, one tidy CSV, or one self-contained
HTML page with the plots inlined, so every format shows the same numbers.

The package, one job per module, each importing only the ones before it:

* :mod:`.data` — open the database read-only, load runs, group them, mean ± stdev;
* :mod:`.tables` — tables (a)–(g), the run list and (h) every cell run by run, as a model
  independent of format;
* :mod:`.formats` — that model as terminal, Markdown, CSV or HTML text;
* :mod:`.plots` — matplotlib figures (reads :mod:`.data` only): one run over time
  (``plots/timeline.py``), the matrix (``plots/matrix.py``), shared PNG writing;
* :mod:`.build` — :func:`build_report`, the entry point that ties them together.

Runs whose validity is ``unknown`` stay out of every aggregate unless ``include_unknown``
is set; the header says how many were left out, and the run list shows each with its
first reason. tests/test_imports.py keeps the package free of import cycles.
"""

from __future__ import annotations

from pgval.report.build import build_report
from pgval.report.data import Group, ReportError, RunData, Selection, Stat, group_runs, load_runs
from pgval.report.formats import FORMATS, Format

__all__ = ["FORMATS", "Format", "Group", "ReportError", "RunData", "Selection", "Stat",
           "build_report", "group_runs", "load_runs"]
