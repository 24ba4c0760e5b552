"""The vectorised fast paths give exactly what the slow ones gave.

Correctness only, never timing: the vectorised Kafka values equal orjson's bytes, a read
batch turned into columns equals a record-by-record read (same columns, same proof of
completeness), Arrow and list inputs parse alike, and on a real broker the generator's
delivered count equals what ``read_topic`` gets back, in the run's own topics.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgval.core.errors import PgvalError
from pgval.core.schema import Topics
from pgval.datasets import (
    GeneratorConfig,
    KafkaSink,
    encode_json_lines,
    encode_values,
    generate_range,
)
from pgval.host.machine import describe_machine
from pgval.kafka.admin import create_topics
from pgval.kafka.broker import KafkaCluster
from pgval.kafka.reader import _Columns, merge_ranges, read_topic, read_topics, split_tasks
from pgval.kafka.topic_records import RECORD_SCHEMA, TopicRecords
from pgval.records.parse import KAFKA_INPUT_SCHEMA, parse_values
from tests.conftest import wait_until

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- encoding


@pytest.mark.parametrize("start, resources", [(9_990, 16), (99_995, 7), (0, 10_001),
                                              (10**17 - 5, 3)])
def test_values_equal_orjson_across_layouts(start: int, resources: int) -> None:
    """Ids crossing a power of ten, GET and POST, and resource names of two widths give
    several layout groups in one chunk; each value still equals orjson's bytes, in order."""
    cfg = GeneratorConfig(resources=resources, get_share=0.5, seed=3)
    batch = generate_range(cfg, 0, start, 40)
    if resources == 10_001:  # names r9999 and r10000 side by side
        batch.resource[::2] = 10_000
        batch.resource[1::2] = 9_999
    for ts in (1_763_000_000_123, np.arange(40, dtype=np.int64) * 997 + 5):
        expected = [orjson.dumps(r) for r in batch.records(ts)]
        assert encode_values(batch, ts) == expected
        lines = encode_json_lines(batch, ts, 7)
        assert lines == b"".join(orjson.dumps({**r, "ingress_ts": 7}) + b"\n"
                                 for r in batch.records(ts))


def test_negative_numbers_are_refused() -> None:
    batch = generate_range(GeneratorConfig(), 0, 0, 3)
    with pytest.raises(ValueError):
        encode_values(batch, -1)
    with pytest.raises(ValueError):
        encode_values(batch, np.array([1, -2, 3]))


def test_kafka_sink_topics_default_and_prefixed() -> None:
    assert KafkaSink("b:1").topics == Topics()
    sink = KafkaSink("b:1", topics=Topics.with_prefix("run7-"))
    assert "run7-get/run7-post" in sink.describe()


# --------------------------------------------------------------------------- read columns


def _reference(batches: list[list[Message]], end: dict[int, int]
               ) -> tuple[list[tuple], dict[int, int], set[int]]:
    """What the record-by-record loop of the old read_topic made of the same batches."""
    rows: list[tuple] = []
    reached = dict.fromkeys(end, 0)
    todo = {p for p, e in end.items() if e > 0}
    for batch in batches:
        for msg in batch:
            p, off = msg.partition(), msg.offset()
            if off >= end[p]:
                reached[p] = max(reached[p], end[p])
                todo.discard(p)
                continue
            rows.append((msg.key(), msg.value(), msg.timestamp()[1], p, off))
            reached[p] = max(reached[p], off + 1)
            if off + 1 >= end[p]:
                todo.discard(p)
    return rows, reached, todo


