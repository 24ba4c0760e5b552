"""The embedded Kafka against real brokers: its login, topics, timestamps, transactions, cleanup."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from pgval.core import schema
from pgval.core.errors import PgvalError
from pgval.kafka import broker as kafka_mod
from pgval.kafka import jvm_reader
from pgval.kafka.admin import create_topics, delete_topics, is_reachable
from pgval.kafka.broker import KafkaCluster
from pgval.kafka.client import java_client_options, quiet_conf
from pgval.kafka.reader import read_topic, read_topics, reader_conf
from pgval.run.readback import written_after
from tests.conftest import wait_until

PLAIN = schema.Topics()  # the unprefixed topics

# ---- no broker needed ----------------------------------------------------------------------


def test_cluster_ids_never_look_like_options() -> None:
    ids = {kafka_mod._new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_read_from_an_unreachable_broker_is_a_problem_not_a_traceback() -> None:
    got = read_topic("127.0.0.1:1", schema.GET_TOPIC, timeout_s=3, strict=False)
    assert not got.complete and got.problems and len(got) == 0
    with pytest.raises(PgvalError, match="could not read all of topic"):
        read_topic("127.0.0.1:1", schema.GET_TOPIC, timeout_s=3)


def test_a_sasl_login_becomes_jaas_for_java_clients_and_round_trips(tmp_path: Path) -> None:
    """Spark's source and sink (Java) get the login pgval's librdkafka clients use, as
    JAAS; other settings pass unchanged; the 0600 file reads back as written."""
    creds = kafka_mod.KafkaCredentials.new()
    assert len(creds.password) == 48 and creds != kafka_mod.KafkaCredentials.new()
    java = java_client_options({**creds.client_config(), "linger.ms": "5"})
    assert java == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "linger.ms": "5",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                            f'required username="pgval" password="{creds.password}";'}
    plain = java_client_options({"sasl.mechanisms": "PLAIN", "sasl.username": "u",
                                 "sasl.password": 'a"b\\c'})
    assert plain["sasl.jaas.config"] == ("org.apache.kafka.common.security.plain."
                                         'PlainLoginModule required username="u" '
                                         'password="a\\"b\\\\c";')
    assert java_client_options({"acks": "all"}) == {"acks": "all"}
    kerberos = {"sasl.mechanism": "GSSAPI", "sasl.username": "u"}
    assert java_client_options(kerberos) == kerberos
    path = tmp_path / "kafka" / "client.properties"
    path.parent.mkdir()
    path.write_text("old")
    path.chmod(0o644)
    creds.write(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert kafka_mod.KafkaCredentials.read(path) == creds
    assert kafka_mod.KafkaCredentials.read(tmp_path / "none") is None
    assert KafkaCluster(tmp_path, sasl=False).auth_config == {}


# ---- real brokers --------------------------------------------------------------------------


def _jvms_mentioning(path: Path) -> list[int]:
    """Pids of live java processes whose command line mentions ``path`` (our run dir)."""
    found = []
    needle = str(path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"java" in cmd and needle in cmd and state != "Z":
            found.append(int(entry.name))
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    # Plain listeners: these tests are about topics and reads; the closed (SASL) cluster is
    # test_three_brokers_are_closed_align_leaders_and_leave_no_jvm's.
    c = KafkaCluster(tmp_path_factory.mktemp("run"), brokers=1, partitions=3, sasl=False)
    try:
        c.start()
        create_topics(c.client_config, PLAIN.all(), 3, compacted=[PLAIN.marker])
        yield c
    finally:
        c.stop()
    assert not _jvms_mentioning(c.run_dir)


def _producer(bootstrap: str, **extra: object) -> Producer:
    """Quiet producer: it outlives the brokers in some tests and would log refused connects."""
    conf = {**quiet_conf(bootstrap), "linger.ms": 5, **extra}
    return Producer(conf)


@pytest.mark.cluster
def test_log_append_time_overrides_client_timestamp(cluster: KafkaCluster) -> None:
    p = _producer(cluster.bootstrap)
    before_ms = int(time.time() * 1000)
    p.produce(schema.GET_TOPIC, key=b"r0000", value=b"old", timestamp=1_000, partition=1)
    assert p.flush(30) == 0
    got = read_topic(cluster.bootstrap, schema.GET_TOPIC)
    assert got.values.to_pylist() == [b"old"] and got.keys.to_pylist() == [b"r0000"]
    assert got.partitions.tolist() == [1]
    ts = int(got.timestamps[0])
    assert before_ms - 5_000 <= ts <= int(time.time() * 1000) + 5_000


@pytest.mark.cluster
def test_experiment_topics_exist_with_compacted_marker(cluster: KafkaCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    md = admin.list_topics(timeout=10)
    for name in (schema.GET_TOPIC, schema.POST_TOPIC, schema.OUTPUT_TOPIC, schema.MARKER_TOPIC):
        assert len(md.topics[name].partitions) == 3
    for name in (schema.GET_TOPIC, schema.MARKER_TOPIC):
        res = ConfigResource(ConfigResource.Type.TOPIC, name)
        cfg = admin.describe_configs([res])[res].result(timeout=10)
        assert cfg["cleanup.policy"].value == ("compact" if name == schema.MARKER_TOPIC
                                               else "delete")
        assert cfg["message.timestamp.type"].value == "LogAppendTime"
        assert cfg["retention.ms"].value == "-1" and cfg["min.insync.replicas"].value == "1"
    # Creating again is an error: the topic may hold someone else's records.
    with pytest.raises(PgvalError, match="topic output already exists"):
        create_topics(cluster.client_config, [schema.OUTPUT_TOPIC], 3)


@pytest.mark.cluster
def test_delete_topics_deletes_and_a_missing_one_is_no_error(cluster: KafkaCluster) -> None:
    create_topics(cluster.client_config, ["doomed"], 3)
    assert delete_topics(cluster.client_config, ["doomed", "never-was"]) == ["doomed"]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: "doomed" not in admin.list_topics(timeout=10).topics, 30,
               "the deleted topic to leave the metadata")


@pytest.mark.cluster
def test_read_committed_skips_aborted_and_open_transactions(cluster: KafkaCluster) -> None:
    topic = "txn-roundtrip"
    create_topics(cluster.client_config, [topic], 3)
    tx = _producer(cluster.bootstrap, **{"transactional.id": "pgval-test-tx"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(topic, key=b"k", value=f"committed-{i}".encode(), partition=i)
    tx.commit_transaction(30)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(topic, key=b"k", value=f"aborted-{i}".encode(), partition=i)
    tx.flush(30)
    tx.abort_transaction(30)
    plain = _producer(cluster.bootstrap)
    plain.produce(topic, value=b"plain", partition=0)
    assert plain.flush(30) == 0

    committed = read_topic(cluster.bootstrap, topic)
    assert sorted(committed.values.to_pylist()) == [b"committed-0", b"committed-1", b"committed-2",
                                                    b"plain"]
    assert committed.timestamps.dtype.kind == "i" and len(committed.offsets) == 4
    everything = read_topic(cluster.bootstrap, topic, isolation="read_uncommitted")
    assert len(everything) == 7
    # The read's own isolation level holds whatever the user's client settings say.
    said = read_topic(cluster.bootstrap, topic, config={"isolation.level": "read_uncommitted"})
    assert sorted(said.values.to_pylist()) == sorted(committed.values.to_pylist())

    # An open transaction holds back the last stable offset. The read waits for it: one
    # still open when the wait ends leaves the read incomplete, with the reason, and its
    # records unread.
    tx.begin_transaction()
    tx.produce(topic, value=b"pending", partition=2)
    tx.flush(30)
    t0 = time.monotonic()
    held = read_topic(cluster.bootstrap, topic, timeout_s=3, strict=False)
    assert 2.5 < time.monotonic() - t0 < 15
    assert not held.complete and b"pending" not in held.values.to_pylist()
    assert any("partition 2: a transaction" in p and "neither committed nor aborted" in p
               for p in held.problems), held.problems
    with pytest.raises(PgvalError, match="neither committed nor aborted"):
        read_topic(cluster.bootstrap, topic, timeout_s=1)

    # Committed while the snapshot waits (as when a sink's commit has returned but its
    # markers are still being written): its records belong to the read; aborted, they do not.
    for finish, value in ((tx.commit_transaction, b"late-commit"),
                          (tx.abort_transaction, b"late-abort")):
        if value != b"late-commit":
            tx.begin_transaction()
        tx.produce(topic, value=value, partition=1)
        tx.flush(30)
        timer = threading.Timer(3.0, finish, args=(30,))
        timer.start()
        t0 = time.monotonic()
        try:
            got = read_topic(cluster.bootstrap, topic, timeout_s=30)
        finally:
            timer.join()
        assert got.complete and time.monotonic() - t0 > 2.9  # it waited for the outcome
        assert (value in got.values.to_pylist()) == (value == b"late-commit")
        # The marker written once the snapshot was taken is no record past it.
        assert written_after(cluster.bootstrap, {}, got) == []
    assert b"pending" in got.values.to_pylist() and len(got) == 6


@pytest.mark.cluster
def test_a_topic_written_after_the_read_is_named(cluster: KafkaCluster) -> None:
    """After the drain nothing may write to the output topic: a record that arrives after
    the read's snapshot is a problem of the read (the sink was still writing)."""
    topic = "written-after"
    create_topics(cluster.client_config, [topic], 2)
    plain = _producer(cluster.bootstrap)
    plain.produce(topic, value=b"before", partition=0)
    assert plain.flush(30) == 0
    read = read_topic(cluster.bootstrap, topic)
    assert written_after(cluster.bootstrap, {}, read) == []
    plain.produce(topic, value=b"after", partition=1)
    assert plain.flush(30) == 0
    assert written_after(cluster.bootstrap, {}, read) == [
        "records past the read-back's snapshot (the sink was still writing, or the "
        "snapshot's end was too low): partition 1: 1 after offset 0"]


