"""pgval's own input records decoded with numpy read exactly as the JSON parser reads them:
the same events, in the same order, the same malformed count, on any mix of records."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datasets.generator import EventBatch
from datasets.writers import encode_values
from pgval.records import parse
from pgval.records.own_inputs import decode_chunk
from pgval.records.parse import (
    KAFKA_INPUT_SCHEMA,
    InputEvents,
    KafkaInputColumns,
    ResourceTable,
    inputs_from_kafka,
    inputs_from_table,
    inputs_from_topics,
    parse_values,
)
from pgval.records.phases import MAX_MS


def _own(ident: int, kind: str, resource: str, ts: int) -> bytes:
    return b'{"id":%d,"type":"%s","resource":"%s","event_ts":%d}' % (
        ident, kind.encode(), resource.encode(), ts)


#: Records near pgval's own layout that the decoder must leave to the parser (or decode
#: to the same event): each is one way a byte can differ.
NEAR = [
    b'{"id":01,"type":"GET","resource":"r0001","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":05}',
    b'{"id":1234567890123456789,"type":"GET","resource":"r0001","event_ts":5}',
    b'{"id":-1,"type":"GET","resource":"r0001","event_ts":5}',
    b'{"id":1,"type":"PUT","resource":"r0001","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"r00a1","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"r\\u0030001","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"r12345","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"x0001","event_ts":5}',
    b'{"id":1, "type":"GET","resource":"r0001","event_ts":5}',
    b'{"type":"GET","id":1,"resource":"r0001","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":5,"x":1}',
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":5}\n',
    b' {"id":1,"type":"GET","resource":"r0001","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":%d}' % (MAX_MS + 1),
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":999999999999999}',
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":1.5}',
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":null}',
    b'{"id":1,"type":"GET","resource":"r0001"}',
    b'{"id":1,"type":"GET","resource":"r0001","event_ts":5',
    b'{"id":1,"type":"POST","resource":"r0001","event_ts":5}',
    b"", None, b"garbage", b"[]",
    b'{"id":1, "type":"GET","resource":"r0009","event_ts":5}',
    b'{"id":1,"type":"GET","resource":"zzz","event_ts":5}',
]

own_record = st.builds(
    _own, st.integers(0, 10 ** 18 - 1), st.sampled_from(["GET", "POST"]),
    st.integers(0, 9999).map(lambda r: f"r{r:04d}"),
    st.one_of(st.integers(0, 10 ** 13), st.integers(0, MAX_MS)))
record = st.one_of(own_record, own_record, st.sampled_from(NEAR))


def _parsed(values: list[bytes | None], timestamps: np.ndarray, resources: ResourceTable,
            partitions: np.ndarray, offsets: np.ndarray, topic_code: int = 1) -> InputEvents:
    """The events as the JSON parser alone reads them (the reference)."""
    table, kept, malformed, _ = parse_values(values, KAFKA_INPUT_SCHEMA)
    for name, column in (("ingress_ts", timestamps), ("_partition", partitions),
                         ("_offset", offsets)):
        table = table.append_column(name, pa.array(column[kept], type=pa.int64()))
    table = table.append_column("_topic", pa.array(np.full(len(kept), topic_code, np.int64)))
    return inputs_from_table(table, resources, malformed)


def _same(a: InputEvents, b: InputEvents) -> None:
    for name in ("id", "is_get", "event_ts", "ingress_ts", "topic", "partition", "offset"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=name)
            assert x.dtype == y.dtype, (name, x.dtype, y.dtype)
    np.testing.assert_array_equal(a.resource, b.resource, err_msg="resource codes")
    assert a.resource.dtype == b.resource.dtype
    assert a.resources.names == b.resources.names  # new names numbered in the same order
    assert (a.malformed, a.missing) == (b.malformed, b.missing)


@settings(max_examples=200, deadline=None)
@given(st.lists(record, max_size=40), st.lists(st.integers(1, 7), max_size=6),
       st.lists(st.sampled_from([0, 1_700_000_000_000, -5, MAX_MS + 1]), min_size=1),
       st.integers(0, 20))
def test_decoder_reads_as_the_parser(values: list[bytes | None], cuts: list[int],
                                     stamps: list[int], known: int) -> None:
    """Any mix of own and other records, in chunks of any size: the same events."""
    n = len(values)
    timestamps = np.resize(np.array(stamps, dtype=np.int64), n)
    partitions, offsets = np.arange(n, dtype=np.int64) % 3, np.arange(n, dtype=np.int64) * 7
    bounds = np.unique(np.clip(np.cumsum(cuts), 0, n)).tolist()
    chunks = [pa.array(values[lo:hi], type=pa.binary())
              for lo, hi in zip([0, *bounds], [*bounds, n], strict=True) if hi > lo]
    names = [f"r{r:04d}" for r in range(known)]
    got = inputs_from_kafka(pa.chunked_array(chunks, type=pa.binary()), timestamps,
                            ResourceTable(names), partitions, offsets, topic_code=1)
    want = _parsed(values, timestamps, ResourceTable(names), partitions, offsets)
    _same(got, want)
    # Decoded already, chunk by chunk (as during the read-back): the same events. Notes
    # that do not fit the chunks (one short, of a chunk of another length, not a decode)
    # are decoded again.
    column = pa.chunked_array(chunks, type=pa.binary())
    done = [decode_chunk(c) for c in chunks]
    misfits: list[list[object]] = [done[:-1], ["not a decode"] * len(chunks)]
    if len(chunks) > 1 and len(chunks[0]) != len(chunks[1]):
        misfits.append([done[1], done[0], *done[2:]])
    for decoded in [done, *misfits]:
        again = inputs_from_kafka(column, timestamps, ResourceTable(names), partitions,
                                  offsets, topic_code=1, decoded=decoded)
        _same(again, want)


def _chunked(values: list[bytes | None], cuts: list[int]) -> pa.ChunkedArray:
    n = len(values)
    bounds = np.unique(np.clip(np.cumsum(cuts), 0, n)).tolist()
    return pa.chunked_array([pa.array(values[lo:hi], type=pa.binary())
                             for lo, hi in zip([0, *bounds], [*bounds, n], strict=True)
                             if hi > lo], type=pa.binary())


topic_records = st.one_of(st.lists(own_record, max_size=30), st.lists(record, max_size=30))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(topic_records, st.lists(st.integers(1, 7), max_size=5)),
                max_size=3),
       st.lists(st.sampled_from([0, 1_700_000_000_000, MAX_MS + 1]), min_size=1),
       st.tuples(st.integers(0, 10 ** 18), st.integers(0, 10 ** 18)),
       st.sampled_from(["none", "range", "ids"]), st.booleans(), st.booleans(),
       st.integers(0, 20))
def test_topics_read_together_as_each_alone_joined(
        topics: list[tuple[list[bytes | None], list[int]]], stamps: list[int],
        control: tuple[int, int], kind: str, decoded: bool, coordinates: bool,
        known: int) -> None:
    """Several topics at once (or none), pgval's own IDs set aside (a range, a list of IDs,
    or none): what the JSON parser reads from each topic alone, without the control IDs,
    joined in topic order; the same columns and types, resource codes, malformed counts
    and first defect; decoded during the read or not, with the read-back's int32
    partitions or without coordinates."""
    lo, hi = sorted(control)
    every = [i for values, _ in topics for i in _parsed_ids(values)]
    ids = np.unique(np.array(every[::2], dtype=np.int64))

    def mine(x: np.ndarray) -> np.ndarray:
        if kind == "none":
            return np.zeros(len(x), dtype=bool)
        return (x >= lo) & (x <= hi) if kind == "range" else np.isin(x, ids)

    names = [f"r{r:04d}" for r in range(known)]
    got_table, want_table = ResourceTable(names), ResourceTable(names)
    columns, want, dropped, defects = [], [], 0, []
    for code, (values, cuts) in enumerate(topics):
        n = len(values)
        timestamps = np.resize(np.array(stamps, dtype=np.int64), n)
        partitions = np.arange(n, dtype=np.int32) % 2
        offsets = np.arange(n, dtype=np.int64)
        chunked = _chunked(values, cuts)
        notes = [decode_chunk(c) for c in chunked.chunks] if decoded else None
        columns.append(KafkaInputColumns(chunked, timestamps,
                                         partitions if coordinates else None,
                                         offsets if coordinates else None, code, notes))
        alone = (_parsed(values, timestamps, want_table, partitions.astype(np.int64), offsets,
                         code) if coordinates else
                 inputs_from_table(*_table_only(values, timestamps, want_table)))
        drop = mine(alone.id)
        dropped += int(drop.sum())
        want.append(alone.take(np.flatnonzero(~drop)))
        # The parser alone numbers a defect by its table's rows; the topic's own read by
        # its records: the first defect is the first topic's that has one.
        defects.append(inputs_from_kafka(chunked, timestamps, ResourceTable(names)).defect)
    got, set_aside = inputs_from_topics(columns, got_table, mine)
    _same(got, InputEvents.concat(want, want_table))
    assert set_aside == dropped
    assert got.defect == next((d for d in defects if d is not None), None)


def _parsed_ids(values: list[bytes | None]) -> list[int]:
    """The IDs the parser reads from ``values`` (to draw control IDs from)."""
    table, _, _, _ = parse_values(values, KAFKA_INPUT_SCHEMA)
    return [i for i in table.column("id").to_pylist() if isinstance(i, int)]


def _table_only(values: list[bytes | None], timestamps: np.ndarray,
                resources: ResourceTable) -> tuple[pa.Table, ResourceTable, int]:
    """The parser's table of ``values`` with their ingress times, no coordinates."""
    table, kept, malformed, _ = parse_values(values, KAFKA_INPUT_SCHEMA)
    table = table.append_column("ingress_ts", pa.array(timestamps[kept], type=pa.int64()))
    return table, resources, malformed


