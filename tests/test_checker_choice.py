"""Who judges a run (``--checker``), and a run judged on Spark as the rest of pgval reads it.

No cluster: the choice by the inputs in Kafka against ``--spark-above``, the options that
do not fit a run, the Spark checker's figures as an evaluation (verdict, counts, phase
rows, throughput; no latency, saying why), the reasons a Spark read gives, and its
tables sealed with the evidence. The Spark
path on a real run is judged in tests/test_canary.py and tests/test_validate.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pgval.checker.metrics import _throughput, phase_throughput
from pgval.checker.validator import PhaseCounts
from pgval.checker.validity import evaluation_reasons
from pgval.config import resolve
from pgval.core.errors import EvidenceInDoubt, UserMistake
from pgval.core.spec import SPARK_ABOVE, RunSpec
from pgval.evidence.bundle import Manifest, seal, verify
from pgval.evidence.run_import import _sums_verified
from pgval.records.phases import Phases
from pgval.run.job_oracle import batch_timeout_s
from pgval.run.spark_judge import checker_heap_mb, choose_checker, judge_timeout_s
from pgval.scale.checker import SparkValidation
from pgval.scale.evaluation import NOT_ON_SPARK, as_evaluation, read_reasons


def test_auto_judges_on_spark_only_above_the_threshold() -> None:
    cfg = RunSpec(topology="sst")
    assert choose_checker(cfg, SPARK_ABOVE).checker == "numpy"
    above = choose_checker(cfg, SPARK_ABOVE + 1)
    assert above.checker == "spark" and above.inputs == SPARK_ABOVE + 1
    assert f"above --spark-above {SPARK_ABOVE:,}" in above.why
    low = RunSpec(topology="mst", spark_above=1_000)
    assert choose_checker(low, 1_000).checker == "numpy"
    assert choose_checker(low, 1_001).checker == "spark"


def test_the_checkers_heap_grows_with_the_run_within_half_the_machine() -> None:
    assert checker_heap_mb(0, machine_mb=24_576) == 1024
    assert checker_heap_mb(100_000_000, machine_mb=24_576) == 1024 + 3814  # 4 GiB judged it
    assert checker_heap_mb(100_000_000, machine_mb=4_096) == 2048
    assert checker_heap_mb(10**9, machine_mb=1_024) == 1024  # never below the base


def test_a_jobs_checker_gets_its_batch_runs_allowance_on_top() -> None:
    assert judge_timeout_s(0) == 300
    assert judge_timeout_s(10_000_000) == 300 + 250  # 25 µs an input
    # The job's batch run is the job's cost: what the local batch oracle would be allowed.
    assert judge_timeout_s(10_000_000, job=True) == 550 + batch_timeout_s(10_000_000) == 1350


def test_what_numpy_alone_judges_stays_with_numpy_and_says_so() -> None:
    job = RunSpec(topology="job", job="examples/jobs/filter.py:build", spark_above=10)
    assert choose_checker(job, 11).checker == "spark"  # its batch run on Spark too
    said = choose_checker(job, 11, reads_kafka=True)
    assert said.checker == "numpy" and "a job that reads Kafka itself" in said.why
    to_files = RunSpec(topology="job", job="examples/jobs/filter.py:build", spark_above=10,
                       sink="files")
    said = choose_checker(to_files, 11)
    assert said.checker == "numpy" and "a job writing to --sink files" in said.why
    said = choose_checker(job, 11, dropped_rows=7)  # only numpy replays the batches
    assert said.checker == "numpy" and "a job whose watermark dropped 7 rows" in said.why
    late = RunSpec(topology="sst", late_events=3, spark_above=10)
    assert choose_checker(late, 11).checker == "numpy"
    for given in ("numpy", "spark", "both"):
        chosen = choose_checker(RunSpec(topology="sst", checker=given), 5)
        assert (chosen.checker, chosen.why) == (given, f"--checker {given}")


@pytest.mark.parametrize("fields,words", [
    ({"checker": "spark", "spark_above": 5}, "--spark-above says when --checker auto"),
    ({"checker": "numpy", "spark_master": "local[2]"}, "--checker numpy runs none"),
    ({"checker": "spark", "spark_master": "spark://elsewhere:7077"}, "give local\\[N\\]"),
    ({"checker": "both", "topology": "job", "job": "examples/jobs/filter.py:build",
      "sink": "files"}, "a job writing to --sink files is judged by --checker numpy"),
    ({"checker": "spark", "pg": "e1", "late_events": 4}, "--late-events is told apart"),
])
def test_options_that_do_not_fit_are_one_sentence(fields: dict, words: str) -> None:
    with pytest.raises(UserMistake, match=words):
        resolve(RunSpec(**{"topology": "sst", **fields}))


def test_the_default_options_leave_a_runs_shape_as_it_was() -> None:
    """A matrix stored before --checker resumes: the defaults are not part of its key."""
    plain = RunSpec(topology="sst").shape()
    assert "checker" not in plain.values and "spark_above" not in plain.values
    assert RunSpec(topology="sst", checker="spark").shape() != plain


def spark_counts(phases: dict[str, PhaseCounts] | None = None) -> SparkValidation:
    rows = phases or {"control": PhaseCounts(100, 100, 0, 0, 0, 100),
                      "failure": PhaseCounts(80, 70, 10, 3, 0, 67, 3, 0),
                      "recovery": PhaseCounts(90, 90, 0, 0, 0, 90)}
    return SparkValidation(
        "sst", expected=270, processed=260, unprocessed=10, duplicate=3, incorrect=0,
        reliable=257, duplicated_ids=3, incorrect_ids=0, output_before_input=0,
        wrong_value=None, outputs=40, correct_outputs=37, expected_outputs=40,
        missing_outputs=1, expected_inputs=None, malformed=2, phases=rows,
        duplicate_inputs=1, first_own={"control": 100, "failure": 60, "recovery": 100},
        output_span_ms=(5_000, 61_000))


def test_the_spark_checkers_figures_are_the_verdict_and_its_counts() -> None:
    phases = Phases(10_000, 30_000, 50_000, 60_000)
    ev = as_evaluation(spark_counts(), "sst", 10_000, phases, malformed_inputs=4)
    v, out = ev.validation, ev.summary()
    assert v.guarantee == "none" and out["guarantee"] == "none"
    assert (out["expected"], out["processed"], out["duplicate"], out["unprocessed"]) == \
        (270, 260, 3, 10)
    assert out["malformed"] == 2 and out["malformed_inputs"] == 4
    assert out["duplicate_inputs"] == 1 and out["missing_outputs"] == 1
    assert out["phases"]["failure"]["unprocessed"] == 10
    assert out["reliability"] == pytest.approx(257 / 270)
    # Throughput by the numpy checker's rule: first processed pairs / the phase's length.
    assert out["reliable_throughput"] == {"control": 5.0, "failure": 3.0,
                                          "recovery": round(100 / 11, 3)}
    # What needs every ID's times says why it is missing, not a number.
    assert out["latency"]["control"]["p50_s"] is None
    assert out["latency"]["control"]["undefined"] == NOT_ON_SPARK
    assert out["failure_cost_s"] is None and out["failure_cost_undefined"] == NOT_ON_SPARK
    assert ev.recovery.recovered is None and ev.recovery.note == NOT_ON_SPARK
    assert len(ev.validation.ids("unprocessed")) == 0  # the sets are Parquet, not here
    # The input the Spark oracle set aside as a retry is a data reason, as numpy's is.
    (reason,) = evaluation_reasons(ev).reasons
    assert reason.kind == "data" and "1 input records repeat an ID" in reason.text


def test_an_unjudged_read_is_unknown() -> None:
    ev = as_evaluation(None, "mst", 10_000, Phases(1, 2, 3, 4), malformed_inputs=0)
    assert ev.validation.guarantee == "unknown" and ev.validation.expected == 0
    reasons = evaluation_reasons(ev)
    assert not reasons.valid and "nothing was expected" in reasons.reasons[0].text


def test_throughput_from_counts_is_the_numpy_rule() -> None:
    """Pairs first processed in a phase over its length; recovery until the last output;
    without phases, control spans the outputs: worked out by hand here, and the numpy
    checker's own path (first-own times) gives the same."""
    phases = Phases(10_000, 40_000, 70_000, 90_000)
    first = np.array([5_000, 12_000, 39_999, 40_000, 69_000, 70_000, 95_000, 99_000])
    span = (20_000, 100_000)  # recovery runs to 100 s: 30 s
    want = {"control": 2 / 30, "failure": 2 / 30, "recovery": 3 / 30}
    counts = {"control": 2, "failure": 2, "recovery": 3}
    assert phase_throughput(counts, span, phases) == pytest.approx(want)
    assert _throughput(first, np.array(span), phases) == pytest.approx(want)
    assert phase_throughput({"control": 8}, (0, 4_000), Phases.unbounded()) == \
        {"control": 2.0, "failure": 0.0, "recovery": 0.0}
    assert phase_throughput({}, None, Phases.unbounded())["control"] == 0.0


