"""A user's job run as a batch (the oracle of `pgval validate --job`): the three example
jobs on a local Spark session, each result against the same job written out by hand in
Python, and the rows turned into the validator's expectation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pgval.oracle.rows import expected_from_rows
from pgval.topologies.job import JobError, load
from tests.spark_local import local_session
from tests.strategies import to_inputs

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "jobs"
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    yield from local_session("pgval-job-batch")


def _events(n: int = 400) -> list[dict]:
    rng = np.random.default_rng(3)
    return [{"id": i, "type": "GET" if rng.random() < 0.9 else "POST",
             "resource": f"r{int(rng.integers(16)):04d}", "event_ts": T0 + 37 * i,
             "ingress_ts": T0 + 37 * i + 5, "partition": i % 3, "offset": i // 3}
            for i in range(n)]


def _tables(events: list[dict]) -> dict[str, pa.Table]:
    """The events as the raw Kafka records of each topic (JSON value, partition, offset)."""
    fields = ("id", "type", "resource", "event_ts")
    return {name: pa.table({
        "value": pa.array([json.dumps({f: e[f] for f in fields}).encode()
                           for e in events if e["type"] == kind], pa.binary()),
        "partition": pa.array([e["partition"] for e in events if e["type"] == kind],
                              pa.int32()),
        "offset": pa.array([e["offset"] for e in events if e["type"] == kind], pa.int64())})
        for name, kind in (("get", "GET"), ("post", "POST"))}


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _by_hand(name: str, events: list[dict]) -> dict[tuple, list[int]]:
    """Each example's rows, key → IDs ascending, the slow way."""
    out: dict[tuple, list[int]] = {}
    for e in events:
        if name == "per_type_window":
            key: tuple = ((e["event_ts"] // 5000) * 5000, e["type"])
        elif name == "enrich":
            if e["type"] != "GET" or int(e["resource"][1:]) >= 12:
                continue
            key = (e["id"],)
        else:
            if e["type"] != "GET" or e["resource"] not in ("r0001", "r0002", "r0003"):
                continue
            key = (e["id"],)
        out.setdefault(key, []).append(e["id"])
    return {k: sorted(v) for k, v in out.items()}


def _parsed(name: str, key: str) -> tuple:
    obj = json.loads(key)
    if name == "per_type_window":
        return (_ms(obj["window_start"]), obj["type"])
    return (obj["id"],)


@pytest.mark.parametrize("name", ["per_type_window", "enrich", "filter"])
def test_an_example_job_as_a_batch_is_the_job_by_hand(spark: object, name: str,
                                                      tmp_path: Path) -> None:
    from pgval.topologies.batch import batch_rows

    events = _events()
    job = load(f"{EXAMPLES / (name + '.py')}:build")
    keys, ids, offsets = batch_rows(job, spark, _tables(events), tmp_path)  # type: ignore[arg-type]
    got = {_parsed(name, k): sorted(ids[offsets[i]:offsets[i + 1]].tolist())
           for i, k in enumerate(keys)}
    want = _by_hand(name, events)
    assert got == want
    assert len(keys) == len(set(keys))  # one row per key
    expected = expected_from_rows(keys, ids, offsets, to_inputs(events))
    assert expected.id_sorted.tolist() == sorted(i for v in want.values() for i in v)


def test_mst_by_aggregation_gives_msts_rows(spark: object, tmp_path: Path) -> None:
    """The example that drops the join's pairs (docs/performance.md, "Where MST's time
    goes") computes MST's rows: per (window, resource) with a GET and a POST, all their
    IDs — the same as pgval's own MST oracle."""
    from pgval.oracle import expected_outputs
    from pgval.topologies.batch import batch_rows

    events = _events(2000)
    job = load(f"{EXAMPLES / 'mst_by_aggregation.py'}:build")
    keys, ids, offsets = batch_rows(job, spark, _tables(events), tmp_path)  # type: ignore[arg-type]
    got = {(_ms(json.loads(k)["window_start"]) if isinstance(json.loads(k)["window_start"], str)
            else json.loads(k)["window_start"], json.loads(k)["resource"]):
           sorted(ids[offsets[i]:offsets[i + 1]].tolist()) for i, k in enumerate(keys)}
    sides: dict[tuple, dict[str, list[int]]] = {}
    for e in events:
        key = ((e["event_ts"] // 10_000) * 10_000, e["resource"])
        sides.setdefault(key, {"GET": [], "POST": []})[e["type"]].append(e["id"])
    want = {k: sorted(v["GET"] + v["POST"]) for k, v in sides.items() if v["GET"] and v["POST"]}
    assert got == want and len(want) > 10
    oracle = expected_outputs(to_inputs(events), "mst", 10_000)
    assert sorted(oracle.ids.tolist()) == sorted(i for v in want.values() for i in v)


def test_the_batch_oracles_heap_grows_with_the_run_within_half_the_machine() -> None:
    from pgval.run.job_oracle import BASE_HEAP_MB, batch_heap_mb

    assert batch_heap_mb(0, machine_mb=24_000) == BASE_HEAP_MB == 1024
    assert batch_heap_mb(21_000_000, machine_mb=24_000) == 1024 + 1281
    assert batch_heap_mb(10**10, machine_mb=24_000) == 12_000
    assert batch_heap_mb(10**10, machine_mb=1_000) == BASE_HEAP_MB  # never below the base


def test_a_batch_result_without_ids_is_refused(spark: object, tmp_path: Path) -> None:
    from pgval.topologies.batch import batch_rows

    (tmp_path / "no_ids.py").write_text(
        "def build(spark, sources):\n    return sources['get'].select('id', 'resource')\n")
    with pytest.raises(JobError, match="has no 'ids' column"):
        batch_rows(load(f"{tmp_path / 'no_ids.py'}:build"), spark,  # type: ignore[arg-type]
                   _tables(_events(20)), tmp_path)


def test_a_job_whose_rows_a_rerun_would_not_repeat_is_refused(spark: object,
                                                               tmp_path: Path) -> None:
    from pgval.topologies.batch import batch_rows

    (tmp_path / "clock.py").write_text(
        "from pyspark.sql import functions as F\n"
        "def build(spark, sources):\n"
        "    return sources['get'].select('id', F.current_timestamp().alias('seen'),\n"
        "                                 F.array('id').alias('ids'))\n"
        "build.key = ['id']\n")
    with pytest.raises(JobError, match=r"calls current_timestamp\(\), whose value a re-run"):
        batch_rows(load(f"{tmp_path / 'clock.py'}:build"), spark,  # type: ignore[arg-type]
                   _tables(_events(20)), tmp_path)


@pytest.mark.parametrize(("plan", "found"), [
    ("Project [id#1, current_timestamp() AS seen#5]", "current_timestamp"),
    ("Project [rand(42) AS r#3]", "rand"),
    ("Project [uuid(Some(7)) AS u#3]", "uuid"),
    ("Filter (operand#3 > 0)\n+- Project [brand(x) AS b]", None),  # a UDF named brand
    ("Aggregate [window#3], [count(1) AS n#9, collect_list(id#1, 0, 0) AS ids#10]", None),
    # As Spark 4.2 prints them: order-dependent aggregates.
    ("Aggregate [g#1L], [g#1L, first(id#0L, false) AS x#2L]", "first"),
    ("Aggregate [g#1L], [g#1L, last(id#0L, true) AS x#6L]", "last"),
    ("Aggregate [g#1L], [g#1L, any_value(id#0L, false) AS x#10L]", "any_value"),
    ("Project [first_name#3, last_seen#4]", None),  # columns, not calls
])
def test_the_functions_a_rerun_would_not_repeat_are_found_in_a_plan(plan: str,
                                                                    found: str | None) -> None:
    from pgval.topologies.job import not_repeatable

    assert not_repeatable(plan) == found


def test_a_streaming_only_dedup_has_its_batch_meaning_in_the_batch_oracle(
        spark: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dropDuplicatesWithinWatermark`` is refused by Spark on a batch DataFrame; in the
    batch oracle it is ``dropDuplicates`` on the same columns, and a streaming DataFrame
    keeps Spark's own call (its plan still deduplicates within the watermark)."""
    from pyspark.errors import AnalysisException

    from pgval.topologies.batch import batch_meanings

    rows = [("M-1", "a", 1), ("M-1", "a", 2), ("M-2", "b", 3), ("M-3", "c", 4),
            ("M-3", "c", 5)]
    df = spark.createDataFrame(rows, "order_id STRING, customer STRING, n INT")
    kind = type(df)
    # Spark's own call, whatever an earlier test of this process (a lint's session) gave
    # it; undone after this test: the batch oracle's process is the only one that keeps it.
    own = kind.dropDuplicatesWithinWatermark
    monkeypatch.setattr(kind, "dropDuplicatesWithinWatermark", getattr(own, "spark_own", own))
    with pytest.raises(AnalysisException, match="not supported with batch"):
        df.dropDuplicatesWithinWatermark(["order_id"]).collect()
    batch_meanings(spark)
    batch_meanings(spark)  # once is enough: a second call changes nothing
    got = df.dropDuplicatesWithinWatermark(["order_id"]).select("order_id", "customer")
    assert sorted(map(tuple, got.collect())) == [("M-1", "a"), ("M-2", "b"), ("M-3", "c")]
    stream = spark.readStream.format("rate").load().withWatermark("timestamp", "1 second")
    kept = stream.dropDuplicatesWithinWatermark(["value"])
    plan = kept._jdf.queryExecution().logical().toString()
    assert kept.isStreaming and "DeduplicateWithinWatermark" in plan, plan
