"""One run over time, like the paper's Figures 9/12/15 (:func:`plot_run`).

Input rate, reliable throughput and output rate (top), latency p50/max (middle), anomalies
per second by kind (bottom: unprocessed IDs at their input's time, duplicate and incorrect
occurrences at their output's; runs stored before the series counted them have no such
panel), phases shaded, the fault's *actual* injection and removal marked (they lag the
intended T2/T3 by however long the fault mechanism took). Unknown runs are drawn alike:
their caption says so.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pgval.core.schema import Fault
from pgval.report.data import DASH, ReportError, RunData, Selection, load_runs, opened
from pgval.report.plots.png import DPI, save_png, style
from pgval.store.dbfile import json_object_cell

#: Light shading of each phase on the timeline.
SHADE = {"warm-up": "#ececec", "control": "#e3f4dc", "failure": "#fde0d4",
         "recovery": "#dbe9f6"}
C_INPUT = "#333333"
C_RELIABLE = "#1f77b4"
C_RELIABLE_BIN = "#a9cce8"  # opaque, so bins look the same over every phase's shading
C_OUTPUT = "#9467bd"
C_P50 = "#2ca02c"
C_MAX = "#d62728"
C_PART = "#444444"  # a schedule's parts
#: The anomaly panel: series column, colour, label.
ANOMALY_SERIES = (("unprocessed", "#e08214", "unprocessed IDs (at input time)"),
                  ("duplicate", "#8073ac", "duplicate occurrences"),
                  ("incorrect", "#b2182b", "incorrect occurrences"),
                  ("output_before_input", "#4d4d4d", "of which output before input"))


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
    if r.get("valid") == 0:
        text += " [validity unknown]"
    return text


def _series(conn: sqlite3.Connection, run_id: int) -> dict[str, np.ndarray]:
    """The run's 1 s series; an anomaly column the database lacks (stored before anomalies
    were counted) is left out, a NULL in it is NaN."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    have = ({r[1] for r in conn.execute("PRAGMA table_info(series)")}
            if "series" in names else set())
    cols = ("t_ms", "inputs", "outputs", "reliable", "latency_p50_s", "latency_max_s",
            *(c for c, _, _ in ANOMALY_SERIES if c in have))
    rows = [] if "series" not in names else conn.execute(
        f"SELECT {', '.join(cols)} FROM series WHERE run_id = ? ORDER BY t_ms",
        [run_id]).fetchall()
    arr = (np.array(rows, dtype=float).reshape(-1, len(cols)) if rows
           else np.zeros((0, len(cols))))
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
    if (run.row.get("fault") or Fault.NONE) == Fault.NONE:
        return out
    for e in run.fault_log:
        if e.get("step") in ("inject", "remove") and e.get("actual_ms") is not None:
            out.setdefault(e["step"], float(e["actual_ms"]))
    return out


def part_intervals(run: RunData) -> list[tuple[str, float, float | None]]:
    """Each part of a schedule: (label, from, to) in epoch ms, by when it took effect and
    ended (``effective_ms``; ``to`` None: never removed). Empty for a single fault."""
    found: dict[int, list[Any]] = {}
    for e in run.fault_log:
        entry = {**json_object_cell(e.get("detail")), **{k: v for k, v in e.items()
                                                          if v is not None}}
        part, step = entry.get("part"), entry.get("step")
        if not isinstance(part, int) or step not in ("part-inject", "part-remove"):
            continue
        when = entry.get("effective_ms", entry.get("actual_ms"))
        slot = found.setdefault(part, [f"{entry.get('fault')} → {entry.get('target')}",
                                       None, None])
        slot[1 if step == "part-inject" else 2] = when
    return [(label, float(a), None if b is None else float(b))
            for label, a, b in (found[k] for k in sorted(found)) if a is not None]


def _bins(ax: Axes, x: np.ndarray, values: np.ndarray, **kw: Any) -> Any:
    """One bar per 1 s bin centred on ``x``: a single filled step outline where the bins
    are contiguous (hundreds of bar rectangles cost most of a figure's drawing time),
    bars where seconds are missing."""
    if len(x) > 1 and np.allclose(np.diff(x), 1.0):
        return ax.stairs(np.nan_to_num(values), np.r_[x - 0.5, x[-1] + 0.5], fill=True,
                         lw=0, **kw)
    return ax.bar(x, values, width=1.0, lw=0, **kw)


