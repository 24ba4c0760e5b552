"""The e1 sink's SELF-TEST sabotage, offline: spec parsing, which batch is hit, what is
written, what is reported, and how it travels DriverSpec → document → driver → sink.

The sink runs against a fake DataFrame (``select(...).collect()`` → rows) and a fake
transactional producer that keeps committed transactions apart from aborted ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pgval.deploy.driver_process import DriverSpec, sabotage_events
from pgval.topologies.guarantee_sinks import (
    SABOTAGE_USAGE,
    Sabotage,
    TransactionalSink,
    _row_ids,
    parse_sabotage,
)

OUT = "out-test"
MARKERS = "markers-test"


# ---- fakes ---------------------------------------------------------------------------------


class FakeFrame:
    """What the sink uses of a DataFrame: ``select("key", "value").collect()``."""

    def __init__(self, rows: list[tuple[str | None, str]]) -> None:
        self.rows = [{"key": k, "value": v} for k, v in rows]

    def select(self, *cols: str) -> FakeFrame:
        assert cols == ("key", "value")
        return self

    def collect(self) -> list[dict[str, Any]]:
        return list(self.rows)


class FakeProducer:
    """Transactions as lists of (topic, key, value); only committed ones are kept."""

    def __init__(self, fail_commits: int = 0) -> None:
        self.committed: list[list[tuple[str, str | None, str]]] = []
        self.aborted = 0
        self.fail_commits = fail_commits
        self._open: list[tuple[str, str | None, str]] | None = None

    def begin_transaction(self) -> None:
        assert self._open is None
        self._open = []

    def produce(self, topic: str, value: bytes, key: bytes | None = None,
                on_delivery: Any = None) -> None:
        assert self._open is not None
        self._open.append((topic, key.decode() if key else None, value.decode()))

    def commit_transaction(self, timeout: float) -> None:
        assert self._open is not None
        if self.fail_commits:
            self.fail_commits -= 1
            raise KafkaException(KafkaError(KafkaError._STATE, "injected commit failure"))
        self.committed.append(self._open)
        self._open = None

    def abort_transaction(self, timeout: float) -> None:
        self._open = None
        self.aborted += 1

    def flush(self, timeout: float) -> int:
        return 0


def _row(ids: list[int], resource: str = "r0001", start: int = 0) -> tuple[str, str]:
    value = {"window_start": start, "window_end": start + 2000, "resource": resource,
             "count": len(ids), "ids": ids}
    return resource, json.dumps(value)


def _sink(monkeypatch: pytest.MonkeyPatch, spec: str | None, producer: FakeProducer,
          events: list[dict[str, Any]], last_committed: int = -1) -> TransactionalSink:
    sink = TransactionalSink("h:1", "pgval-test", "/nonexistent", topic=OUT,
                             marker_topic=MARKERS, on_batch=events.append,
                             sabotage=parse_sabotage(spec) if spec else None)

    def fake_open(self: TransactionalSink) -> None:
        self.query_id = "qid"
        if self.last_committed is None:
            self.last_committed = last_committed
        self._producer = producer  # type: ignore[assignment]

    monkeypatch.setattr(TransactionalSink, "_open", fake_open)
    return sink


def _outputs(txn: list[tuple[str, str | None, str]]) -> list[tuple[str | None, str]]:
    return [(k, v) for t, k, v in txn if t == OUT]


def _marker(txn: list[tuple[str, str | None, str]]) -> dict[str, Any]:
    markers = [json.loads(v) for t, _, v in txn if t == MARKERS]
    assert len(markers) == 1 and txn[-1][0] == MARKERS
    return markers[0]


def _sabotage_ids(events: list[dict[str, Any]]) -> list[int]:
    return [i for e in events if e.get("event") == "sabotage" for i in e["ids"]]


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e.get("event", "sink_batch") for e in events]


# ---- the spec ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "kind", "nth"), [
    ("drop-batch:1", "drop", 1), ("dup-batch:2", "dup", 2), ("dup-batch:17", "dup", 17),
    (" drop-batch:3\n", "drop", 3), ("drop-batch:007", "drop", 7),
])
def test_parse_sabotage_accepts(text: str, kind: str, nth: int) -> None:
    sab = parse_sabotage(text)
    assert sab == Sabotage(kind, nth)
    assert str(sab) == f"{kind}-batch:{nth}" and parse_sabotage(str(sab)) == sab


@pytest.mark.parametrize("text", [
    "", "drop", "dup-batch", "drop-batch:", "drop-batch:0", "dup-batch:-1", "dup-batch:+2",
    "drop-batch:x", "drop-batch:1.5", "drop-batch:1:2", "DROP-batch:1", "delete-batch:1",
    "drop-batch: 1", "drop_batch:1", "dup-batches:2",
])
def test_parse_sabotage_rejects(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_sabotage(text)
    assert str(info.value) == SABOTAGE_USAGE == (
        "--sabotage takes drop-batch:N or dup-batch:N with N >= 1")


def test_sabotage_value_checks_itself() -> None:
    for kind, nth in (("lose", 1), ("drop", 0), ("dup", -2)):
        with pytest.raises(ValueError, match="drop-batch:N"):
            Sabotage(kind, nth)


def test_row_ids_real_and_negative() -> None:
    assert _row_ids(_row([3, -1, 0, -7])[1]) == ([3, 0], 2)
    assert _row_ids(_row([4])[1].encode()) == ([4], 0)
    assert _row_ids(json.dumps({"ids": [1, "2", True, 2.5, None, -3]})) == ([1], 1)
    for bad in (None, "", "not json", "[1, 2]", '{"ids": 5}', '{"count": 1}'):
        assert _row_ids(bad) == ([], 0)


# ---- the sink ------------------------------------------------------------------------------


def test_counting_only_committed_batches_with_real_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty batches, control-only batches and skipped re-runs do not count."""
    producer, events = FakeProducer(), []
    sink = _sink(monkeypatch, "dup-batch:2", producer, events)
    prime = _row([-1, -2], "r0000", start=-10_000)
    sink(FakeFrame([]), 0)                          # empty: no transaction at all
    sink(FakeFrame([prime]), 1)                     # control only: committed, not counted
    first = _row([1, 2])
    sink(FakeFrame([first]), 2)                     # real batch #1, written normally
    sink(FakeFrame([first]), 2)                     # re-run of 2: skipped, not counted
    sink(FakeFrame([]), 3)                          # empty
    close = _row([-9], "r0003", start=10**9)
    hit = [_row([5, 6, 7], "r0001", 2000), close, _row([8], "r0002", 2000)]
    sink(FakeFrame(hit), 4)                         # real batch #2: sabotaged
    after = _row([9])
    sink(FakeFrame([after]), 5)                     # done: written normally again

    assert len(producer.committed) == 4 and producer.aborted == 0
    t_prime, t_first, t_hit, t_after = producer.committed
    assert _outputs(t_prime) == [prime] and _outputs(t_first) == [first]
    assert _outputs(t_after) == [after]
    # dup: each real row twice, the control-only row once, one transaction, one marker.
    assert sorted(_outputs(t_hit)) == sorted([*hit, hit[0], hit[2]])
    assert _outputs(t_hit)[:3] == hit
    marker = _marker(t_hit)
    assert marker["batch_id"] == 4 and marker["rows"] == 5
    assert marker["sabotage"] == "dup-batch:2"
    assert all("sabotage" not in _marker(t) for t in (t_prime, t_first, t_after))

    sabotage = [e for e in events if e.get("event") == "sabotage"]
    assert sabotage == [{"event": "sabotage", "kind": "dup", "batch_id": 4, "nth": 2,
                         "rows": 2, "ids": [5, 6, 7, 8], "negative_ids": 0}]
    # Reported before the batch's own sink_batch line, which says what was written.
    assert _kinds(events) == ["sink_batch", "sink_batch", "sink_batch",
                              "sabotage", "sink_batch", "sink_batch"]
    batch4 = events[4]
    assert batch4["batch_id"] == 4 and batch4["rows"] == 3
    assert batch4["sabotage"] == "dup" and batch4["written"] == 5
    assert events[2] == {"batch_id": 2, "rows": 1, "skipped": True}
    assert sink.sabotaged_batch == 4 and sink.skipped == [2] and sink.commits == 4