@pytest.mark.cluster
def test_three_brokers_are_closed_align_leaders_and_leave_no_jvm(tmp_path: Path) -> None:
    """Three brokers (controller quorum on SASL/PLAIN, inter-broker SCRAM): only a client
    with the cluster's password gets in; the password is in 0600 files, on no command line
    and in no log."""
    c = KafkaCluster(tmp_path, brokers=3, partitions=4)
    pids: list[int] = []
    try:
        c.start()
        pids = [p.pid for p in c.procs]
        assert len(pids) == 3 and c.startup_seconds is not None
        names = PLAIN.all()
        create_topics(c.client_config, names, 4, compacted=[PLAIN.marker])
        assert_closed(c)
        admin = AdminClient(c.client_config)
        md = admin.list_topics(timeout=10)
        for name in names:
            for p, pmd in md.topics[name].partitions.items():
                assert pmd.leader == p % 3, (name, p)
                assert list(pmd.replicas) == [p % 3, (p + 1) % 3, (p + 2) % 3]
        prod = _producer(c.bootstrap, acks="all", **c.auth_config)
        prod.produce(schema.POST_TOPIC, value=b"x", partition=3)
        assert prod.flush(30) == 0
        # The one record is the authenticated one: the refused writes left nothing.
        assert read_topic(c.bootstrap, schema.POST_TOPIC,
                          config=c.auth_config).values.to_pylist() == [b"x"]
        # The Java reader logs in with the same password (as JAAS, on its stdin).
        by_java = read_topics(c.bootstrap, [schema.POST_TOPIC], config=c.auth_config,
                              reader="jvm")[schema.POST_TOPIC]
        assert by_java.values.to_pylist() == [b"x"] and by_java.reader == "jvm"
    finally:
        c.stop()
        c.stop()  # idempotent
    assert pids and not any(_pid_alive(pid) for pid in pids)
    assert not _jvms_mentioning(tmp_path)
    assert not is_reachable(c.bootstrap, timeout_s=1.0)
    assert not list((tmp_path / "pids").glob("*.json"))


