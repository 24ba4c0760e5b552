"""Users' jobs and sinks on the real cluster (`validate --job`, `--sink`), on one embedded
cluster the runs share (each run has its own topics, checkpoint and driver, as a warm
matrix's cells do). What must hold: every run is valid evidence, the verdict is the one
the crash can give, the batch oracle's rows are kept and a re-check from them (no Spark)
gives the same answer; a built-in job's batch oracle agrees with pgval's own on a real run;
the file sink is exactly-once through its log and not raw; a foreachBatch append
duplicates exactly the rows a cut write had inserted, an upsert keyed by batch id does not.
Each example job runs here under a crash: the windowed count into the file sink, the
enrichment join into the append, the filter into the upsert (and, under a driver crash
after the sink's write, as docs/your-job.md's own first command: tests/test_your_job_doc.py).
A sliding window's rows fan out, and its pairs are judged under a crash too.
Every example job under both crashes, SST and MST as jobs too: experiments/jobs-24."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pgval.config import resolve
from pgval.core.spec import ClusterSpec, RunSpec
from pgval.deploy.warm import WarmDeployments
from pgval.evidence.bundle import EXPECTED, JOB_SOURCE, evidence_dir
from pgval.evidence.recheck import recheck
from pgval.run.experiment import Experiment, ExperimentResult
from tests.conftest import shared_cluster
from tests.test_faults_cluster import assert_driver_restarted

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "jobs"


def job_config(job: str, pg: str, fault: str, **extra: object) -> RunSpec:
    # 4 resources: the enrichment knows an owner for each, the filter keeps 3 of 4. Short
    # phases and warm-up: what is judged is the verdict, not the latency.
    settings: dict[str, object] = dict(
        topology="job", job=job, pg=pg, fault=fault, rate=400, resources=4,
        phase_seconds=10, warmup_seconds=5, warmup_max_seconds=8, trigger_ms=1000,
        window_ms=5000, get_share=0.9, prime_events=2000,
        cluster=ClusterSpec(brokers=1, partitions=3, workers=2))
    return RunSpec(**{**settings, **extra})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmDeployments]:
    """One embedded cluster (1 broker, 2 workers) for every run of this module, up before
    the first test looks at what exists (each checks it leaves nothing of its own)."""
    with shared_cluster(tmp_path_factory.mktemp("jobs"), "jobs-cluster",
                        job_config(f"{EXAMPLES / 'filter.py'}:build", "a1", "crash")) as shared:
        yield shared


def run(warm: WarmDeployments, cfg: RunSpec, run_dir: Path) -> ExperimentResult:
    cfg = resolve(cfg)
    return Experiment(cfg, run_dir, db=run_dir.parent / "results.db",
                      deployment=warm.for_run(cfg)).run()


def assert_rechecks_the_same(run_dir: Path, result: ExperimentResult) -> dict:
    """Evidence holds the job's rows and source; a re-check (no Spark) is the run again."""
    assert (evidence_dir(run_dir) / JOB_SOURCE).is_file()
    rows = pq.read_table(evidence_dir(run_dir) / EXPECTED)
    assert rows.num_rows > 0 and rows.column_names == ["key", "ids", "value"]
    summary = result.summary()
    again = recheck(run_dir, db=run_dir.parent / "results.db").summary()
    for key in ("expected", "processed", "duplicate", "incorrect", "unprocessed",
                "guarantee", "valid", "validity_reasons", "phases", "raw_read", "values"):
        assert again.get(key) == summary.get(key), key
    assert again["anomalies"]["same"] is True, again["anomalies"]
    return summary


def test_sst_as_a_builtin_job_agrees_with_pgvals_own_oracle(warm: WarmDeployments,
                                                           tmp_path: Path) -> None:
    job = tmp_path / "sst_small.py"
    job.write_text("from pgval.topologies.builtin import make_sst\n"
                   "build = make_sst(window_ms=2000, watermark_ms=1000)\n")
    # The driver restarted at the schedule's T3 (--restart at-remove), not at once: the
    # other policy than tests/test_faults_cluster.py's driver crash, judged the same way.
    cfg = job_config(f"{job}:build", "e1", "driver-crash", window_ms=2000,
                     restart="at-remove")
    result = run(warm, cfg, tmp_path / "run")
    fault_steps = {e["step"]: e for e in result.fault_log}
    assert_driver_restarted(result, fault_steps)
    intended = fault_steps["remove"]["intended_ms"]
    assert intended == result.bounds["t3_intended"] <= fault_steps["remove"]["actual_ms"]
    s = assert_rechecks_the_same(tmp_path / "run", result)
    assert s["oracles_agree"] is True, s.get("oracles_disagreement")
    assert s["valid"], s["validity_reasons"]
    assert s["guarantee"] == "exactly-once", s
    oracle = json.loads((evidence_dir(tmp_path / "run") / "run.json").read_text())["job"]
    assert oracle["oracle"]["builtin"] == {"topology": "sst", "window_ms": 2000}