def test_drop_commits_the_marker_but_no_real_row(monkeypatch: pytest.MonkeyPatch) -> None:
    producer, events = FakeProducer(), []
    sink = _sink(monkeypatch, "drop-batch:1", producer, events, last_committed=6)
    sink(FakeFrame([_row([100])]), 5)               # below the last marker: skipped
    mixed = _row([10, -4, 11])                      # real and negative IDs in one row
    control = _row([-5], "r0004", start=10**9)
    other = _row([12], "r0002")
    sink(FakeFrame([mixed, control, other]), 7)
    assert len(producer.committed) == 1
    (txn,) = producer.committed
    assert _outputs(txn) == [control]               # the control-only row is kept
    marker = _marker(txn)
    assert marker["batch_id"] == 7 and marker["rows"] == 1
    assert marker["sabotage"] == "drop-batch:1"
    (event,) = [e for e in events if e.get("event") == "sabotage"]
    assert event == {"event": "sabotage", "kind": "drop", "batch_id": 7, "nth": 1, "rows": 2,
                     "ids": [10, 11, 12], "negative_ids": 1}
    assert all(isinstance(i, int) for i in event["ids"])

    # The marker holds: a re-run of batch 7 is skipped, the dropped rows never come back.
    sink(FakeFrame([mixed, control, other]), 7)
    assert len(producer.committed) == 1 and sink.skipped == [5, 7]
    # Later batches are not touched.
    sink(FakeFrame([_row([13])]), 8)
    assert _outputs(producer.committed[-1]) == [_row([13])]