@pytest.mark.cluster
def test_a_new_cluster_starts_on_fresh_storage_where_an_old_one_stopped(tmp_path: Path) -> None:
    """A warm cluster started again whole, or `cluster up` after a forced `down`, runs a new
    KafkaCluster in the same directory. Storage formatting skips a formatted directory, so
    the old metadata log (old cluster id, old SCRAM login, old topics) would be kept and the
    new brokers could not log in: the new cluster starts on fresh storage."""
    old = KafkaCluster(tmp_path, brokers=1, partitions=1)
    try:
        old.start()
        create_topics(old.client_config, ["kept"], 1)
    finally:
        old.stop()
    new = KafkaCluster(tmp_path, brokers=1, partitions=1)
    try:
        new.start()
        assert new.credentials is not None and old.credentials is not None
        assert new.credentials.password != old.credentials.password
        metadata = AdminClient(new.client_config).list_topics(timeout=10)  # the login works
        assert "kept" not in metadata.topics
        create_topics(new.client_config, ["kept"], 1)  # the name is free again
    finally:
        new.stop()
    assert not _jvms_mentioning(tmp_path)


@pytest.mark.cluster
@pytest.mark.parametrize("taken_twice", [False, True])
def test_a_broker_whose_port_was_taken_starts_again_on_new_ports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken_twice: bool) -> None:
    """Between choosing a port and the broker's bind, another process can take it (CI saw
    "kafka-broker-0 exited before listening"): a new cluster is planned again, once, and the
    failed attempt's log is kept. Taken again, the start fails with the cause in its one
    sentence, and no broker outlives it."""
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real_plan = KafkaCluster._plan
    plans: list[list[int]] = []

    def plan_on_the_taken_port(self: KafkaCluster) -> list:
        nodes = real_plan(self)
        if not plans or taken_twice:
            nodes[0].port = taken
        plans.append([n.port for n in nodes])
        return nodes

    monkeypatch.setattr(KafkaCluster, "_plan", plan_on_the_taken_port)
    c = KafkaCluster(tmp_path, brokers=1, partitions=1, sasl=False)
    try:
        if taken_twice:
            # The squatter accepts connections, so the port looks served: the broker is
            # found dead while it waits to register, not while it waits for the port.
            with pytest.raises(PgvalError, match=r"Kafka broker 0 exited during "
                               r"startup \(.*Address already in use.*\); see "):
                c.start()
        else:
            c.start()
            assert is_reachable(c.bootstrap, timeout_s=10.0)
            assert c.procs and all(p.alive() for p in c.procs)
    finally:
        c.stop()
        squatter.close()
    assert len(plans) == 2
    kept = (tmp_path / "kafka" / "port-taken-broker-0.log").read_text()
    assert "Address already in use" in kept
    assert not _jvms_mentioning(tmp_path)