def test_generator_records_are_all_decoded() -> None:
    """The generator's own values take the fast path, every one of them."""
    rng = np.random.default_rng(3)
    n = 20_000
    batch = EventBatch(producer_index=0, start_seq=0, ids=rng.integers(0, 10 ** 12, n),
                       is_post=rng.random(n) < 0.005, resource=rng.integers(0, 100, n),
                       resources=100)
    values = encode_values(batch, rng.integers(0, 2 * 10 ** 12, n))
    own = decode_chunk(pa.array(values, type=pa.binary()))
    assert len(own.rest) == 0 and len(own.index) == n
    np.testing.assert_array_equal(own.id, batch.ids)
    np.testing.assert_array_equal(own.resource_number, batch.resource)
    np.testing.assert_array_equal(own.is_get, ~batch.is_post)


def test_every_near_record_reads_as_the_parser() -> None:
    """Each way a record can differ from the layout, between own records, in one read."""
    values = [v for near in NEAR for v in (_own(7, "GET", "r0002", 9), near)]
    n = len(values)
    timestamps = np.full(n, 1_700_000_000_000, dtype=np.int64)
    timestamps[4] = MAX_MS + 1  # an own record with an ingress time out of range
    partitions, offsets = np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)
    got = inputs_from_kafka(values, timestamps, ResourceTable(), partitions, offsets, 1)
    want = _parsed(values, timestamps, ResourceTable(), partitions, offsets)
    _same(got, want)
    assert want.malformed > 10


