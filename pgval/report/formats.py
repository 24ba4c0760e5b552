"""The report's four output formats, each rendering the same tables (:mod:`.tables`).

* terminal — rich tables (with colours when a console is given);
* Markdown — GitHub tables, plots linked;
* CSV — one long/tidy file, so pandas can pivot it::

      table, topology, pg, fault, phase, metric, unit, mean, sd, n, text

  one line per table cell; ``text`` holds non-numeric cells (verdicts, k/n flags) and what
  a number is besides a mean (a lower bound; undefined in some runs);
* HTML — one self-contained page with the plots inlined as data URIs.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from pgval.report.data import Stat
from pgval.report.tables import ReportTable

Format = Literal["terminal", "markdown", "csv", "html", "json"]
FORMATS: tuple[str, ...] = ("terminal", "markdown", "csv", "html", "json")


def render_terminal(tables: list[ReportTable], console: Console, header: str) -> None:
    console.print(f"[bold]{header}[/]")
    for t in tables:
        table = Table(title=t.title, title_justify="left", caption=t.note or None,
                      caption_justify="left")
        for _, h in t.key_headers:
            table.add_column(h, justify="left", no_wrap=True)
        if t.name != "runs":
            table.add_column("n", justify="right")
        for c in t.columns:
            table.add_column(c.header, justify="left" if c.metric == "guarantee" else "right")
        prev: tuple[str, str] | None = None
        for row in t.rows:
            head = (row.keys.get("topology", ""), row.keys.get("pg", ""))
            if prev is not None and head != prev:
                table.add_section()
            prev = head
            cells = [t.key_text(row, k) for k, _ in t.key_headers]
            if t.name != "runs":
                cells.append(str(row.n))
            cells += [t.cell_text(c, v) for c, v in zip(t.columns, row.values, strict=True)]
            table.add_row(*cells)
        console.print()
        console.print(table)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(tables: list[ReportTable], header: str,
                    images: Sequence[tuple[str, str]] = ()) -> str:
    lines = ["# pgval report", "", header, ""]
    for t in tables:
        lines += [f"## {t.title}", ""]
        heads = [h for _, h in t.key_headers] + (["n"] if t.name != "runs" else [])
        heads += [c.header for c in t.columns]
        aligns = [":--"] * len(t.key_headers) + (["--:"] if t.name != "runs" else [])
        aligns += [":--" if c.metric == "guarantee" else "--:" for c in t.columns]
        lines.append("| " + " | ".join(_md_cell(h) for h in heads) + " |")
        lines.append("| " + " | ".join(aligns) + " |")
        for row in t.rows:
            cells = [t.key_text(row, k) for k, _ in t.key_headers]
            if t.name != "runs":
                cells.append(str(row.n))
            cells += [t.cell_text(c, v) for c, v in zip(t.columns, row.values, strict=True)]
            lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
        if t.note:
            lines += ["", f"_{t.note}_"]
        lines.append("")
    if images:
        lines += ["## Plots", ""]
        for caption, ref in images:
            lines += [f"![{caption}]({ref})", ""]
    return "\n".join(lines)


CSV_FIELDS = ("table", "topology", "pg", "fault", "phase", "metric", "unit", "mean", "sd", "n",
              "text", "shape")


def render_csv(tables: list[ReportTable]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for t in tables:
        for row in t.rows:
            base = {"table": t.name, "topology": row.keys.get("topology", ""),
                    "pg": row.keys.get("pg", ""), "fault": row.keys.get("fault", ""),
                    "n": row.n, "shape": row.keys.get("shape", "")}
            if "run" in row.keys:  # one row per run (the run list, OIR trials)
                base["table"] = f"{t.name}:{row.keys['run']}"
            for c, v in zip(t.columns, row.values, strict=True):
                rec = {**base, "phase": c.phase or row.keys.get("phase", ""),
                       "metric": c.metric, "unit": c.unit}
                if isinstance(v, Stat):
                    rec.update(mean=_csv_num(v.mean, c.scale), sd=_csv_num(v.sd, c.scale),
                               n=v.n, text=v.flags())
                elif v is not None:
                    rec["text"] = v
                w.writerow(rec)
    return buf.getvalue()


def render_json(tables: list[ReportTable], header: str) -> str:
    """The report as one JSON object: the header line and every table, each row its keys
    (raw, as the CSV keeps them), ``n`` and one entry a column — a statistic as ``mean``,
    ``sd`` and ``n`` in the column's unit (with its flags as ``text``), else its text."""
    out = []
    for t in tables:
        rows = []
        for row in t.rows:
            values: dict[str, Any] = {}
            for c, v in zip(t.columns, row.values, strict=True):
                name = f"{c.phase}.{c.metric}" if c.phase else c.metric
                if isinstance(v, Stat):
                    values[name] = {"mean": _json_num(v.mean, c.scale),
                                    "sd": _json_num(v.sd, c.scale), "n": v.n,
                                    "unit": c.unit, "text": v.flags()}
                else:
                    values[name] = v
            rows.append({**row.keys, "n": row.n, "values": values})
        out.append({"table": t.name, "title": t.title, "note": t.note,
                    "keys": [k for k, _ in t.key_headers], "rows": rows})
    return json.dumps({"header": header, "tables": out}, indent=1, allow_nan=False) + "\n"