def test_drop_of_an_all_real_batch_commits_only_the_marker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    producer, events = FakeProducer(), []
    sink = _sink(monkeypatch, "drop-batch:1", producer, events)
    sink(FakeFrame([_row([1]), _row([2, 3], "r0002")]), 0)
    (txn,) = producer.committed
    assert _outputs(txn) == [] and _marker(txn)["rows"] == 0
    assert _sabotage_ids(events) == [1, 2, 3]


def test_a_failed_commit_does_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted are batches actually committed: an aborted try of batch 1 and its re-run
    make one real batch, and the sabotage still hits the second committed one."""
    producer, events = FakeProducer(fail_commits=1), []
    sink = _sink(monkeypatch, "dup-batch:2", producer, events)
    with pytest.raises(KafkaException):
        sink(FakeFrame([_row([1])]), 1)
    assert producer.aborted == 1 and producer.committed == [] and sink.real_batches == 0
    assert events[-1]["event"] == "sink_error"
    sink(FakeFrame([_row([1])]), 1)                 # Spark's re-run, same process
    sink(FakeFrame([_row([2])]), 2)
    assert sink.real_batches == 2 and sink.sabotaged_batch == 2
    assert [len(_outputs(t)) for t in producer.committed] == [1, 2]
    assert _sabotage_ids(events) == [2]


def test_a_failed_sabotaged_commit_is_sabotaged_again_on_rerun(
        monkeypatch: pytest.MonkeyPatch) -> None:
    producer, events = FakeProducer(fail_commits=1), []
    sink = _sink(monkeypatch, "dup-batch:1", producer, events)
    with pytest.raises(KafkaException):
        sink(FakeFrame([_row([4])]), 3)
    sink(FakeFrame([_row([4])]), 3)
    assert [len(_outputs(t)) for t in producer.committed] == [2]
    # One event per try; the committed try is the last one.
    assert [e["batch_id"] for e in events if e.get("event") == "sabotage"] == [3, 3]


def test_without_sabotage_nothing_is_parsed_or_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    producer, events = FakeProducer(), []
    sink = _sink(monkeypatch, None, producer, events)
    monkeypatch.setattr("pgval.topologies.guarantee_sinks._row_ids",
                        lambda value: pytest.fail("parsed without sabotage"))
    rows = [_row([1]), _row([-1], "r0009")]
    for b in range(3):
        sink(FakeFrame(rows), b)
    assert [_outputs(t) for t in producer.committed] == [rows] * 3
    assert "sabotage" not in _kinds(events) and sink.real_batches == 0


# ---- driver document, progress file, DriverSpec --------------------------------------------


def test_the_driver_document_takes_sabotage_only_with_e1() -> None:
    """Checked once, in the document: on pgval's side when it is made, on the driver's
    when it reads it (the same class); the driver parses the spec itself with the sink's
    parser (:func:`pgval.topologies.guarantee_sinks.parse_sabotage`)."""
    from pgval.core.errors import UserMistake

    assert _spec("e1", "drop-batch:3").sabotage == "drop-batch:3"
    assert _spec("e1").sabotage is None
    with pytest.raises(UserMistake, match="needs pg e1, not a1"):
        _spec("a1", "drop-batch:3")
    assert parse_sabotage(_spec("e1", "dup-batch:2").sabotage or "") == Sabotage("dup", 2)


def test_sabotage_event_reaches_the_progress_file(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """The driver's own on_batch path: sink → ProgressLog → sabotage_events()."""
    from pgval.topologies.driver import ProgressLog, sink_event_writer

    progress = tmp_path / "progress.jsonl"
    producer = FakeProducer()
    sink = _sink(monkeypatch, "dup-batch:1", producer, [])
    sink.on_batch = sink_event_writer(ProgressLog(progress))
    sink(FakeFrame([_row([-1])]), 0)
    sink(FakeFrame([_row([21, 22]), _row([-2], "r0005", start=10**9)]), 1)
    (event,) = sabotage_events(progress)
    assert {k: v for k, v in event.items() if k != "wall_ms"} == {
        "event": "sabotage", "kind": "dup", "batch_id": 1, "nth": 1, "rows": 1,
        "ids": [21, 22], "negative_ids": 0}
    kinds = [json.loads(line)["event"] for line in progress.read_text().splitlines()]
    assert kinds == ["sink_batch", "sabotage", "sink_batch"]

    spec = _spec("e1", sabotage="dup-batch:1", progress_file=progress)
    from pgval.deploy.driver_process import DriverProcess

    proc = DriverProcess(spec, tmp_path / "logs", tmp_path / "pids")
    assert proc.sabotage_events() == sabotage_events(progress)
    assert sabotage_events(tmp_path / "missing.jsonl") == []


def _spec(pg: str, sabotage: str | None = None,
          progress_file: Path = Path("/tmp/p.jsonl")) -> DriverSpec:
    return DriverSpec(topology="mst", pg=pg, bootstrap="h:1", master="local[2]",
                      checkpoint=Path("/tmp/ck"), progress_file=progress_file,
                      window_ms=2000, watermark_ms=1000, trigger_ms=500,
                      shuffle_partitions=3, sabotage=sabotage)


def test_driver_spec_passes_the_sabotage_in_its_document(tmp_path: Path) -> None:
    from pgval.core.driver_spec import DriverDocument

    spec = _spec("e1", "dup-batch:2")
    written = DriverDocument.read(spec.write(tmp_path / "driver-spec.json"))
    assert written.sabotage == "dup-batch:2" and written == spec.document()
    assert spec.argv(tmp_path / "driver-spec.json")[1:3] == ["-m", "pgval.topologies.driver"]