def _shade(ax: Axes, spans: list[tuple[str, float, float]]) -> None:
    for name, a, b in spans:
        if b > a:
            ax.axvspan(a, b, color=SHADE[name], zorder=0, lw=0)


def _anomalies(ax: Axes, x: np.ndarray, series: dict[str, np.ndarray]) -> list[Any]:
    """Anomalies per second by kind (a symmetric-log axis: a burst of 100,000 duplicates
    and a handful of incorrect IDs stay visible together); the legend's handles."""
    handles: list[Any] = []
    present = [(c, colour, label) for c, colour, label in ANOMALY_SERIES if c in series]
    if not present or not len(x):
        ax.text(0.5, 0.5, "no anomaly series stored (a run stored before they were counted)",
                transform=ax.transAxes, ha="center", va="center", color="#777777")
    total = 0.0
    for column, colour, label in present:
        values = np.nan_to_num(series[column])
        total += float(values.sum())
        if values.any():
            (line,) = ax.step(x, values, where="mid", color=colour, lw=1.1, label=label)
            handles.append(line)
    if present and len(x) and total == 0:
        ax.text(0.5, 0.5, "no anomaly", transform=ax.transAxes, ha="center", va="center",
                color="#777777")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("anomalies per s")
    return handles


#: Changes when the figure changes: a cached plot of an older drawing is drawn again.
PLOT_VERSION = 2


@dataclass
class RunPlot:
    """What one run's timeline is drawn from (read from the database in one go, so the
    drawing can happen in another process and be skipped when its :meth:`key` is known)."""

    run: RunData
    series: dict[str, np.ndarray]

    def key(self) -> str:
        """A digest of everything the figure shows: same key, same picture."""
        h = hashlib.sha256(f"{PLOT_VERSION}|{run_caption(self.run)}".encode())
        h.update(json.dumps([self.run.row, self.run.summary.get("generator"),
                             self.run.fault_log], sort_keys=True, default=str).encode())
        for name in sorted(self.series):
            h.update(name.encode())
            h.update(np.ascontiguousarray(self.series[name], dtype=float).tobytes())
        return h.hexdigest()[:32]


def load_run_plot(db: Path | str | Any, run_id: int) -> RunPlot:
    """The run and its 1 s series (a plain error if the run is not there)."""
    with opened(db) as conn:
        runs = load_runs(conn, Selection(run_ids=(int(run_id),), status=None))
        if not runs:
            raise ReportError(f"no run {run_id} in the database")
        return RunPlot(runs[0], _series(conn, runs[0].id))


def plot_run(db: Path | str | Any, run_id: int, path: Path | str) -> Path:
    """Write the timeline figure of one run to ``path`` (PNG) and return the path."""
    return draw_run(load_run_plot(db, run_id), path)


def draw_run(data: RunPlot, path: Path | str) -> Path:
    """Draw :class:`RunPlot` ``data`` to ``path`` (PNG): rates on top, latency below, the
    anomalies in a panel, the phases shaded and the fault's steps marked."""
    run, s = data.run, data.series
    t0, xlabel = _origin(run, s)
    x = (s["t_ms"] - t0) / 1000.0 + 0.5  # bin centres
    end = float(x[-1] + 0.5) if len(x) else 1.0
    begin = min(0.0, float(x[0] - 0.5)) if len(x) else 0.0
    spans = _spans(run.row, t0, begin, end)
    window_s = max(1, int(round((run.row.get("window_ms") or 1000) / 1000)))
    k = max(5, window_s)

    with plt.rc_context(style()):
        fig: Figure = plt.figure(figsize=(12, 9.5), dpi=DPI, layout="constrained")
        top, bottom, panel = fig.subplots(3, 1, sharex=True, height_ratios=[3, 2, 1.6])
        for ax in (top, bottom, panel):
            _shade(ax, spans)
            ax.grid(True, axis="y", color="#dddddd", lw=0.6)
            ax.set_axisbelow(True)
        handles = _draw_rates(top, x, s, k)
        for name, a, b in spans:  # phase names above the plot, centred on their span
            if b - a >= 0.04 * (end - begin):
                top.text((a + b) / 2, 1.01, name, transform=top.get_xaxis_transform(),
                         ha="center", va="bottom", fontsize=8, color="#555555")
        handles += _draw_latency(bottom, x, s, k)
        handles += _anomalies(panel, x, s)
        panel.set_xlabel(xlabel)
        panel.set_xlim(begin, end)
        faults = {step: (when - t0) / 1000.0 for step, when in _fault_times(run).items()}
        handles += _mark_faults((top, bottom, panel), faults)
        handles += [Patch(color=SHADE[name], label=name) for name, a, b in spans if b > a]
        handles += _draw_parts(bottom, part_intervals(run), t0, end)
        fig.suptitle(run_caption(run), fontsize=11)
        fig.legend(handles=handles, loc="outside lower center", ncols=4, frameon=False)
        out = save_png(fig, path)
        plt.close(fig)
    return out