def test_a_spark_judged_runs_tables_are_sealed_and_verified(tmp_path: Path) -> None:
    """Every file under evidence/spark is hashed with the rest, made private, and an edit,
    a file added later or a stored key leading out of the folder is refused."""
    run = tmp_path / "run"
    sets = run / "evidence" / "spark" / "sets" / "unprocessed"
    sets.mkdir(parents=True)
    (sets / "part-0.parquet").write_bytes(b"PAR1 ids")
    (sets / "_SUCCESS").write_bytes(b"")
    Manifest(topology="sst", window_ms=1000, resources=1, phases=[0, 1, 2],
             run_id=7).write(run)
    hashes = seal(run, 7)
    assert "evidence/spark/sets/unprocessed/part-0.parquet" in hashes
    assert oct((sets / "part-0.parquet").stat().st_mode & 0o777) == "0o600"
    verify(run, hashes, 7)
    (sets / "part-0.parquet").write_bytes(b"PAR1 other ids")
    with pytest.raises(EvidenceInDoubt, match="part-0.parquet of run 7 differs"):
        verify(run, hashes, 7)
    hashes = seal(run, 7)
    (sets / "part-1.parquet").write_bytes(b"PAR1 more")
    with pytest.raises(EvidenceInDoubt, match="was not there at the end of the run"):
        verify(run, hashes, 7)
    (sets / "part-1.parquet").unlink()
    with pytest.raises(EvidenceInDoubt, match="which is no evidence file"):
        verify(run, {**hashes, "evidence/spark/../run.json": "0" * 64}, 7)
    # An import of the run (its storing failed) reads the same SHA256SUMS.
    assert _sums_verified(run) == hashes
    (sets / "part-2.parquet").write_bytes(b"PAR1 late")
    with pytest.raises(EvidenceInDoubt, match="added after the run"):
        _sums_verified(run)


