"""pgval's own streaming plan (topologies/query.py) against a per-record reference.

The plan is the one the driver runs, on a streaming file source instead of Kafka: the same
parsing (:func:`pgval.topologies.query.events`), watermark, windows, join, aggregation and
append mode, fed in micro-batches. Inputs carry duplicated IDs the way Kafka can hold them
(a retried produce: the same value twice; the same ID at another key; a GET and a POST
sharing an ID), so the test pins docs/semantics.md's rule: every *record* is one
occurrence, in SST and in MST alike. The reference below is written plainly from that
page, record by record; the validator is then judged on Spark's real output against the
loop-by-loop reference of Algorithms 1 and 3 (tests/reference.py).

Local Spark, no cluster: about 10 s per topology on a 2-core machine.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgval.checker.validator import validate
from pgval.oracle import expected_outputs
from tests.reference import ref_validate
from tests.spark_local import local_session
from tests.strategies import to_inputs, to_outputs

pyspark_sql = pytest.importorskip("pyspark.sql")

T0 = 1_700_000_000_000
W = 100
RESOURCES = ["r0", "r1", "r2", "r3"]
CLOSING = "close"  # the closing events' resource: their windows are not judged
RAW_DDL = "value STRING, partition INT, offset LONG"


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    yield from local_session("pgval-streaming-plan", cores=2)


def records_with_duplicates(seed: int, n: int = 300) -> list[dict]:
    """Input records (one per Kafka record) where some IDs occur more than once.

    Each record has its topic's partition and a dense offset in it, and an ingress time
    that grows with its position (as LogAppendTime would).
    """
    rng = random.Random(seed)
    recs = [{"id": i, "type": "GET" if rng.random() < 0.6 else "POST",
             "resource": rng.choice(RESOURCES), "event_ts": T0 + rng.randrange(0, 1000)}
            for i in range(1, n + 1)]
    for _ in range(25):  # a retried produce: the same value again
        recs.append(dict(rng.choice(recs)))
    for _ in range(10):  # the same ID at another key (a producer bug, not a retry)
        recs.append({**rng.choice(recs), "resource": rng.choice(RESOURCES),
                     "event_ts": T0 + rng.randrange(0, 1000)})
    for _ in range(10):  # a GET and a POST sharing an ID
        src = rng.choice(recs)
        recs.append({**src, "type": "POST" if src["type"] == "GET" else "GET"})
    rng.shuffle(recs)
    next_offset: dict[tuple[str, int], int] = defaultdict(int)
    for k, r in enumerate(recs):
        r["partition"] = rng.randrange(3)
        r["offset"] = next_offset[(r["type"], r["partition"])]
        next_offset[(r["type"], r["partition"])] += 1
        r["ingress_ts"] = T0 + 2000 + k
    return recs


def reference_outputs(recs: list[dict], topology: str) -> dict[tuple[int, str], tuple]:
    """docs/semantics.md record by record: each record read is one occurrence."""
    keys: dict[tuple[int, str], dict[str, list[int]]] = defaultdict(
        lambda: {"GET": [], "POST": []})
    for r in recs:
        window_start = (r["event_ts"] // W) * W
        keys[(window_start, r["resource"])][r["type"]].append(r["id"])
    out = {}
    for key, by_type in keys.items():
        if topology == "sst" and by_type["GET"]:
            out[key] = (len(by_type["GET"]), sorted(by_type["GET"]))
        elif topology == "mst" and by_type["GET"] and by_type["POST"]:
            out[key] = (len(by_type["GET"]), len(by_type["POST"]),
                        sorted(by_type["GET"] + by_type["POST"]))
    return out


def write_batch(folder: Path, name: str, recs: list[dict]) -> None:
    """One file of raw records, renamed into place so the file source sees it whole."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({
        "value": json.dumps({k: r[k] for k in ("id", "type", "resource", "event_ts")}),
        "partition": r["partition"], "offset": r["offset"]}) + "\n" for r in recs))
    tmp.rename(folder / f"{name}.json")


def closing(ts: int, first_id: int) -> list[dict]:
    """One GET and one POST past every window: the next batch's watermark passes them."""
    return [{"id": first_id - k, "type": t, "resource": CLOSING, "event_ts": ts,
             "partition": 0, "offset": 10_000 + ts - T0 + k}
            for k, t in enumerate(("GET", "POST"))]


def run_plan(spark, tmp: Path, topology: str, recs: list[dict]) -> list[dict]:
    """Feed ``recs`` in three micro-batches through the driver's plan; the emitted outputs."""
    from pgval.topologies.query import plan

    dirs = {t: tmp / t for t in ("GET", "POST")}
    for d in dirs.values():
        d.mkdir(parents=True)
    raw = {t: spark.readStream.schema(RAW_DDL).json(str(d)) for t, d in dirs.items()}
    out = plan(topology, raw["GET"], raw["POST"] if topology == "mst" else None, W, 0)
    name = f"pgval_plan_{topology}_{tmp.name}".replace("-", "_")
    query = (out.writeStream.format("memory").queryName(name).outputMode("append")
             .option("checkpointLocation", str(tmp / "checkpoint")).start())
    try:
        batches = [recs, closing(T0 + 10_000, -1), closing(T0 + 20_000, -10)]
        for k, batch in enumerate(batches):
            for t, d in dirs.items():
                write_batch(d, f"batch-{k}", [r for r in batch if r["type"] == t])
            query.processAllAvailable()
        rows = spark.table(name).collect()
    finally:
        query.stop()
    outputs = [json.loads(r.value) for r in rows]
    assert all(r.key == o["resource"] for r, o in zip(rows, outputs, strict=True))
    return [o for o in outputs if o["resource"] != CLOSING]


@pytest.mark.parametrize("topology", ["sst", "mst"])
def test_streaming_plan_carries_every_record_and_the_validator_counts_it(
        spark, tmp_path: Path, topology: str) -> None:
    recs = records_with_duplicates(seed=11 if topology == "sst" else 12)
    outputs = run_plan(spark, tmp_path, topology, recs)

    got = {}
    for o in outputs:
        key = (o["window_start"], o["resource"])
        assert key not in got, f"two outputs for {key}"  # append mode: one per key
        assert o["window_end"] - o["window_start"] == W
        got[key] = ((o["count"], sorted(o["ids"])) if topology == "sst"
                    else (o["gets"], o["posts"], sorted(o["ids"])))
    want = reference_outputs(recs, topology)
    assert got == want
    # The data really has what the test is about: an ID listed twice in one output.
    assert any(len(v[-1]) > len(set(v[-1])) for v in want.values())

    # The validator on Spark's real output, against the loop-by-loop reference.
    events = [{k: r[k] for k in ("id", "type", "resource", "event_ts", "ingress_ts")}
              for r in recs]
    produced = [{**o, "ingress_ts": T0 + 5000 + k} for k, o in enumerate(outputs)]
    inputs = to_inputs(events)
    expected = expected_outputs(inputs, topology, W)
    v = validate(expected, to_outputs(produced, inputs.resources))
    ref = ref_validate(events, produced, topology, W)
    assert (v.expected, v.processed, v.unprocessed, v.duplicate, v.incorrect, v.reliable) == (
        ref.expected, ref.processed, ref.unprocessed, ref.duplicate, ref.incorrect,
        ref.reliable)
    read = [r for r in recs if topology == "mst" or r["type"] == "GET"]
    assert v.duplicate_inputs == len(read) - len({r["id"] for r in read}) > 0
    assert v.duplicate > 0  # a duplicated input shows as a duplicate: Spark did not hide it
