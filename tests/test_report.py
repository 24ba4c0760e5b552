"""`pgval report` and the plots, on a small database of realistic synthetic runs.

The runs go through the real path (oracle → validator → metrics → ResultsStore),
so the report is tested against what an experiment would store, not against a
hand-made schema.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from pgval.evaluate import Evaluation, evaluate
from pgval.oracle import expected_outputs
from pgval.phases import Phases
from pgval.plots import plot_matrix, plot_run
from pgval.records import InputEvents, OutputRecords, ResourceTable
from pgval.report import ReportError, Selection, build_report, load_runs
from pgval.store import ResultsStore
from tests.strategies import to_inputs, to_outputs

T1 = 1_700_000_000_000
W = 2_000
WARMUP_MS = 4_000
PHASE_MS = 16_000
RATE = 100  # events/s
RESOURCES = 4


def synthetic_streams(fault: str, repeat: int) -> tuple[InputEvents, OutputRecords, Phases]:
    """A run of SST at RATE ev/s; the fault delays, drops or repeats outputs in failure.

    * ``none``: every window emitted once, 400 ms after it closes.
    * ``crash``: windows closing in failure are held until T3 + 1 s, and ``repeat``
      + 1 of them are emitted twice (at-least-once after a restart).
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
        if fault == "crash" and in_failure:
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
    assert re.search(r"\| SST \| A1 \| Process crash \| 2 \| \d+\.\d ± \d+\.\d \|", md)
    assert "| SST | A1 | No fault | 2 |" in md
    # Verdicts and the latency table with Karimov's definition beside the paper's.
    assert "at-least-once ×2" in md and "exactly-once ×2" in md
    assert "exactly-once ×1, at-most-once ×1" in md  # delay-lt drops `repeat` outputs
    assert "p50 s (Karimov)" in md
    # Optional tables of newer stores are absent here rather than empty.
    assert "(f) Recovery" not in md and "(g) Why events" not in md


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
    """A store with the newer columns/table: shown when present, – where a run lacks them."""
    store = ResultsStore(tmp_path / "new.db")
    for repeat in (0, 1):
        ev, _ = synthetic_run("crash", repeat)
        run_id = store.start_run("validate", "sst", W, pg="a1", fault="crash", repeat=repeat)
        store.finish_run(run_id, ev)
    ev, _ = synthetic_run("delay-lt-timeout", 1)
    lone = store.start_run("validate", "sst", W, pg="a1", fault="delay-lt-timeout")
    store.finish_run(lone, ev)
    store.db["runs"].add_column("downtime_s", float)
    store.db["runs"].add_column("recovered", int)
    store.db["runs"].update(1, {"downtime_s": 4.0, "recovered": 1})
    store.db["runs"].update(2, {"downtime_s": 6.0, "recovered": 0})
    store.db["unprocessed_causes"].insert_all(
        [{"run_id": lone, "cause": "lost", "count": 3}])
    md = build_report(tmp_path / "new.db", fmt="markdown")
    assert isinstance(md, str)
    rec = md.split("## (f) Recovery")[1].split("##")[0]
    assert "| sst | a1 | crash | 2 | 5.0 ± 1.4 | 1/2 |" in rec
    assert "| sst | a1 | delay-lt-timeout | 1 | – | – |" in rec
    causes = md.split("## (g)")[1].split("##")[0]
    # The crash runs lost nothing (no rows, nothing unprocessed): zeros, not unknown.
    assert "| sst | a1 | crash | 2 | 0.0 ± 0.0 | 0.0 ± 0.0 | 0.0 ± 0.0 |" in causes
    assert "| sst | a1 | delay-lt-timeout | 1 | 0.0 | 0.0 | 3.0 |" in causes


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