def partition(topic: str, p: int, end: int, records: int) -> dict:
    return {"topic": topic, "partition": p, "end": end, "records": records,
            "last_offset": end - 1 if records else None}


def test_a_spark_read_reconciles_like_the_numpy_read() -> None:
    inputs = ["r-get", "r-post"]
    read = {"complete": True, "problems": [], "partitions": [
        partition("r-get", 0, 600, 600), partition("r-post", 0, 50, 50),
        partition("r-out", 0, 90, 40)]}  # the output's markers do not count
    assert read_reasons(read, inputs, delivered=600, own_events=50, generator_valid=True) == []
    short = read_reasons(read, inputs, delivered=700, own_events=50, generator_valid=True)
    assert [r.kind for r in short] == ["reconcile"], short
    broken = read_reasons({"complete": False, "problems": ["partition 1 starts at offset 2"]},
                          inputs, 600, 50, True)
    assert [(r.kind, r.text) for r in broken] == [
        ("readback", "the Spark read-back is incomplete: partition 1 starts at offset 2")]


def test_a_job_reading_kafka_itself_is_refused_the_spark_checker_before_anything_starts() -> None:
    """Its IDs are its records' coordinates, which the numpy path alone reads."""
    from pgval.run.setup import checked_job

    cfg = resolve(RunSpec(topology="job", job="examples/jobs/orders.py:build", checker="both",
                          replay={"orders": "examples/inputs/orders.jsonl"}))
    with pytest.raises(UserMistake, match="a job that reads Kafka itself .* --checker numpy"):
        checked_job(cfg)
    assert checked_job(cfg.replace(checker="numpy")).job is not None


def test_a_jobs_spark_figures_are_an_evaluation_too() -> None:
    """A user's job judged on Spark: its figures read as a job's, with nothing per ID."""
    import dataclasses

    judged = dataclasses.replace(spark_counts(), topology="job", wrong_value=2)
    ev = as_evaluation(judged, "job", 1, Phases(10_000, 30_000, 50_000, 60_000), 0)
    out = ev.summary()
    assert ev.topology == "job" and ev.expected.topology == "job"
    assert out["guarantee"] == "none" and out["expected"] == 270
    assert ev.validation.wrong_value == 2
