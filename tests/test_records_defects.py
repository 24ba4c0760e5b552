"""Bad records are counted and skipped, the same way whatever their neighbours and path.

The readers have a fast path (pyarrow over a whole block) and an exact per-line path
(taken when a block has any bad line). Each line's fate must not depend on which one
ran, so every case is read alone, next to garbage, and from Kafka values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgval.records.parse import (
    OutputRecords,
    ResourceTable,
    inputs_from_kafka,
    outputs_from_kafka,
    read_inputs,
    read_outputs,
)

BIG = 1 << 63  # one past the largest int64


def out_line(**fields: object) -> bytes:
    row = {"window_start": 0, "window_end": 10, "resource": "r0", "count": 1, "ids": [1],
           "ingress_ts": 100}
    row.update(fields)
    return _dumps(row)


def _dumps(row: dict) -> bytes:
    """The stdlib writes integers of any size (orjson refuses those beyond 64 bits)."""
    return json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()


def in_line(**fields: object) -> bytes:
    row = {"id": 1, "type": "GET", "resource": "r0", "event_ts": 5, "ingress_ts": 6}
    row.update(fields)
    return _dumps(row)


GOOD = out_line()
DEEP = b"[" * 2000 + b"]" * 2000  # deeper than orjson (1024 levels) or json will go
#: Output lines that must be malformed however they are read.
BAD_OUTPUTS = {
    "null id": out_line(ids=[1, None]),
    "only null": out_line(ids=[None]),
    "float id": out_line(ids=[1, 2.5]),
    "integral float id": out_line(ids=[1.0]),
    "string id": out_line(ids=["1"]),
    "bool id": out_line(ids=[True]),
    "nested id": out_line(ids=[[1]]),
    "id too big": out_line(ids=[BIG]),
    "id too small": out_line(ids=[-BIG - 1]),
    "window too big": out_line(window_start=BIG),
    "count too big": out_line(count=2 * BIG),
    "non-UTF-8 resource": GOOD.replace(b'"r0"', b'"r\xff"'),
    "non-UTF-8 extra field": GOOD[:-1] + b',"x":"\xff"}',
    "raw 0xff": b"\xff",
    "two objects, CR": GOOD + b"\r" + GOOD,
    "two objects, space": GOOD + b" " + GOOD,
    "top-level null": b"null",
    "top-level array": b"[1,2]",
    "garbage": b"this is not json",
    "vertical tab": GOOD + b"\x0b",
    "lone surrogate": GOOD.replace(b'"r0"', b'"\\ud800"'),
    "deep extra field, bad ids": out_line(ids=["1"])[:-1] + b',"x":' + DEEP + b"}",
}
#: Lines that are fine (JSON whitespace around them, unknown fields, extreme int64).
GOOD_OUTPUTS = {
    "plain": GOOD,
    "CRLF": GOOD + b"\r",
    "spaces": b"  \t" + GOOD + b"  ",
    "extra field": GOOD[:-1] + b',"x":[1,"a",null]}',
    "NaN in extra field": GOOD[:-1] + b',"x":NaN}',
    "int64 extremes": out_line(ids=[BIG - 1, -BIG]),
    "empty ids": out_line(ids=[]),
    "UTF-8 resource": out_line(resource="résumé"),
    "deep extra field": GOOD[:-1] + b',"x":' + DEEP + b"}",
    "deep extra field with NaN": GOOD[:-1] + b',"x":[NaN,' + DEEP + b"]}",
}


def write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def kafka_outputs(lines: list[bytes | None]) -> OutputRecords:
    n = len(lines)
    return outputs_from_kafka(lines, np.arange(n, dtype=np.int64) + 100, np.zeros(n, np.int64),
                              np.arange(n, dtype=np.int64), ResourceTable())


def kept_ids(outputs: OutputRecords) -> list[list[int]]:
    return [outputs.ids[a:b].tolist() for a, b in zip(outputs.offsets[:-1],
                                                      outputs.offsets[1:], strict=True)]


@pytest.mark.parametrize("name", sorted(BAD_OUTPUTS))
@pytest.mark.parametrize("neighbour", [None, GOOD, b"garbage"], ids=["alone", "good", "garbage"])
def test_bad_output_line_is_malformed_alone_or_not(tmp_path: Path, name: str,
                                                  neighbour: bytes | None) -> None:
    lines = [BAD_OUTPUTS[name]] + ([neighbour] if neighbour is not None else [])
    expect_bad = 1 + (neighbour == b"garbage")
    expect_kept = [[1]] if neighbour == GOOD else []
    got = read_outputs(write(tmp_path / "o.jsonl", lines), ResourceTable())
    assert (got.malformed, kept_ids(got)) == (expect_bad, expect_kept)
    kafka = kafka_outputs(lines)
    assert (kafka.malformed, kept_ids(kafka)) == (expect_bad, expect_kept)


@pytest.mark.parametrize("name", sorted(GOOD_OUTPUTS))
@pytest.mark.parametrize("neighbour", [None, b"garbage"], ids=["alone", "garbage"])
def test_good_output_line_is_kept_alone_or_not(tmp_path: Path, name: str,
                                              neighbour: bytes | None) -> None:
    lines = [GOOD_OUTPUTS[name]] + ([neighbour] if neighbour is not None else [])
    got = read_outputs(write(tmp_path / "o.jsonl", lines), ResourceTable())
    kafka = kafka_outputs(lines)
    for outputs in (got, kafka):
        assert outputs.malformed == (neighbour is not None)
        assert len(outputs) == 1


BAD_INPUTS = {
    "id too big": in_line(id=BIG),
    "id too small": in_line(id=-BIG - 1),
    "event_ts too big": in_line(event_ts=10 * BIG),
    "event_ts int64 max": in_line(event_ts=BIG - 1),
    "event_ts int64 min": in_line(event_ts=-BIG),
    "event_ts past year 9999": in_line(event_ts=253_402_300_800_000),
    "float id": in_line(id=1.5),
    "non-UTF-8 resource": in_line().replace(b'"r0"', b'"r\xff"'),
    "non-UTF-8 type": in_line().replace(b'"GET"', b'"G\xffT"'),
    "raw 0xff": b"\xff",
    "top-level null": b"null",
    "two objects, CR": in_line() + b"\r" + in_line(id=2),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
@pytest.mark.parametrize("neighbour", [None, in_line(id=9), b"garbage"],
                         ids=["alone", "good", "garbage"])
def test_bad_input_line_is_malformed_alone_or_not(tmp_path: Path, name: str,
                                                 neighbour: bytes | None) -> None:
    lines = [BAD_INPUTS[name]] + ([neighbour] if neighbour is not None else [])
    expect_bad = 1 + (neighbour == b"garbage")
    expect_ids = [9] if neighbour not in (None, b"garbage") else []
    got = read_inputs(write(tmp_path / "i.jsonl", lines))
    assert (got.malformed, got.id.tolist()) == (expect_bad, expect_ids)
    kafka = inputs_from_kafka(lines, np.arange(len(lines), dtype=np.int64), ResourceTable())
    assert (kafka.malformed, kafka.id.tolist()) == (expect_bad, expect_ids)


def test_deeply_nested_extra_field_is_kept_next_to_garbage(tmp_path: Path) -> None:
    """Found by tests/test_fuzz_cli.py. Was: pyarrow reads any depth, orjson stops at 1024
    levels, so a valid record with a deep unknown field was kept when its block was clean
    and malformed when a garbage neighbour sent the block down the per-line path."""
    deep = in_line()[:-1] + b',"x":{"y":' + DEEP + b"}}"
    for lines, bad, ids in (([deep], 0, [1]), ([deep, b"garbage"], 1, [1]),
                            ([b"garbage", deep, in_line(id=2)], 1, [1, 2])):
        got = read_inputs(write(tmp_path / "i.jsonl", lines))
        assert (got.malformed, got.id.tolist()) == (bad, ids)
    kafka = inputs_from_kafka([deep, b"garbage"], np.arange(2, dtype=np.int64), ResourceTable())
    assert (kafka.malformed, kafka.id.tolist()) == (1, [1])


def test_bare_cr_and_other_line_breaks_do_not_split_records(tmp_path: Path) -> None:
    # str.splitlines() would also cut at \r, \x0b, \x0c, \x1c-\x1e, \x85 ...
    junk = [b"junk\rmore\x0bx\x0cy\x1cz\x1d\x1e", b"a\rb", b"{\"window_start\":0}\r{"] * 3334
    got = read_outputs(write(tmp_path / "o.jsonl", junk[:10_000]), ResourceTable())
    assert got.malformed == 10_000 and len(got) == 0
    # A CR inside a line between two good records: one bad line, not two good records.
    got = read_outputs(write(tmp_path / "o.jsonl", [GOOD + b"\r" + GOOD, GOOD]),
                       ResourceTable())
    assert (got.malformed, len(got)) == (1, 1)


def test_blank_lines_are_not_records(tmp_path: Path) -> None:
    lines = [b"", b"  \t\r", GOOD, b"", b"garbage", b"   "]
    got = read_outputs(write(tmp_path / "o.jsonl", lines), ResourceTable())
    assert (got.malformed, len(got)) == (1, 1)
    got = read_outputs(write(tmp_path / "o.jsonl", [b"", b" \r", GOOD, b"\r"]), ResourceTable())
    assert (got.malformed, len(got)) == (0, 1)


def test_byte_order_mark_at_file_start_is_not_a_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD + b"\n" + GOOD + b"\n")
    got = read_outputs(path, ResourceTable())
    assert (got.malformed, len(got)) == (0, 2)


def test_top_level_null_at_any_block_offset_does_not_crash(tmp_path: Path) -> None:
    # pyarrow 26 segfaults on a top-level null at the start of one of its chunks.
    lines = [GOOD] * 3 + [b"null"] + [GOOD] * 3
    got = read_outputs(write(tmp_path / "o.jsonl", lines), ResourceTable())
    assert (got.malformed, len(got)) == (1, 6)
    kafka = kafka_outputs([b"null", GOOD])
    assert (kafka.malformed, len(kafka)) == (1, 1)


def test_kafka_metadata_stays_aligned_when_values_hold_cr(tmp_path: Path) -> None:
    values = [out_line(ids=[1]), GOOD + b"\r" + GOOD, out_line(ids=[3]), None, b" "]
    got = kafka_outputs(values)
    assert got.malformed == 3
    assert kept_ids(got) == [[1], [3]]
    assert got.ingress_ts.tolist() == [100, 102]  # the timestamps of values 0 and 2


POOL = [*BAD_OUTPUTS.values(), *GOOD_OUTPUTS.values(), b"", b"  "]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(POOL), max_size=12))
def test_each_lines_fate_is_independent_of_its_neighbours(
        tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    """Reading lines together gives what reading each alone gives, on both paths."""
    tmp = tmp_path_factory.mktemp("mix")
    alone = [read_outputs(write(tmp / f"{k}.jsonl", [line]), ResourceTable())
             for k, line in enumerate(lines)]
    together = read_outputs(write(tmp / "all.jsonl", lines), ResourceTable())
    assert together.malformed == sum(a.malformed for a in alone)
    assert kept_ids(together) == [ids for a in alone for ids in kept_ids(a)]
    records = [line for line in lines if line.strip(b" \t\r")]
    kafka = kafka_outputs(records)
    assert (kafka.malformed, kept_ids(kafka)) == (together.malformed, kept_ids(together))


def test_minus_nan_in_an_ignored_field_is_judged_alike_next_to_garbage() -> None:
    """Found by tests/test_fuzz_cli.py in CI. Was: a Kafka output value carrying
    ``"ingress_ts": -NaN`` (ignored: Kafka's timestamp is the ingress) was a row alone,
    read by pyarrow, but malformed next to a ``{`` line, where Python's json decided."""
    import numpy as np

    good = (b'{"window_start":-50,"window_end":0,"resource":"r2","count":1,"ids":[1],'
            b'"ingress_ts":-NaN}')

    def rows(values: list[bytes]) -> tuple[int, int]:
        n = len(values)
        stamps = np.arange(n, dtype=np.int64)
        out = outputs_from_kafka(values, stamps, np.zeros(n, np.int64), stamps,
                                 ResourceTable())
        return len(out.window_start), out.malformed

    assert rows([good]) == (1, 0)
    assert rows([b"{", good]) == (1, 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(POOL), max_size=12))
def test_the_first_defect_is_the_same_alone_or_not(
        tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    """``pgval check`` names the first malformed record (its field and fault): the same
    record, said the same way, whichever path read it and whatever its neighbours."""
    tmp = tmp_path_factory.mktemp("first")
    records = [line for line in lines if line.strip(b" \t\r")]
    alone = [read_outputs(write(tmp / f"{k}.jsonl", [line]), ResourceTable())
             for k, line in enumerate(records)]
    bad = [k for k, a in enumerate(alone) if a.malformed]
    got = read_outputs(write(tmp / "all.jsonl", lines), ResourceTable()).defect
    if not bad:
        assert got is None
        return
    first = alone[bad[0]].defect
    assert first is not None and got is not None
    assert (got.record, got.field, got.problem) == (bad[0], first.field, first.problem)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([GOOD, b"", b" ", b"\r", b" \t\r", b"x", b"  {}"]),
                max_size=15),
       st.booleans(), st.booleans(), st.sampled_from([3, 17, 64, 1 << 20]))
