"""Matplotlib figures of stored runs (PNG, 150 dpi, Agg backend, no display needed).

Reads runs through :mod:`pgval.report.data` only, so the report's entry point can draw
them without an import cycle; importing this module selects the Agg backend.

* :func:`plot_run` — one run over time, like the paper's Figures 9/12/15: input
  rate, reliable throughput and output rate (top), latency p50/max (bottom),
  phases shaded, the fault's *actual* injection and removal marked (they lag the
  intended T2/T3 by however long the fault mechanism took).
* :func:`plot_matrix` — a matrix of runs, like Figures 8/11/14: reliability,
  reliable throughput and latency per phase by fault, one panel per
  topology × PG, mean over repetitions with stdev error bars.
"""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pgval.report.data import (  # noqa: E402
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
from pgval.schema import PHASES  # noqa: E402

DPI = 150
#: Light shading of the timeline, and the stronger colour of each phase's bars.
SHADE = {"warm-up": "#ececec", "control": "#e3f4dc", "failure": "#fde0d4",
         "recovery": "#dbe9f6"}
BAR = {"control": "#41ab5d", "failure": "#e6550d", "recovery": "#3182bd", "run": "#8c8c8c"}
SHORT_FAULT = {"none": "no fault", "delay-lt-timeout": "PD < TO", "delay-gt-timeout": "PD > TO",
               "crash": "crash", "driver-crash": "driver crash"}
C_INPUT = "#333333"
C_RELIABLE = "#1f77b4"
C_RELIABLE_BIN = "#a9cce8"  # opaque, so bins look the same over every phase's shading
C_OUTPUT = "#9467bd"
C_P50 = "#2ca02c"
C_MAX = "#d62728"


def save_png(fig: Figure, path: Path | str) -> Path:
    """Save at DPI as a 256-colour PNG: looks the same, a third of the bytes (HTML inlines it)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png")
    try:
        from PIL import Image

        buf.seek(0)
        with Image.open(buf) as im:
            im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(
                out, format="PNG", optimize=True, dpi=(DPI, DPI))
    except ImportError:  # Pillow comes with matplotlib, but stay correct without it
        out.write_bytes(buf.getvalue())
    return out


def _style() -> dict[str, Any]:
    return {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
            "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.spines.top": False}


def run_caption(run: RunData) -> str:
    """"run 7: SST A1, fault crash (seed 1, repeat 0) — at-least-once, reliability 98.08 %"."""
    r = run.row
    text = f"run {run.id}: {(r.get('topology') or DASH).upper()}"
    if r.get("pg"):
        text += f" {r['pg'].upper()}"
    if r.get("fault"):
        text += f", fault {r['fault']}"
    elif r.get("kind"):
        text += f" ({r['kind']})"
    extra = [f"{k} {r[k]}" for k in ("seed", "repeat") if r.get(k) is not None]
    if extra:
        text += f" ({', '.join(extra)})"
    if r.get("guarantee"):
        text += f" — {r['guarantee']}"
    if r.get("reliability") is not None:
        text += f", reliability {100 * r['reliability']:.2f} %"
    if r.get("status") not in (None, "complete"):
        text += f" [{r['status']}]"
    return text


# ---------------------------------------------------------------------------- one run
def _series(conn: sqlite3.Connection, run_id: int) -> dict[str, np.ndarray]:
    cols = ("t_ms", "inputs", "outputs", "reliable", "latency_p50_s", "latency_max_s")
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    rows = [] if "series" not in names else conn.execute(
        f"SELECT {', '.join(cols)} FROM series WHERE run_id = ? ORDER BY t_ms",
        [run_id]).fetchall()
    arr = np.array(rows, dtype=float).reshape(-1, len(cols)) if rows else np.zeros((0, 6))
    return {c: arr[:, k] for k, c in enumerate(cols)}


def _origin(run: RunData, series: dict[str, np.ndarray]) -> tuple[float, str]:
    """T1 (generators start) in ms and how the x axis is labelled."""
    started = (run.summary.get("generator") or {}).get("started_ms")
    if started:
        return float(started), "time since T1, generators start (s)"
    try:
        params = json.loads(run.row.get("params") or "{}")
    except ValueError:
        params = {}
    if run.row.get("t_start") is not None and params.get("warmup_seconds") is not None:
        return (float(run.row["t_start"]) - 1000.0 * float(params["warmup_seconds"]),
                "time since T1, generators start (s)")
    busy = np.flatnonzero(series["inputs"] > 0)
    if len(busy):
        return float(series["t_ms"][busy[0]]), "time since first input (s)"
    if run.row.get("t_start") is not None:
        return float(run.row["t_start"]), "time since control start (s)"
    return (float(series["t_ms"][0]) if len(series["t_ms"]) else 0.0), "time (s)"


def _trailing_mean(values: np.ndarray, k: int) -> np.ndarray:
    """Mean of the last ``k`` bins: causal, so recovery never shows before it happened."""
    if k <= 1 or len(values) == 0:
        return values.astype(float)
    csum = np.cumsum(np.r_[0.0, values.astype(float)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - k, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def _gapped(x: np.ndarray, y: np.ndarray, max_gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Points with a value, with a NaN inserted where they are more than ``max_gap`` apart.

    Outputs come in micro-batch bursts, so a few empty seconds are normal and are
    bridged; a longer silence (an outage) breaks the line instead of hiding it.
    """
    ok = ~np.isnan(y)
    xs, ys = x[ok], y[ok]
    if len(xs) < 2:
        return xs, ys
    breaks = np.flatnonzero(np.diff(xs) > max_gap) + 1
    return (np.insert(xs, breaks, np.nan), np.insert(ys, breaks, np.nan))


def _fault_times(run: RunData) -> dict[str, float]:
    """Actual inject/remove times; none for fault-free runs (their log only marks T2/T3)."""
    out: dict[str, float] = {}
    if (run.row.get("fault") or "none") == "none":
        return out
    for e in run.fault_log:
        if e.get("step") in ("inject", "remove") and e.get("actual_ms") is not None:
            out.setdefault(e["step"], float(e["actual_ms"]))
    return out


def _shade(ax: Axes, spans: list[tuple[str, float, float]]) -> None:
    for name, a, b in spans:
        if b > a:
            ax.axvspan(a, b, color=SHADE[name], zorder=0, lw=0)


def plot_run(db: Path | str | Any, run_id: int, path: Path | str) -> Path:
    """Write the timeline figure of one run to ``path`` (PNG) and return the path."""
    with opened(db) as conn:
        runs = load_runs(conn, Selection(run_ids=(int(run_id),), status=None))
        if not runs:
            raise ReportError(f"no run {run_id} in the database")
        run = runs[0]
        s = _series(conn, run.id)
    t0, xlabel = _origin(run, s)
    x = (s["t_ms"] - t0) / 1000.0 + 0.5  # bin centres
    end = float(x[-1] + 0.5) if len(x) else 1.0
    begin = min(0.0, float(x[0] - 0.5)) if len(x) else 0.0

    spans: list[tuple[str, float, float]] = []
    r = run.row
    if r.get("t_start") is not None and r.get("t2") is not None and r.get("t3") is not None:
        start, t2, t3 = ((float(r[k]) - t0) / 1000.0 for k in ("t_start", "t2", "t3"))
        spans = [("warm-up", begin, start), ("control", start, t2), ("failure", t2, t3),
                 ("recovery", t3, max(end, t3))]
    faults = {k: (v - t0) / 1000.0 for k, v in _fault_times(run).items()}

    window_s = max(1, int(round((r.get("window_ms") or 1000) / 1000)))
    k = max(5, window_s)
    reliable_mean = _trailing_mean(s["reliable"], k)

    with plt.rc_context(_style()):
        fig: Figure = plt.figure(figsize=(12, 7.5), dpi=DPI, layout="constrained")
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
        for ax in (top, bottom):
            _shade(ax, spans)
            ax.grid(True, axis="y", color="#dddddd", lw=0.6)
            ax.set_axisbelow(True)

        handles: list[Any] = []
        if len(x):
            width = 1.0
            bars = top.bar(x, s["reliable"], width=width, color=C_RELIABLE_BIN, lw=0,
                           zorder=2, label="reliable IDs per 1 s bin")
            handles.append(bars)
            (line,) = top.plot(x, reliable_mean, color=C_RELIABLE, lw=2, zorder=4,
                               label=f"reliable throughput (trailing {k} s mean)")
            handles.append(line)
            (line,) = top.plot(x, s["inputs"], color=C_INPUT, lw=1.3, zorder=5,
                               label="input rate")
            handles.append(line)
            # Bursts of a micro-batch dwarf the rates; clip them so the rates stay readable.
            scale = max(float(np.nanmax(s["inputs"], initial=0)),
                        float(np.nanmax(reliable_mean, initial=0)), 1.0)
            if float(np.nanmax(s["reliable"], initial=0)) > 2.5 * scale:
                top.set_ylim(0, 1.6 * scale)
                bars.set_label("reliable IDs per 1 s bin (bursts clipped)")
            else:
                top.set_ylim(bottom=0)
            right = top.twinx()
            right.spines["top"].set_visible(False)
            (line,) = right.plot(x, s["outputs"], color=C_OUTPUT, lw=0.9, ls="-", alpha=0.8,
                                 zorder=3, label="output rate (records/s, right axis)")
            handles.append(line)
            right.set_ylabel("output records/s", color=C_OUTPUT)
            right.tick_params(axis="y", colors=C_OUTPUT)
            right.set_ylim(0, max(1.0, float(np.nanmax(s["outputs"], initial=0))) * 1.15)
        else:
            top.text(0.5, 0.5, "no per-second series stored", transform=top.transAxes,
                     ha="center", va="center", color="#777777")
        top.set_ylabel("events/s  ·  reliable IDs/s")
        for name, a, b in spans:  # phase names above the plot, centred on their span
            if b - a >= 0.04 * (end - begin):
                top.text((a + b) / 2, 1.01, name, transform=top.get_xaxis_transform(),
                         ha="center", va="bottom", fontsize=8, color="#555555")

        for key, colour, label in (("latency_p50_s", C_P50, "latency p50 of the second"),
                                   ("latency_max_s", C_MAX, "latency max of the second")):
            xs, ys = _gapped(x, s[key], max_gap=k)
            if len(xs):
                (line,) = bottom.plot(xs, ys, color=colour, lw=1.1, marker="o", ms=2.5,
                                      label=label)
                handles.append(line)
        bottom.set_ylim(bottom=0)
        bottom.set_ylabel("latency (s), paper's definition")
        bottom.set_xlabel(xlabel)
        bottom.set_xlim(begin, end)

        styles = {"inject": ("#b2182b", "fault injected (actual)"),
                  "remove": ("#2166ac", "fault removed (actual)")}
        for step, when in faults.items():
            colour, label = styles[step]
            for ax in (top, bottom):
                ax.axvline(when, color=colour, ls="--", lw=1.4, zorder=6)
            handles.append(Line2D([], [], color=colour, ls="--", lw=1.4, label=label))
        handles += [Patch(color=SHADE[name], label=name) for name, a, b in spans if b > a]

        fig.suptitle(run_caption(run), fontsize=11)
        fig.legend(handles=handles, loc="outside lower center", ncols=4, frameon=False)
        out = save_png(fig, path)
        plt.close(fig)
    return out


# ---------------------------------------------------------------------------- matrix
@dataclass(frozen=True)
class BarSeries:
    """One bar per fault cluster: a label, a colour and how to read its value from a run."""

    label: str
    colour: str
    value: Callable[[RunData], float | None]
    #: Optional second value drawn as a marker on the bar (e.g. p99 over p50 bars).
    marker: Callable[[RunData], float | None] | None = None


def _faults_in(groups: list[Group]) -> list[str | None]:
    seen: list[str | None] = []
    for g in groups:
        if g.key[2] not in seen:
            seen.append(g.key[2])
    return seen


def _panels(groups: list[Group]) -> list[tuple[str | None, str | None]]:
    out: list[tuple[str | None, str | None]] = []
    for g in groups:
        if g.key[:2] not in out:
            out.append(g.key[:2])
    return out


def _bar_panel(ax: Axes, groups: list[Group], faults: list[str | None],
               series: Sequence[BarSeries], scale: float, annotate: bool,
               fmt: str, cap: float | None = None) -> list[float]:
    """Grouped bars (one cluster per fault); returns every plotted mean ± sd for the y range."""
    width = 0.8 / len(series)
    by_fault = {g.key[2]: g for g in groups}
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
                ax.annotate("n/a", (xpos, 0), xytext=(0, 2), textcoords="offset points",
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
        # Whiskers stop at 0 (and at ``cap``, e.g. 100 %): values beyond are impossible.
        lower = [min(sd, m) for m, sd in zip(means, sds, strict=True)]
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
    for fault in faults:
        g = by_fault.get(fault)
        name = SHORT_FAULT.get(fault or "", fault or DASH)
        labels.append(f"{name}\nn={g.n}" if g else f"{name}\n(no runs)")
    ax.set_xticks(range(len(faults)), labels)
    ax.set_xlim(-0.6, len(faults) - 0.4)
    ax.grid(True, axis="y", color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    ax.spines["right"].set_visible(False)
    return extent


def _matrix_figure(groups: list[Group], title: str, ylabel: str, series: Sequence[BarSeries],
                   scale: float, fmt: str, path: Path, percent: bool = False,
                   extra_handles: Sequence[Any] = (), legend_title: str = "") -> Path:
    panels = _panels(groups)
    faults = _faults_in(groups)
    annotate = len(faults) * len(series) <= 24
    with plt.rc_context(_style()):
        ncols = min(2, len(panels))  # SST/MST × A1/E1 → a 2 × 2 grid, not one long strip
        nrows = -(-len(panels) // ncols)
        panel_w = max(4.5, 0.4 * len(faults) * len(series))
        fig = plt.figure(figsize=(min(20.0, 1.0 + ncols * panel_w), 1.3 + 3.6 * nrows),
                         dpi=DPI, layout="constrained")
        grid = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
        axes = grid.ravel()
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        extent: list[float] = []
        for ax, (topo, pg) in zip(axes, panels, strict=False):
            sub = [g for g in groups if g.key[:2] == (topo, pg)]
            extent += _bar_panel(ax, sub, faults, series, scale, annotate, fmt,
                                 cap=100.0 if percent else None)
            ax.set_title(f"{(topo or DASH).upper()} {(pg or DASH).upper()}")
        hi = max(extent, default=1.0) or 1.0
        lo = 0.0
        if percent:
            # Reliability near 100 % everywhere: zoom in (and say so), or nothing is visible.
            low = min(extent, default=100.0)
            if low >= 90.0:
                lo = max(0.0, float(np.floor(low - 0.5)))
                ylabel += f" — axis starts at {lo:g} %"
            hi = max(hi, 100.0)
        headroom = (0.24 if any(bs.marker for bs in series) else 0.16) if annotate else 0.05
        axes[0].set_ylim(lo, hi + headroom * (hi - lo))
        for row in grid:
            row[0].set_ylabel(ylabel)
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
    groups = group_runs(runs)
    prefix = Path(path_prefix)
    base = str(prefix / "matrix-") if prefix.is_dir() else str(prefix)
    Path(base).parent.mkdir(parents=True, exist_ok=True)

    rel = [BarSeries(p, BAR[p], _phase_column(p, "reliability")) for p in PHASES]
    rel.append(BarSeries("whole run", BAR["run"], lambda r: r.row.get("reliability")))
    tp = [BarSeries(p, BAR[p], _phase_column(p, "throughput")) for p in PHASES]
    lat = [BarSeries(p, BAR[p], _latency_column(p, "latency_p50_s"),
                     _latency_column(p, "latency_p99_s")) for p in PHASES]
    p99 = Line2D([], [], marker="_", ls="", color="#222222", ms=10, mew=2.2,
                 label="p99 (mean)")
    return [
        _matrix_figure(groups, "Reliability by fault and phase", "reliability (%)", rel,
                       100.0, "{:.2f}", Path(base + "reliability.png"), percent=True),
        _matrix_figure(groups, "Reliable throughput by fault and phase",
                       "reliable throughput (events/s)", tp, 1.0, "{:,.0f}",
                       Path(base + "throughput.png")),
        _matrix_figure(groups, "Latency by fault and phase (paper's definition): p50 bars, "
                       "p99 markers", "latency (s)", lat, 1.0, "{:.2f}",
                       Path(base + "latency.png"), extra_handles=[p99],
                       legend_title="mean over repetitions; whiskers: ±1 stdev of p50; "
                                    "labels: p50 / p99"),
    ]
