"""Terminal rendering of an evaluation: a verdict line and a per-phase table (rich).

A phase row has two clocks (docs/semantics.md): ``duplicate`` and ``incorrect`` count
occurrences by the output's ingress time; ``dup IDs``, ``inc IDs`` and reliability
count expected IDs by the input's ingress time, so they can be read together. A phase
without outputs shows its latency as "undefined (no output)": a measurement, not a gap in
the table; a number the run's schedule bounds shows as a lower bound, "≥ 90.20".
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pgval.checker.evaluate import Evaluation
from pgval.checker.metrics import NO_OUTPUT, LatencyStats, failure_cost_bound
from pgval.checker.recovery import recovery_bounds
from pgval.core.schema import PHASES

VERDICT_STYLE = {"exactly-once": "bold green", "at-least-once": "bold yellow",
                 "at-most-once": "bold yellow", "none": "bold red", "unknown": "bold"}


def _fmt_s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _fmt_bound(value: float | None, bounded: bool) -> str:
    """Seconds, "≥ " in front when the number is a lower bound."""
    return ("≥ " if bounded and value is not None else "") + _fmt_s(value)


def _fmt_latency(stats: LatencyStats, value: float | None) -> str:
    """A latency cell: the number, or why there is none."""
    if stats.undefined is None:
        return _fmt_s(value)
    return "undefined (no output)" if stats.undefined == NO_OUTPUT else "undefined"


def _fmt_pct(value: float | None, decimals: int = 2) -> str:
    """A share as a percentage; "–" when there was nothing to measure (nothing expected)."""
    return "–" if value is None else f"{value:.{decimals}%}"


def _back(value: float | None, bounded: bool) -> str:
    """A recovery time: seconds, or "not back" (censored)."""
    return "– (not back)" if value is None else f"{_fmt_bound(value, bounded)} s"


def render_evaluation(ev: Evaluation, console: Console, title: str | None = None) -> None:
    """The verdict line, the per-phase table, then the notes and witness IDs."""
    v = ev.validation
    style = VERDICT_STYLE.get(v.guarantee, "bold")
    console.print(f"[{style}]guarantee: {v.guarantee}[/]   reliability "
                  f"{_fmt_pct(v.reliability, 4)}   correctness {v.correctness:.2%} "
                  f"({v.correct_outputs}/{v.outputs} outputs)")
    console.print(phase_table(ev, title))
    for line in notes(ev):
        console.print(f"  • {line}")
    for kind, pairs in v.witnesses.items():
        if pairs:
            sample = ", ".join(str(i) for _, i in pairs[:8])
            console.print(f"  • {kind} e.g. IDs {sample}")


def phase_table(ev: Evaluation, title: str | None = None) -> Table:
    """Counts, reliability, throughput and latency per phase, and the totals."""
    v, m = ev.validation, ev.metrics
    table = Table(title=title or f"{ev.topology.upper()} — per phase", title_justify="left",
                  caption="duplicate, incorrect: occurrences, by output time; dup IDs, "
                          "inc IDs, reliability: expected IDs, by input time",
                  caption_justify="left")
    for col in ("phase", "expected", "processed", "unprocessed", "duplicate", "incorrect",
                "dup IDs", "inc IDs", "reliability", "reliable ev/s", "lat p50 s",
                "lat p99 s", "Karimov p50 s"):
        # One-word headers keep their width; the others wrap when a column is squeezed (a
        # console narrower than the table prints it in parts: pgval.cli.common.fit).
        table.add_column(col, justify="right" if col != "phase" else "left",
                         min_width=max(map(len, col.split())))
    for p in PHASES:
        c = v.phases[p]
        lat = m.latency[p]
        table.add_row(p, f"{c.expected:,}", f"{c.processed:,}", f"{c.unprocessed:,}",
                      f"{c.duplicate:,}", f"{c.incorrect:,}", f"{c.duplicated_ids:,}",
                      f"{c.incorrect_ids:,}", _fmt_pct(c.reliability),
                      f"{m.throughput[p]:,.0f}", _fmt_latency(lat, lat.p50),
                      _fmt_latency(lat, lat.p99),
                      _fmt_latency(m.latency_karimov[p], m.latency_karimov[p].p50))
    table.add_section()
    table.add_row("total", f"{v.expected:,}", f"{v.processed:,}", f"{v.unprocessed:,}",
                  f"{v.duplicate:,}", f"{v.incorrect:,}", f"{v.duplicated_ids:,}",
                  f"{v.incorrect_ids:,}", _fmt_pct(v.reliability), "", "", "", "")
    return table


def notes(ev: Evaluation) -> list[str]:
    """What the table does not show: skipped records, undefined or bounded figures,
    recovery, why IDs were unprocessed."""
    v, m = ev.validation, ev.metrics
    extras = []
    if ev.by_rows:  # first: every count above is of rows, by the time they came out
        extras.append(f"{ev.by_rows}; the phase rows count expected rows by the time their "
                      "first copy came out (a row never written is in no phase)")
    if v.malformed:
        extras.append(f"{v.malformed} malformed output records skipped")
    if v.malformed_inputs:
        extras.append(f"{v.malformed_inputs} malformed input records skipped")
    if v.duplicate_inputs:
        extras.append(f"{v.duplicate_inputs} input IDs appeared more than once (first kept)")
    if v.missing_outputs:
        extras.append(f"{v.missing_outputs} of {v.expected_outputs} expected outputs never "
                      "appeared")
    if ev.phases.bounded():
        extras += [f"{p} latency undefined: {m.latency[p].undefined}" for p in PHASES
                   if m.latency[p].undefined is not None]
    outage = m.outage_at_t3
    rec = ev.recovery
    cost_bound = failure_cost_bound(None if outage is None else outage.as_dict(),
                                    rec.recovered)
    if m.failure_cost_s is not None:
        extras.append(f"failure cost {_fmt_bound(m.failure_cost_s, cost_bound is not None)} s"
                      + (f" (≥: a lower bound, {cost_bound})"
                         if outage is None and cost_bound is not None else ""))
    elif ev.phases.bounded():
        extras.append(f"failure cost undefined: {m.failure_cost_undefined}")
    if ev.phases.bounded() and rec.note:
        extras.append(f"recovery: {rec.note}")
    elif ev.phases.bounded() and rec.recovered is not None:
        bound = recovery_bounds(rec.as_dict(), None if outage is None else outage.as_dict())
        extras.append(
            f"recovery: downtime {_fmt_bound(rec.downtime_s, 'downtime_bound' in bound)} s "
            f"(control's longest gap {_fmt_s(rec.control_max_gap_s)} s), throughput back "
            f"after {_back(rec.recovery_throughput_s, 'recovery_throughput_bound' in bound)}, "
            f"latency back after "
            f"{_back(rec.recovery_latency_s, 'recovery_latency_bound' in bound)}"
            + (" — censored: not back by the end of the load" if rec.censored else ""))
    if outage is not None:
        extras.append(f"≥ marks a lower bound: {outage.why} (--phase-seconds sets it)")
    extras += [f"caveat: {why}" for why in (m.control_unsettled, m.falls_behind) if why]
    counts = ev.unprocessed_causes.get("counts") or {}
    if any(counts.values()):
        examples = ev.unprocessed_causes.get("examples") or {}
        extras.append("why unprocessed: " + ", ".join(
            f"{cause} {n:,}" + (f" (e.g. {', '.join(map(str, examples.get(cause, [])[:3]))})"
                                if examples.get(cause) else "")
            for cause, n in counts.items() if n))
    late = ev.late or {}
    if late.get("told_apart") and late.get("inputs"):
        phases = late.get("phases") or {}
        what = (f"{late['inputs']:,} inputs" if late.get("pairs") == late["inputs"] else
                f"{late['pairs']:,} (input, row) pairs of {late['inputs']:,} inputs")
        extras.append(
            f"dropped behind the watermark, by Spark's rule (the run's micro-batches "
            f"replayed), not expected: {what} ("
            + ", ".join(f"{p} {phases.get(p, 0):,}" for p in PHASES) + ")")
    elif late and not late.get("told_apart"):
        extras.append(f"Spark dropped {late.get('run_dropped_rows', 0):,} rows behind the "
                      f"watermark, not told apart from losses: {late.get('why')}")
    outside = sum(m.series_outside.values())
    if outside:
        extras.append(f"{outside} records stamped outside the run's time span (counted, "
                      "not in the 1 s series)")
    return extras