def assert_closed(c: KafkaCluster) -> None:
    """Nobody without the cluster's password can read metadata or write a record; the
    password is only in 0600 files."""
    assert c.credentials is not None
    password = c.credentials.password
    assert is_reachable(c.bootstrap, timeout_s=10.0, config=c.auth_config)
    assert not is_reachable(c.bootstrap, timeout_s=2.0)
    assert not is_reachable(c.bootstrap, timeout_s=2.0,
                            config={**c.auth_config, "sasl.password": "not-" + password})
    errors: list[object] = []
    intruder = _producer(c.bootstrap, acks="all", **{"message.timeout.ms": 3000})
    intruder.produce(schema.POST_TOPIC, value=b"intruder", partition=0,
                     on_delivery=lambda err, _msg: errors.append(err))
    intruder.flush(10)
    assert len(errors) == 1 and errors[0] is not None
    for proc in c.procs:
        assert password.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    private = [c.credentials_file, *(c.run_dir / "kafka").glob("broker-*/server.properties")]
    assert len(private) == 4
    for path in private:
        assert password in path.read_text() and path.stat().st_mode & 0o777 == 0o600, path
    assert not list((c.run_dir / "kafka").glob("broker-*/format.args"))
    logs = list((c.run_dir / "kafka").rglob("*.log"))
    assert logs and not any(password in p.read_text(errors="replace") for p in logs)


@pytest.mark.cluster
def test_read_back_proves_completeness_or_says_why_not(cluster: KafkaCluster) -> None:
    """A complete read reaches every end offset; deleted records or a time-out are problems."""
    topic = "completeness"
    create_topics(cluster.client_config, [topic], 3)
    p = _producer(cluster.bootstrap, acks="all")
    for i in range(9):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0
    full = read_topic(cluster.bootstrap, topic)
    assert full.complete and full.problems == [] and len(full) == 9
    assert full.end_offsets == {0: 3, 1: 3, 2: 3} and full.reached == full.end_offsets

    # Retention (here: delete-records) removed the head of partition 1: the read says so,
    # keeps what it could read, and strict mode refuses with one sentence.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.delete_records([TopicPartition(topic, 1, 2)]).values():
        fut.result(timeout=30)
    cut = read_topic(cluster.bootstrap, topic, strict=False)
    assert not cut.complete and len(cut) == 7
    assert any("partition 1 starts at offset 2" in why for why in cut.problems)
    with pytest.raises(PgvalError, match="earlier records were deleted"):
        read_topic(cluster.bootstrap, topic)

    # No time to read: short, with the reason, never a silent partial result.
    rushed = read_topic(cluster.bootstrap, topic, timeout_s=0.0, strict=False)
    assert not rushed.complete and rushed.problems