@st.composite
def fetched(draw: st.DrawFn) -> tuple[list[list[Message]], dict[int, int]]:
    """Per-partition increasing offsets (gaps like transaction markers), cut into batches."""
    parts = draw(st.integers(1, 4))
    end: dict[int, int] = {}
    stream: list[Message] = []
    for p in range(parts):
        offsets = sorted(draw(st.sets(st.integers(0, 40), max_size=12)))
        end[p] = draw(st.integers(0, 45))
        for off in offsets:
            key = draw(st.one_of(st.none(), st.binary(max_size=3)))
            value = draw(st.one_of(st.none(), st.binary(max_size=5)))
            stream.append(Message(topic="t", partition=p, offset=off, key=key, value=value,
                                  timestamp=(1, draw(st.integers(0, 2**40)))))
    # Interleave partitions as a fetch would (each partition's order kept).
    order = draw(st.permutations(range(len(stream))))
    by_part: dict[int, list[Message]] = {}
    for msg in stream:
        by_part.setdefault(msg.partition(), []).append(msg)
    interleaved = []
    heads = {p: 0 for p in by_part}
    for k in order:
        p = stream[k].partition()
        interleaved.append(by_part[p][heads[p]])
        heads[p] += 1
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(interleaved))), max_size=4)))
    batches, prev = [], 0
    for c in [*cuts, len(interleaved)]:
        if c > prev:
            batches.append(interleaved[prev:c])
            prev = c
    return batches, end


@FAST
@given(fetched())
def test_batch_columns_equal_a_record_by_record_read(case: tuple) -> None:
    batches, end = case
    rows, reached_ref, todo_ref = _reference(batches, end)
    columns = _Columns()
    reached = dict.fromkeys(end, 0)
    todo = {p for p, e in end.items() if e > 0}
    end_arr = np.array([end[p] for p in range(len(end))], dtype=np.int64)
    for batch in batches:
        columns.add(batch, end_arr, reached, todo)
    records = TopicRecords.from_table(columns.table())
    assert records.rows() == rows
    assert reached == reached_ref and todo == todo_ref
    assert columns.count == len(rows)


def test_topic_records_take_lists_or_arrow() -> None:
    from_lists = TopicRecords(keys=[b"k", None], values=[None, b"v"], timestamps=[5, 6],
                              partitions=[0, 1], offsets=[3, 4])
    from_arrow = TopicRecords(keys=pa.array([b"k", None]), values=pa.chunked_array(
        [pa.array([None], pa.binary()), pa.array([b"v"])]), timestamps=np.array([5, 6]),
        partitions=np.array([0, 1]), offsets=np.array([3, 4]))
    assert from_lists.rows() == from_arrow.rows() == [(b"k", None, 5, 0, 3),
                                                      (None, b"v", 6, 1, 4)]
    assert from_lists.values.type == pa.binary() and len(from_arrow) == 2
    with pytest.raises(ValueError):
        TopicRecords(keys=[b"k"], values=[], timestamps=[], partitions=[], offsets=[])


def test_topic_records_round_trip_through_the_record_schema() -> None:
    """The reader's wire and the evidence's Parquet are one table: nothing lost either way,
    and an empty read keeps its column types."""
    recs = TopicRecords(keys=[b"k", None, b""], values=[None, b"v", b"w"], timestamps=[5, 6, 7],
                        partitions=[2, 0, 1], offsets=[3, 4, 9], topic="t")
    table = recs.to_table()
    assert table.schema == RECORD_SCHEMA
    back = TopicRecords.from_table(table, "t")
    assert back.rows() == recs.rows() and back.topic == "t"
    empty = TopicRecords.from_table(RECORD_SCHEMA.empty_table())
    assert len(empty) == 0 and empty.offsets.dtype == np.int64
    assert empty.partitions.dtype == np.int32 and empty.timestamps.dtype == np.int64


VALUES = st.lists(st.one_of(
    st.none(),
    st.sampled_from([b"", b"   ", b"\t{}", b"garbage", b'{"id":1}\n{"id":2}',
                     b' {"id":3,"type":"GET","resource":"r1","event_ts":5} ']),
    st.builds(lambda i, t, r, e: orjson.dumps({"id": i, "type": t, "resource": r,
                                               "event_ts": e}),
              st.integers(-2**63, 2**63 - 1), st.sampled_from(["GET", "POST", "PUT"]),
              st.sampled_from(["r0000", "r0001", "é"]), st.integers(-10**15, 10**15)),
), max_size=30)


