"""Terminal rendering of an evaluation: a verdict line and a per-phase table (rich).

A phase row has two clocks (docs/semantics.md): ``duplicate`` and ``incorrect`` count
occurrences by the output's ingress time; ``dup IDs``, ``inc IDs`` and reliability
count expected IDs by the input's ingress time, so they can be read together.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pgval.checker.evaluate import Evaluation
from pgval.schema import PHASES

VERDICT_STYLE = {"exactly-once": "bold green", "at-least-once": "bold yellow",
                 "at-most-once": "bold yellow", "none": "bold red", "unknown": "bold"}


def _fmt_s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _fmt_pct(value: float | None, decimals: int = 2) -> str:
    """A share as a percentage; "–" when there was nothing to measure (nothing expected)."""
    return "–" if value is None else f"{value:.{decimals}%}"


def render_evaluation(ev: Evaluation, console: Console, title: str | None = None) -> None:
    v = ev.validation
    m = ev.metrics
    style = VERDICT_STYLE.get(v.guarantee, "bold")
    console.print(f"[{style}]guarantee: {v.guarantee}[/]   reliability "
                  f"{_fmt_pct(v.reliability, 4)}   correctness {v.correctness:.2%} "
                  f"({v.correct_outputs}/{v.outputs} outputs)")
    table = Table(title=title or f"{ev.topology.upper()} — per phase", title_justify="left",
                  caption="duplicate, incorrect: occurrences, by output time; dup IDs, "
                          "inc IDs, reliability: expected IDs, by input time",
                  caption_justify="left")
    for col in ("phase", "expected", "processed", "unprocessed", "duplicate", "incorrect",
                "dup IDs", "inc IDs", "reliability", "reliable ev/s", "lat p50 s",
                "lat p99 s", "Karimov p50 s"):
        # One-word headers keep their width; the others wrap when the terminal is narrow.
        table.add_column(col, justify="right" if col != "phase" else "left",
                         min_width=max(map(len, col.split())))
    for p in PHASES:
        c = v.phases[p]
        lat = m.latency[p]
        table.add_row(p, f"{c.expected:,}", f"{c.processed:,}", f"{c.unprocessed:,}",
                      f"{c.duplicate:,}", f"{c.incorrect:,}", f"{c.duplicated_ids:,}",
                      f"{c.incorrect_ids:,}", _fmt_pct(c.reliability),
                      f"{m.throughput[p]:,.0f}", _fmt_s(lat.p50), _fmt_s(lat.p99),
                      _fmt_s(m.latency_karimov[p].p50))
    table.add_section()
    table.add_row("total", f"{v.expected:,}", f"{v.processed:,}", f"{v.unprocessed:,}",
                  f"{v.duplicate:,}", f"{v.incorrect:,}", f"{v.duplicated_ids:,}",
                  f"{v.incorrect_ids:,}", _fmt_pct(v.reliability), "", "", "", "")
    console.print(table)
    extras = []
    if v.malformed:
        extras.append(f"{v.malformed} malformed output records skipped")
    if v.malformed_inputs:
        extras.append(f"{v.malformed_inputs} malformed input records skipped")
    if v.duplicate_inputs:
        extras.append(f"{v.duplicate_inputs} input IDs appeared more than once (first kept)")
    if v.missing_outputs:
        extras.append(f"{v.missing_outputs} of {v.expected_outputs} expected outputs never "
                      "appeared")
    if m.failure_cost_s is not None:
        extras.append(f"failure cost {m.failure_cost_s:.2f} s")
    rec = ev.recovery
    if ev.phases.bounded() and rec.note:
        extras.append(f"recovery: {rec.note}")
    elif ev.phases.bounded() and rec.recovered is not None:
        extras.append(
            f"recovery: downtime {_fmt_s(rec.downtime_s)} s (control's longest gap "
            f"{_fmt_s(rec.control_max_gap_s)} s), throughput back after "
            f"{_fmt_s(rec.recovery_throughput_s)} s, latency back after "
            f"{_fmt_s(rec.recovery_latency_s)} s"
            + (" — censored: not back by the end of the load" if rec.censored else ""))
    counts = ev.unprocessed_causes.get("counts") or {}
    if any(counts.values()):
        examples = ev.unprocessed_causes.get("examples") or {}
        extras.append("why unprocessed: " + ", ".join(
            f"{cause} {n:,}" + (f" (e.g. {', '.join(map(str, examples.get(cause, [])[:3]))})"
                                if examples.get(cause) else "")
            for cause, n in counts.items() if n))
    outside = sum(m.series_outside.values())
    if outside:
        extras.append(f"{outside} records stamped outside the run's time span (counted, "
                      "not in the 1 s series)")
    for line in extras:
        console.print(f"  • {line}")
    for kind, pairs in v.witnesses.items():
        if pairs:
            sample = ", ".join(str(i) for _, i in pairs[:8])
            console.print(f"  • {kind} e.g. IDs {sample}")
