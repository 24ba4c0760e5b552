"""The Spark topologies end to end: real Kafka, the driver as a subprocess, the validator as judge.

Inputs are produced live with wall-clock event times, so windows close while the query runs;
closing events far in the future (negative IDs, as the runner writes them) then push the
watermark past every real window. What Kafka holds afterwards goes through the oracle and
the validator, which must find every expected ID exactly once in the right output.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pgval.checker.evaluate import Evaluation, evaluate
from pgval.checker.explain import watermark_ms
from pgval.core import schema
from pgval.host.procs import Managed, spawn
from pgval.kafka.admin import admin_client, create_topics, delete_topics
from pgval.kafka.broker import KafkaCluster
from pgval.kafka.reader import read_topic
from pgval.records.parse import InputEvents, ResourceTable, inputs_from_kafka, outputs_from_kafka
from tests.conftest import processes_mentioning, wait_until

W = 2000  # window
D = 1000  # watermark delay
RESOURCES = [schema.resource_name(i) for i in range(5)]
GET_ONLY = schema.resource_name(9)  # MST must never emit it: it has no POST partner


# ---- helpers -------------------------------------------------------------------------------


@dataclass
class Driver:
    """One driver process and the files it writes."""

    name: str
    topology: str
    pg: str
    argv: list[str]
    progress: Path
    checkpoint: Path
    output_topic: str
    log_dir: Path
    proc: Managed | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        self.proc = spawn(f"{self.name}-{self.starts}", self.argv,
                          self.log_dir / f"{self.name}-{self.starts}.log")

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        rows = []
        if self.progress.exists():
            for line in self.progress.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if kind is None or row.get("event") == kind:
                    rows.append(row)
        return rows

    def check_alive(self) -> None:
        assert self.proc is not None
        if not self.proc.alive():
            pytest.fail(f"driver {self.name} exited with {self.proc.popen.returncode}:\n"
                        f"{self.proc.log_tail(30)}")


def _driver(tmp: Path, bootstrap: str, topology: str, pg: str, master: str = "local[2]",
            trigger_ms: int = 500, **extra: Any) -> Driver:
    """A driver of its document, written as pgval writes it (``extra``: more fields)."""
    from pgval.deploy.driver_process import DriverSpec

    name = f"{topology}-{pg}"
    checkpoint = tmp / f"ck-{name}"
    progress = tmp / f"progress-{name}.jsonl"
    output_topic = f"out-{name}"
    spec = DriverSpec(topology=topology, pg=pg, bootstrap=bootstrap, master=master,
                      checkpoint=checkpoint, window_ms=W, watermark_ms=D,
                      trigger_ms=trigger_ms, shuffle_partitions=3, progress_file=progress,
                      query_name=f"pgval-test-{name}", output_topic=output_topic, **extra)
    argv = spec.argv(spec.write(tmp / f"driver-{name}.json"))
    return Driver(name, topology, pg, argv, progress, checkpoint, output_topic, tmp / "logs")


def _wait(cond: Callable[[], bool], timeout_s: float, what: str,
          drivers: tuple[Driver, ...] = (), step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        for d in drivers:
            d.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(step)


def _wait_started(drivers: tuple[Driver, ...], timeout_s: float = 150.0) -> None:
    for d in drivers:
        n = d.starts
        _wait(lambda d=d, n=n: len(d.events("started")) >= n, timeout_s,
              f"{d.name} to start", drivers)


def _producer(bootstrap: str) -> Producer:
    # log_level 3: a fresh broker's "coordinator load in progress" retries are not news.
    return Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                     "linger.ms": 5, "enable.idempotence": True, "acks": "all",
                     "log_level": 3})


def _produce_live(bootstrap: str, seconds: float, rate: float, first_id: int,
                  seed: int = 7, twice_every: int = 0) -> int:
    """Events with event_ts = now, at ``rate``/s; returns the next unused ID. With
    ``twice_every`` = k, every k-th event is produced twice (two records, one value), as a
    producer retry without idempotence would."""
    rng = random.Random(seed)
    producer = _producer(bootstrap)
    next_id = first_id
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        if rng.random() < 0.1:
            resource, typ = GET_ONLY, schema.GET
        else:
            resource = rng.choice(RESOURCES)
            typ = schema.GET if rng.random() < 0.55 else schema.POST
        value = {"id": next_id, "type": typ, "resource": resource,
                 "event_ts": int(time.time() * 1000)}
        topic = schema.GET_TOPIC if typ == schema.GET else schema.POST_TOPIC
        for _ in range(2 if twice_every and next_id % twice_every == 0 else 1):
            producer.produce(topic, key=resource.encode(), value=json.dumps(value).encode())
        producer.poll(0)
        next_id += 1
        time.sleep(1.0 / rate)
    assert producer.flush(30) == 0
    return next_id


def _produce_closing(bootstrap: str) -> None:
    """One GET and one POST per resource far ahead of every window: the watermark moves on."""
    producer = _producer(bootstrap)
    ts = int(time.time() * 1000) + 60 * W
    ident = -1
    for resource in [*RESOURCES, GET_ONLY]:
        for topic, typ in ((schema.GET_TOPIC, schema.GET), (schema.POST_TOPIC, schema.POST)):
            value = {"id": ident, "type": typ, "resource": resource, "event_ts": ts}
            producer.produce(topic, key=resource.encode(), value=json.dumps(value).encode())
            ident -= 1
    assert producer.flush(30) == 0


def _topic_sizes(bootstrap: str) -> dict[str, int]:
    return {t: len(read_topic(bootstrap, t, idle_timeout_s=3))
            for t in (schema.GET_TOPIC, schema.POST_TOPIC)}


def _consumed(d: Driver) -> dict[str, int]:
    """Input records the query has read so far (end offsets of its last progress)."""
    progress = d.events("progress")
    if not progress:
        return {}
    out: dict[str, int] = {}
    for src in progress[-1]["sources"]:
        for topic, parts in (src.get("endOffset") or {}).items():
            out[topic] = sum(int(v) for v in parts.values())
    return out


def _read_inputs(bootstrap: str, resources: ResourceTable) -> InputEvents:
    """The inputs Kafka holds, closing events (negative IDs) dropped."""
    parts = []
    for topic in (schema.GET_TOPIC, schema.POST_TOPIC):
        recs = read_topic(bootstrap, topic)
        ev = inputs_from_kafka(recs.values, recs.timestamps, resources)
        assert ev.malformed == 0
        parts.append(ev.take(np.flatnonzero(ev.id >= 0)))
    return InputEvents.concat(parts, resources)


def _read_back(bootstrap: str, output_topic: str
               ) -> tuple[InputEvents, Any, int]:
    """Inputs and committed outputs, as the validator's columns."""
    resources = ResourceTable([*RESOURCES, GET_ONLY])
    events = _read_inputs(bootstrap, resources)
    out = read_topic(bootstrap, output_topic, isolation="read_committed")
    outputs = outputs_from_kafka(out.values, out.timestamps, out.partitions, out.offsets,
                                 resources)
    return events, outputs, len(out)


