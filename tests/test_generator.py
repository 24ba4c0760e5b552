"""The synthetic web-log generator: determinism, id scheme, distribution, pacing, sinks, processes.

The generator is the ground truth of every experiment (the validator compares outputs with
what it says was delivered), so these check the properties the validator relies on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgval.core.clock import now_ms
from pgval.core.schema import GET, POST, resource_name
from pgval.datasets import (
    FileSink,
    GeneratorConfig,
    GeneratorConfigError,
    GeneratorError,
    KafkaSink,
    NullSink,
    ProducerGroup,
    decode_id,
    encode_json_lines,
    encode_values,
    generate_batch,
    generate_range,
    produce,
    run_producers,
)
from pgval.host.procs import free_port

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _read_lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _all_events(cfg: GeneratorConfig, producer: int) -> list[dict]:
    out: list[dict] = []
    b = 0
    while True:
        batch = generate_batch(cfg, producer, b)
        if len(batch) == 0:
            return out
        out.extend(batch.records(0))
        b += 1


# ---- determinism and the id scheme ---------------------------------------------------------


@FAST
@given(
    seed=st.integers(min_value=-(2**70), max_value=2**70),
    producers=st.integers(1, 5),
    resources=st.integers(1, 40),
    start=st.integers(0, 5000),
    count=st.integers(0, 700),
    cut=st.integers(0, 700),
)
def test_same_seed_same_events_whatever_the_batching(
    seed: int, producers: int, resources: int, start: int, count: int, cut: int
) -> None:
    cfg = GeneratorConfig(seed=seed, producers=producers, resources=resources)
    p = producers - 1
    whole = generate_range(cfg, p, start, count)
    cut = min(cut, count)
    a, b = generate_range(cfg, p, start, cut), generate_range(cfg, p, start + cut, count - cut)
    assert np.array_equal(whole.ids, np.concatenate([a.ids, b.ids]))
    assert np.array_equal(whole.is_post, np.concatenate([a.is_post, b.is_post]))
    assert np.array_equal(whole.resource, np.concatenate([a.resource, b.resource]))
    again = generate_range(cfg, p, start, count)
    assert np.array_equal(whole.resource, again.resource)
    assert np.array_equal(whole.is_post, again.is_post)


def test_batch_size_and_rate_do_not_change_the_sequence() -> None:
    base = GeneratorConfig(seed=7, producers=2, events=10_000, batch_size=20_000, rate=None)
    other = GeneratorConfig(seed=7, producers=2, events=10_000, batch_size=333, rate=50.0)
    assert _all_events(base, 1) == _all_events(other, 1)
    different = GeneratorConfig(seed=8, producers=2, events=10_000, rate=None)
    assert _all_events(base, 1) != _all_events(different, 1)


@FAST
@given(producers=st.integers(1, 8), per=st.integers(0, 300), seed=st.integers(0, 2**32))
def test_ids_are_unique_across_producers_and_decode(producers: int, per: int, seed: int) -> None:
    cfg = GeneratorConfig(producers=producers, seed=seed)
    ids = np.concatenate([generate_range(cfg, p, 0, per).ids for p in range(producers)])
    assert len(np.unique(ids)) == len(ids) == producers * per
    for p in range(producers):
        for seq, event_id in enumerate(generate_range(cfg, p, 0, per).ids.tolist()):
            assert event_id == p + producers * seq
            assert decode_id(event_id, producers) == (p, seq)


def test_event_counts_split_evenly_and_batches_stop_at_the_limit() -> None:
    cfg = GeneratorConfig(producers=3, events=10, batch_size=3)
    assert [cfg.producer_events(p) for p in range(3)] == [4, 3, 3]
    assert [len(generate_batch(cfg, 0, b)) for b in range(3)] == [3, 1, 0]
    paced = GeneratorConfig(producers=3, rate=1000.0, duration_s=2.0)
    assert sum(paced.producer_events(p) or 0 for p in range(3)) == 2000
    assert GeneratorConfig(rate=None, duration_s=1.0).producer_events(0) is None


# ---- distribution --------------------------------------------------------------------------


@pytest.mark.parametrize("share", [0.995, 0.5, 0.0, 1.0])
def test_get_share_is_close_to_configured(share: float) -> None:
    n = 400_000
    cfg = GeneratorConfig(get_share=share, seed=3)
    gets = int(np.count_nonzero(~generate_range(cfg, 0, 0, n).is_post))
    sigma = (share * (1 - share) / n) ** 0.5
    assert abs(gets / n - share) <= 5 * sigma + 1e-12


@FAST
@given(resources=st.integers(1, 64), count=st.integers(1, 3000), seed=st.integers(0, 2**31))
def test_resources_are_equally_represented_at_every_prefix(
    resources: int, count: int, seed: int
) -> None:
    cfg = GeneratorConfig(resources=resources, seed=seed, producers=2)
    res = generate_range(cfg, 1, 0, count).resource
    assert res.min() >= 0 and res.max() < resources
    onehot = np.zeros((count, resources), dtype=np.int64)
    onehot[np.arange(count), res] = 1
    prefix = np.cumsum(onehot, axis=0)
    assert (prefix.max(axis=1) - prefix.min(axis=1) <= 1).all()


def test_resource_order_is_shuffled_not_round_robin() -> None:
    res = generate_range(GeneratorConfig(resources=16, seed=1), 0, 0, 16 * 50).resource
    blocks = res.reshape(-1, 16)
    assert len({tuple(b) for b in blocks.tolist()}) > 40
    assert all(sorted(b) == list(range(16)) for b in blocks.tolist())


# ---- encoding ------------------------------------------------------------------------------


@FAST
@given(
    producers=st.integers(1, 3000),
    start=st.integers(0, 10**12),
    count=st.integers(0, 50),
    resources=st.sampled_from([1, 7, 16, 10_001]),
    ts=st.one_of(st.integers(0, 2**62), st.lists(st.integers(0, 2**62), min_size=50,
                                                 max_size=50)),
    ingress=st.one_of(st.none(), st.integers(0, 2**62)),
)
def test_encoding_equals_orjson_per_record(
    producers: int, start: int, count: int, resources: int, ts: int | list[int],
    ingress: int | None,
) -> None:
    cfg = GeneratorConfig(producers=producers, resources=resources, get_share=0.5)
    batch = generate_range(cfg, producers - 1, start, count)
    event_ts = ts if isinstance(ts, int) else np.array(ts[:count], dtype=np.int64)
    expected = []
    for rec in batch.records(event_ts):
        if ingress is not None:
            rec["ingress_ts"] = ingress
        expected.append(orjson.dumps(rec) + b"\n")
    assert encode_json_lines(batch, event_ts, ingress) == b"".join(expected)
    values = encode_values(batch, event_ts)
    assert values == [orjson.dumps(rec) for rec in batch.records(event_ts)]
    assert [json.loads(v) for v in values] == batch.records(event_ts)


def test_records_use_schema_names() -> None:
    rec = generate_range(GeneratorConfig(get_share=0.0), 0, 0, 1).records(5)[0]
    assert rec["type"] == POST and rec["resource"].startswith("r") and rec["event_ts"] == 5
    assert set(rec) == {"id", "type", "resource", "event_ts"}
    rec = generate_range(GeneratorConfig(get_share=1.0, resources=1), 0, 0, 1).records(5)[0]
    assert rec["type"] == GET and rec["resource"] == resource_name(0)


# ---- emission: event time, pacing, files ---------------------------------------------------


def test_wall_event_ts_is_monotonic_and_ingress_is_emission_time(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    cfg = GeneratorConfig(rate=5000.0, events=2000, tick_s=0.002)
    before = time.time_ns() // 1_000_000
    rep = produce(cfg, FileSink(path))
    after = time.time_ns() // 1_000_000
    rows = _read_lines(path)
    assert rep.sent == rep.delivered == len(rows) == 2000
    ts = [r["event_ts"] for r in rows]
    assert ts == sorted(ts)
    assert before <= ts[0] and ts[-1] <= after
    assert all(r["ingress_ts"] == r["event_ts"] for r in rows)
    assert ts[-1] - ts[0] >= 300  # ~400 ms of paced emission, not one timestamp
    assert rep.first_emit_ms == ts[0] and rep.last_emit_ms == ts[-1]


def test_synthetic_event_time_files_are_byte_identical(tmp_path: Path) -> None:
    cfg = GeneratorConfig(rate=None, events=30_000, producers=1, event_time="synthetic",
                          synthetic_rate=1000.0, start_ts_ms=1_700_000_000_000, seed=5)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    produce(cfg, FileSink(a, ingress="event"))
    produce(dataclasses.replace(cfg, batch_size=777), FileSink(b, ingress="event"))
    assert a.read_bytes() == b.read_bytes()
    rows = _read_lines(a)
    assert [r["event_ts"] for r in rows[:3]] == [1_700_000_000_000, 1_700_000_000_001,
                                                 1_700_000_000_002]
    assert rows[-1]["event_ts"] == 1_700_000_000_000 + 29_999


def test_rate_pacing_is_within_ten_percent(tmp_path: Path) -> None:
    path = tmp_path / "paced.jsonl"
    cfg = GeneratorConfig(rate=20_000.0, duration_s=2.0, producers=2)
    t0 = time.monotonic()
    rep = run_producers(cfg, FileSink(path))
    assert time.monotonic() - t0 < 15
    assert rep.ok, rep.summary()
    assert rep.sent == rep.delivered == 40_000
    assert abs(rep.achieved_rate - 20_000) <= 2_000, rep.summary()
    for p in rep.producers:
        assert abs(p.achieved_rate - 10_000) <= 1_000
    # Spread over time, not one burst: each half second holds about a quarter of the events.
    ingress = np.array([r["ingress_ts"] for r in _read_lines(path)])
    start = ingress.min()
    quarters = np.bincount(np.minimum((ingress - start) // 500, 3), minlength=4)
    assert (abs(quarters - 10_000) <= 2_500).all(), quarters


def test_merged_file_holds_every_producer_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "inputs.jsonl"
    cfg = GeneratorConfig(rate=None, events=30_001, producers=3, seed=11)
    rep = run_producers(cfg, FileSink(path))
    assert rep.ok and rep.delivered == 30_001
    assert sorted(tmp_path.iterdir()) == [path]  # parts merged away
    rows = _read_lines(path)
    assert sorted(r["id"] for r in rows) == list(range(30_001))
    expected = {e["id"]: e for p in range(3) for e in _all_events(cfg, p)}
    for r in rows:
        e = expected[r["id"]]
        assert (r["type"], r["resource"]) == (e["type"], e["resource"])
    per_producer: dict[int, list[int]] = {}
    for r in rows:
        per_producer.setdefault(r["id"] % 3, []).append(r["event_ts"])
    assert all(v == sorted(v) for v in per_producer.values())


def test_unmerged_files_one_per_producer(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "out", merge=False)
    rep = run_producers(GeneratorConfig(rate=None, events=1000, producers=2), sink)
    paths = sink.output_paths(2)
    assert [p.name for p in paths] == ["producer-000.jsonl", "producer-001.jsonl"]
    assert [len(_read_lines(p)) for p in paths] == [500, 500] and rep.delivered == 1000


# ---- processes -----------------------------------------------------------------------------


def test_producers_are_separate_processes_and_all_gone_afterwards(tmp_path: Path) -> None:
    cfg = GeneratorConfig(rate=None, events=60_000, producers=3)
    pid_dir = tmp_path / "pids"
    seen: list[int] = []

    def on_start(group: ProducerGroup) -> None:
        seen.extend(group.pids)
        assert sorted(p.name for p in pid_dir.iterdir()) == [
            "generator-0.json", "generator-1.json", "generator-2.json"]

    rep = run_producers(cfg, NullSink(), pid_dir=pid_dir, on_start=on_start)
    pids = [p.pid for p in rep.producers]
    assert sorted(pids) == sorted(seen) and len(set(pids)) == 3 and os.getpid() not in pids
    assert rep.sent == rep.delivered == 60_000
    assert _wait_gone(pids, 5.0) == []
    assert list(pid_dir.iterdir()) == []


def test_stop_from_another_thread_and_progress(tmp_path: Path) -> None:
    cfg = GeneratorConfig(rate=10_000.0, producers=2)  # unbounded: runs until stopped
    stop = threading.Event()
    snapshots: list[int] = []
    t0 = time.monotonic()
    rep = run_producers(cfg, FileSink(tmp_path / "x.jsonl"), stop_event=stop,
                        on_progress=lambda ps: snapshots.append(sum(p.sent for p in ps)),
                        progress_interval_s=0.1,
                        on_start=lambda _group: threading.Timer(1.0, stop.set).start())
    assert time.monotonic() - t0 < 30
    assert all(p.stopped_early for p in rep.producers)
    assert rep.ok and 3_000 < rep.sent < 30_000, rep.summary()
    assert snapshots == sorted(snapshots) and snapshots[-1] == rep.sent
    assert _wait_gone([p.pid for p in rep.producers if p.pid], 5.0) == []


def test_group_stop_method_and_context_manager(tmp_path: Path) -> None:
    with ProducerGroup(GeneratorConfig(rate=None, producers=2), NullSink()) as group:
        group.start()
        time.sleep(0.5)
        threading.Thread(target=group.stop).start()
        rep = group.join(timeout_s=20)
    assert rep.sent > 0 and all(p.stopped_early for p in rep.producers)
    assert _wait_gone(group.pids, 5.0) == []


def test_prepared_producers_write_nothing_until_released(tmp_path: Path) -> None:
    """prepare(): every producer up with its sink open, silent; go(): the start (T1)."""
    path = tmp_path / "events.jsonl"
    with ProducerGroup(GeneratorConfig(rate=200.0, events=100, producers=2),
                       FileSink(path)) as group:
        with pytest.raises(GeneratorError, match="not prepared"):
            group.go()
        group.prepare()
        time.sleep(1.0)
        assert group.started_ms is None and all(p.sent == 0 for p in group.progress())
        before = now_ms()
        group.go()
        assert group.started_ms is not None and group.started_ms >= before
        with pytest.raises(GeneratorError, match="already released"):
            group.go()
        rep = group.join(timeout_s=30)
    assert rep.ok and rep.sent == 100, rep.summary()
    assert len(path.read_bytes().splitlines()) == 100


def test_error_in_the_caller_stops_all_producers() -> None:
    seen: list[int] = []

    def boom(group: ProducerGroup) -> None:
        seen.extend(group.pids)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_producers(GeneratorConfig(rate=1000.0, producers=2), NullSink(), on_start=boom)
    assert len(seen) == 2 and _wait_gone(seen, 5.0) == []


def test_producers_exit_when_the_parent_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "children.json"
    script = textwrap.dedent(f"""
        import json
        from pgval.datasets import GeneratorConfig, NullSink, run_producers
        def on_start(group):
            open({str(pid_file)!r}, "w").write(json.dumps(group.pids))
        if __name__ == "__main__":
            run_producers(GeneratorConfig(rate=1000.0, producers=2), NullSink(),
                          on_start=on_start)
    """)
    (tmp_path / "parent.py").write_text(script)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")])
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        children = json.loads(pid_file.read_text())
        assert all(_alive(p) for p in children)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _wait_gone(children, 10.0) == []
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in json.loads(pid_file.read_text() or "[]") if pid_file.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_sink_that_cannot_open_fails_start_plainly(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(GeneratorError, match="cannot open sink"):
        run_producers(GeneratorConfig(producers=2), FileSink(blocker / "sub" / "in.jsonl"))


def test_invalid_configs_are_rejected() -> None:
    for bad in (dict(resources=0), dict(get_share=1.5), dict(producers=0), dict(rate=-1.0),
                dict(event_time="synthetic", rate=None), dict(batch_size=0)):
        with pytest.raises(GeneratorConfigError):
            GeneratorConfig(**bad).validate()  # type: ignore[arg-type]


# ---- Kafka sink ----------------------------------------------------------------------------


def _dead_kafka_sink() -> KafkaSink:
    """Nothing listens at the port: every delivery times out quickly."""
    return KafkaSink(f"127.0.0.1:{free_port()}", message_timeout_ms=1500, flush_timeout_s=20,
                     config={"log_level": 0})


def test_failing_kafka_deliveries_are_recorded_never_delivered() -> None:
    cfg = GeneratorConfig(rate=None, events=500, producers=1)
    rep = produce(cfg, _dead_kafka_sink())
    assert rep.sent == 500
    assert rep.delivered == 0 and rep.failed == 500 and rep.undelivered == 0
    assert len(rep.failed_ids) == 100 and set(rep.failed_ids) <= set(range(500))
    assert any("_MSG_TIMED_OUT" in e for e in rep.errors), rep.errors


def test_failing_kafka_sink_in_producer_processes() -> None:
    cfg = GeneratorConfig(rate=2000.0, events=1000, producers=2)
    rep = run_producers(cfg, _dead_kafka_sink())
    assert rep.sent == 1000 and rep.delivered == 0 and rep.failed == 1000
    assert not rep.ok
    for p in rep.producers:
        assert p.failed == 500 and all(i % 2 == p.index for i in p.failed_ids)


def test_full_local_queue_is_waited_out_not_dropped() -> None:
    sink = KafkaSink(f"127.0.0.1:{free_port()}", message_timeout_ms=300, flush_timeout_s=20,
                     config={"log_level": 0, "queue.buffering.max.messages": 100})
    rep = produce(GeneratorConfig(rate=None, events=350), sink)
    # Every event was eventually enqueued (BufferError -> poll -> retry) and accounted for.
    assert rep.sent == 350 and rep.failed == 350 and rep.delivered == 0
    assert not rep.stopped_early


def test_flush_timeout_reports_undelivered_not_failed() -> None:
    sink = KafkaSink(f"127.0.0.1:{free_port()}", message_timeout_ms=60_000,
                     config={"log_level": 0})
    t0 = time.monotonic()
    rep = produce(GeneratorConfig(rate=None, events=300), sink, flush_timeout_s=1.0)
    assert time.monotonic() - t0 < 20
    assert rep.sent == 300 and rep.delivered == 0 and rep.failed == 0
    assert rep.undelivered == 300


def _kafka_cluster_available() -> bool:
    try:
        from pgval.kafka.broker import KafkaCluster  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.cluster
@pytest.mark.skipif(not _kafka_cluster_available(), reason="pgval.kafka.broker not available")
def test_kafka_sink_delivers_to_a_real_broker(tmp_path: Path) -> None:
    from pgval.core.schema import GET_TOPIC, POST_TOPIC, Topics
    from pgval.kafka.admin import create_topics
    from pgval.kafka.broker import KafkaCluster
    from pgval.kafka.reader import read_topic

    cluster = KafkaCluster(tmp_path, brokers=1, sasl=False)
    cluster.start()
    try:
        create_topics(cluster.client_config, Topics().all(), 3, compacted=[Topics().marker])
        cfg = GeneratorConfig(rate=20_000.0, events=20_000, producers=2, get_share=0.9, seed=4)
        rep = run_producers(cfg, KafkaSink(cluster.bootstrap))
        assert rep.ok, rep.summary()
        assert rep.delivered == 20_000
        gets = read_topic(cluster.bootstrap, GET_TOPIC, isolation="read_uncommitted")
        posts = read_topic(cluster.bootstrap, POST_TOPIC, isolation="read_uncommitted")
    finally:
        cluster.stop()
    expected = {e["id"]: e for p in range(2) for e in _all_events(cfg, p)}
    seen = []
    for records, kind in ((gets, GET), (posts, POST)):
        for key, value, ts, _part, _off in records.rows():
            event = orjson.loads(value)
            assert list(event) == ["id", "type", "resource", "event_ts"]
            assert event["type"] == kind and key == event["resource"].encode()
            assert event["resource"] == expected[event["id"]]["resource"]
            assert ts >= event["event_ts"] - 1000  # LogAppendTime, set by the broker
            seen.append(event["id"])
    assert sorted(seen) == list(range(20_000))
    assert 1500 < len(posts) < 2500
