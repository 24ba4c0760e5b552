"""A matrix of runs, like the paper's Figures 8/11/14 (:func:`plot_matrix`).

Reliability, reliable throughput and latency per phase by fault, one panel per
topology × PG, mean over repetitions with stdev error bars. Throughput panels share a y
axis per topology only (SST at 12k ev/s beside MST at 1.75k would flatten MST's bars); a
latency with no output in the phase is labelled "undefined", not drawn as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pgval.core.schema import PHASES
from pgval.report.data import (
    DASH,
    Group,
    ReportError,
    RunData,
    Selection,
    Stat,
    group_runs,
    load_runs,
    opened,
)
from pgval.report.plots.png import DPI, save_png, style

#: The stronger colour of each phase's bars.
BAR = {"control": "#41ab5d", "failure": "#e6550d", "recovery": "#3182bd", "run": "#8c8c8c"}
SHORT_FAULT = {"none": "no fault", "delay-lt-timeout": "PD < TO", "delay-gt-timeout": "PD > TO",
               "crash": "crash", "driver-crash": "driver crash"}


@dataclass(frozen=True)
class BarSeries:
    """One bar per fault cluster: a label, a colour and how to read its value from a run."""

    label: str
    colour: str
    value: Callable[[RunData], float | None]
    #: Optional second value drawn as a marker on the bar (e.g. p99 over p50 bars).
    marker: Callable[[RunData], float | None] | None = None
    #: Whether a run's value is undefined (a measurement: no output in the phase).
    undefined: Callable[[RunData], bool] | None = None


#: A bar cluster: a fault, and the run shape when shapes differ (never averaged together).
Cluster = tuple[str | None, str]


def _cluster(g: Group) -> Cluster:
    return g.key[2], g.shape_label


def _faults_in(groups: list[Group]) -> list[Cluster]:
    seen: list[Cluster] = []
    for g in groups:
        if _cluster(g) not in seen:
            seen.append(_cluster(g))
    return seen


def _panels(groups: list[Group]) -> list[tuple[str | None, str | None]]:
    out: list[tuple[str | None, str | None]] = []
    for g in groups:
        if g.key[:2] not in out:
            out.append(g.key[:2])
    return out


def _bar_panel(ax: Axes, groups: list[Group], faults: list[Cluster],
               series: Sequence[BarSeries], scale: float, annotate: bool,
               fmt: str, cap: float | None = None) -> list[float]:
    """Grouped bars (one cluster per fault); returns every plotted mean ± sd for the y range."""
    width = 0.8 / len(series)
    by_fault = {_cluster(g): g for g in groups}
    extent: list[float] = []
    for j, bs in enumerate(series):
        xs, means, sds, tops, texts = [], [], [], [], []
        marks: list[tuple[float, float]] = []
        for i, fault in enumerate(faults):
            g = by_fault.get(fault)
            if g is None:
                continue
            xpos = i - 0.4 + width * (j + 0.5)
            st = Stat.of_values((bs.value(r) for r in g.runs), of=g.n)
            if st.mean is None:  # e.g. no outputs at all in that phase: say so, not 0
                undefined = bs.undefined is not None and any(map(bs.undefined, g.runs))
                ax.annotate("undefined" if undefined else "n/a", (xpos, 0), xytext=(0, 2),
                            textcoords="offset points",
                            ha="center", va="bottom", fontsize=6.5, rotation=90,
                            color="#777777", annotation_clip=False)
                continue
            xs.append(xpos)
            means.append(st.mean * scale)
            sds.append((st.sd or 0.0) * scale)
            tops.append(means[-1] + sds[-1] if cap is None else min(cap, means[-1] + sds[-1]))
            texts.append(fmt.format(means[-1]))
            if bs.marker is not None:
                mk = Stat.of_values((bs.marker(r) for r in g.runs), of=g.n)
                if mk.mean is not None:
                    marks.append((xpos, mk.mean * scale))
                    tops[-1] = max(tops[-1], marks[-1][1])
                    texts[-1] += " / " + fmt.format(marks[-1][1])
        if not xs:
            continue
        # Whiskers stop at 0 (and at ``cap``, e.g. 100 %): values beyond are impossible. A
        # negative mean (outputs stamped before their closing input: clocks of other
        # engines' brokers, constructed runs) has its whisker whole.
        lower = [sd if m < 0 else min(sd, m) for m, sd in zip(means, sds, strict=True)]
        upper = [sd if cap is None else max(0.0, min(sd, cap - m))
                 for m, sd in zip(means, sds, strict=True)]
        ax.bar(xs, means, width=width * 0.92, color=bs.colour, yerr=[lower, upper],
               capsize=2.5,
               error_kw={"elinewidth": 0.9, "ecolor": "#222222"}, zorder=3)
        extent += [m - lo for m, lo in zip(means, lower, strict=True)]
        extent += [m + up for m, up in zip(means, upper, strict=True)]
        if marks:
            mx, my = zip(*marks, strict=True)
            ax.scatter(mx, my, marker="_", s=90, linewidths=2.2, color="#222222", zorder=5)
            extent += list(my)
        if annotate:
            for xv, text, top in zip(xs, texts, tops, strict=True):
                ax.annotate(text, (xv, top), xytext=(0, 3),
                            textcoords="offset points", ha="center", va="bottom",
                            fontsize=6.5, rotation=90, color="#333333")
    labels = []
    for fault, shape in faults:
        g = by_fault.get((fault, shape))
        name = SHORT_FAULT.get(fault or "", fault or DASH) + (f"\n{shape}" if shape else "")
        labels.append(f"{name}\nn={g.n}" if g else f"{name}\n(no runs)")
    ax.set_xticks(range(len(faults)), labels)
    ax.set_xlim(-0.6, len(faults) - 0.4)
    ax.grid(True, axis="y", color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    ax.spines["right"].set_visible(False)
    return extent


def _matrix_figure(groups: list[Group], title: str, ylabel: str, series: Sequence[BarSeries],
                   scale: float, fmt: str, path: Path, percent: bool = False,
                   extra_handles: Sequence[Any] = (), legend_title: str = "",
                   per_topology: bool = False) -> Path:
    """One panel per topology × PG; ``per_topology``: each topology's panels share a y
    axis of their own (rates differ by topology), else all panels share one."""
    panels = _panels(groups)
    faults = _faults_in(groups)
    annotate = len(faults) * len(series) <= 24
    with plt.rc_context(style()):
        ncols = min(2, len(panels))  # SST/MST × A1/E1 → a 2 × 2 grid, not one long strip
        nrows = -(-len(panels) // ncols)
        panel_w = max(4.5, 0.4 * len(faults) * len(series))
        fig = plt.figure(figsize=(min(20.0, 1.0 + ncols * panel_w), 1.3 + 3.6 * nrows),
                         dpi=DPI, layout="constrained")
        grid = fig.subplots(nrows, ncols, sharey=not per_topology, squeeze=False)
        axes = grid.ravel()
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        extents: dict[str | None, list[float]] = {}
        for ax, (topo, pg) in zip(axes, panels, strict=False):
            sub = [g for g in groups if g.key[:2] == (topo, pg)]
            extents.setdefault(topo if per_topology else None, []).extend(
                _bar_panel(ax, sub, faults, series, scale, annotate, fmt,
                           cap=100.0 if percent else None))
            ax.set_title(f"{(topo or DASH).upper()} {(pg or DASH).upper()}")
        headroom = (0.24 if any(bs.marker for bs in series) else 0.16) if annotate else 0.05
        for ax, (topo, _) in zip(axes, panels, strict=False):
            extent = extents[topo if per_topology else None]
            hi = max(extent, default=1.0) or 1.0
            lo = 0.0
            label = ylabel
            if percent:
                # Reliability near 100 % everywhere: zoom in (and say so), or nothing shows.
                low = min(extent, default=100.0)
                if low >= 90.0:
                    lo = max(0.0, float(np.floor(low - 0.5)))
                    label += f" — axis starts at {lo:g} %"
                hi = max(hi, 100.0)
            ax.set_ylim(lo, hi + headroom * (hi - lo))
            if per_topology or ax in grid[:, 0]:
                ax.set_ylabel(label)
        handles = [Patch(color=bs.colour, label=bs.label) for bs in series]
        handles += list(extra_handles)
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles),
                   frameon=False, title=legend_title or "bars: mean over repetitions; "
                                                         "whiskers: ±1 stdev",
                   title_fontsize=8)
        fig.suptitle(title, fontsize=11)
        save_png(fig, path)
        plt.close(fig)
    return path


def _phase_column(phase: str, column: str) -> Callable[[RunData], float | None]:
    return lambda r: r.phase_value(phase, column)


def _latency_column(phase: str, column: str) -> Callable[[RunData], float | None]:
    return lambda r: (r.phases.get(phase) or {}).get(column)


def plot_matrix(db: Path | str | Any, path_prefix: Path | str,
                selection: Selection | None = None) -> list[Path]:
    """Write ``<prefix>reliability.png``, ``<prefix>throughput.png``, ``<prefix>latency.png``.

    ``path_prefix`` is prepended literally (``plots/sst-`` → ``plots/sst-reliability.png``);
    an existing directory gets ``matrix-…`` files inside it.
    """
    with opened(db) as conn:
        runs = load_runs(conn, selection or Selection())
    if not runs:
        raise ReportError("no runs match the selection; nothing to plot")
    groups = group_runs([r for r in runs if not r.oir_trial])
    if not groups:  # OIR trials only: their own table, no fault matrix
        return []
    prefix = Path(path_prefix)
    base = str(prefix / "matrix-") if prefix.is_dir() else str(prefix)
    Path(base).parent.mkdir(parents=True, exist_ok=True)

    rel = [BarSeries(p, BAR[p], _phase_column(p, "reliability")) for p in PHASES]
    rel.append(BarSeries("whole run", BAR["run"], lambda r: r.row.get("reliability")))
    tp = [BarSeries(p, BAR[p], _phase_column(p, "throughput")) for p in PHASES]
    lat = [BarSeries(p, BAR[p], _latency_column(p, "latency_p50_s"),
                     _latency_column(p, "latency_p99_s"),
                     lambda r, p=p: r.latency_undefined(p) is not None) for p in PHASES]
    p99 = Line2D([], [], marker="_", ls="", color="#222222", ms=10, mew=2.2,
                 label="p99 (mean)")
    return [
        _matrix_figure(groups, "Reliability by fault and phase", "reliability (%)", rel,
                       100.0, "{:.2f}", Path(base + "reliability.png"), percent=True),
        _matrix_figure(groups, "Reliable throughput by fault and phase (y axis per topology)",
                       "reliable throughput (events/s)", tp, 1.0, "{:,.0f}",
                       Path(base + "throughput.png"), per_topology=True),
        _matrix_figure(groups, "Latency by fault and phase (paper's definition): p50 bars, "
                       "p99 markers", "latency (s)", lat, 1.0, "{:.2f}",
                       Path(base + "latency.png"), extra_handles=[p99],
                       legend_title="mean over repetitions; whiskers: ±1 stdev of p50; "
                                    "labels: p50 / p99"),
    ]