# ---------------------------------------------------------------- sinks other than Kafka
def test_the_file_sink_is_exactly_once_through_its_log_and_not_raw(warm: WarmDeployments,
                                                                   tmp_path: Path) -> None:
    """Halted after a batch's data files and before its log entry, the re-run writes the
    batch again under new names: a reader through ``_spark_metadata`` sees each row once, a
    reader listing the directory sees the first attempt's files too — exactly their IDs."""
    # The windowed example (its windows' rows each carry many IDs): a halt waits for a
    # batch that wrote outputs, one whose windows closed. Its 5 s windows close once per
    # 5 s, in the batch after the one that moved the watermark, so the wait (half the
    # failure phase) must exceed 5 s and two batches: with 10 s phases it was 5 s and
    # one CI run in several timed out (unknown, as it should be). 20 s phases: a 10 s wait.
    cfg = job_config(f"{EXAMPLES / 'per_type_window.py'}:build", "a1", "driver-crash",
                     crash_point="after-sink-write", sink="files", phase_seconds=20)
    result = run(warm, cfg, tmp_path / "run")
    s = assert_rechecks_the_same(tmp_path / "run", result)
    assert s["valid"], s["validity_reasons"]
    assert s["guarantee"] == "exactly-once", s
    inject = next(e for e in result.fault_log if e["step"] == "inject")
    assert inject["halt_stage"] == "sink-log" and inject["outputs_written"] > 0, inject
    raw = pq.read_table(evidence_dir(tmp_path / "run") / "output-raw.parquet")
    orphans = sorted(i for batch, ids in zip(raw.column("batch").to_pylist(),
                                             raw.column("ids").to_pylist(), strict=True)
                     if batch == -1 for i in ids if i >= 0)
    assert orphans, "the halted batch left no data file outside the log"
    assert s["raw_read"]["guarantee"] == "at-least-once", s["raw_read"]
    assert s["raw_read"]["duplicate"] == len(orphans)
    assert s["raw_read"]["duplicated_ids"] == orphans[:20]
    assert "commit" in s["latency_clock"]


def _sink_rows(run_dir: Path) -> list[tuple[int, int, list[int]]]:
    """(batch, written_ms, ids) of every row the SQLite example sinks hold."""
    import sqlite3

    db = sqlite3.connect(run_dir / "sink" / "outputs.sqlite")
    try:
        return [(b, w, json.loads(i)) for b, w, i in db.execute(
            "SELECT batch, written_ms, ids FROM outputs ORDER BY rowid")]
    finally:
        db.close()


@pytest.mark.parametrize(("sink", "verdict"), [("sqlite_append", "at-least-once"),
                                               ("sqlite_upsert", "exactly-once")])
def test_a_crash_during_a_foreach_batch_write(warm: WarmDeployments, tmp_path: Path,
                                              sink: str, verdict: str) -> None:
    """The driver, where a foreachBatch sink writes, killed while a write is under way: the
    plain append keeps the rows it had inserted and the re-run inserts them again — the
    duplicates are exactly those rows; the transactional upsert keyed by batch id rolls the
    cut write back and does it once."""
    sinks = Path(__file__).resolve().parents[1] / "examples" / "sinks"
    # One row per input in both: the enrichment join into the append, the filter into the
    # upsert (the doc's test runs the filter too; every example runs here under a crash).
    job = "enrich.py" if sink == "sqlite_append" else "filter.py"
    # 16 s phases: the driver dies with the write and comes back at T3, which takes it 6-12 s
    # here; with 10 s phases a slow restart left no recovery phase and the run unknown.
    cfg = job_config(f"{EXAMPLES / job}:build", "a1", "crash",
                     crash_point="during-sink-write", sink=f"{sinks / (sink + '.py')}:write",
                     keep_data=True, phase_seconds=16)  # the SQLite file, read below
    result = run(warm, cfg, tmp_path / "run")
    s = assert_rechecks_the_same(tmp_path / "run", result)
    assert s["valid"], s["validity_reasons"]
    inject = next(e for e in result.fault_log if e["step"] == "inject")
    assert inject["write_finished"] is False, inject
    assert s["guarantee"] == verdict, s
    assert s["unprocessed"] == 0 and s["incorrect"] == 0
    if sink == "sqlite_append":
        cut = sorted(i for b, w, ids in _sink_rows(tmp_path / "run")
                     if b == inject["batch"] and w <= inject["effective_ms"] for i in ids)
        assert cut, "the kill landed before the write inserted a row"
        dup = sorted(int(i) for i in result.evaluation.validation.ids("duplicate"))
        assert dup == cut
    assert s["latency_clock"] == "your sink's written_ms"


