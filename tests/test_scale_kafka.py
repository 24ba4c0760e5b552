"""The read-back as a Spark job, on a real broker: Kafka's batch source to the end offsets,
then the Spark oracle and checker, held to the numpy path on the same topics (every count,
phase row and anomaly set) and to anomalies planted by hand: a lost output, a duplicated
one, a foreign ID, pgval's control IDs, malformed records of both kinds, a retried input, an
aborted transaction. A log that lost its first records makes the verdict unknown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pgval.checker.evaluate import evaluate
from pgval.core.schema import Topics
from pgval.evidence.bundle import streams_from_records
from pgval.kafka.admin import create_topics
from pgval.kafka.broker import KafkaCluster
from pgval.kafka.client import quiet_conf
from pgval.kafka.reader import read_topics
from pgval.records.phases import MAX_MS
from pgval.scale.agreement import differences
from pgval.scale.judge import judge_on_spark
from tests.spark_local import local_session

pytestmark = pytest.mark.cluster

TOPICS = Topics.with_prefix("spark-")
RESOURCES = 7
CONTROL = (-20, -1)
WINDOW_MS = 1000
T0 = 1_700_000_000_000
FOREIGN = 777_777
BAD_INPUTS = [b"garbage", b'{"id":9000,"type":"PUT","resource":"r0001","event_ts":1}',
              b'{"id":9001,"type":"GET","resource":"r0001"}',
              b'{"id":9002,"type":"GET","resource":"r0001","event_ts":%d}' % (MAX_MS + 1),
              b'{"id":9003,"type":"GET","resource":"r0001","event_ts":5}\n',
              b'{"id":9004,"type":"GET","resource":"r0001","event_ts":5.5}']
BAD_OUTPUTS = [b'{"window_start":0,"resource":"r0001","ids":[1,null]}',
               b'{"resource":"r0001","ids":[1]}', b"not json",
               b'{"window_start":0,"resource":"r0001","ids":[1],"count":"3"}']


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A closed (SASL) broker, as a run's: Spark's consumer logs in like the reader's."""
    c = KafkaCluster(tmp_path_factory.mktemp("run"), brokers=1, partitions=3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def spark():  # noqa: ANN201 - a SparkSession
    """The test process's Spark (its JVM has Kafka's connector), two cores as the checker's."""
    yield from local_session("pgval-test-spark-read-back", cores=2)


def _producer(cluster: KafkaCluster, **extra: object) -> Producer:
    return Producer({**quiet_conf(cluster.bootstrap), **cluster.auth_config, "linger.ms": 5,
                     **extra})


def _event(i: int, kind: str = "GET", resource: str | None = None) -> bytes:
    name = resource or f"r{i % RESOURCES:04d}"
    return orjson.dumps({"id": i, "type": kind, "resource": name, "event_ts": T0 + 10 * abs(i)})


def _write_inputs(cluster: KafkaCluster) -> dict[tuple[int, str], list[int]]:
    """2,000 events (every 50th a POST), a retry of ID 5, 20 control events, an unknown
    resource and four malformed records; the SST rows they expect, by (window, name)."""
    p = _producer(cluster, acks="all")
    rows: dict[tuple[int, str], list[int]] = {}
    for i in range(2000):
        post = i % 50 == 0
        p.produce(TOPICS.post if post else TOPICS.get, _event(i, "POST" if post else "GET"),
                  partition=i % 3)
        if not post:
            ws = (T0 + 10 * i) // WINDOW_MS * WINDOW_MS
            rows.setdefault((ws, f"r{i % RESOURCES:04d}"), []).append(i)
    p.produce(TOPICS.get, _event(5), partition=5 % 3)  # a retried produce: counted once
    p.produce(TOPICS.get, _event(4242, resource="zzz"), partition=1)
    rows.setdefault(((T0 + 42420) // WINDOW_MS * WINDOW_MS, "zzz"), []).append(4242)
    for i in range(CONTROL[0], CONTROL[1] + 1):
        p.produce(TOPICS.get, _event(i, resource="r0000"), partition=0)
    for bad in BAD_INPUTS:
        p.produce(TOPICS.get, bad, partition=2)
    assert p.flush(30) == 0
    return rows


def _output(ws: int, name: str, ids: list[int]) -> bytes:
    return orjson.dumps({"window_start": ws, "window_end": ws + WINDOW_MS, "resource": name,
                         "count": len(ids), "gets": len(ids), "posts": 0, "ids": ids})


def _write_outputs(cluster: KafkaCluster, rows: dict[tuple[int, str], list[int]]
                   ) -> dict[str, list[int]]:
    """Every expected row, with row 3 lost, row 4 twice, a foreign ID in row 5, a control
    ID in row 6, a control-only output, three malformed ones, row 7 again in an aborted
    transaction and row 8 in a committed one. Returns the planted IDs by kind."""
    keys = sorted(rows)
    p = _producer(cluster, acks="all")
    for k, (ws, name) in enumerate(keys):
        ids = rows[(ws, name)]
        if k in (3, 8):
            continue
        extra = {5: [FOREIGN], 6: [-3]}.get(k, [])
        p.produce(TOPICS.output, _output(ws, name, ids + extra), partition=k % 3)
        if k == 4:
            p.produce(TOPICS.output, _output(ws, name, ids), partition=(k + 1) % 3)
    p.produce(TOPICS.output, _output(*keys[0], [-1, -2]), partition=0)
    for bad in BAD_OUTPUTS:
        p.produce(TOPICS.output, bad, partition=1)
    assert p.flush(30) == 0
    tx = _producer(cluster, **{"transactional.id": "pgval-spark-read"})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(TOPICS.output, _output(*keys[7], rows[keys[7]]), partition=2)
    tx.flush(30)
    tx.abort_transaction(30)
    tx.begin_transaction()
    tx.produce(TOPICS.output, _output(*keys[8], rows[keys[8]]), partition=2)
    tx.commit_transaction(30)
    return {"unprocessed": rows[keys[3]], "duplicate": rows[keys[4]], "incorrect": [FOREIGN]}


def _numpy_evaluation(cluster: KafkaCluster):  # noqa: ANN202 - an Evaluation
    got = read_topics(cluster.bootstrap, [TOPICS.get, TOPICS.post, TOPICS.output],
                      config=cluster.auth_config)
    assert all(r.complete for r in got.values())
    streams = streams_from_records({"get": got[TOPICS.get], "post": got[TOPICS.post]},
                                   got[TOPICS.output], RESOURCES, CONTROL)
    return evaluate(streams.events, streams.outputs, "sst", WINDOW_MS)


def test_spark_read_back_agrees_with_numpy_and_finds_what_was_planted(
        cluster: KafkaCluster, spark, tmp_path: Path) -> None:  # noqa: ANN001
    create_topics(cluster.client_config, [*TOPICS.inputs, TOPICS.output], 3)
    planted = _write_outputs(cluster, _write_inputs(cluster))
    mine = _numpy_evaluation(cluster)
    judged = judge_on_spark(spark, cluster.bootstrap,
                            {"get": TOPICS.get, "post": TOPICS.post}, TOPICS.output,
                            "sst", WINDOW_MS, tmp_path / "spark", resources=RESOURCES,
                            control_ids=CONTROL, config=cluster.auth_config)
    v = judged.validation
    assert v is not None and judged.reason is None
    assert differences(mine.validation, v,
                       duplicate_inputs=mine.expected.duplicate_inputs) == []
    read = judged.read
    assert (read.control_inputs, read.malformed_inputs) == (20, len(BAD_INPUTS))
    assert (read.control_outputs, read.malformed_outputs) == (1, len(BAD_OUTPUTS))
    assert v.duplicate_inputs == 1 and v.malformed == len(BAD_OUTPUTS)
    for kind, ids in planted.items():
        assert v.ids(kind).tolist() == sorted(ids), kind
    assert judged.guarantee == "none"
    # Every offset of the plain input topics was read; the output topic's transaction
    # markers and aborted record were skipped below its end.
    for part in read.partitions:
        assert part.records <= part.end
        if part.topic != TOPICS.output:
            assert part.records == part.end and part.last_offset == part.end - 1
    out = [p for p in read.partitions if p.topic == TOPICS.output and p.partition == 2]
    assert out[0].last_offset is not None and out[0].last_offset < out[0].end - 1

    # Retention took the head of a partition: nobody judges, the reason is said.
    admin = AdminClient({**quiet_conf(cluster.bootstrap), **cluster.auth_config})
    for fut in admin.delete_records([TopicPartition(TOPICS.get, 1, 2)]).values():
        fut.result(timeout=30)
    cut = judge_on_spark(spark, cluster.bootstrap, {"get": TOPICS.get, "post": TOPICS.post},
                         TOPICS.output, "sst", WINDOW_MS, tmp_path / "cut",
                         resources=RESOURCES, control_ids=CONTROL,
                         config=cluster.auth_config)
    assert cut.guarantee == "unknown" and cut.validation is None
    assert "partition 1 starts at offset 2" in (cut.reason or "")


# ---------------------------------------------------------------- a user's job on Spark
JOB = "examples/jobs/per_type_window.py:build"
JOB_TOPICS = Topics.with_prefix("spark-job-")


def _job_rows(spark, got: dict, workdir: Path):  # noqa: ANN001, ANN202 - a pa.Table
    """The numpy path's oracle: the job run as a batch over the records pgval's own reader
    read (:func:`pgval.topologies.batch.batch_table`), as the batch oracle process runs it."""
    import pyarrow as pa

    from pgval.topologies.batch import RAW_SCHEMA, batch_sources, batch_table
    from pgval.topologies.job_query import load_job_for_spark

    records = {name: pa.table({"value": got[topic].values, "partition": got[topic].partitions,
                               "offset": got[topic].offsets}, schema=RAW_SCHEMA)
               for name, topic in (("get", JOB_TOPICS.get), ("post", JOB_TOPICS.post))}
    job = load_job_for_spark(JOB)
    return batch_table(job, spark, batch_sources(spark, records, workdir))


def _write_job_inputs(cluster: KafkaCluster) -> None:
    """3,000 events (every 7th a POST) over 30 s, pgval's control events and two records
    no parser reads. No retried ID, and no malformed record the job itself can read: the
    job would list them in its rows (an ID twice in a row, an ID that is no input), which
    both checkers refuse to judge."""
    p = _producer(cluster, acks="all")
    for i in range(3000):
        post = i % 7 == 0
        p.produce(JOB_TOPICS.post if post else JOB_TOPICS.get,
                  _event(i, "POST" if post else "GET"), partition=i % 3)
    for i in range(CONTROL[0], CONTROL[1] + 1):
        p.produce(JOB_TOPICS.get, _event(i, resource="r0000"), partition=0)
    for bad in (b"garbage", b"[1, 2"):
        p.produce(JOB_TOPICS.get, bad, partition=2)
    assert p.flush(30) == 0


def _job_output(key: str, value: str, ids: list[int]) -> bytes:
    return orjson.dumps({"_pgval_key": key, "_pgval_value": value, "ids": ids})


def _write_job_outputs(cluster: KafkaCluster, rows) -> dict[str, list[int]]:  # noqa: ANN001
    """The batch's rows as the streaming query writes them, with row 1 lost, row 2 twice,
    a foreign ID in row 3, a control ID in row 4, row 5's count written wrong, a
    control-only output, an output of a key no row has, and malformed outputs."""
    keys = rows.column("key").to_pylist()
    values = rows.column("value").to_pylist()
    ids = [sorted(i for i in got if i >= 0) for got in rows.column("ids").to_pylist()]
    p = _producer(cluster, acks="all")
    for k in range(len(keys)):
        if k == 1:
            continue
        value = values[k]
        if k == 5:  # n one more than the IDs: a wrong value, the right IDs
            n = orjson.loads(value)["n"]
            value = value.replace(f'"n":{n}', f'"n":{n + 1}')
        extra = {3: [FOREIGN], 4: [-3]}.get(k, [])
        p.produce(JOB_TOPICS.output, _job_output(keys[k], value, ids[k] + extra),
                  partition=k % 3)
        if k == 2:
            p.produce(JOB_TOPICS.output, _job_output(keys[k], values[k], ids[k]),
                      partition=(k + 1) % 3)
    p.produce(JOB_TOPICS.output, _job_output(keys[0], values[0], [-1, -2]), partition=0)
    p.produce(JOB_TOPICS.output, _job_output('{"window_start":"1970-01-01T00:00:00.000Z",'
                                             '"type":"GET"}', "{}", [ids[6][0]]), partition=1)
    for bad in (b'{"_pgval_key":"k","ids":[1,null]}', b'{"ids":[1]}', b"not json"):
        p.produce(JOB_TOPICS.output, bad, partition=1)
    assert p.flush(30) == 0
    # An output whose values are wrong processes none of its IDs: they are unprocessed too.
    return {"unprocessed": ids[1] + ids[5], "duplicate": ids[2],
            "incorrect": sorted([FOREIGN, *ids[5], ids[6][0]])}


def test_a_users_job_judged_on_spark_agrees_with_numpy_and_finds_what_was_planted(
        cluster: KafkaCluster, spark, tmp_path: Path) -> None:  # noqa: ANN001
    """The job's batch run on Spark over the staged records, its rows and outputs as the
    checker's tables, the values compared in Spark's Python workers: every figure, phase
    row and set equal to the numpy path's (its own reader, batch oracle, value check and
    validator), and the sets exactly what was planted."""
    from pgval.evidence.bundle import job_streams_from_records
    from pgval.oracle.values import DEFAULT_TOLERANCE
    from pgval.scale.evaluation import KeptJob, rejudge_kept, same_sets
    from pgval.scale.judge import judge_job_on_spark
    from pgval.topologies.batch import batch_rows_on_spark
    from pgval.topologies.job_query import load_job_for_spark

    create_topics(cluster.client_config, [*JOB_TOPICS.inputs, JOB_TOPICS.output], 3)
    _write_job_inputs(cluster)
    topics = [JOB_TOPICS.get, JOB_TOPICS.post]
    got = read_topics(cluster.bootstrap, topics, config=cluster.auth_config)
    rows = _job_rows(spark, got, tmp_path / "numpy-batch")
    planted = _write_job_outputs(cluster, rows)
    got = read_topics(cluster.bootstrap, [*topics, JOB_TOPICS.output],
                      config=cluster.auth_config)
    streams, expected = job_streams_from_records(
        {"get": got[JOB_TOPICS.get], "post": got[JOB_TOPICS.post]}, got[JOB_TOPICS.output],
        rows, 0, CONTROL)
    mine = evaluate(streams.events, streams.outputs, "job", 1, expected=expected,
                    values=streams.values)
    job = load_job_for_spark(JOB)
    names = {"get": JOB_TOPICS.get, "post": JOB_TOPICS.post}
    try:
        judged = judge_job_on_spark(
            spark, cluster.bootstrap, names, JOB_TOPICS.output, tmp_path / "spark",
            lambda staged, folder: batch_rows_on_spark(job, spark, staged, names, folder),
            DEFAULT_TOLERANCE, control_ids=CONTROL, config=cluster.auth_config)
        # A re-check from the kept tables and the batch run's kept rows (no job runs).
        assert judged.validation is not None
        again = rejudge_kept(spark, tmp_path / "spark" / "read", "job", 1, None,
                             tmp_path / "again", judged.read.malformed_outputs,
                             KeptJob(tmp_path / "spark" / "batch", CONTROL, DEFAULT_TOLERANCE))
        assert again.counts() == judged.validation.counts()
        assert same_sets(spark, judged.validation.sets, again.sets)["same"] is True
    finally:  # its Python workers (the value comparison) go with it: the module's last test
        spark.stop()
    v = judged.validation
    assert v is not None and judged.reason is None, judged.reason
    assert differences(mine.validation, v,
                       duplicate_inputs=mine.expected.duplicate_inputs) == []
    assert v.duplicate_inputs == 0 and v.wrong_value == len(planted["incorrect"]) - 2
    assert (judged.read.control_outputs, judged.read.malformed_outputs) == (1, 3)
    for kind, ids in planted.items():
        assert v.ids(kind).tolist() == sorted(ids), kind
    assert judged.guarantee == "none" and judged.job is not None
    assert judged.job["values_compared"] and not judged.job["keyed_by_id"]