def _json_num(v: float | None, scale: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(f"{v * scale:.6g}")


def _csv_num(v: float | None, scale: float) -> str:
    return "" if v is None else f"{v * scale:.6g}"


#: A cell longer than this wraps (a reason, a list of IDs) instead of widening its table.
LONG_CELL = 60

HTML_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1400px;padding:0 1rem;color:#222;line-height:1.4}
h1{margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{padding:.25rem .6rem;border-bottom:1px solid #e5e5e5;white-space:nowrap}
td.long{white-space:normal;min-width:24rem;max-width:48rem;overflow-wrap:anywhere}
div.wide{max-width:100%;overflow-x:auto}
th{background:#f4f4f4;text-align:left;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.sep td{border-top:2px solid #bbb}
p.note{color:#555;font-size:.85rem;margin:.2rem 0 1rem}
.meta{color:#555}figure{margin:1rem 0}figcaption{color:#444;font-size:.9rem}
img{max-width:100%;height:auto;border:1px solid #eee}
details{margin:.4rem 0}summary{cursor:pointer}
"""


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(tables: list[ReportTable], header: str,
                matrix_images: Sequence[tuple[str, Path]] = (),
                run_images: Sequence[tuple[str, Path]] = (),
                link: Callable[[Path], str] | None = None) -> str:
    """One HTML page. ``link``: where the page finds each PNG (files beside it, loaded
    lazily: the page stays small); without it every PNG is inlined (self-contained)."""
    esc = html.escape

    def src(path: Path) -> str:
        return (f"src=\"{esc(link(path))}\" loading=\"lazy\"" if link is not None
                else f"src=\"{_data_uri(path)}\"")

    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>pgval report</title>", f"<style>{HTML_CSS}</style></head><body>",
             "<h1>pgval report</h1>", f"<p class=\"meta\">{esc(header)}</p>"]
    for t in tables:
        parts.append(f"<h2>{esc(t.title)}</h2><div class=\"wide\"><table><thead><tr>")
        heads = [h for _, h in t.key_headers] + (["n"] if t.name != "runs" else [])
        heads += [c.header for c in t.columns]
        parts.append("".join(f"<th>{esc(h)}</th>" for h in heads) + "</tr></thead><tbody>")
        prev: tuple[str, str] | None = None
        for row in t.rows:
            head = (row.keys.get("topology", ""), row.keys.get("pg", ""))
            cls = " class=\"sep\"" if prev is not None and head != prev else ""
            prev = head
            cells = [f"<td>{esc(t.key_text(row, k))}</td>" for k, _ in t.key_headers]
            if t.name != "runs":
                cells.append(f"<td class=\"num\">{row.n}</td>")
            for c, v in zip(t.columns, row.values, strict=True):
                klass = "" if c.metric == "guarantee" else " class=\"num\""
                text = t.cell_text(c, v)
                if len(text) > LONG_CELL:
                    klass = " class=\"long\""
                cells.append(f"<td{klass}>{esc(text)}</td>")
            parts.append(f"<tr{cls}>{''.join(cells)}</tr>")
        parts.append("</tbody></table></div>")
        if t.note:
            parts.append(f"<p class=\"note\">{esc(t.note)}</p>")
    if matrix_images:
        parts.append("<h2>Matrix plots</h2>")
        for caption, path in matrix_images:
            parts.append(f"<figure><img alt=\"{esc(caption)}\" {src(path)}>"
                         f"<figcaption>{esc(caption)}</figcaption></figure>")
    if run_images:
        parts.append("<h2>Runs over time</h2>")
        for caption, path in run_images:
            parts.append(f"<details><summary>{esc(caption)}</summary><figure>"
                         f"<img alt=\"{esc(caption)}\" {src(path)}></figure>"
                         "</details>")
    parts.append("</body></html>")
    return "\n".join(parts)