def test_a_sink_that_adds_a_replayed_batch_to_its_counts_is_caught_by_its_values(
        warm: WarmDeployments, tmp_path: Path) -> None:
    """sqlite_counter.py adds each batch's count to its row (n = n + excluded.n) and
    replaces the IDs: halted after its write, the batch Spark runs again is added twice.
    By IDs the run is exactly-once; its values are not the batch run's, so the outputs of
    that batch are incorrect (wrong-value), the verdict none, each with both values."""
    sinks = Path(__file__).resolve().parents[1] / "examples" / "sinks"
    cfg = job_config(f"{EXAMPLES / 'per_type_window.py'}:build", "a1", "driver-crash",
                     crash_point="after-sink-write",
                     sink=f"{sinks / 'sqlite_counter.py'}:write", phase_seconds=12)
    result = run(warm, cfg, tmp_path / "run")
    s = assert_rechecks_the_same(tmp_path / "run", result)
    assert s["valid"], s["validity_reasons"]
    assert s["values"]["columns"] == "read" and s["values"]["wrong_outputs"] > 0, s["values"]
    assert s["guarantee"] == "none" and s["duplicate"] == 0, s
    assert s["incorrect"] == s["values"]["wrong_value"] > 0
    wrong = [a for a in result.evaluation.anomalies().to_pylist()
             if a["kind"] == "wrong-value"]
    assert len(wrong) == s["values"]["wrong_value"]
    for anomaly in wrong:  # the replayed batch's count, added a second time
        assert json.loads(anomaly["written_value"])["n"] == 2 * json.loads(
            anomaly["expected_value"])["n"]


ORDERS = Path(__file__).resolve().parents[1] / "examples" / "inputs" / "orders.jsonl"


def orders_config(job: str, pg: str, fault: str, **extra: object) -> RunSpec:
    """A job that reads Kafka itself, on the user's own records: the orders sample
    replayed with a skewed customer and out-of-order event time (within the job's 10 s
    watermark), judged over 10 s windows; 30 s phases, so that the halt after the sink's
    write has two windows' closes to find a batch with outputs (at 20 s it twice found
    none)."""
    settings: dict[str, object] = dict(
        replay={"orders": str(ORDERS)}, event_time_field="ts", skew={"customer": "zipf:1.2"},
        disorder="0.2:4000", window_ms=10_000, phase_seconds=30)
    return job_config(f"{EXAMPLES / job}:build", pg, fault, **{**settings, **extra})


def test_a_job_reading_kafka_on_its_own_records_is_judged_by_coordinates(
        warm: WarmDeployments, tmp_path: Path) -> None:
    """orders_avro.py (its own Avro schema decoded with from_avro, its source option and
    record_id()) on the orders as Avro, halted after its sink's write under a1: the re-run
    batch's windows come out twice, each ID a Kafka record's coordinates; pgval's own
    records (the model's, under pgval's key) set aside. The batch oracle decodes the same
    bytes with the same jar (the JSON job's cells: experiments/own-jobs)."""
    from pgval.core.record_ids import coordinates

    cfg = orders_config("orders_avro.py", "a1", "driver-crash",
                        crash_point="after-sink-write", replay={},
                        inputs_spec=str(ORDERS.with_name("orders_avro.toml")),
                        event_time_field=None, skew={}, disorder=None)
    result = run(warm, cfg, tmp_path / "run")
    s = assert_rechecks_the_same(tmp_path / "run", result)
    assert s["valid"], s["validity_reasons"]
    assert s["guarantee"] == "at-least-once" and s["duplicate"] > 0, s
    assert s["unprocessed"] == 0 and s["incorrect"] == 0, s
    slot, _, _ = coordinates(result.evaluation.validation.ids("duplicate"))
    assert set(slot.tolist()) == {0}  # every duplicated ID a record of input "orders"
    manifest = json.loads((evidence_dir(tmp_path / "run") / "run.json").read_text())
    assert manifest["job"]["ids"] == "kafka" and "orders" in manifest["job"]["inputs"]
    assert manifest["control_events"] > 0