def test_a_record_is_found_on_its_line(tmp_path_factory: pytest.TempPathFactory,
                                       lines: list[bytes], bom: bool, final_newline: bool,
                                       block: int) -> None:
    """Record k (the k-th non-blank line) is on the line a reader counting every line of
    the file finds it, whatever the blocks the file is read in."""
    from pgval.records.parse import line_of_record

    path = tmp_path_factory.mktemp("lines") / "f.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines)
                     + (b"\n" if final_newline and lines else b""))
    where = [i + 1 for i, line in enumerate(lines) if line.strip(b" \t\r")]
    assert [line_of_record(path, k, block) for k in range(len(where) + 1)] == [*where, None]


def test_a_defect_says_field_and_fault(tmp_path: Path) -> None:
    """What a refusal of `pgval check` says about each kind of bad input record."""
    cases = {
        in_line(id="5"): ("id", "has 'id': \"5\", not a 64-bit integer"),
        in_line(type="get"): ("type", "has 'type': \"get\", not \"GET\" or \"POST\""),
        in_line(event_ts=1.5): ("event_ts", "has 'event_ts': 1.5, not epoch milliseconds "
                                            "(an integer)"),
        in_line(ingress_ts=1_698_300_000_000_000): (
            "ingress_ts", "has 'ingress_ts': 1698300000000000, beyond the year 9999 in epoch "
                          "milliseconds (it looks like microseconds)"),
        in_line(resource=None): ("resource", "lacks the field 'resource'"),
        in_line()[:-4]: (None, "is cut short (not a whole JSON object)"),
        b"[1]": (None, "is not one JSON object"),
        b"\xff": (None, "is not UTF-8 text"),
    }
    for line, said in cases.items():
        for neighbours in ([], [in_line(id=2)], [b"garbage"]):
            got = read_inputs(write(tmp_path / "i.jsonl", [in_line(id=3), line, *neighbours]))
            assert got.defect is not None
            assert (got.defect.record, got.defect.field, got.defect.problem) == (1, *said)