@FAST
@given(values=VALUES, cuts=st.lists(st.integers(0, 30), max_size=4))
def test_arrow_chunks_parse_like_a_list_and_like_each_value_alone(values: list, cuts: list
                                                                  ) -> None:
    bounds = sorted({0, len(values), *[min(c, len(values)) for c in cuts]})
    chunked = pa.chunked_array([pa.array(values[a:b], pa.binary())
                                for a, b in zip(bounds, bounds[1:], strict=False)] or
                               [pa.array([], pa.binary())], type=pa.binary())
    table, kept, malformed, _ = parse_values(chunked, KAFKA_INPUT_SCHEMA)
    listed, kept2, malformed2, _ = parse_values(values, KAFKA_INPUT_SCHEMA)
    assert table.to_pylist() == listed.to_pylist()
    assert kept.tolist() == kept2.tolist() and malformed == malformed2
    alone_rows, alone_kept, alone_bad = [], [], 0
    for k, v in enumerate(values):
        t, kk, bad, _ = parse_values([v], KAFKA_INPUT_SCHEMA)
        alone_rows += t.to_pylist()
        alone_kept += [k] * len(kk)
        alone_bad += bad
    assert table.to_pylist() == alone_rows and kept.tolist() == alone_kept
    assert malformed == alone_bad


# --------------------------------------------------------------------------- real broker


def _slow_read(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple]:
    """A plain per-message read to the end offsets (the high watermarks: a read_committed
    read waits at a transaction until its markers are written): the reference for
    read_topic."""
    conf = {"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
            "enable.partition.eof": True, "enable.auto.commit": False}
    consumer = Consumer({**conf, "isolation.level": "read_uncommitted"})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30,
                                                  cached=False)[1] for p in parts}
    finally:
        consumer.close()
    consumer = Consumer({**conf, "isolation.level": isolation})
    try:
        todo = {p for p, e in ends.items() if e > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        rows = []
        while todo:
            msg = consumer.poll(10)
            assert msg is not None, "the reference read stalled"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF
                if msg.offset() >= ends[msg.partition()]:
                    todo.discard(msg.partition())
                continue
            if msg.offset() < ends[msg.partition()]:
                rows.append((msg.key(), msg.value(), msg.timestamp()[1], msg.partition(),
                             msg.offset()))
        return sorted(rows, key=lambda r: (r[3], r[4]))
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    c = KafkaCluster(tmp_path_factory.mktemp("rates"), brokers=1, partitions=3, heap="256m",
                     sasl=False)  # component test: plain listeners (SASL: test_kafka_runtime)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.mark.cluster
def test_sink_counts_equal_what_read_topic_returns_in_the_runs_topics(broker: KafkaCluster
                                                                      ) -> None:
    from pgval.datasets import run_producers

    topics = Topics.with_prefix("run-a-")
    create_topics(broker.client_config, [*topics.inputs, *Topics().inputs], 3)
    cfg = GeneratorConfig(rate=None, events=30_000, producers=2, get_share=0.9, seed=11)
    report = run_producers(cfg, KafkaSink(broker.bootstrap, topics=topics,
                                          config={"log_level": 3}))
    assert report.ok and report.sent == report.delivered == 30_000
    gets = read_topic(broker.bootstrap, topics.get)
    posts = read_topic(broker.bootstrap, topics.post)
    assert len(gets) + len(posts) == report.delivered
    assert gets.complete and posts.complete
    ids = []
    for recs, kind in ((gets, "GET"), (posts, "POST")):
        for value in recs.values.to_pylist():
            event = orjson.loads(value)
            assert event["type"] == kind
            ids.append(event["id"])
    assert sorted(ids) == list(range(30_000))
    # The plain topics of a shared cluster got nothing from this run.
    assert len(read_topic(broker.bootstrap, "get")) == len(read_topic(broker.bootstrap,
                                                                        "post")) == 0


@pytest.mark.cluster
def test_read_topic_columns_equal_a_slow_reference_read(broker: KafkaCluster) -> None:
    topic = "mixed"
    create_topics(broker.client_config, [topic], 3)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(500):
        key = None if i % 7 == 0 else b"r%04d" % (i % 5)
        value = None if i % 11 == 0 else b'{"n":%d}' % i
        plain.produce(topic, key=key, value=value, partition=i % 3)
    assert plain.flush(30) == 0
    tx = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "rates-tx",
                   "log_level": 3})
    tx.init_transactions(30)
    for commit in (True, False, True):
        tx.begin_transaction()
        for i in range(40):
            tx.produce(topic, value=b"tx-%d-%s" % (i, b"c" if commit else b"a"), partition=i % 3)
        tx.commit_transaction(30) if commit else tx.abort_transaction(30)
    for isolation in ("read_committed", "read_uncommitted"):
        reference = _slow_read(broker.bootstrap, topic, isolation)
        for batch_size in (7, 100_000):  # many batches with ends in between, and one
            got = read_topic(broker.bootstrap, topic, isolation=isolation,
                             batch_size=batch_size)
            assert sorted(got.rows(), key=lambda r: (r[3], r[4])) == reference
            assert got.complete and got.reached == got.end_offsets
    committed = read_topic(broker.bootstrap, topic)
    values = committed.values.to_pylist()
    assert not any(v and v.endswith(b"-a") for v in values)
    assert sum(1 for v in values if v and v.endswith(b"-c")) == 80