@pytest.mark.cluster
def test_another_engine_is_judged_through_generate_record_and_check(
        cluster: KafkaCluster, tmp_path: Path) -> None:
    """The flow for a Flink or Kafka Streams job: `pgval generate` into new topics, the
    engine's outputs in an output topic (here the oracle's outputs of what Kafka holds,
    written by a plain producer, one window written twice), `pgval record`, then `pgval
    check --expect`: the duplicated window's IDs, no more, fail exactly-once. An output
    topic stamping CreateTime is recorded, with a warning."""
    import json
    import subprocess
    import sys

    from confluent_kafka.admin import NewTopic

    from pgval.oracle import expected_outputs
    from pgval.records.parse import read_inputs

    boot = cluster.bootstrap

    def pgval(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pgval.cli", *args], capture_output=True,
                              text=True, timeout=180)

    gen = pgval("generate", "--bootstrap", boot, "--topic-prefix", "other-", "--rate", "0",
                "--events", "3000", "--resources", "4", "--seed", "5", "--json")
    assert gen.returncode == 0, gen.stderr
    report = json.loads(gen.stdout)
    # Then one closing event per resource on each of the 3 partitions of both topics.
    assert report["delivered"] == 3000 and report["closing_events"] == 2 * 3 * 4
    again = pgval("generate", "--bootstrap", boot, "--topic-prefix", "other-", "--events", "1")
    assert again.returncode == 2 and "already exists" in again.stderr
    # The engine: reads the inputs (pgval record of the inputs alone gives them) ...
    first = pgval("record", "--bootstrap", boot, "--inputs", "other-get,other-post",
                  "--outputs", schema.OUTPUT_TOPIC, "--out", str(tmp_path / "in"))
    assert first.returncode == 0, first.stderr
    events = read_inputs(tmp_path / "in" / "inputs.jsonl")
    assert len(events) == 3000
    rows = expected_outputs(events, "sst", 100).to_records()
    assert len(rows) >= 4  # 4 resources, in one or more 100 ms windows
    # ... and writes its outputs, window 0 twice, to a topic of its own.
    create_topics(cluster.client_config, ["other-output"], 3)
    p = _producer(boot)
    for row in [*rows, rows[0]]:
        p.produce("other-output", key=row["resource"].encode(), value=json.dumps(row).encode())
    assert p.flush(30) == 0
    rec = pgval("record", "--bootstrap", boot, "--inputs", "other-get,other-post",
                "--outputs", "other-output", "--out", str(tmp_path / "rec"))
    assert rec.returncode == 0, rec.stderr
    assert "warning" not in rec.stderr
    info = json.loads((tmp_path / "rec" / "record.json").read_text())
    assert info["inputs"] == 3000 and info["outputs"] == len(rows) + 1
    assert info["closing_events_set_aside"] == 24
    assert sum(int(o) for t in ("other-get", "other-post")
               for o in info["topics"][t]["end_offsets"].values()) == 3000 + 24
    assert {t["timestamp_type"] for t in info["topics"].values()} == {"LogAppendTime"}
    files = ["--topology", "sst", "--inputs", str(tmp_path / "rec" / "inputs.jsonl"),
             "--outputs", str(tmp_path / "rec" / "outputs.jsonl"), "--window-ms", "100"]
    strict = pgval("check", *files, "--expect", "exactly-once", "--json")
    assert strict.returncode == 1, strict.stderr
    summary = json.loads(strict.stdout)
    assert summary["guarantee"] == "at-least-once"
    assert summary["duplicate"] == len(rows[0]["ids"]) and summary["unprocessed"] == 0
    assert pgval("check", *files, "--expect", "at-least-once").returncode == 0
    # A topic made with the broker's default stamps CreateTime: recorded, and said.
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("other-created", 1, 1)])["other-created"].result(30)
    ct = pgval("record", "--bootstrap", boot, "--inputs", "other-get", "--outputs",
               "other-created", "--out", str(tmp_path / "ct"))
    assert ct.returncode == 0, ct.stderr
    assert "other-created stamp CreateTime" in " ".join(ct.stderr.split())
    info = json.loads((tmp_path / "ct" / "record.json").read_text())
    assert info["create_time_topics"] == ["other-created"]


