"""`pgval report` and the plots, on a small database of realistic synthetic runs.

The runs go through the real path (oracle → validator → metrics → ResultsStore),
so the report is tested against what an experiment would store, not against a
hand-made schema.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import statistics
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from click.testing import CliRunner

from pgval.checker.evaluate import Evaluation, evaluate
from pgval.cli import main
from pgval.oracle import expected_outputs
from pgval.records.parse import InputEvents, OutputRecords, ResourceTable
from pgval.records.phases import Phases
from pgval.report import ReportError, Selection, build_report, group_runs, load_runs
from pgval.report.plots import plot_matrix, plot_run
from pgval.store.results import ResultsStore
from tests.strategies import to_inputs, to_outputs
from tests.test_phase_rows import issue_example

T1 = 1_700_000_000_000
W = 2_000
WARMUP_MS = 4_000
PHASE_MS = 16_000
RATE = 100  # events/s
RESOURCES = 4


def synthetic_streams(fault: str, repeat: int) -> tuple[InputEvents, OutputRecords, Phases]:
    """A run of SST at RATE ev/s; the fault delays, drops or repeats outputs in failure.

    * ``none``: every window emitted once, 400 ms after it closes.
    * ``crash``: windows closing in failure after its first window are held until
      T3 + 1 s, and ``repeat`` + 1 of them are emitted twice (at-least-once after a
      restart). The first one is out before the crash bites, so every phase has outputs
      and the run is valid evidence (pgval/checker/validity.py).
    * ``delay-lt-timeout``: windows closing in failure are 3 s late; ``repeat`` of
      them are lost (at-most-once).
    """
    start = T1 + WARMUP_MS
    t2 = start + PHASE_MS
    t3 = t2 + PHASE_MS
    t4 = t3 + PHASE_MS
    step = 1000 // RATE
    events = [{"id": k + 1, "type": "GET", "resource": f"r{k % RESOURCES:04d}",
               "event_ts": ts - 20, "ingress_ts": ts}
              for k, ts in enumerate(range(T1, t4, step))]
    rt = ResourceTable()
    inputs = to_inputs(events, rt)
    rows = expected_outputs(inputs, "sst", W).to_records()
    outputs: list[dict] = []
    dropped = duplicated = 0
    for row in rows:
        close = int(row["window_end"]) + 400 + 30 * (int(row["window_start"]) // W % 3)
        in_failure = t2 <= close < t3
        if fault == "crash" and in_failure and close >= t2 + W:
            close = t3 + 1_000 + (close - t2) // 20
            if duplicated <= repeat:
                outputs.append({**row, "ingress_ts": close + 5_000})
                duplicated += 1
        elif fault == "delay-lt-timeout" and in_failure:
            close += 3_000
            if dropped < repeat:
                dropped += 1
                continue
        outputs.append({**row, "ingress_ts": close})
    return inputs, to_outputs(outputs, rt), Phases(start, t2, t3)


def synthetic_run(fault: str, repeat: int) -> tuple[Evaluation, Phases]:
    """:func:`synthetic_streams` through oracle, validator and metrics."""
    inputs, outputs, phases = synthetic_streams(fault, repeat)
    return evaluate(inputs, outputs, "sst", W, phases), phases


FAULTS = ("none", "crash", "delay-lt-timeout")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, int], float]]:
    """none/crash/delay-lt × 2 repetitions, plus one MST-free single run (n = 1)."""
    path = tmp_path_factory.mktemp("report") / "results.db"
    store = ResultsStore(path)
    reliability: dict[tuple[str, int], float] = {}
    for fault in FAULTS:
        for repeat in (0, 1):
            ev, phases = synthetic_run(fault, repeat)
            run_id = store.start_run("validate", "sst", W, pg="a1", fault=fault, seed=repeat,
                                     repeat=repeat, params={"warmup_seconds": 4})
            store.finish_run(run_id, ev, extra={"generator": {"started_ms": T1}})
            if fault != "none":
                store.save_fault_log(run_id, [
                    {"step": "inject", "fault": fault, "intended_ms": phases.t2,
                     "actual_ms": phases.t2 + 400, "done_ms": phases.t2 + 500},
                    {"step": "remove", "fault": fault, "intended_ms": phases.t3,
                     "actual_ms": phases.t3 + 800, "done_ms": phases.t3 + 900}])
            reliability[(fault, repeat)] = ev.validation.reliability
    ev, _ = synthetic_run("crash", 0)  # a lone e1 run: n = 1, no stdev
    run_id = store.start_run("validate", "sst", W, pg="e1", fault="crash", seed=7, repeat=0)
    store.finish_run(run_id, ev)
    failed = store.start_run("validate", "sst", W, pg="a1", fault="none", seed=9, repeat=2)
    store.fail_run(failed, "boom")  # never in the report
    return path, reliability


def test_synthetic_runs_cover_all_phases(db: tuple[Path, dict]) -> None:
    path, reliability = db
    runs = load_runs(path)
    assert len(runs) == 7
    for run in runs:
        assert all(run.phases[p]["expected"] > 0 for p in ("control", "failure", "recovery"))
    verdicts = {r.row["fault"]: r.row["guarantee"] for r in runs if r.row["pg"] == "a1"}
    assert verdicts == {"none": "exactly-once", "crash": "at-least-once",
                        "delay-lt-timeout": "at-most-once"}
    assert reliability[("crash", 0)] != reliability[("crash", 1)]  # so stdev > 0


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "csv", "html"])
def test_every_format_renders(db: tuple[Path, dict], fmt: str) -> None:
    path, _ = db
    text = build_report(path, fmt=fmt, run_plots=False)
    assert isinstance(text, str) and len(text) > 500
    assert "boom" not in text


def test_markdown_has_the_aggregated_numbers(db: tuple[Path, dict]) -> None:
    path, reliability = db
    md = build_report(path, fmt="markdown")
    assert isinstance(md, str)
    vals = [reliability[("crash", 0)], reliability[("crash", 1)]]
    mean = 100 * statistics.fmean(vals)
    sd = 100 * statistics.stdev(vals)
    crash_a1 = next(line for line in md.splitlines()
                    if line.startswith("| sst | a1 | crash | 2 |") and "%" not in line
                    and f"{mean:.2f} ± {sd:.2f}" in line)
    assert crash_a1
    # n = 1 (the e1 run): a bare mean, no "±".
    e1 = [line for line in md.splitlines() if line.startswith("| sst | e1 | crash | 1 |")]
    assert e1 and all("±" not in line for line in e1)
    # Table 4 layout: paper's fault names, one column per system.
    assert "| Topology | PG | Fault | n | Spark |" in md
    # The synthetic crash holds its outputs until T3 + 1 s: the removal ends the stall, so
    # the failure cost is the failure phase's length, a lower bound.
    assert re.search(r"\| SST \| A1 \| Process crash \| 2 \| ≥ \d+\.\d ± \d+\.\d \|", md)
    assert re.search(r"\| SST \| A1 \| No fault \| 2 \| -?\d+\.\d ± \d+\.\d \|", md)
    assert "| SST | A1 | No fault | 2 |" in md
    # Verdicts and the latency table with Karimov's definition beside the paper's.
    assert "at-least-once ×2" in md and "exactly-once ×2" in md
    assert "exactly-once ×1, at-most-once ×1" in md  # delay-lt drops `repeat` outputs
    assert "p50 s (Karimov)" in md
    # Every stored run has recovery metrics; causes only come with batch progress.
    assert "(f) Recovery" in md and "(g) Why events" not in md


def test_selection_filters(db: tuple[Path, dict]) -> None:
    path, reliability = db
    md = build_report(path, Selection(fault="none", pg="a1"), fmt="markdown")
    assert isinstance(md, str)
    assert "| sst | a1 | none | 2 |" in md and "crash" not in md.split("## Runs")[0]
    with pytest.raises(ReportError, match="no runs"):
        build_report(path, Selection(topology="mst"), fmt="markdown")
    single = build_report(path, [1], fmt="csv")
    assert isinstance(single, str)
    rows = list(csv.DictReader(io.StringIO(single)))
    rel = next(r for r in rows if r["table"] == "reliability" and r["phase"] == "total")
    assert float(rel["mean"]) == pytest.approx(100 * reliability[("none", 0)])
    assert rel["sd"] == "" and rel["n"] == "1"


def test_csv_is_tidy(db: tuple[Path, dict], tmp_path: Path) -> None:
    path, reliability = db
    out = build_report(path, fmt="csv", out=tmp_path / "r.csv")
    assert out == tmp_path / "r.csv"
    rows = list(csv.DictReader(out.open()))
    assert {r["table"] for r in rows} >= {"reliability", "throughput", "latency",
                                          "failure_cost", "anomalies"}
    rel = next(r for r in rows if r["table"] == "reliability" and r["fault"] == "crash"
               and r["pg"] == "a1" and r["phase"] == "total")
    vals = [reliability[("crash", 0)], reliability[("crash", 1)]]
    assert float(rel["mean"]) == pytest.approx(100 * statistics.fmean(vals), rel=1e-5)
    assert float(rel["sd"]) == pytest.approx(100 * statistics.stdev(vals), rel=1e-5)
    verdict = next(r for r in rows if r["table"] == "anomalies" and r["metric"] == "guarantee"
                   and r["fault"] == "crash" and r["pg"] == "a1")
    assert verdict["text"] == "at-least-once ×2"
    # Table 4 shows the paper's labels, the CSV keeps the raw keys so it joins with the rest.
    cost = [r for r in rows if r["table"] == "failure_cost"]
    assert {(r["topology"], r["pg"], r["fault"]) for r in cost} >= {("sst", "a1", "crash")}


def test_json_holds_what_the_csv_holds(db: tuple[Path, dict]) -> None:
    """``report --json``: one object, every table, the same figures as the CSV rows."""
    from click.testing import CliRunner

    from pgval.cli import main

    path, reliability = db
    res = CliRunner().invoke(main, ["report", "--db", str(path), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    tables = {t["table"]: t for t in report["tables"]}
    assert {"reliability", "throughput", "latency", "failure_cost", "anomalies"} <= set(tables)
    row = next(r for r in tables["reliability"]["rows"]
               if (r["fault"], r["pg"]) == ("crash", "a1"))
    vals = [reliability[("crash", 0)], reliability[("crash", 1)]]
    total = row["values"]["total.reliability"]
    assert total["mean"] == pytest.approx(100 * statistics.fmean(vals), rel=1e-5)
    assert total["sd"] == pytest.approx(100 * statistics.stdev(vals), rel=1e-5)
    assert total["n"] == row["n"] == 2 and total["unit"] == "%"
    verdict = next(r for r in tables["anomalies"]["rows"]
                   if (r["fault"], r["pg"]) == ("crash", "a1"))
    assert verdict["values"]["guarantee"] == "at-least-once ×2"
    assert report["header"].startswith(f"{sum(r['n'] for r in tables['reliability']['rows'])}")
    both = CliRunner().invoke(main, ["report", "--db", str(path), "--json", "--format", "csv"])
    assert both.exit_code == 2 and "two formats" in both.output


def test_html_is_one_self_contained_page(db: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = db
    out = build_report(path, fmt="html", out=tmp_path / "report.html")
    page = Path(out).read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    assert page.count("data:image/png;base64,") == 3 + 7  # matrix + one per run
    assert 'src="http' not in page and "<link" not in page and "<script" not in page
    assert "PD &lt; TO" in page  # escaped


def test_plots_are_written_and_sane(db: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = db
    run_png = plot_run(path, 3, tmp_path / "run.png")
    assert run_png.stat().st_size > 10_000
    h, w = mpimg.imread(run_png).shape[:2]
    assert 800 <= w <= 2500 and 500 <= h <= 1500
    pngs = plot_matrix(path, tmp_path / "m-", Selection(pg="a1"))
    assert [p.name for p in pngs] == ["m-reliability.png", "m-throughput.png", "m-latency.png"]
    for p in pngs:
        assert p.stat().st_size > 10_000
        h, w = mpimg.imread(p).shape[:2]
        assert 600 <= w <= 3500 and 300 <= h <= 1200
    with pytest.raises(ReportError):
        plot_run(path, 999, tmp_path / "none.png")


def test_report_writes_plots_and_links_them(db: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = db
    out = build_report(path, Selection(fault="crash"), fmt="markdown", out=tmp_path / "r.md",
                       plots_dir=tmp_path / "plots")
    md = Path(out).read_text()
    assert "![matrix: reliability](plots/matrix-reliability.png)" in md
    assert (tmp_path / "plots" / "run-3.png").is_file()
    assert len(list((tmp_path / "plots").glob("*.png"))) == 3 + 3


def test_optional_recovery_columns_and_causes(tmp_path: Path) -> None:
    """Recovery columns and causes: shown when present, – where a run lacks them."""
    store = ResultsStore(tmp_path / "new.db")
    for repeat in (0, 1):
        ev, _ = synthetic_run("crash", repeat)
        run_id = store.start_run("validate", "sst", W, pg="a1", fault="crash", repeat=repeat)
        store.finish_run(run_id, ev)
    ev, _ = synthetic_run("delay-lt-timeout", 1)
    lone = store.start_run("validate", "sst", W, pg="a1", fault="delay-lt-timeout")
    store.finish_run(lone, ev)
    store.db["runs"].update(1, {"downtime_s": 4.0, "recovered": 1})
    store.db["runs"].update(2, {"downtime_s": 6.0, "recovered": 0})
    store.db["runs"].update(lone, dict.fromkeys(
        ["downtime_s", "control_max_gap_s", "recovery_throughput_s", "recovery_latency_s",
         "catchup_s", "recovered", "censored"]))
    store.db["unprocessed_causes"].insert_all(
        [{"run_id": lone, "cause": "lost", "count": 3},
         {"run_id": lone, "cause": "skipped", "count": 2}])
    md = build_report(tmp_path / "new.db", fmt="markdown")
    assert isinstance(md, str)
    rec = md.split("## (f) Recovery")[1].split("##")[0]
    crash = next(line for line in rec.splitlines() if line.startswith("| sst | a1 | crash | 2 |"))
    # Downtime and latency back are lower bounds: the synthetic crash's stall lasts until T3.
    assert crash.startswith("| sst | a1 | crash | 2 | ≥ 5.0 ± 1.4 | 2.0 ± 0.0 | – | ≥ 18.0")
    assert "| 1/2 |" in crash
    assert "| sst | a1 | delay-lt-timeout | 1 | – | – | – | – | – | – | – |" in rec
    causes = md.split("## (g)")[1].split("##")[0]
    # The crash runs lost nothing (no rows, nothing unprocessed): zeros, not unknown.
    assert "| sst | a1 | crash | 2 | 0.0 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 |" in causes
    assert "| sst | a1 | delay-lt-timeout | 1 | 0.0 | 2.0 | 0.0 | 3.0 |" in causes


def test_check_runs_without_phases(tmp_path: Path) -> None:
    """`pgval check` runs have no PG, fault or phases: – in the tables, no shading in the plot."""
    store = ResultsStore(tmp_path / "check.db")
    inputs, outputs, _ = synthetic_streams("none", 0)
    unbounded = evaluate(inputs, outputs, "sst", W)
    run_id = store.save_check(unbounded)
    md = build_report(tmp_path / "check.db", Selection(kind="check"), fmt="markdown")
    assert isinstance(md, str)
    assert "| sst | – | – | 1 | 100.00 | – | – | 100.00 | 100.00 |" in md
    png = plot_run(tmp_path / "check.db", run_id, tmp_path / "check.png")
    assert png.stat().st_size > 10_000



def _unknown_db(path: Path) -> Path:
    """Two valid crash runs and one unknown one whose numbers would change every mean."""
    store = ResultsStore(path)
    for repeat in (0, 1):
        ev, _ = synthetic_run("crash", repeat)
        store.finish_run(store.start_run("validate", "sst", W, pg="a1", fault="crash",
                                         repeat=repeat), ev)
    ev, _ = synthetic_run("delay-lt-timeout", 3)  # at-most-once, lower reliability
    bad = store.start_run("validate", "sst", W, pg="a1", fault="crash", repeat=2)
    store.finish_run(bad, ev)
    if "valid" not in store.db["runs"].columns_dict:  # stores before validity existed
        store.db["runs"].add_column("valid", int)
        store.db["runs"].add_column("validity_reasons", str)
    store.db["runs"].update(bad, {"valid": 0, "validity_reasons": json.dumps(
        ["read-back of topic out incomplete: partition 2 not reached", "drain timed out"])})
    return path


def test_unknown_runs_stay_out_of_aggregates(tmp_path: Path) -> None:
    path = _unknown_db(tmp_path / "u.db")
    md = build_report(path, fmt="markdown")
    assert isinstance(md, str)
    assert "1 unknown run left out (use --include-unknown)" in md
    aggregates, runs = md.split("## Runs")
    assert "| sst | a1 | crash | 2 |" in aggregates and "| sst | a1 | crash | 3 |" not in aggregates
    assert "at-least-once ×2" in aggregates and "at-most-once" not in aggregates
    # The run list still shows it, with its first reason.
    assert "unknown: read-back of topic out incomplete: partition 2 not reached (+1 more)" in runs
    assert runs.count("| valid |") == 2
    with_unknown = build_report(path, Selection(include_unknown=True), fmt="markdown")
    assert isinstance(with_unknown, str)
    aggregates = with_unknown.split("## Runs")[0]
    assert "| sst | a1 | crash | 3 |" in aggregates and "at-most-once ×1" in aggregates
    assert "1 unknown run included" in with_unknown and "left out" not in with_unknown
    # The CLI flag reaches the report.
    for extra, needle in (([], "| sst | a1 | crash | 2 |"),
                          (["--include-unknown"], "| sst | a1 | crash | 3 |")):
        result = CliRunner().invoke(main, ["report", "--db", str(path), "--format",
                                           "markdown", *extra])
        assert result.exit_code == 0, result.output
        assert needle in result.output.split("## Runs")[0]  # (h), after it, lists all
    # Matrix plots are aggregates too: they follow the same selection.
    assert len(load_runs(path)) == 2 and len(load_runs(path, Selection(include_unknown=True))) == 3


def test_every_cell_run_by_run_names_unknown_runs_and_bounds(tmp_path: Path) -> None:
    """Table (h): each run's own numbers side by side, the unknown one too (named), with
    the lower-bound mark on the runs whose number the schedule capped."""
    path = _unknown_db(tmp_path / "u.db")
    md = build_report(path, fmt="markdown")
    assert isinstance(md, str)
    table = md.split("## (h) Every cell, run by run")[1].split("\n## ")[0]
    row = next(line for line in table.splitlines() if line.startswith("| sst | a1 | crash |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    runs = load_runs(path, Selection(include_unknown=True))
    assert cells[3] == "3" and cells[5] == "1, 2, 3" and cells[7] == "3"
    assert cells[6] == "at-least-once ×2, 1 unknown"  # verdicts of valid runs only
    want = " / ".join(f"{100 * r.row['reliability']:.2f}" for r in runs)
    assert cells[8] == want
    assert cells[10] == " / ".join(f"{r.row['unprocessed']:,}" for r in runs)
    # The crash runs' stall lasts until T3: their failure cost is a lower bound, each marked.
    costs = cells[-1].split(" / ")
    assert [c.startswith("≥") for c in costs] == [r.bounded("failure_cost") for r in runs]
    assert costs[0] == f"≥{runs[0].row['failure_cost_s']:.1f}"


def test_only_unknown_runs_is_a_plain_error(tmp_path: Path) -> None:
    path = _unknown_db(tmp_path / "u.db")
    ResultsStore(path).db.execute("UPDATE runs SET valid = 0")
    ResultsStore(path).db.conn.commit()
    with pytest.raises(ReportError, match="all 3 runs .* unknown.*--include-unknown"):
        build_report(path, fmt="markdown")
    text = build_report(path, Selection(include_unknown=True), fmt="terminal")
    assert "3 unknown runs included" in str(text)


def test_old_databases_count_as_valid_and_lack_the_input_clock(tmp_path: Path) -> None:
    path = _unknown_db(tmp_path / "old.db")
    with sqlite3.connect(path) as conn:  # as written before validity and the input clock
        for table, column in (("runs", "valid"), ("runs", "validity_reasons"),
                              ("phase_results", "reliable"),
                              ("phase_results", "duplicated_ids"),
                              ("phase_results", "incorrect_ids")):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    md = build_report(path, fmt="markdown")
    assert isinstance(md, str)
    assert "| sst | a1 | crash | 3 |" in md.split("## Runs")[0] and "left out" not in md
    two_clocks = md.split("## (e2)")[1].split("##")[0]
    assert "duplicate occ. (output time)" in two_clocks
    assert "duplicated IDs" not in two_clocks and "reliable IDs" not in two_clocks
    assert "expected IDs (input time)" in two_clocks  # stored by every version


def test_phase_anomalies_on_both_clocks(tmp_path: Path) -> None:
    """The example of tests/test_phase_rows.py stored and reported: control's duplicated ID
    is visible."""
    inputs, outputs = issue_example()
    rt = ResourceTable()
    ev = evaluate(to_inputs(inputs, rt), to_outputs(outputs, rt), "sst", 100,
                  Phases(0, 1_000, 2_000))
    store = ResultsStore(tmp_path / "p.db")
    run_id = store.start_run("validate", "sst", 100, pg="a1", fault="crash")
    store.finish_run(run_id, ev)
    (control,) = [r for r in store.phase_results(run_id) if r["phase"] == "control"]
    assert (control["duplicate"], control["duplicated_ids"], control["reliable"]) == (0, 1, 0)
    md = build_report(tmp_path / "p.db", Selection(include_unknown=True), fmt="markdown")
    assert isinstance(md, str)
    table = md.split("## (e2)")[1].split("##")[0]
    header = next(line for line in table.splitlines() if line.startswith("| topology"))
    assert header == ("| topology | PG | fault | phase | n | duplicate occ. (output time) | "
                      "duplicated IDs (input time) | incorrect occ. (output time) | "
                      "incorrect IDs (input time) | reliable IDs (input time) | "
                      "expected IDs (input time) |")
    assert "| sst | a1 | crash | control | 1 | 0.0 | 1.0 | 0.0 | 0.0 | 0.0 | 1.0 |" in table
    assert "| sst | a1 | crash | failure | 1 | 2.0 | 0.0 | 0.0 | 0.0 | 1.0 | 1.0 |" in table


def test_run_with_nothing_expected_has_no_reliability(tmp_path: Path) -> None:
    """Reliability NULL (nothing expected) is left out of means, never shown as 100 %."""
    store = ResultsStore(tmp_path / "e.db")
    rt = ResourceTable()
    empty = evaluate(to_inputs([], rt), to_outputs([], rt), "sst", W)
    run_id = store.save_check(empty)
    assert store.runs()[0]["reliability"] is None
    assert store.runs()[0]["guarantee"] == "unknown"
    md = build_report(tmp_path / "e.db", Selection(include_unknown=True), fmt="markdown")
    assert isinstance(md, str)
    rel = md.split("## (a)")[1].split("##")[0]
    assert "| sst | – | – | 1 | – | – | – | – | 100.00 |" in rel  # correctness of 0 outputs
    assert "unknown ×1" in md
    runs = md.split("## Runs")[1]
    assert f"| {run_id} | sst | – | – | – | – | unknown | unknown: nothing was expected" in runs


def _shaped_db(path: Path) -> Path:
    """SST a1 none at two rates (2 runs each), one run with 45 s phases, two OIR trials."""
    store = ResultsStore(path)
    ev, _ = synthetic_run("none", 0)
    for rate, phase_s, repeats in ((2000, 20, 2), (20000, 20, 2), (2000, 45, 1)):
        for repeat in range(repeats):
            run_id = store.start_run("validate", "sst", W, pg="a1", fault="none", repeat=repeat,
                                     params={"rate": rate, "phase_seconds": phase_s})
            store.finish_run(run_id, ev)
    for rate in (8000, 16000):
        run_id = store.start_run("validate", "sst", W, pg="a1", fault="none",
                                 params={"rate": rate, "phase_seconds": 20, "oir_trial": True})
        store.finish_run(run_id, ev)
    return path


def test_runs_of_different_shapes_are_never_averaged(tmp_path: Path) -> None:
    path = _shaped_db(tmp_path / "shapes.db")
    md = build_report(path, fmt="markdown")
    assert isinstance(md, str)
    assert "5 runs in 3 groups and 2 OIR trials" in md
    faults, runs = md.split("## Runs")
    aggregates, trials = faults.split("## OIR trials")
    # One row per shape, named by what differs (rate, phases), never a mean over both rates.
    table_a = aggregates.split("## (b)")[0]
    rows = [line for line in table_a.splitlines() if line.startswith("| sst | a1 | none |")]
    assert [line.split(" | ")[3:5] for line in rows] == [
        ["2,000 ev/s, 20 s phases", "2"], ["2,000 ev/s, 45 s phases", "1"],
        ["20,000 ev/s, 20 s phases", "2"]]
    assert "| topology | PG | fault | run shape | n |" in table_a
    # The OIR trials have a table of their own, in rate order, and stay out of the others.
    assert "8,000" not in aggregates and "16,000" not in aggregates
    assert trials.index("| 8,000 |") < trials.index("| 16,000 |")
    assert runs.count("(OIR trial)") == 2
    # The matrix plots keep the shapes apart too (one bar cluster per shape).
    assert len(plot_matrix(path, tmp_path / "m-")) == 3


def test_one_shape_adds_no_column(db: tuple[Path, dict]) -> None:
    path, _ = db
    md = build_report(path, fmt="markdown")
    assert isinstance(md, str) and "run shape" not in md and "OIR" not in md


def test_only_oir_trials_report_their_table_and_no_matrix(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "oir.db")
    ev, _ = synthetic_run("none", 0)
    run_id = store.start_run("validate", "sst", W, pg="a1", fault="none",
                             params={"rate": 4000, "oir_trial": True})
    store.finish_run(run_id, ev)
    md = build_report(tmp_path / "oir.db", fmt="markdown")
    assert isinstance(md, str)
    assert "0 runs in 0 groups and 1 OIR trial" in md and "## OIR trials" in md
    assert "(a) Reliability" not in md
    assert plot_matrix(tmp_path / "oir.db", tmp_path / "m-") == []


def test_crash_points_are_one_group_per_shape_and_verdicts_say_what_the_kill_hit(
        tmp_path: Path) -> None:
    """Runs of crash (timed) are one shape in every cell: labelled "@timed" in a cell whose
    other runs crashed elsewhere and in one where all are timed alike, so the matrix has one
    cluster per crash point. Verdicts say how many kills caught a batch in flight; a phase
    without outputs reads "undefined", not a blank."""
    store = ResultsStore(tmp_path / "crash.db")
    inputs, outputs, phases = synthetic_streams("none", 0)
    ev = evaluate(inputs, outputs, "sst", W, phases)
    # The same stream with the failure phase silent: every output of it comes after T3.
    moved = outputs.ingress_ts.copy()
    moved[(moved >= phases.t2) & (moved < phases.t3)] = phases.t3 + 500
    silent = evaluate(inputs, OutputRecords(**{**vars(outputs), "ingress_ts": moved}), "sst",
                      W, phases)
    assert silent.validation.guarantee == "exactly-once" and silent.metrics.throughput[
        "failure"] == 0
    runs = [("a1", "timed", {"in_flight_batch": 41}, ev),
            ("a1", "timed", {"in_flight_batch": None}, silent),
            ("a1", "during-sink-write", {"hit_ms": phases.t2 + 900, "batch": 42}, ev),
            ("e1", "timed", {"in_flight_batch": None}, ev)]
    for pg, point, detail, evaluation in runs:
        run_id = store.start_run("validate", "sst", W, pg=pg, fault="crash",
                                 params={"crash_point": point})
        store.finish_run(run_id, evaluation, fault_log=[
            {"step": "inject", "fault": "crash", "intended_ms": phases.t2,
             "actual_ms": phases.t2 + 300, "crash_point": point, **detail}])
    groups = group_runs(load_runs(tmp_path / "crash.db"))
    assert [(g.key[1], g.shape_label, g.n) for g in groups] == [
        ("a1", "@during-sink-write", 1), ("a1", "@timed", 2), ("e1", "@timed", 1)]
    md = build_report(tmp_path / "crash.db", fmt="markdown")
    assert isinstance(md, str)
    verdicts = md.split("## (e)")[1].split("##")[0]
    assert "| sst | a1 | crash | @timed | 2 |" in verdicts
    assert "exactly-once ×2 (1/2 hit a batch in flight)" in verdicts
    assert "exactly-once ×1 (1/1 killed during a sink write)" in verdicts
    assert "exactly-once ×1 (0/1 hit a batch in flight)" in verdicts
    latency = md.split("## (c)")[1].split("##")[0]
    failure = next(line for line in latency.splitlines()
                   if line.startswith("| sst | a1 | crash | @timed | failure | 2 |"))
    assert "(n=1, 1 undefined)" in failure
    assert len(plot_matrix(tmp_path / "crash.db", tmp_path / "m-")) == 3