@pytest.mark.cluster
def test_bench_readback_command_runs_and_finds_the_planted_anomalies(tmp_path: Path) -> None:
    """The CLI end to end on a tiny run: its own broker, stopped, data deleted."""
    proc = subprocess.run(
        [sys.executable, "-m", "pgval.cli", "bench", "readback", "--events", "20000",
         "--runs", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "read-back + validation" in proc.stdout and "'duplicate'" in proc.stdout
    assert not list(tmp_path.glob("*/state.json"))
    assert not list(tmp_path.glob("*/kafka"))


def test_bench_spark_readback_refuses_a_cluster_master_in_one_sentence(tmp_path: Path) -> None:
    """Its tables are written on this disk: a cluster's executors could not read them."""
    proc = subprocess.run(
        [sys.executable, "-m", "pgval.cli", "bench", "spark-readback", "--events", "20000",
         "--master", "spark://elsewhere:7077", "--runs", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "local[N], not spark://elsewhere:7077" in proc.stderr
    assert not list(tmp_path.iterdir())  # refused before any broker


def test_bench_spark_readback_refuses_a_job_it_cannot_load_in_one_sentence(tmp_path: Path
                                                                          ) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pgval.cli", "bench", "spark-readback", "--events", "20000",
         "--job", str(tmp_path / "nowhere.py") + ":build", "--runs", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "nowhere.py" in proc.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_every_bench_prints_its_figures_as_json(tmp_path: Path) -> None:
    """`pgval bench … --json`: one JSON object on stdout, the same figures as the table
    (offline here; the others print theirs the same way, report's in
    tests/test_report_page.py)."""
    import json

    offline = subprocess.run(
        [sys.executable, "-m", "pgval.cli", "bench", "offline", "--events", "20000",
         "--workdir", str(tmp_path / "off"), "--json"],
        capture_output=True, text=True, timeout=300)
    assert offline.returncode == 0, offline.stderr
    figures = json.loads(offline.stdout)
    assert figures["events"] == 20000 and figures["events_per_s"] > 0
    assert set(figures["stages_s"]) == set(figures["cpu_s"])
    assert figures["machine"] == describe_machine()  # numbers name the machine they measured


@FAST
@given(sizes=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 400)), max_size=8),
       workers=st.integers(1, 5))
def test_readers_get_equal_ranges_covering_every_partition_once(sizes: list, workers: int
                                                                 ) -> None:
    tasks = [("t", p, start, start + n) for p, (start, n) in enumerate(sizes) if n]
    groups = split_tasks(tasks, workers)
    total = sum(n for _, n in sizes)
    assert len(groups) <= workers and all(groups) and (groups or total == 0)
    loads = [sum(e - s for _, _, s, e in g) for g in groups]
    assert sum(loads) == total and all(load <= -(-total // workers) for load in loads)
    for g in groups:  # one consumer cannot hold two ranges of one partition
        assert len({p for _, p, _, _ in g}) == len(g)
    for _, p, start, end in tasks:
        pieces = sorted((s, e) for g in groups for _, q, s, e in g if q == p)
        assert pieces[0][0] == start and pieces[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))


def test_a_split_partition_is_complete_only_when_every_range_is() -> None:
    assert merge_ranges([(0, 50, 50), (50, 100, 100)], 0) == 100
    assert merge_ranges([(50, 100, 120), (0, 50, 50)], 0) == 100  # EOF past the range end
    assert merge_ranges([(0, 50, 30), (50, 100, 100)], 0) == 30  # the first range is short
    assert merge_ranges([(0, 50, 50), (50, 100, 70)], 0) == 70
    assert merge_ranges([], 7) == 7


def test_read_topics_from_an_unreachable_broker_is_a_problem() -> None:
    got = read_topics("127.0.0.1:1", ["get", "post"], timeout_s=3, strict=False)
    assert all(not r.complete and r.problems and len(r) == 0 for r in got.values())
    with pytest.raises(PgvalError, match="could not read all of topic get"):
        read_topics("127.0.0.1:1", ["get"], timeout_s=3)


@pytest.mark.cluster
def test_parallel_readers_give_what_read_topic_gives(broker: KafkaCluster) -> None:
    """Two reader processes (forced even for small topics; a partition split between them,
    an aborted transaction inside it) against one in-process read per topic: same records
    in offset order per partition, same proof of completeness."""
    topics = ["par-a", "par-b"]
    create_topics(broker.client_config, topics, 3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "log_level": 3})
    tx = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "par-tx",
                   "log_level": 3})
    tx.init_transactions(30)
    for i in range(3000):
        producer.produce("par-a", key=b"k%d" % (i % 7), value=b"v%d" % i, partition=i % 3)
        if i == 1500:
            assert producer.flush(30) == 0
            tx.begin_transaction()
            for j in range(50):
                tx.produce("par-a", value=b"aborted-%d" % j, partition=1)
            tx.abort_transaction(30)
    for i in range(101):
        producer.produce("par-b", value=b"b%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    together = read_topics(broker.bootstrap, topics, workers=2, parallel_min_records=0)
    assert split_tasks([("par-a", p, 0, e) for p, e in together["par-a"].end_offsets.items()],
                       2)[0][-1][1] == 1  # partition 1 is split between the readers
    for topic in topics:
        alone = read_topic(broker.bootstrap, topic)
        got = together[topic]
        assert sorted(got.rows(), key=lambda r: r[3]) == sorted(alone.rows(), key=lambda r: r[3])
        assert got.complete and got.end_offsets == alone.end_offsets
        assert got.reached == alone.reached and got.topic == topic
    assert not any(v.startswith(b"aborted") for v in together["par-a"].values.to_pylist())
    assert len(together["par-a"]) == 3000 and len(together["par-b"]) == 101


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_reader_process_dies_with_its_parent(tmp_path: Path) -> None:
    """A SIGKILLed pgval must not leave a reader behind (it would read on for minutes)."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import multiprocessing as mp, os, time\n"
        "from pgval.kafka import reader as readback\n"
        "from pgval.kafka.reader import reader_conf\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('spawn')\n"
        "    recv, send = ctx.Pipe(duplex=False)\n"
        "    conf = reader_conf('127.0.0.1:1', 'read_committed')\n"
        "    p = ctx.Process(target=readback._reader_main, args=(send, os.getpid(),\n"
        "        conf, [('t', 0, 0, 10)], 120.0, 120.0, 100))\n"
        "    p.start()\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        reader = int(parent.stdout.readline())
        time.sleep(3)  # the reader is up and waiting for records that never come
        assert _alive(reader)
    finally:
        parent.kill()
        parent.wait()
    wait_until(lambda: not _alive(reader), 15, "the reader to die with its parent")