def test_a_job_without_ids_is_judged_by_its_rows(warm: WarmDeployments,
                                                tmp_path: Path) -> None:
    """orders_unmodified.py, with nothing added for pgval, halted after its sink's write:
    the re-run batch's rows come out twice, found by comparing rows with the batch run."""
    cfg = orders_config("orders_unmodified.py", "a1", "driver-crash",
                        crash_point="after-sink-write")
    result = run(warm, cfg, tmp_path / "run")
    summary = result.summary()
    again = recheck(tmp_path / "run", db=tmp_path / "results.db").summary()
    for key in ("expected", "duplicate", "unprocessed", "incorrect", "guarantee", "valid"):
        assert again.get(key) == summary.get(key), key
    assert summary["valid"], summary["validity_reasons"]
    assert summary["guarantee"] == "at-least-once" and summary["duplicate"] > 0, summary
    assert summary["by_rows"].startswith("a verdict by rows")
    rows = pq.read_table(evidence_dir(tmp_path / "run") / "expected-rows.parquet")
    assert rows.column_names == ["key", "value", "own"]


def test_a_sliding_window_is_judged_pair_by_pair(warm: WarmDeployments,
                                                 tmp_path: Path) -> None:
    """sliding_windows.py (10 s windows every 5 s: each GET in two windows) halted after
    its sink's write under a1: the re-run batch's windows come out twice. The rows fan out,
    so each (input, window) pair is judged: its duplicated pairs are the halted batch's,
    nothing lost, about two pairs an input; the re-check gives the same. Judged on Spark
    too (``--checker both``: the job's batch run on the run's cluster, its rows and outputs
    as the Spark checker's tables): every figure, phase row and set agrees with numpy's."""
    cfg = job_config(f"{EXAMPLES / 'sliding_windows.py'}:build", "a1", "driver-crash",
                     crash_point="after-sink-write", window_ms=10_000, phase_seconds=15,
                     checker="both")
    result = run(warm, cfg, tmp_path / "run")
    s = assert_rechecks_the_same(tmp_path / "run", result)
    assert s["spark_check"]["agrees"] is True, s["spark_check"]
    assert s["spark_check"]["master"].startswith("spark://")
    assert s["valid"], s["validity_reasons"]
    assert s["guarantee"] == "at-least-once" and s["duplicate"] > 0, s
    assert s["unprocessed"] == 0 and s["incorrect"] == 0, s
    assert 1.8 * s["expected_inputs"] <= s["expected"] <= 2 * s["expected_inputs"], s
    v = result.evaluation.validation
    assert v.duplicate >= len(v.ids("duplicate")) > 0  # pairs, of fewer inputs or as many


def test_late_orders_are_dropped_by_sparks_rule_and_a_lost_batch_is_still_lost(
        warm: WarmDeployments, tmp_path: Path) -> None:
    """orders.py (10 s windows, 10 s watermark) on orders of which 5 % are a minute late,
    under an executor crash, with the e1 sink dropping one batch of real outputs on purpose
    (a SELF-TEST). Spark drops the late orders behind the watermark; the run's batches
    replayed tell exactly which, so they leave the expectation and are reported apart,
    per phase, while the sabotaged batch's inputs — which the rule kept — are unprocessed,
    lost: the one anomaly of the run. The replay ran with the run's watermark at every
    batch, its rows are kept, and a re-check (no Spark) is the run again."""
    from tests.test_canary import sabotaged_ids

    cfg = orders_config("orders.py", "e1", "crash", late="0.05:60000",
                        sabotage="drop-batch:4", phase_seconds=15)
    result = run(warm, cfg, tmp_path / "run")
    s = assert_rechecks_the_same(tmp_path / "run", result)
    assert s["valid"], s["validity_reasons"]
    late = s["dropped_behind_watermark"]
    assert late["told_apart"] and late["run_dropped_rows"] > 0, late
    assert late["inputs"] > 0 and sum(late["phases"].values()) > 0, late
    manifest = json.loads((evidence_dir(tmp_path / "run") / "run.json").read_text())
    replay = manifest["job"]["oracle"]["replay"]
    assert replay["used"] and replay["batches"] > 0, replay
    assert (evidence_dir(tmp_path / "run") / "replay.parquet").is_file()
    v = result.evaluation.validation
    lost = sabotaged_ids(result)
    assert set(v.ids("unprocessed").tolist()) == lost
    assert s["unprocessed_causes"]["counts"]["lost"] == len(lost), s["unprocessed_causes"]
    assert (s["duplicate"], s["incorrect"]) == (0, 0), s
    # No late input is among the lost, and none is expected any more.
    dropped = set(late["examples"])
    assert not dropped & lost
    assert not dropped & set(result.evaluation.expected.id_sorted.tolist())