# ---- the Java reader reads exactly what librdkafka reads --------------------------------


def _sorted(recs: object) -> object:
    return recs.to_table().sort_by([("partition", "ascending"),  # type: ignore[attr-defined]
                                    ("offset", "ascending")])


def _ours_running() -> list[int]:
    """Pids of live Java readers (the reader's main class on their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and jvm_reader.MAIN_CLASS.encode() in \
                    (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.cluster
def test_the_java_reader_reads_what_librdkafka_reads(cluster: KafkaCluster) -> None:
    """Committed, aborted and still open transactions, null and empty keys and values, and
    more records than one of the Java reader's chunks: record for record the same columns
    and the same proof from both readers, read_committed and read_uncommitted."""
    topic = "two-readers"
    create_topics(cluster.client_config, [topic], 3)
    tx = _producer(cluster.bootstrap, **{"transactional.id": "pgval-two-readers"})
    tx.init_transactions(30)
    for outcome in ("commit", "abort"):
        tx.begin_transaction()
        for i in range(30):
            tx.produce(topic, key=None if i % 4 == 0 else b"k", value=f"{outcome}-{i}".encode(),
                       partition=i % 3)
        tx.commit_transaction(30) if outcome == "commit" else (tx.flush(30),
                                                               tx.abort_transaction(30))
    plain = _producer(cluster.bootstrap, **{"compression.type": "lz4", "linger.ms": 20})
    for i in range(150_000):  # > 2 chunks of 65,536 in partition 0
        value = None if i % 1000 == 7 else b"" if i % 1000 == 8 else b'{"id":%d}' % i
        while True:
            try:
                plain.produce(topic, key=b"r%d" % (i % 9) if i % 5 else None, value=value,
                              partition=0 if i % 3 else 1 + i % 2)
                break
            except BufferError:
                plain.poll(0.05)
    assert plain.flush(60) == 0
    tx.begin_transaction()  # open: read_committed cannot get past it
    tx.produce(topic, value=b"pending", partition=2)
    tx.flush(30)
    try:
        for isolation in ("read_committed", "read_uncommitted"):
            got = {r: read_topic(cluster.bootstrap, topic, isolation=isolation, reader=r,
                                 timeout_s=8, strict=False)
                   for r in ("jvm", "librdkafka")}
            java, rdkafka = got["jvm"], got["librdkafka"]
            assert java.reader == "jvm" and rdkafka.reader == "librdkafka"
            # Both stop at the open transaction and say so; both read everything else.
            held = isolation == "read_committed"
            for one in (java, rdkafka):
                assert one.complete != held, (one.reader, one.problems)
                assert held == any("neither committed nor aborted" in p for p in one.problems)
            assert (java.end_offsets, java.reached) == (rdkafka.end_offsets, rdkafka.reached)
            assert _sorted(java).equals(_sorted(rdkafka)), isolation
            values = java.values.to_pylist()
            assert len(java) == 150_000 + 30 * (1 if isolation == "read_committed" else 2) \
                + (isolation == "read_uncommitted")
            assert None in values and b"" in values and (b"pending" in values) == (
                isolation == "read_uncommitted")
    finally:
        tx.abort_transaction(30)
    # From 1M records on (here: lowered) "auto" takes the Java reader; what the caller
    # notes of each chunk while it reads is one note per chunk of the values, in order.
    auto = read_topics(cluster.bootstrap, [topic], jvm_min_records=1000, on_chunk=len)[topic]
    assert auto.reader == "jvm" and auto.complete and len(auto) == 150_030
    assert auto.chunk_notes == [len(c) for c in auto.values.chunks]
    assert auto.values.num_chunks >= 3  # more than one chunk: the order is a real one

    def fails(values: object) -> object:
        raise ValueError("a note that fails")

    # A note that fails is dropped; the read stands.
    noted = read_topics(cluster.bootstrap, [topic], jvm_min_records=1000, on_chunk=fails)
    assert noted[topic].complete and len(noted[topic]) == 150_030
    assert noted[topic].chunk_notes is None
    by_rdkafka = read_topics(cluster.bootstrap, [topic], reader="librdkafka", on_chunk=len)
    assert by_rdkafka[topic].chunk_notes is None  # notes are the Java reader's
    assert not _ours_running()


@pytest.mark.cluster
def test_a_java_read_that_fails_or_runs_out_of_time_is_short_with_its_reason(
        cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "java-short"
    create_topics(cluster.client_config, [topic], 3)
    p = _producer(cluster.bootstrap)
    for i in range(30):
        p.produce(topic, value=b"v%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    # A range that ends past what the partition holds: the reader reads the 10 records,
    # then nothing moves, and after the idle time it says so (reached: where it stopped).
    got: dict[str, tuple[int, dict[int, int], list[str]]] = {}
    jvm_reader.read_tasks_jvm(reader_conf(cluster.bootstrap, "read_committed"),
                              [(topic, 0, 0, 1000), (topic, 1, 4, 10)], 60.0, 1.0,
                              lambda t, table, reached, why: got.update(
                                  {t: (len(table), reached, why)}))
    assert got == {topic: (10 + 6, {0: 10, 1: 10}, ["nothing arrived for 1 s"])}
    # A JVM that cannot start (a heap too small for it) leaves every partition at its
    # start, with the JVM's own words, never a silent empty read.
    monkeypatch.setattr(jvm_reader, "HEAP", "1k")
    broken = read_topic(cluster.bootstrap, topic, strict=False, reader="jvm")
    assert len(broken) == 0 and broken.reached == {0: 0, 1: 0, 2: 0}
    assert broken.problems[0].startswith("the Java reader failed"), broken.problems
    assert "heap" in broken.problems[0].lower()
    with pytest.raises(PgvalError, match="could not read all of topic java-short"):
        read_topic(cluster.bootstrap, topic, reader="jvm")
    # Left to choose ("auto"), pgval reads again with librdkafka and says why; notes of
    # the failed read are not kept.
    again = read_topics(cluster.bootstrap, [topic], jvm_min_records=1, on_chunk=len)[topic]
    assert again.complete and len(again) == 30 and again.chunk_notes is None
    assert again.reader.startswith("librdkafka (the Java reader could not: the Java reader "
                                   "failed"), again.reader
    assert not _ours_running()


def test_settings_the_java_reader_cannot_translate_keep_librdkafka() -> None:
    assert jvm_reader.jvm_unusable(reader_conf("h:1", "read_committed")) is None
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "u", "sasl.password": "p"}
    assert jvm_reader.jvm_unusable(reader_conf("h:1", "read_committed", sasl)) is None
    java = jvm_reader.java_settings(reader_conf("h:1", "read_committed", sasl))
    assert "sasl.password" not in java and "password=\"p\"" in java["sasl.jaas.config"]
    assert "logger" not in java and java["isolation.level"] == "read_committed"
    ssl = reader_conf("h:1", "read_committed", {"ssl.ca.location": "/ca.pem"})
    assert jvm_reader.jvm_unusable(ssl) == ("client settings without a Java translation: "
                                            "ssl.ca.location")
    assert jvm_reader.jvm_unusable(reader_conf("h:1", "read_committed", {
        **sasl, "security.protocol": "SASL_SSL"})).startswith("security.protocol SASL_SSL")
    assert jvm_reader.jvm_unusable(reader_conf("h", "read_committed")) == \
        "a bootstrap address without its port"
    assert jvm_reader.jvm_unusable(reader_conf("h:1", "read_committed", {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"})) == \
        "sasl mechanism GSSAPI"
    assert "tab or line break" in jvm_reader.jvm_unusable(
        reader_conf("h:1", "read_committed", {"sasl.password": "a\tb"}))


def test_a_frame_reader_that_fails_or_ends_silently_is_a_read_error_not_a_wait() -> None:
    """Whatever stops the thread reading the Java reader's pipe, the taker hears of it."""
    import io
    import queue
    import threading

    class Breaks(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise RuntimeError("a bug in the frame reader")

    frames: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
    thread = threading.Thread(target=jvm_reader._frames, args=(Breaks(), frames))
    thread.start()
    thread.join(5)
    kind, item = jvm_reader._next_frame(frames, thread)
    assert kind == "E" and isinstance(item, EOFError) and "a bug in the frame reader" in str(item)
    silent = threading.Thread(target=lambda: None)
    silent.start()
    silent.join(5)
    with pytest.raises(EOFError, match="stopped without an end"):
        jvm_reader._next_frame(queue.SimpleQueue(), silent)