def _spans(r: dict[str, Any], t0: float, begin: float, end: float
           ) -> list[tuple[str, float, float]]:
    """The phases as (name, start s, end s) from the run's bounds (none when not stored)."""
    if r.get("t_start") is None or r.get("t2") is None or r.get("t3") is None:
        return []
    start, t2, t3 = ((float(r[k]) - t0) / 1000.0 for k in ("t_start", "t2", "t3"))
    return [("warm-up", begin, start), ("control", start, t2), ("failure", t2, t3),
            ("recovery", t3, max(end, t3))]


def _draw_rates(top: Any, x: np.ndarray, s: dict[str, np.ndarray], k: int) -> list[Any]:
    """Reliable IDs per bin, their trailing mean, the input rate; outputs on a right axis."""
    handles: list[Any] = []
    if not len(x):
        top.text(0.5, 0.5, "no per-second series stored", transform=top.transAxes,
                 ha="center", va="center", color="#777777")
        top.set_ylabel("events/s  ·  reliable IDs/s")
        return handles
    reliable_mean = _trailing_mean(s["reliable"], k)
    bars = _bins(top, x, s["reliable"], color=C_RELIABLE_BIN, zorder=2,
                 label="reliable IDs per 1 s bin")
    handles.append(bars)
    (line,) = top.plot(x, reliable_mean, color=C_RELIABLE, lw=2, zorder=4,
                       label=f"reliable throughput (trailing {k} s mean)")
    handles.append(line)
    (line,) = top.plot(x, s["inputs"], color=C_INPUT, lw=1.3, zorder=5, label="input rate")
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
    top.set_ylabel("events/s  ·  reliable IDs/s")
    return handles


def _draw_latency(bottom: Any, x: np.ndarray, s: dict[str, np.ndarray], k: int) -> list[Any]:
    """Latency p50 and max of each second, gaps longer than ``k`` s left open."""
    handles: list[Any] = []
    for key, colour, label in (("latency_p50_s", C_P50, "latency p50 of the second"),
                               ("latency_max_s", C_MAX, "latency max of the second")):
        xs, ys = _gapped(x, s[key], max_gap=k)
        if len(xs):
            (line,) = bottom.plot(xs, ys, color=colour, lw=1.1, marker="o", ms=2.5,
                                  label=label)
            handles.append(line)
    bottom.set_ylim(bottom=0)
    bottom.set_ylabel("latency (s), paper's definition")
    return handles


def _mark_faults(axes: tuple[Any, ...], faults: dict[str, float]) -> list[Any]:
    """A dashed line on every panel where the fault was injected and removed (actual)."""
    styles = {"inject": ("#b2182b", "fault injected (actual)"),
              "remove": ("#2166ac", "fault removed (actual)")}
    handles: list[Any] = []
    for step, when in faults.items():
        colour, label = styles[step]
        for ax in axes:
            ax.axvline(when, color=colour, ls="--", lw=1.4, zorder=6)
        handles.append(Line2D([], [], color=colour, ls="--", lw=1.4, label=label))
    return handles


def _draw_parts(bottom: Any, parts: list[tuple[str, float, float | None]], t0: float,
                end: float) -> list[Any]:
    """A schedule: each part's interval as a bar across the top of the latency panel."""
    for k, (label, a_ms, b_ms) in enumerate(parts):
        a = (a_ms - t0) / 1000.0
        b = end if b_ms is None else (b_ms - t0) / 1000.0
        y = 0.97 - 0.09 * k
        bottom.plot([a, b], [y, y], transform=bottom.get_xaxis_transform(),
                    color=C_PART, lw=5, solid_capstyle="butt", zorder=7)
        bottom.text(b, y, f"  {label}", transform=bottom.get_xaxis_transform(),
                    va="center", fontsize=7, color=C_PART, zorder=7)
    if not parts:
        return []
    return [Line2D([], [], color=C_PART, lw=5, label="each fault of the schedule")]