def _expected_outputs(bootstrap: str, topology: str) -> int:
    from pgval.oracle import expected_outputs

    events = _read_inputs(bootstrap, ResourceTable([*RESOURCES, GET_ONLY]))
    return len(expected_outputs(events, topology, W))


def _wait_outputs(bootstrap: str, d: Driver, n_expected: int, timeout_s: float = 90.0,
                  quiet_s: float = 2.0) -> None:
    """Until the committed output holds ``n_expected`` records and then stays put a moment."""
    def count() -> int:
        return len(read_topic(bootstrap, d.output_topic, idle_timeout_s=3))

    _wait(lambda: count() >= n_expected, timeout_s, f"{n_expected} outputs of {d.name}", (d,),
          step=1.0)
    time.sleep(quiet_s)


def _judge(bootstrap: str, d: Driver) -> Evaluation:
    events, outputs, n_records = _read_back(bootstrap, d.output_topic)
    ev = evaluate(events, outputs, d.topology, W)
    v = ev.validation
    summary = {k: val for k, val in ev.summary().items() if k != "witnesses"}
    assert outputs.malformed == 0, summary
    assert v.expected > 0 and ev.expected.to_records(), summary
    assert v.unprocessed == 0 and v.duplicate == 0 and v.incorrect == 0, summary
    assert v.reliability == 1.0 and v.guarantee == "exactly-once", summary
    assert v.correctness == 1.0 and v.missing_outputs == 0, summary
    # Field for field: the produced outputs are the oracle's (ID order aside).
    fields = schema.SST_OUTPUT_FIELDS if d.topology == "sst" else schema.MST_OUTPUT_FIELDS
    got = []
    for rec in read_topic(bootstrap, d.output_topic).values.to_pylist():
        obj = json.loads(rec)
        assert tuple(obj) == fields
        got.append({**obj, "ids": sorted(obj["ids"])})
    want = [{k: r[k] for k in fields} for r in ev.expected.to_records()]
    key = (lambda r: (r["window_start"], r["resource"]))  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert len(got) == n_records
    if d.topology == "mst":
        assert all(r["resource"] != GET_ONLY for r in got)
    else:
        assert any(r["resource"] == GET_ONLY for r in got)
    # The input was in order, so the watermark never dropped a row.
    for p in d.events("progress"):
        for op in p["stateOperators"]:
            assert op["numRowsDroppedByWatermark"] == 0, p
    return ev


