"""Input models: the user's own records, their shape (skew, disorder, late), and IDs from
Kafka coordinates, without a cluster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.config import input_model, resolve
from pgval.core.errors import UserMistake
from pgval.core.record_ids import OWN_KEY, coordinates, record_ids
from pgval.datasets.models import (
    InputModel,
    InputModelError,
    InputSource,
    PreparedModel,
    format_time,
    model_from_options,
    zipf_ranks,
)
from pgval.evidence.bundle import coordinate_events
from pgval.kafka.topic_records import TopicRecords
from pgval.topologies.job import check_file, load_or_check

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "examples" / "inputs" / "orders.jsonl"
MAKE = f"{ROOT / 'examples' / 'inputs' / 'orders_make.py'}:make"
JOB = f"{ROOT / 'examples' / 'jobs' / 'orders.py'}:build"
NOW = 1_800_000_000_000


def replay(**shape: object) -> InputModel:
    model = model_from_options({"orders": str(SAMPLE)}, {}, "ts", shape.get("skew", {}),
                               shape.get("disorder"), shape.get("late"), None)
    assert model is not None
    return model


@given(st.lists(st.integers(0, (1 << 16) - 1), min_size=1, max_size=20),
       st.lists(st.integers(0, (1 << 40) - 1), min_size=1, max_size=20), st.integers(0, 1))
def test_an_id_gives_back_its_coordinates(partitions: list[int], offsets: list[int],
                                          slot: int) -> None:
    n = min(len(partitions), len(offsets))
    p, o = np.array(partitions[:n]), np.array(offsets[:n])
    ids = record_ids(slot, p, o)
    assert (ids >= 0).all()
    s, p2, o2 = coordinates(ids)
    assert (s == slot).all() and (p2 == p).all() and (o2 == o).all()
    pairs = set(zip(p.tolist(), o.tolist(), strict=True))
    assert len(np.unique(record_ids(slot, p, o))) == len(pairs)


def test_record_id_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(ValueError):
        record_ids(0, np.array([1 << 16]), np.array([0]))
    with pytest.raises(ValueError):
        record_ids(0, np.array([0]), np.array([1 << 40]))


@settings(max_examples=30, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(1, 60_000), st.integers(0, 1000))
def test_disorder_moves_that_share_back_by_at_most_max(share: float, max_ms: int,
                                                        seed: int) -> None:
    model = PreparedModel(replay(disorder=f"{share}:{max_ms}"), seed)
    ids = np.arange(20_000)
    times = model.event_times(ids, NOW)
    back = NOW - times
    assert (back >= 0).all() and (back <= max_ms).all()
    moved = (back > 0).mean()
    assert abs(moved - share) < 0.03  # a share, not an exact count
    # The same record always gets the same event time, whichever producer makes it.
    assert (model.event_times(ids[::-1], NOW)[::-1] == times).all()


def test_late_records_are_exactly_ms_behind_in_their_share() -> None:
    model = PreparedModel(replay(late="0.05:60000"), 1)
    back = NOW - model.event_times(np.arange(40_000), NOW)
    assert set(np.unique(back)) == {0, 60_000}
    assert abs((back > 0).mean() - 0.05) < 0.005


def test_zipf_skew_makes_the_first_value_the_commonest() -> None:
    model = PreparedModel(replay(skew={"customer": "zipf:1.5"}), 2)
    slots, keys, values = model.records(np.arange(20_000), NOW)
    customers = [json.loads(v)["customer"] for v in values]
    counts = np.unique(customers, return_counts=True)[1]
    shares = np.sort(counts)[::-1] / len(customers)
    expected = 1 / np.arange(1, len(model.streams[0].skew_values["customer"]) + 1) ** 1.5
    expected /= expected.sum()
    assert abs(shares[0] - expected[0]) < 0.02 and shares[0] > 3 * shares[3]
    # The skewed field is the record's Kafka key.
    assert keys[0] == json.dumps(json.loads(values[0])["customer"]).encode()
    assert (slots == 0).all()


def test_zipf_ranks_stay_in_range() -> None:
    ranks = zipf_ranks(np.linspace(0, 0.999999, 1000), 7, 1.0)
    assert ranks.min() == 0 and ranks.max() == 6


def test_replay_restamps_the_event_time_in_the_records_own_format() -> None:
    model = PreparedModel(replay(), 0)
    _, _, values = model.records(np.arange(3), NOW)
    first = json.loads(values[0])
    sample = json.loads(SAMPLE.read_text().splitlines()[0])
    assert first["ts"] == format_time(NOW, "iso-z") and first["ts"].endswith("Z")
    assert {k: v for k, v in first.items() if k != "ts"} == {
        k: v for k, v in sample.items() if k != "ts"}
    assert format_time(NOW, "ms") == NOW


def test_make_gets_its_record_number_a_seeded_rng_and_the_event_time(tmp_path: Path) -> None:
    model = model_from_options({}, {"orders": MAKE}, None, {}, None, None, None)
    assert model is not None
    a = PreparedModel(model, 5).records(np.arange(4), NOW)[2]
    b = PreparedModel(model, 5).records(np.arange(4), NOW)[2]
    c = PreparedModel(model, 6).records(np.arange(4), NOW)[2]
    assert a == b and a != c
    assert json.loads(a[2])["order_id"] == "M-2"


def test_two_inputs_alternate_and_own_records_are_the_models(tmp_path: Path) -> None:
    model = model_from_options({"orders": str(SAMPLE)}, {"more": MAKE}, "ts", {}, None,
                               None, None)
    assert model is not None and model.names == ("orders", "more")
    prepared = PreparedModel(model, 0)
    slots, _, values = prepared.records(np.arange(6), NOW)
    assert slots.tolist() == [0, 1, 0, 1, 0, 1]
    own = prepared.own_records(1, 2, NOW)
    assert len(own) == 2 and json.loads(own[0])["order_id"] == "M--1"


def test_an_inputs_spec_file_holds_the_whole_model(tmp_path: Path) -> None:
    spec = ROOT / "examples" / "inputs" / "orders.toml"
    model = input_model(resolve({"job": JOB, "topology": "job", "inputs_spec": str(spec)}))
    assert model is not None and model.names == ("orders",)
    assert model.skew == (("customer", 1.2),) and model.disorder == (0.2, 4000)
    assert InputModel.from_record(model.to_record()) == model


@pytest.mark.parametrize("fields, said", [
    ({"replay": {"orders": "/nonexistent.jsonl"}}, "cannot read it"),
    ({"replay": {"orders": str(SAMPLE)}, "event_time_field": "nope"}, "no event time in 'nope'"),
    ({"replay": {"orders": str(SAMPLE)}, "skew": {"customer": "pareto:2"}}, "zipf:S"),
    ({"replay": {"orders": str(SAMPLE)}, "skew": {"shoe": "zipf:1"}}, "no records with a field"),
    ({"replay": {"orders": str(SAMPLE)}, "disorder": "2:100"}, "SHARE:MS"),
    ({"replay": {"orders": str(SAMPLE)}, "late": "0.1"}, "SHARE:MS"),
    ({"disorder": "0.1:100"}, "give --replay"),
    ({"replay": {"orders": str(SAMPLE)}, "inputs_spec": "x.toml"}, "give it alone"),
    ({"input_makers": {"orders": "nofile.py:make"}}, "no such file"),
    ({"replay": {"a": str(SAMPLE), "b": str(SAMPLE), "c": str(SAMPLE)}}, "at most 2 inputs"),
])
def test_a_model_that_cannot_be_used_is_one_sentence(fields: dict[str, object],
                                                      said: str) -> None:
    with pytest.raises(UserMistake) as err:
        resolve({"job": JOB, "topology": "job", **fields})
    assert said in str(err.value) and "\n" not in str(err.value)


def test_an_input_model_needs_a_job() -> None:
    with pytest.raises(UserMistake, match="give --job"):
        resolve({"topology": "sst", "replay": {"orders": str(SAMPLE)}})


def test_a_job_reading_the_web_log_cannot_take_a_model() -> None:
    from pgval.run.setup import job_inputs

    cfg = resolve({"job": f"{ROOT / 'examples' / 'jobs' / 'filter.py'}:build",
                   "topology": "job", "replay": {"orders": str(SAMPLE)}})
    with pytest.raises(UserMistake, match="name build's second parameter kafka"):
        job_inputs(cfg)


def test_a_kafka_job_is_known_by_its_second_parameter() -> None:
    assert load_or_check(JOB).reads_kafka
    assert not load_or_check(f"{ROOT / 'examples' / 'jobs' / 'filter.py'}:build").reads_kafka


def test_a_job_file_that_needs_a_session_is_checked_by_its_syntax(tmp_path: Path) -> None:
    job = tmp_path / "udf_job.py"
    job.write_text(
        "from pyspark.sql import functions as F\n"
        "@F.udf('string')\n"
        "def shout(s):\n    return s.upper()\n"
        "def build(spark, kafka):\n    return None\n"
        "build.key = ['customer']\n")
    loaded = load_or_check(f"{job}:build")
    assert loaded.reads_kafka and loaded.key == ("customer",)
    bad = tmp_path / "bad.py"
    bad.write_text("def build(spark):\n    return None\n")
    with pytest.raises(UserMistake, match="two arguments"):
        check_file(f"{bad}:build")


def test_coordinate_events_set_aside_pgvals_own_records_by_their_key() -> None:
    recs = TopicRecords(keys=[b"k", OWN_KEY, None], values=[b"{}", b"{}", b"{}"],
                        timestamps=[5, 6, 7], partitions=[0, 1, 1], offsets=[10, 0, 1])
    events, own = coordinate_events({"get": recs})
    assert events.id.tolist() == record_ids(0, np.array([0, 1]), np.array([10, 1])).tolist()
    assert own.tolist() == record_ids(0, np.array([1]), np.array([0])).tolist()
    assert events.ingress_ts.tolist() == [5, 7]


def test_the_sources_of_an_input_source_are_stored_and_read_back() -> None:
    src = InputSource("orders", "replay", str(SAMPLE), "ts")
    assert InputSource(**src.to_record()) == src
    with pytest.raises(InputModelError):
        model_from_options({"bad name!": str(SAMPLE)}, {}, None, {}, None, None, None)


def _records(keys: list[bytes | None], values: list[bytes], ts: list[int]) -> TopicRecords:
    n = len(values)
    return TopicRecords(keys=keys, values=values, timestamps=ts, partitions=[0] * n,
                        offsets=list(range(n)))


@pytest.mark.parametrize("written, verdict", [
    (["a1", "b1", "c1"], "exactly-once"),
    (["a1", "b1", "b1", "c1"], "at-least-once"),
    (["a1", "c1"], "at-most-once"),
    (["a1", "b2", "c1"], "none"),  # b with another value: incorrect, and b's row missing
    (["a1", "b1", "c1", "d1"], "none"),  # a row the batch never produced
    (["a1", "own", "b1", "c1", "own"], "exactly-once"),  # pgval's own row again: aside
])
def test_a_job_without_ids_is_judged_by_its_rows(written: list[str], verdict: str) -> None:
    """Each expected row one synthetic input: found once, duplicated, missing, or with
    other values; pgval's own rows (priming windows) set aside on both sides, however
    often the stream wrote them."""
    import pyarrow as pa

    from pgval.checker.evaluate import by_rows, evaluate
    from pgval.evidence.bundle import EXPECTED_ROWS_SCHEMA, rows_streams

    def value(text: str) -> str:
        return json.dumps({"_pgval_key": text[0], "n": int(text[1:])})

    rows = pa.table({"key": ["a", "b", "c", "own"],
                     "value": [value("a1"), value("b1"), value("c1"), "{}"],
                     "own": [False, False, False, True]}, schema=EXPECTED_ROWS_SCHEMA)
    out = ["own", *written]
    output = _records([w[0].encode() if w != "own" else b"own" for w in out],
                      [value(w).encode() if w != "own" else b"{}" for w in out],
                      list(range(100, 100 + 10 * len(out), 10)))
    streams, expected = rows_streams(rows, output)
    ev = by_rows(evaluate(streams.events, streams.outputs, "job", 1, expected=expected))
    assert ev.validation.guarantee == verdict
    assert streams.control_outputs == out.count("own") and ev.validation.expected == 3
    assert ev.summary()["by_rows"].startswith("a verdict by rows")
    assert ev.metrics.latency["control"].p50 is None
    from pgval.checker.render import notes

    assert notes(ev)[0].startswith("a verdict by rows")


@pytest.mark.parametrize("trigger, said", [
    ("available-now", "keeps reading through its phases"),
    ("sometimes", "expected processing-time:INTERVAL or real-time:INTERVAL"),
    ("real-time:", "expected processing-time:INTERVAL"),
])
def test_a_trigger_pgval_cannot_run_is_one_sentence(trigger: str, said: str) -> None:
    with pytest.raises(UserMistake, match=said):
        resolve({"job": JOB, "topology": "job", "trigger": trigger})


def test_real_time_mode_needs_sparks_own_kafka_sink() -> None:
    with pytest.raises(UserMistake, match="use --pg a1 with --sink kafka"):
        resolve({"job": JOB, "topology": "job", "trigger": "real-time:5 seconds",
                 "pg": "e1"})
    spec = resolve({"job": JOB, "topology": "job", "trigger": "real-time:5 seconds",
                    "replay": {"orders": str(SAMPLE)}, "cluster": {"cores_per_worker": 2}})
    assert spec.trigger == "real-time:5 seconds"


def test_real_time_mode_with_fewer_cores_than_partitions_is_refused_before_a_start() -> None:
    """Spark's Real-time Mode holds a core per partition for a whole batch; a partition
    whose task finds none is never read (a third of the inputs, 3 partitions on 2 cores,
    seen on the real cluster): refused with the cores it needs, counting every input the
    run has (the web log's two topics, a model's inputs)."""
    one_input = {"job": JOB, "topology": "job", "trigger": "real-time:5 seconds",
                 "replay": {"orders": str(SAMPLE)}}
    with pytest.raises(UserMistake, match=r"the 3 Kafka partitions .* the cluster has 2 "
                       r"\(--workers 2 x --cores-per-worker 1\); give at least 3 cores"):
        resolve(one_input)
    web_log = {"job": JOB, "topology": "job", "trigger": "real-time:5 seconds",
               "cluster": {"cores_per_worker": 2}}
    with pytest.raises(UserMistake, match="the 6 Kafka partitions"):
        resolve(web_log)
    two_inputs = {**one_input, "replay": {"a": str(SAMPLE), "b": str(SAMPLE)},
                  "cluster": {"cores_per_worker": 2}}
    with pytest.raises(UserMistake, match="the 6 Kafka partitions"):
        resolve(two_inputs)
    assert resolve({**one_input, "cluster": {"partitions": 2}}).cluster.partitions == 2
    assert resolve({**two_inputs, "cluster": {"cores_per_worker": 2, "workers": 3}}
                   ).cluster.workers == 3
    assert resolve({**web_log, "cluster": {"cores_per_worker": 3}}).trigger


def test_a_jobs_own_trigger_is_read_from_build(tmp_path: Path) -> None:
    job = tmp_path / "rtm.py"
    job.write_text("def build(spark, kafka):\n    return None\n"
                   "build.trigger = 'real-time:5 seconds'\n")
    assert load_or_check(f"{job}:build").trigger == "real-time:5 seconds"
    job.write_text("def build(spark, kafka):\n    return None\nbuild.trigger = 'soon'\n")
    with pytest.raises(UserMistake, match="build.trigger 'soon'"):
        load_or_check(f"{job}:build")


def test_a_value_the_user_typed_is_printed_as_typed(tmp_path: Path) -> None:
    """``:x:`` in a value stays text (no emoji code), in one line, exit 2."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pgval.cli", "validate", "--job", JOB,
                           "--replay", f"orders={SAMPLE}", "--skew", "c=zipf:x",
                           "--db", str(tmp_path / "r.db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--skew c=zipf:x: expected FIELD=zipf:S" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()