def test_chunks_decoded_during_the_read_are_not_decoded_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Notes that fit are used as they are; only notes that do not fit are redone."""
    values = [_own(k, "GET", "r0001", 5) for k in range(6)]
    chunks = [pa.array(values[:4], type=pa.binary()), pa.array(values[4:], type=pa.binary())]
    stamps = np.full(6, 1_700_000_000_000, dtype=np.int64)
    done = [decode_chunk(c) for c in chunks]
    calls: list[int] = []

    def counted(arr: pa.BinaryArray) -> object:
        calls.append(len(arr))
        return decode_chunk(arr)

    monkeypatch.setattr(parse, "decode_chunk", counted)
    column = pa.chunked_array(chunks, type=pa.binary())
    used = inputs_from_kafka(column, stamps, ResourceTable(), decoded=done)
    assert calls == [] and used.id.tolist() == list(range(6))
    redone = inputs_from_kafka(column, stamps, ResourceTable(), decoded=done[::-1])
    assert calls == [4, 2] and redone.id.tolist() == list(range(6))


def test_concat_with_empty_parts_keeps_counts_and_coordinates() -> None:
    """One part with events and empty ones: the same as a concatenation, without a copy."""
    ids = np.array([3, 1, 2], dtype=np.int64)
    full = InputEvents(ids, np.ones(3, bool), np.zeros(3, np.int32), ids * 10, ids * 11,
                       ResourceTable(["r0000"]), malformed=2, missing={"id": 1},
                       topic=np.zeros(3, np.int64), partition=ids, offset=ids)
    empty = InputEvents.empty(full.resources)
    empty.malformed, empty.missing = 5, {"id": 2, "type": 1}
    joined = InputEvents.concat([empty, full], full.resources)
    assert joined.id is full.id  # no copy
    assert (joined.malformed, joined.missing) == (7, {"id": 3, "type": 1})
    assert joined.topic is None  # the empty part has no coordinates: neither has the whole
    empty.topic = empty.partition = empty.offset = np.zeros(0, np.int64)
    placed = InputEvents.concat([full, empty], full.resources)
    assert placed.partition is not None and placed.partition.tolist() == [3, 1, 2]
    full.id.flags.writeable = False  # a view Arrow lent: copied, as a concatenation would
    copied = InputEvents.concat([full, empty], full.resources)
    assert copied.id is not full.id and copied.id.tolist() == [3, 1, 2]