def _stop_gracefully(d: Driver) -> int:
    """SIGTERM to the driver process only (not its JVM): stop the query, exit 0."""
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGTERM)
    return d.proc.popen.wait(timeout=60)


#: The fixed topics the drivers here read and write (SST and MST, every guarantee).
TOPICS = [schema.GET_TOPIC, schema.POST_TOPIC, schema.MARKER_TOPIC,
          *(f"out-{t}-{pg}" for t in schema.BUILTIN_TOPOLOGIES
            for pg in schema.PROCESSING_GUARANTEES)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One broker for the module's tests (each gets the topics new: :func:`kafka`)."""
    root = tmp_path_factory.mktemp("kafka")
    cluster = KafkaCluster(root, brokers=1, partitions=3, sasl=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    wait_until(lambda: not processes_mentioning(str(root)), 30, "the broker to end")


@pytest.fixture
def kafka(broker: KafkaCluster) -> Iterator[KafkaCluster]:
    """The module's broker with the fixed topics made new for this test: what an earlier
    test wrote is gone (the topics deleted, and gone from the broker's metadata, first)."""
    delete_topics(broker.client_config, TOPICS)
    admin = admin_client(broker.client_config)
    deadline = time.monotonic() + 60
    while set(TOPICS) & set(admin.list_topics(timeout=5).topics):
        assert time.monotonic() < deadline, "the earlier test's topics were not deleted"
        time.sleep(0.5)
    create_topics(broker.client_config, TOPICS, 3, compacted=[schema.MARKER_TOPIC])
    yield broker


def _batch_stats(d: Driver) -> dict[str, Any]:
    progress = [p for p in d.events("progress") if p.get("numInputRows")]
    started = d.events("started")
    return {"startup_s": [s["startup_s"] for s in started],
            "batch_ms_with_data": [p["batchDuration"] for p in progress]}


# ---- no cluster needed ---------------------------------------------------------------------


def _doc(**kw: Any) -> Any:
    from pgval.core.driver_spec import DriverDocument

    return DriverDocument(**{**dict(topology="sst", pg="a1", bootstrap="h:1",
                                    master="local[2]", checkpoint="ck", progress_file="p",
                                    window_ms=2000, watermark_ms=500, trigger_ms=0,
                                    shuffle_partitions=3), **kw})


def test_document_defaults_and_spark_conf() -> None:
    from pgval.topologies.driver import spark_conf

    doc = _doc(topology="mst", pg="e1", conf={"spark.foo": "a=b", "spark.bar": "pgval"})
    assert doc.output == schema.OUTPUT_TOPIC
    conf = spark_conf(doc, "x.jar,y.jar", {"spark.bar": "user", "spark.baz": "user"},
                      before={"spark.baz": "sink", "spark.qux": "sink"})
    assert conf["spark.jars"] == "x.jar,y.jar" and conf["spark.foo"] == "a=b"
    # A sink's session settings, then the user's, then pgval's own time-outs.
    assert (conf["spark.qux"], conf["spark.baz"], conf["spark.bar"]) == ("sink", "user", "pgval")
    assert conf["spark.sql.shuffle.partitions"] == "3" and conf["spark.ui.enabled"] == "false"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"


#: Reads a properties file as Spark does (UTF-8 reader, Properties.load) and prints each
#: entry as hex of its UTF-8 bytes, so no escaping stands between Java and the test.
_LOAD_PROPERTIES_JAVA = """
import java.io.*; import java.nio.charset.StandardCharsets; import java.util.*;
public class Load { public static void main(String[] a) throws Exception {
  Properties p = new Properties();
  try (Reader r = new InputStreamReader(new FileInputStream(a[0]), StandardCharsets.UTF_8)) {
    p.load(r); }
  for (String k : p.stringPropertyNames()) System.out.println(
    HexFormat.of().formatHex(k.getBytes(StandardCharsets.UTF_8)) + " "
    + HexFormat.of().formatHex(p.getProperty(k).getBytes(StandardCharsets.UTF_8))); } }
"""


def test_the_driver_conf_file_reads_back_exactly_in_java(tmp_path: Path) -> None:
    """The driver's settings reach its JVM in a properties file (``start_jvm``): Java's own
    parser must read every key and value back unchanged, separators, comment marks,
    backslashes, control characters and non-ASCII (a surrogate pair too) included."""
    from pgval.topologies.driver import properties_text

    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    conf = {"spark.plain": "a", "spark.sep": "k=v:w", "spark.comment": "#x !y",
            "spark.back": "C:\\dir\\n", "spark.ctl": "a\tb\nc\rd\fe",
            "spark.lead": " lead", "spark.uni": "pässwörd-€-\U0001f600",
            "key with = and : and space": "v", "spark.empty": ""}
    text = properties_text(conf)
    assert text.isascii() and len(text.splitlines()) == len(conf)
    (tmp_path / "conf.properties").write_text(text)
    (tmp_path / "Load.java").write_text(_LOAD_PROPERTIES_JAVA)
    out = subprocess.run([java, str(tmp_path / "Load.java"), str(tmp_path / "conf.properties")],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    back = dict((bytes.fromhex(k).decode(), bytes.fromhex(v).decode()) for k, v in
                (line.split(" ") for line in out.splitlines()))
    assert back == conf


def test_the_crash_trigger_installs_the_hook_after_the_users_settings(tmp_path: Path) -> None:
    from pgval.faults.hooks import CRASH_BEFORE_COMMIT, TRIGGER_KEY, ensure_hooks_jar
    from pgval.topologies.driver import spark_conf

    doc = _doc(crash_trigger=tmp_path / "trigger")
    conf = spark_conf(doc, "x.jar", {"spark.jars": "user.jar"})
    manager = "spark.sql.streaming.checkpointFileManagerClass"
    assert conf[manager] == CRASH_BEFORE_COMMIT
    assert conf[f"spark.hadoop.{TRIGGER_KEY}"] == str(tmp_path / "trigger")
    assert conf["spark.jars"] == f"user.jar,{ensure_hooks_jar()}"  # the user's, plus the hook
    with pytest.raises(ValueError, match="replaces spark.sql.streaming.checkpointFile"):
        spark_conf(doc, "x.jar", {manager: "my.Manager"})


def test_the_sink_trigger_adds_the_producer_hook_to_the_sink_settings(tmp_path: Path) -> None:
    from pgval.faults.hooks import HALT_ON_SINK_WRITE, SINK_TRIGGER_KEY, ensure_hooks_jar
    from pgval.topologies.driver import sink_hook_options, spark_conf

    trigger = str(tmp_path / "trigger")
    conf = spark_conf(_doc(sink_trigger=trigger), "x.jar")
    assert conf["spark.jars"] == f"x.jar,{ensure_hooks_jar()}"  # executors load the hook
    assert "spark.sql.streaming.checkpointFileManagerClass" not in conf  # no commit hook
    user = {"security.protocol": "SSL"}
    assert sink_hook_options(user, None) == user
    assert sink_hook_options(user, trigger) == {
        **user, "interceptor.classes": HALT_ON_SINK_WRITE, SINK_TRIGGER_KEY: trigger}
    with pytest.raises(ValueError, match="interceptor.classes"):
        sink_hook_options({"interceptor.classes": "my.Interceptor"}, trigger)


def test_m1_starts_a_new_query_each_time_from_the_latest_offsets(tmp_path: Path) -> None:
    from pgval.topologies.driver import m1_start

    first, offsets = m1_start(str(tmp_path / "checkpoint"))
    second, _ = m1_start(str(tmp_path / "checkpoint"))
    assert offsets == "latest"  # Spark's default for a streaming query's first start
    assert first != second  # a restart never finds the last start's offsets or state
    assert Path(first).parent == Path(second).parent == tmp_path / "checkpoint"


def test_progress_record_keeps_offsets_watermark_and_state() -> None:
    from pgval.topologies.driver import progress_record

    raw = {"id": "x", "runId": "r", "batchId": 3, "timestamp": "t", "numInputRows": 5,
           "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 2.0, "batchDuration": 7,
           "durationMs": {"addBatch": 4}, "eventTime": {"watermark": "w"},
           "stateOperators": [{"operatorName": "symmetricHashJoin", "numRowsTotal": 9,
                               "numRowsUpdated": 1, "numRowsDroppedByWatermark": 2,
                               "memoryUsedBytes": 10, "allUpdatesTimeMs": 11,
                               "commitTimeMs": 3,
                               "customMetrics": {"stateOnCurrentVersionSizeBytes": 8}}],
           "sources": [{"description": "kafka", "startOffset": {"get": {"0": 1}},
                        "endOffset": {"get": {"0": 6}}, "latestOffset": {"get": {"0": 6}},
                        "numInputRows": 5}],
           "sink": {"description": "s", "numOutputRows": 4}}
    rec = progress_record(json.dumps(raw))
    assert rec["batchId"] == 3 and rec["eventTime"] == {"watermark": "w"}
    assert rec["runId"] == "r"  # a served driver's events are routed by it
    assert rec["sources"][0]["endOffset"] == {"get": {"0": 6}}
    assert rec["stateOperators"][0]["numRowsDroppedByWatermark"] == 2
    assert rec["stateOperators"][0]["allUpdatesTimeMs"] == 11
    assert rec["stateOperators"][0]["customMetrics"] == {"stateOnCurrentVersionSizeBytes": 8}
    assert rec["sink"] == {"description": "s", "numOutputRows": 4}


def test_checkpoint_query_id(tmp_path: Path) -> None:
    from pgval.topologies.guarantee_sinks import _checkpoint_query_id

    assert _checkpoint_query_id(str(tmp_path)) is None
    (tmp_path / "metadata").write_text('{"id":"abc"}')
    assert _checkpoint_query_id(str(tmp_path)) == "abc"


# ---- with Kafka and Spark ------------------------------------------------------------------


@contextlib.contextmanager
def _both_topologies_through(bs: str, tmp_path: Path, pg: str,
                             **produce: Any) -> Iterator[tuple[Driver, ...]]:
    """SST and MST drivers side by side on one live input stream (``_produce_live``'s
    ``produce`` arguments), taken through every input and the closing events to a graceful
    stop; yields them to be judged, and stops whatever still runs afterwards."""
    drivers = tuple(_driver(tmp_path, bs, t, pg) for t in schema.BUILTIN_TOPOLOGIES)
    try:
        for d in drivers:
            d.start()
        _wait_started(drivers)
        _produce_live(bs, **produce)
        sizes = _topic_sizes(bs)
        for d in drivers:
            wanted = {schema.GET_TOPIC: sizes[schema.GET_TOPIC]} if d.topology == "sst" else sizes
            _wait(lambda d=d, w=wanted: all(_consumed(d).get(t) == n for t, n in w.items()),
                  60, f"{d.name} to read all inputs", drivers)
        _produce_closing(bs)
        for d in drivers:
            _wait_outputs(bs, d, _expected_outputs(bs, d.topology))
        for d in drivers:
            assert _stop_gracefully(d) == 0, d.proc.log_tail(30) if d.proc else ""
        yield drivers
    finally:
        for d in drivers:
            if d.proc is not None:
                d.proc.stop(grace_s=10)


@pytest.mark.cluster
def test_topologies_exactly_once_without_faults(kafka: KafkaCluster, tmp_path: Path) -> None:
    """SST and MST side by side on one live input stream under e1; both must be exact. (a1
    runs the same way with some inputs in Kafka twice, the next test; m1:
    test_m1_restart_skips_…; all three end to end: tests/test_validate.py.)"""
    bs = kafka.bootstrap
    with _both_topologies_through(bs, tmp_path, "e1", seconds=7.0, rate=30.0,
                                  first_id=1) as drivers:
        for d in drivers:
            assert d.events("terminated")[-1].get("stopped_by") == "signal"
            _judge(bs, d)
            print(d.name, json.dumps(_batch_stats(d)))
            batches = d.events("sink_batch")
            assert batches and not any(b["skipped"] for b in batches)


@pytest.mark.cluster
def test_an_input_in_kafka_twice_is_listed_twice_by_sst_and_mst(kafka: KafkaCluster,
                                                               tmp_path: Path) -> None:
    """docs/semantics.md, "Input events": every Kafka record is one occurrence, in both
    topologies. An ID produced twice appears twice in its output (one duplicate per extra
    record, nothing incorrect or lost), and each count field counts records. Before, MST's
    ``collect_set`` of IDs hid the second record. About 60 s."""
    bs = kafka.bootstrap
    with _both_topologies_through(bs, tmp_path, "a1", seconds=5.0, rate=30.0, first_id=1,
                                  twice_every=6) as drivers:
        for d in drivers:
            assert d.events("terminated")[-1].get("stopped_by") == "signal"
            events, outputs, _ = _read_back(bs, d.output_topic)
            ev = evaluate(events, outputs, d.topology, W)
            v = ev.validation
            read = events.is_get if d.topology == "sst" else np.ones(len(events), bool)
            ids, times = np.unique(events.id[read], return_counts=True)
            listed = ids[(times > 1) & np.isin(ids, ev.expected.id_sorted)]
            assert v.duplicate_inputs == int((times - 1).sum()) > 0, d.name
            assert (v.unprocessed, v.incorrect, outputs.malformed) == (0, 0, 0), d.name
            assert v.duplicate == len(listed) > 0, d.name  # every record twice was listed twice
            assert sorted(v.ids("duplicate").tolist()) == listed.tolist(), d.name
            # Count fields count records: the oracle's (one per ID) plus the extra records.
            for rec in read_topic(bs, d.output_topic).values.to_pylist():
                obj = json.loads(rec)
                n = obj["count"] if d.topology == "sst" else obj["gets"] + obj["posts"]
                assert n == len(obj["ids"]), (d.name, obj)


def _wait_first_trigger(d: Driver, after: int = 0) -> None:
    """Until the query has run a trigger (more than ``after`` progress events): m1's
    "latest" offsets are fixed then, and what was written before it is skipped."""
    _wait(lambda: len(d.events("progress")) > after, 60, f"{d.name}'s first trigger", (d,))


@pytest.mark.cluster
def test_m1_restart_skips_what_arrived_while_no_driver_ran(kafka: KafkaCluster,
                                                           tmp_path: Path) -> None:
    """m1 (docs/semantics.md): a restarted driver is a new query from the latest offsets.

    What arrived while no driver ran is never processed, and nothing is re-sent: the
    validator must say at-most-once, with exactly the gap's GETs unprocessed beside the
    windows the crash cut (their state died with the driver).
    """
    bs = kafka.bootstrap
    d = _driver(tmp_path, bs, "sst", "m1")
    try:
        d.start()
        _wait_started((d,))
        _wait_first_trigger(d)
        gap_first = _produce_live(bs, seconds=5.0, rate=30.0, first_id=1)
        sizes = _topic_sizes(bs)
        _wait(lambda: _consumed(d).get(schema.GET_TOPIC) == sizes[schema.GET_TOPIC], 60,
              "the first query to read its inputs", (d,))
        assert d.proc is not None
        d.proc.kill()
        gap_end = _produce_live(bs, seconds=4.0, rate=30.0, first_id=gap_first, seed=8)
        seen = len(d.events("progress"))
        d.start()
        _wait_started((d,))
        _wait_first_trigger(d, after=seen)
        last = _produce_live(bs, seconds=5.0, rate=30.0, first_id=gap_end, seed=9)
        closing_after = int(time.time() * 1000) + 50 * W  # the closing events' watermark
        _produce_closing(bs)
        sizes = _topic_sizes(bs)
        _wait(lambda: _consumed(d).get(schema.GET_TOPIC) == sizes[schema.GET_TOPIC], 60,
              "the second query to read its inputs", (d,))
        # Every real window is out once a batch ran with the closing events' watermark
        # (append mode emits a window in the batch whose watermark passes its end).
        _wait(lambda: max((watermark_ms(p) for p in d.events("progress")), default=0)
              >= closing_after, 60, "the watermark past every window", (d,))
        assert _stop_gracefully(d) == 0
        assert last > gap_end
        starts = d.events("started")
        assert [s["starting_offsets"] for s in starts] == ["latest", "latest"]
        assert len({s["checkpoint"] for s in starts}) == 2  # a new query each time

        events, outputs, _ = _read_back(bs, d.output_topic)
        v = evaluate(events, outputs, "sst", W).validation
        assert v.duplicate == 0 and v.incorrect == 0 and outputs.malformed == 0
        assert v.guarantee == "at-most-once" and v.unprocessed > 0
        lost = set(v.ids("unprocessed").tolist())
        gap_gets = set(events.id[(events.id >= gap_first) & (events.id < gap_end)
                                 & events.is_get].tolist())
        assert gap_gets and gap_gets <= lost  # every GET of the gap is lost …
        assert max(lost) < gap_end  # … and nothing written after the restart
    finally:
        if d.proc is not None:
            d.proc.stop(grace_s=10)


class _Restartable:
    """A test Driver as the fault's :class:`RestartableDriver`."""

    def __init__(self, d: Driver) -> None:
        self.d = d

    def pid(self) -> int | None:
        return self.d.proc.pid if self.d.proc is not None else None

    def alive(self) -> bool:
        return self.d.proc is not None and self.d.proc.alive()

    def kill(self) -> None:
        if self.d.proc is not None:
            self.d.proc.kill()

    def start(self) -> float:
        self.d.start()
        _wait_started((self.d,))
        return 0.0


@pytest.mark.cluster
@pytest.mark.parametrize("pg", ("a1", "e1"))
def test_crash_after_sink_write_duplicates_a1_and_not_e1(kafka: KafkaCluster, tmp_path: Path,
                                                         pg: str) -> None:
    """The crash point after-sink-write, as `pgval validate --crash-point` uses it.

    The driver's commit hook stops before each commit; the fault lets batches without
    outputs commit and halts the driver at the first one whose outputs are in Kafka. The
    restart re-runs that batch from the checkpoint: Spark's Kafka sink (a1) writes its
    outputs again — duplicates, every time — and the transactional sink (e1) skips it.
    """
    from pgval.faults.process import DriverCrash

    bs = kafka.bootstrap
    trigger = tmp_path / "control" / "crash-before-commit"
    trigger.parent.mkdir()
    d = _driver(tmp_path, bs, "sst", pg, crash_trigger=trigger)
    producer_done, crashed = threading.Event(), threading.Event()

    def produce() -> None:  # live input until the crash is done and 4 s more after it
        try:
            next_id = 1
            while not crashed.is_set():
                next_id = _produce_live(bs, seconds=2.0, rate=30.0, first_id=next_id,
                                        seed=next_id)
            _produce_live(bs, seconds=4.0, rate=30.0, first_id=next_id, seed=next_id)
        finally:
            producer_done.set()

    ends = Consumer({"bootstrap.servers": bs, "group.id": "pgval-test-ends", "log_level": 3})

    def output_count() -> int:  # as pgval's OutputMonitor: the sum of high watermarks
        parts = ends.list_topics(d.output_topic, timeout=10).topics[d.output_topic].partitions
        return sum(ends.get_watermark_offsets(TopicPartition(d.output_topic, p), timeout=10,
                                              cached=False)[1] for p in parts)

    thread = threading.Thread(target=produce, daemon=True)
    crash = DriverCrash(_Restartable(d), trigger=trigger, reach_timeout_s=60.0,
                        output_count=output_count)
    try:
        d.start()
        _wait_started((d,))
        thread.start()
        _wait(lambda: len(read_topic(bs, d.output_topic, idle_timeout_s=3)) > 0, 60,
              "the first outputs", (d,))
        try:
            entry = crash.inject()
        finally:
            crashed.set()
        assert "error" not in entry, entry
        assert entry["crash_point"] == "after-sink-write" and entry["outputs_written"] > 0
        assert entry["offsets_logged"] and not entry["commit_logged"], entry
        batch = entry["batch"]
        assert not trigger.exists()  # the restart runs without the hook armed
        crash.remove()
        _wait(producer_done.is_set, 60, "the producer", (d,))
        sizes = _topic_sizes(bs)
        _wait(lambda: _consumed(d).get(schema.GET_TOPIC) == sizes[schema.GET_TOPIC], 60,
              "the driver to read all inputs", (d,))
        closing_after = int(time.time() * 1000) + 50 * W  # the closing events' watermark
        _produce_closing(bs)
        # Not an output count: a1's duplicates reach the oracle's count before every
        # window is out. A batch with the closing watermark has emitted them all.
        _wait(lambda: max((watermark_ms(p) for p in d.events("progress")), default=0)
              >= closing_after, 90, "the watermark past every window", (d,))
        assert _stop_gracefully(d) == 0
        if pg == "e1":
            _judge(bs, d)  # exactly-once: the re-run batch was skipped …
            assert any(b["batch_id"] == batch and b["skipped"] for b in d.events("sink_batch"))
            raw = read_topic(bs, d.output_topic, isolation="read_uncommitted")
            assert len(raw) == len(read_topic(bs, d.output_topic))  # … and never re-sent
            return
        events, outputs, _ = _read_back(bs, d.output_topic)
        v = evaluate(events, outputs, "sst", W).validation
        assert v.unprocessed == 0 and v.incorrect == 0 and v.duplicate > 0, v
        assert v.guarantee == "at-least-once"
    finally:
        crashed.set()
        thread.join(timeout=30)
        ends.close()
        if d.proc is not None:
            d.proc.stop(grace_s=10)
