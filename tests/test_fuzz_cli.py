"""Fuzzing `pgval check` and `pgval oracle` (whatever the files and flags), and `recheck`,
`export` and `report` (whatever is broken in a stored run and its database): never a
traceback.

The product rule (README, docs/semantics.md): a malformed record is
counted, never fatal; a wrong flag or a bad file ends in one plain sentence and a
non-zero exit; a valid record is never lost because of a bad neighbour line.

The properties drive the commands in-process through click's CliRunner (a few ms per
run), and a handful of cases through the installed entry point, where exit status and
stderr are what a user sees. Each defect the fuzzing found has a regression test named
for it, next to its kind (tests/test_check_cli.py, tests/test_records_defects.py).

Example counts come from a profile: the default keeps this module to seconds in CI;
``PGVAL_FUZZ=deep`` multiplies them by 25 for a long hunt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgval.cli import main
from pgval.records.parse import (
    InputEvents,
    OutputRecords,
    ResourceTable,
    inputs_from_kafka,
    outputs_from_kafka,
    read_inputs,
    read_outputs,
)
from pgval.records.phases import MAX_MS
from tests.reference import ref_oracle, ref_validate
from tests.strategies import input_events, produced_outputs

settings.register_profile(
    "pgval-fuzz", deadline=None, max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.large_base_example, HealthCheck.filter_too_much])
PROFILE = settings.get_profile("pgval-fuzz")
SCALE = 25 if os.environ.get("PGVAL_FUZZ") == "deep" else 1


def fuzz(examples: int) -> settings:
    """This module's settings with ``examples`` examples (times SCALE)."""
    return settings(PROFILE, max_examples=examples * SCALE)


I64 = 1 << 63
INT_FIELDS_OUT = ("window_start", "window_end", "count", "gets", "posts", "ingress_ts")
REQUIRED_OUT = ("window_start", "resource", "ids", "ingress_ts")


# --------------------------------------------------------------------------- JSON text

@dataclass(frozen=True)
class Raw:
    """A token written verbatim: NaN, 1e999, 01 … (json.dumps cannot write most of them)."""

    text: str


@dataclass(frozen=True)
class Obj:
    """A JSON object as ordered pairs, so a key can appear twice."""

    pairs: tuple[tuple[str, object], ...]


def encode(value: object, ascii_only: bool = True) -> str:
    """JSON text of ``value``; Raw tokens and repeated keys pass through unchanged."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Obj):
        return "{" + ",".join(f"{encode(k, ascii_only)}:{encode(v, ascii_only)}"
                              for k, v in value.pairs) + "}"
    if isinstance(value, dict):
        return encode(Obj(tuple(value.items())), ascii_only)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(encode(v, ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)  # NaN/Infinity for non-finite floats


def line_bytes(value: object, ascii_only: bool = True) -> bytes:
    return encode(value, ascii_only).encode("utf-8", errors="surrogatepass")


EXTREME_INTS = [0, -1, 1, I64 - 1, -I64, I64, -I64 - 1, 1 << 64, -(1 << 64), 10**30,
                MAX_MS, MAX_MS + 1, -MAX_MS, -MAX_MS - 1]
#: Valid JSON numbers of every awkward kind, and the non-standard NaN/Infinity literals.
NUMBER_TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1E+400", "1e308",
                 "-1e308", "-0.0", "0.0", "-0", "0e0", "1.0", "2.5", "5e-324", "1e-400",
                 "9223372036854775808", "-9223372036854775809", "18446744073709551616",
                 "123456789012345678901234567890"]
#: A typo away from JSON; never valid anywhere in a line.
BROKEN_TOKENS = ["nan", "inf", "01", "+1", ".5", "1.", "0x10", "1e", "--1", "tru", "nul",
                 "'a'", "undefined", "-NaN", "[1,]", "{,}", '"\\x41"', '"\\u12"']

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(EXTREME_INTS),
                    st.floats(), st.text(max_size=8),
                    st.sampled_from(NUMBER_TOKENS).map(Raw))
json_values = st.recursive(scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=4), kids, max_size=3)),
    max_leaves=6)
deep = st.integers(900, 3000).map(lambda d: Raw("[" * d + "]" * d))
#: Harmless in a field pgval does not read: any JSON value except numbers beyond a double
#: (which orjson and pyarrow both refuse), including NaN, deep nesting and long strings.
extra_values = st.one_of(
    json_values.filter(lambda v: not any(t in encode(v) for t in ("1e999", "E+400"))),
    deep, st.integers(1000, 100_000).map(lambda n: "x" * n))
extra_keys = st.text(max_size=6).filter(
    lambda k: k not in ("id", "type", "resource", "event_ts", "ingress_ts", *INT_FIELDS_OUT,
                        "ids"))

#: Values that can never be a 64-bit integer field (nor a time).
not_int = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5), st.floats(),
    st.sampled_from(["-0.0", "1.0", "2.5", "1e3", "1E2", "NaN", "Infinity", "-Infinity"]).map(Raw),
    st.sampled_from([I64, -I64 - 1, 1 << 64, 10**30]),
    st.lists(st.integers(-3, 3), max_size=2), st.dictionaries(st.text(max_size=2),
                                                              st.integers(), max_size=2))
#: Integers that are not a time: beyond year 9999 (either side) or beyond int64.
not_time = st.one_of(not_int, st.sampled_from([I64 - 1, -I64, MAX_MS + 1, -MAX_MS - 1]),
                     st.integers(MAX_MS + 1, I64 - 1), st.integers(-I64, -MAX_MS - 1))
not_string = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                       st.lists(st.text(max_size=2), max_size=2),
                       st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2))
not_type = st.one_of(not_string, st.sampled_from(["get", "post", "PUT", "", " GET", "GET ",
                                                  "DELETE", "G\u0000T", "ＧＥＴ"]))
not_ids = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=4),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.lists(st.integers(0, 9), max_size=3).flatmap(lambda ids: st.builds(
        lambda bad, at: [*ids[:at], bad, *ids[at:]],
        st.one_of(st.none(), st.booleans(), st.floats(), st.text(max_size=2),
                  st.sampled_from([I64, -I64 - 1, 10**30]), st.lists(st.integers(), max_size=2),
                  st.sampled_from(["1.0", "2.5", "-0.0", "NaN"]).map(Raw)),
        st.integers(0, len(ids)))))


# --------------------------------------------------------------------------- records

def as_obj(record: dict) -> Obj:
    return Obj(tuple(record.items()))


@st.composite
def dressed(draw: st.DrawFn, record: dict) -> bytes:
    """A valid record written in any of the ways that keep it valid."""
    pairs = list(record.items())
    for _ in range(draw(st.integers(0, 2))):
        pairs.insert(draw(st.integers(0, len(pairs))), (draw(extra_keys), draw(extra_values)))
    pairs = draw(st.permutations(pairs))
    text = line_bytes(Obj(tuple(pairs)), ascii_only=draw(st.booleans()))
    pad = st.sampled_from([b"", b" ", b"\t", b"  \t "])
    return draw(pad) + text + draw(pad) + draw(st.sampled_from([b"", b"\r"]))


@st.composite
def broken_line(draw: st.DrawFn, record: dict, wrong: dict[str, st.SearchStrategy],
                required: Sequence[str]) -> bytes:
    """``record`` made certainly malformed (a valid record never comes out of this)."""
    obj = as_obj(record)
    kind = draw(st.sampled_from(["field", "missing", "duplicate", "truncated", "token",
                                 "not-object", "two", "utf8", "garbage"]))
    if kind == "field":  # one field of the wrong type or range
        name = draw(st.sampled_from(sorted(wrong)))
        return line_bytes(Obj(tuple((k, draw(wrong[k]) if k == name else v)
                                    for k, v in obj.pairs)))
    if kind == "missing":
        name = draw(st.sampled_from(list(required)))
        return line_bytes(Obj(tuple(p for p in obj.pairs if p[0] != name)))
    if kind == "duplicate":  # the last occurrence of a key wins, and it is wrong
        name = draw(st.sampled_from(sorted(wrong)))
        return line_bytes(Obj((*obj.pairs, (name, draw(wrong[name])))))
    if kind == "truncated":
        text = line_bytes(obj)
        return text[: draw(st.integers(1, len(text) - 1))]
    if kind == "token":
        name = draw(st.sampled_from([k for k, _ in obj.pairs]))
        token = Raw(draw(st.sampled_from(BROKEN_TOKENS)))
        return line_bytes(Obj(tuple((k, token if k == name else v) for k, v in obj.pairs)))
    if kind == "not-object":
        value = draw(st.one_of(scalars, st.lists(json_values, max_size=3), st.just([record]),
                               st.just(Raw("null"))))
        return line_bytes(value)
    if kind == "two":
        return line_bytes(obj) + draw(st.sampled_from([b"", b" ", b"\r", b"\t"])) + line_bytes(obj)
    if kind == "utf8":  # a byte that is not UTF-8 inside a string
        text = line_bytes(obj)
        at = text.index(b'"', 1) + 1  # inside the first key or string
        return text[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xc0\xaf",
                                                 b"\xed\xa0\x80", b"\x80"])) + text[at:]
    junk = draw(st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b))
    return b"#" + junk  # never starts like an object


def in_broken(record: dict) -> st.SearchStrategy[bytes]:
    wrong = {"id": not_int, "event_ts": not_time, "ingress_ts": not_time, "type": not_type,
             "resource": not_string}
    return broken_line(record, wrong, list(record))


def out_broken(record: dict) -> st.SearchStrategy[bytes]:
    """Optional fields (window_end, count, gets, posts) may be null, never another type."""
    optional = not_int.filter(lambda v: v is not None)
    wrong = {name: not_time if name == "ingress_ts" else
             not_int if name == "window_start" else optional
             for name in INT_FIELDS_OUT if name in record}
    wrong.update(resource=not_string, ids=not_ids)
    return broken_line(record, wrong, REQUIRED_OUT)


@st.composite
def mutated(draw: st.DrawFn, record: dict) -> bytes:
    """``record`` after a few arbitrary edits: it may or may not still be valid."""
    pairs = list(record.items())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "drop", "dup", "extra", "extreme"]))
        if op == "set" and pairs:
            k = draw(st.integers(0, len(pairs) - 1))
            pairs[k] = (pairs[k][0], draw(json_values))
        elif op == "drop" and pairs:
            pairs.pop(draw(st.integers(0, len(pairs) - 1)))
        elif op == "dup" and pairs:
            pairs.append((draw(st.sampled_from(pairs))[0], draw(json_values)))
        elif op == "extreme" and pairs:
            k = draw(st.integers(0, len(pairs) - 1))
            pairs[k] = (pairs[k][0], draw(st.one_of(st.sampled_from(EXTREME_INTS),
                                                    st.sampled_from(NUMBER_TOKENS).map(Raw))))
        else:
            pairs.append((draw(extra_keys), draw(extra_values)))
    text = line_bytes(Obj(tuple(pairs)), ascii_only=draw(st.booleans()))
    if draw(st.booleans()):  # and maybe a few raw bytes spliced in
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(max_size=4).filter(lambda b: b"\n" not in b)) + text[at:]
    return text


#: Lines that are not records of any kind, as a whole file or between records.
ODD_LINES = [b"", b" ", b"\t\r", b"\x00", b"\x00" * 10, b"\xef\xbb\xbf", b"\xef\xbb\xbf{}",
             b"\r", b"\r\r\r", b"{", b"}", b"{}", b"[]", b"null", b"true", b"0", b'""',
             b"\xff\xfe", b"\x1b[31m", b"[/]", b"[bold]x[/bold]", b"{" * 5000,
             b"[" * 100_000, b'{"a":' * 3000, b"a" * 200_000, b'"' + b"a" * 70_000 + b'"']


@st.composite
def any_lines(draw: st.DrawFn, records: list[dict],
              broken: Callable[[dict], st.SearchStrategy[bytes]]) -> list[bytes]:
    """One line per record: good, broken, mutated, an odd line or raw bytes."""
    kinds = {"good": dressed, "broken": broken, "mutated": mutated,
             "odd": lambda _: st.sampled_from(ODD_LINES),
             "bytes": lambda _: st.binary(max_size=30)}
    return [draw(kinds[draw(st.sampled_from(["good", *kinds]))](r)) for r in records]


@st.composite
def input_file(draw: st.DrawFn) -> bytes:
    return draw(assembled(draw(any_lines(draw(input_events(max_size=12)), in_broken))))


@st.composite
def output_file(draw: st.DrawFn, events: list[dict], topology: str, window_ms: int) -> bytes:
    rows = list(ref_oracle(events, topology, window_ms).values())
    outputs = draw(produced_outputs(rows)) if rows else []
    if not outputs or draw(st.booleans()):
        outputs.append({"window_start": 0, "resource": "r0", "count": 1, "ids": [1],
                        "ingress_ts": 5})
    return draw(assembled(draw(any_lines(outputs, out_broken))))


@st.composite
def assembled(draw: st.DrawFn, lines: list[bytes]) -> bytes:
    """Lines joined into a file: LF or CRLF, maybe a BOM, maybe no final newline."""
    sep = draw(st.sampled_from([b"\n", b"\r\n"]))
    body = sep.join(lines) + (sep if lines and draw(st.booleans()) else b"")
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + body


# --------------------------------------------------------------------------- running

def run_cli(args: Sequence[str], env: dict[str, str] | None = None) -> Result:
    """Invoke `pgval ARGS` in-process and check the rules every outcome must follow.

    Exit 0, 2, 3 or 4 (1 only under --expect: docs/cli.md); no traceback anywhere; an
    exception other than SystemExit is a crash (CliRunner catches it, so it is re-raised
    here with its traceback); a failure ends in one plain line: ``error: ...`` from pgval,
    or click's usage block ending in one ``Error: ...`` line for a flag it rejects (the
    convention of tests/test_check_cli.py).
    """
    result = CliRunner().invoke(main, list(args), env=env)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        raise AssertionError(f"pgval {' '.join(args)} crashed:\n"
                             + "".join(traceback.format_exception(exc)))
    assert result.exit_code in statuses(args), result.output
    assert "Traceback" not in result.output
    if result.exit_code:
        assert_plain_failure(result.stderr)
    return result


def statuses(args: Sequence[str]) -> tuple[int, ...]:
    """The exit statuses a command may end with: 0 done, 2 bad input, 3 evidence in doubt,
    4 the environment; 1 only under ``--expect`` (a verdict weaker than expected)."""
    return (0, 1, 2, 3, 4) if "--expect" in args else (0, 2, 3, 4)


def assert_plain_failure(stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "a failure must say why"
    if lines[0].startswith("Usage: "):  # click's usage block, then its one error line
        errors = [line for line in lines if line.startswith("Error: ")]
        assert len(errors) == 1 and errors[0] == lines[-1], stderr
    else:  # pgval's own "error: ...", or click's "Error: ..." alone (a missing value)
        assert len(lines) == 1 and lines[0].startswith(("error: ", "Error: ")), stderr


def check_args(inputs: Path, outputs: Path, topology: str, window_ms: int | str,
               *extra: str) -> list[str]:
    """`pgval check` that judges what is left of fuzzed files (--allow-malformed): records
    lacking a field are counted, as every other malformed record."""
    return ["check", "--topology", topology, "--inputs", str(inputs), "--outputs",
            str(outputs), f"--window-ms={window_ms}", "--allow-malformed", *extra]


#: The questions `pgval check` refuses to answer of the records it reads, which fuzzed
#: files may well ask (pgval/checker/questions.py): a --window-ms the outputs' own windows
#: contradict, a --phases bound that is no time of the records (farther from every parsed
#: ingress time than their span, a window or a minute).
QUESTION_REFUSALS = ("error: --window-ms is ", "error: --phases ")


def check_json(*args: object) -> dict:
    result = run_cli(check_args(*args, "--json"))  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def oracle_rows(inputs: Path, topology: str, window_ms: int) -> list[dict]:
    result = run_cli(["oracle", "--topology", topology, "--inputs", str(inputs),
                      f"--window-ms={window_ms}"])
    assert result.exit_code == 0, result.output
    return [orjson.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


topologies = st.sampled_from(["sst", "mst"])
windows = st.sampled_from([1, 7, 50, 1000, 10**12])


@st.composite
def phases_flag(draw: st.DrawFn) -> list[str]:
    if draw(st.booleans()):
        return []
    values = sorted(draw(st.lists(st.integers(0, 400), min_size=3, max_size=4)))
    return ["--phases", ",".join(map(str, values))]


# --------------------------------------------------------------------------- properties

@fuzz(100)
@given(inputs=input_file(), topology=topologies, window_ms=windows, phases=phases_flag(),
       as_json=st.booleans(), data=st.data())
def test_check_never_tracebacks_on_any_file(work: Path, inputs: bytes, topology: str,
                                            window_ms: int, phases: list[str], as_json: bool,
                                            data: st.DataObject) -> None:
    events = data.draw(input_events(max_size=8))
    outputs = data.draw(output_file(events, topology, window_ms))
    (work / "in.jsonl").write_bytes(inputs)
    (work / "out.jsonl").write_bytes(outputs)
    anomalies = work / "anomalies.jsonl"
    anomalies.unlink(missing_ok=True)
    result = run_cli(check_args(work / "in.jsonl", work / "out.jsonl", topology, window_ms,
                                *phases, "--anomalies", str(anomalies),
                                *(["--json"] if as_json else [])))
    if result.exit_code:  # a content is never fatal, only a question it cannot answer
        assert result.exit_code == 2 and result.stderr.startswith(QUESTION_REFUSALS), \
            result.output
        return
    if as_json:  # the anomaly set has one row per counted anomaly, each of its kind
        summary = orjson.loads(result.stdout)
        rows = [orjson.loads(line) for line in anomalies.read_bytes().splitlines()]
        kinds = [r["kind"] for r in rows]
        assert (kinds.count("unprocessed"), kinds.count("duplicate"),
                kinds.count("incorrect") + kinds.count("output-before-input"),
                kinds.count("output-before-input")) == (
            summary["unprocessed"], summary["duplicate"], summary["incorrect"],
            summary["output_before_input"])


@fuzz(60)
@given(inputs=input_file(), topology=topologies, window_ms=windows)
def test_oracle_never_tracebacks_on_any_file(work: Path, inputs: bytes, topology: str,
                                             window_ms: int) -> None:
    (work / "in.jsonl").write_bytes(inputs)
    rows = oracle_rows(work / "in.jsonl", topology, window_ms)
    for row in rows:
        assert row["window_end"] == row["window_start"] + window_ms
        assert row["ids"] == sorted(row["ids"])
        assert -MAX_MS - window_ms <= row["window_start"] <= MAX_MS


@fuzz(30)
@given(data=st.binary(max_size=300), topology=topologies)
def test_raw_bytes_files_are_never_fatal(work: Path, data: bytes, topology: str) -> None:
    (work / "raw.jsonl").write_bytes(data)
    summary = check_json(work / "raw.jsonl", work / "raw.jsonl", topology, 1000)
    rows = oracle_rows(work / "raw.jsonl", topology, 1000)
    assert summary["expected"] == len({i for r in rows for i in r["ids"]})
    assert summary["expected_outputs"] == len(rows)


@st.composite
def interleaved(draw: st.DrawFn, good: list[bytes], junk: list[bytes]) -> bytes:
    """``good`` in its order with ``junk`` lines anywhere between."""
    tags = draw(st.permutations([True] * len(good) + [False] * len(junk)))
    g, j = iter(good), iter(junk)
    return draw(assembled([next(g) if t else next(j) for t in tags]))


@fuzz(60)
@given(events=input_events(max_size=15), topology=topologies, window_ms=windows,
       phases=phases_flag(), data=st.data())
def test_valid_records_count_the_same_next_to_bad_ones(
        work: Path, events: list[dict], topology: str, window_ms: int, phases: list[str],
        data: st.DataObject) -> None:
    """Bad lines anywhere change only the malformed counts, never what the valid ones give."""
    rows = list(ref_oracle(events, topology, window_ms).values())
    outputs = data.draw(produced_outputs(rows)) if rows else []
    good_in = [data.draw(dressed(e)) for e in events]
    good_out = [data.draw(dressed(o)) for o in outputs]
    junk_in = data.draw(st.lists(st.one_of(
        *(in_broken(e) for e in events[:3]),
        in_broken({"id": 1, "type": "GET", "resource": "r0", "event_ts": 0, "ingress_ts": 0})),
        max_size=6))
    junk_out = data.draw(st.lists(st.one_of(
        *(out_broken(o) for o in outputs[:3]),
        out_broken({"window_start": 0, "resource": "r0", "count": 1, "ids": [1],
                    "ingress_ts": 5})), max_size=6))
    (work / "in-good.jsonl").write_bytes(b"".join(line + b"\n" for line in good_in))
    (work / "out-good.jsonl").write_bytes(b"".join(line + b"\n" for line in good_out))
    (work / "in-mixed.jsonl").write_bytes(data.draw(interleaved(good_in, junk_in)))
    (work / "out-mixed.jsonl").write_bytes(data.draw(interleaved(good_out, junk_out)))
    alone = check_json(work / "in-good.jsonl", work / "out-good.jsonl", topology, window_ms,
                       *phases)
    mixed = check_json(work / "in-mixed.jsonl", work / "out-mixed.jsonl", topology, window_ms,
                       *phases)
    assert (alone["malformed_inputs"], alone["malformed"]) == (0, 0)
    assert (mixed["malformed_inputs"], mixed["malformed"]) == (len(junk_in), len(junk_out))
    # What the valid records give is what the per-record reference (tests/reference.py)
    # gives for them: an expectation pgval's code did not compute.
    ref = ref_validate(events, outputs, topology, window_ms,
                       tuple(map(int, phases[1].split(",")[:3])) if phases else None)
    assert [alone[k] for k in ("expected", "processed", "unprocessed", "duplicate",
                               "incorrect")] == [ref.expected, ref.processed, ref.unprocessed,
                                                 ref.duplicate, ref.incorrect]
    assert {p: alone["phases"][p] for p in ref.phases} == ref.phases
    # Malformed records judged anyway make the run unknown, with their lines as reasons.
    ignore = {"malformed", "malformed_inputs", "guarantee", "valid", "validity_reasons"}
    assert {k: v for k, v in mixed.items() if k not in ignore} == {
        k: v for k, v in alone.items() if k not in ignore}
    if junk_in or junk_out:
        assert mixed["valid"] is False
    if not junk_out:
        assert mixed["guarantee"] == alone["guarantee"]
    assert oracle_rows(work / "in-mixed.jsonl", topology, window_ms) == oracle_rows(
        work / "in-good.jsonl", topology, window_ms)


def _write(path: Path, lines: Sequence[bytes]) -> Path:
    """A blank first line, so that a byte-order mark is never at the start of the file."""
    path.write_bytes(b"\n" + b"".join(line + b"\n" for line in lines))
    return path


def _input_rows(events: InputEvents) -> tuple[int, list[tuple]]:
    names = events.resources.names
    return events.malformed, list(zip(events.id.tolist(), events.is_get.tolist(),
                                      [names[c] for c in events.resource.tolist()],
                                      events.event_ts.tolist(), events.ingress_ts.tolist(),
                                      strict=True))


def _output_rows(outputs: OutputRecords) -> tuple[int, list[tuple]]:
    names = outputs.resources.names
    ids = [outputs.ids[a:b].tolist() for a, b in zip(outputs.offsets[:-1], outputs.offsets[1:],
                                                     strict=True)]
    return outputs.malformed, list(zip(
        outputs.window_start.tolist(), outputs.window_end.tolist(),
        [names[c] for c in outputs.resource.tolist()], outputs.count.tolist(),
        outputs.gets.tolist(), outputs.posts.tolist(), outputs.ingress_ts.tolist(), ids,
        strict=True))


def _sum(parts: list[tuple[int, list[tuple]]]) -> tuple[int, list[tuple]]:
    return sum(p[0] for p in parts), [row for p in parts for row in p[1]]


@fuzz(100)
@given(events=input_events(max_size=6), data=st.data())
def test_each_input_lines_fate_is_its_own(work: Path, events: list[dict],
                                          data: st.DataObject) -> None:
    """A file reads as the sum of its lines read alone (fast path or exact path alike)."""
    lines = [line.replace(b"\n", b" ") for line in data.draw(any_lines(events, in_broken))]
    together = _input_rows(read_inputs(_write(work / "all.jsonl", lines)))
    alone = _sum([_input_rows(read_inputs(_write(work / "one.jsonl", [line])))
                  for line in lines])
    assert together == alone
    records = [line for line in lines if line.strip(b" \t\r")]
    stamps = np.arange(len(records), dtype=np.int64)
    kafka = _input_rows(inputs_from_kafka(records, stamps, ResourceTable()))
    kafka_alone = _sum([_input_rows(inputs_from_kafka([r], stamps[k:k + 1], ResourceTable()))
                        for k, r in enumerate(records)])
    assert kafka == kafka_alone


@fuzz(100)
@given(events=input_events(max_size=8), topology=topologies, data=st.data())
def test_each_output_lines_fate_is_its_own(work: Path, events: list[dict], topology: str,
                                           data: st.DataObject) -> None:
    rows = list(ref_oracle(events, topology, 50).values())
    outputs = data.draw(produced_outputs(rows)) if rows else []
    lines = [line.replace(b"\n", b" ") for line in data.draw(any_lines(outputs, out_broken))]
    together = _output_rows(read_outputs(_write(work / "all.jsonl", lines), ResourceTable()))
    alone = _sum([_output_rows(read_outputs(_write(work / "one.jsonl", [line]),
                                            ResourceTable())) for line in lines])
    assert together == alone

    def kafka(values: list[bytes], first: int) -> tuple[int, list[tuple]]:
        n = len(values)
        stamps = np.arange(first, first + n, dtype=np.int64)
        return _output_rows(outputs_from_kafka(values, stamps, np.zeros(n, np.int64), stamps,
                                               ResourceTable()))

    records = [line for line in lines if line.strip(b" \t\r")]
    assert kafka(records, 0) == _sum([kafka([r], k) for k, r in enumerate(records)])


# --------------------------------------------------------------------------- flags

@pytest.fixture(scope="module")
def good_files(work: Path) -> tuple[Path, Path]:
    events = [{"id": k, "type": "GET" if k % 3 else "POST", "resource": f"r{k % 2}",
               "event_ts": 10 * k, "ingress_ts": 10 * k + 5} for k in range(20)]
    rows = ref_oracle(events, "sst", 50).values()
    outs = [{**r, "ingress_ts": r["window_end"] + 7} for r in rows]
    return (_write(work / "flags-in.jsonl", [orjson.dumps(e) for e in events]),
            _write(work / "flags-out.jsonl", [orjson.dumps(o) for o in outs]))


NOT_A_NUMBER = ["", " ", "abc", "1.5", "1e3", "1,000", "0x10", "NaN", "inf", "-inf", "--1",
                "1 2", "\x00", "٣x", "10**3", "1e999", "[1]"]


@st.composite
def window_flag(draw: st.DrawFn) -> tuple[str, bool]:
    """(text of --window-ms, whether it is a valid window: an integer in 1..10^12)."""
    value = draw(st.one_of(st.integers(1, 10**12), st.integers(-(10**30), 0),
                           st.integers(10**12 + 1, 10**30),
                           st.sampled_from([0, -1, 10**12, 10**12 + 1, I64 - 1, I64, -I64])))
    if draw(st.integers(0, 4)) == 0:
        return draw(st.one_of(st.sampled_from(NOT_A_NUMBER), st.floats().map(repr))), False
    return str(value), 1 <= value <= 10**12


@fuzz(60)
@given(flag=window_flag(), topology=topologies, command=st.sampled_from(["check", "oracle"]))
def test_window_flag_is_used_or_refused_in_one_line(good_files: tuple[Path, Path],
                                                    flag: tuple[str, bool], topology: str,
                                                    command: str) -> None:
    text, valid = flag
    inputs, outputs = good_files
    args = (check_args(inputs, outputs, topology, text) if command == "check" else
            ["oracle", "--topology", topology, "--inputs", str(inputs), f"--window-ms={text}"])
    result = run_cli(args)
    # good_files' outputs are of 50 ms windows: `check` with another size is refused.
    usable = valid and (command == "oracle" or text.strip() == "50")
    assert result.exit_code == (0 if usable else 2), result.output
    if not usable:
        assert "--window-ms" in result.stderr


@st.composite
def phases_text(draw: st.DrawFn) -> tuple[str, bool]:
    """(text of --phases, whether it is valid: 3 or 4 non-decreasing ms in 0..MAX_MS)."""
    ok_value = st.integers(0, MAX_MS)
    bad_value = st.one_of(st.integers(-(10**20), -1), st.integers(MAX_MS + 1, 10**30),
                          st.sampled_from([str(I64), str(-I64 - 1), str(MAX_MS + 1)]),
                          st.sampled_from([t for t in NOT_A_NUMBER if "," not in t]))
    items = draw(st.lists(st.one_of(ok_value, ok_value, bad_value), min_size=0, max_size=6))
    if draw(st.booleans()):
        items = sorted(items, key=lambda v: v if isinstance(v, int) else -1)
    valid = (len(items) in (3, 4) and all(isinstance(v, int) and 0 <= v <= MAX_MS
                                          for v in items) and items == sorted(items))
    pad = st.sampled_from(["", " ", "\t"])
    return ",".join(f"{draw(pad)}{v}{draw(pad)}" for v in items), valid


@fuzz(80)
@given(flag=phases_text(), as_json=st.booleans())
def test_phases_flag_is_used_or_refused_in_one_line(good_files: tuple[Path, Path],
                                                    flag: tuple[str, bool], as_json: bool
                                                    ) -> None:
    text, valid = flag
    inputs, outputs = good_files
    result = run_cli(check_args(inputs, outputs, "sst", 50, "--phases", text,
                                *(["--json"] if as_json else [])))
    # Valid times far from the records' (5..257 ms) are no times of theirs: refused too.
    near = valid and all(int(v) <= 60_257 for v in text.split(","))
    assert result.exit_code == (0 if near else 2), result.output
    if near and as_json:
        assert set(orjson.loads(result.stdout)["phases"]) == {"control", "failure", "recovery"}
    if not valid:
        assert result.stderr.startswith("error: --phases"), result.stderr
    elif not near:
        assert "is no time of these records" in result.stderr, result.stderr


@pytest.mark.parametrize("flags", [
    ["--window-ms"], ["--phases"], ["--topology"], ["--bogus"], ["--json=yes"],
    ["--topology", "SST"], ["--topology", ""], ["--window-ms", "1", "extra-argument"],
    ["--phases", "1,2,3", "--phases", "1,2"], ["--window-ms=1", "--window-ms=0"],
], ids=lambda f: " ".join(f) or "none")
def test_malformed_command_lines_end_in_one_line(good_files: tuple[Path, Path],
                                                 flags: list[str]) -> None:
    inputs, outputs = good_files
    base = ["check", "--inputs", str(inputs), "--outputs", str(outputs)]
    if "--topology" not in flags:
        base += ["--topology", "sst"]
    assert run_cli(base + flags).exit_code == 2


# --------------------------------------------------------------------------- paths

def _fifo_with_writer(path: Path, data: bytes) -> threading.Thread:
    os.mkfifo(path)

    def feed() -> None:
        with open(path, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    return writer


PATH_CASES = ["missing", "directory", "empty", "dev-null", "broken-symlink", "symlink-loop",
              "unreadable", "fifo"]


@pytest.mark.parametrize("case", PATH_CASES)
@pytest.mark.parametrize("which", ["inputs", "outputs", "oracle"])
def test_bad_paths_end_in_one_line(tmp_path: Path, good_files: tuple[Path, Path], case: str,
                                   which: str) -> None:
    """A path that is missing or not a file is refused in one line; odd files are read."""
    if case == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file")
    path = tmp_path / "x.jsonl"
    writer = None
    if case == "directory":
        path.mkdir()
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "dev-null":
        path = Path(os.devnull)
    elif case == "broken-symlink":
        path.symlink_to(tmp_path / "nowhere")
    elif case == "symlink-loop":
        path.symlink_to(path)
    elif case == "unreadable":
        path.write_bytes(good_files[0].read_bytes())
        path.chmod(0)
    elif case == "fifo":  # `--inputs <(zcat in.jsonl.gz)` hands pgval a pipe
        writer = _fifo_with_writer(path, good_files[0].read_bytes())
    inputs, outputs = good_files
    if which == "oracle":
        args = ["oracle", "--topology", "sst", "--inputs", str(path)]
    else:
        args = check_args(path if which == "inputs" else inputs,
                          path if which == "outputs" else outputs, "sst", 50, "--json")
    result = run_cli(args)
    if writer is not None:
        writer.join(timeout=10)
    readable = case in ("empty", "dev-null", "fifo")
    assert result.exit_code == (0 if readable else 2), result.output
    if not readable:
        assert f"--{'inputs' if which == 'oracle' else which}" in result.stderr
    if case == "fifo" and which != "oracle":
        summary = orjson.loads(result.stdout)
        assert summary["malformed"] + summary["malformed_inputs"] == (
            20 if which == "outputs" else 0)  # inputs read as outputs are malformed ones


# --------------------------------------------------------------------------- entry point

def _entry_point() -> list[str]:
    script = Path(sys.executable).with_name("pgval")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pgval.cli"]


def run_process(args: Sequence[str], **env: str) -> subprocess.CompletedProcess[str]:
    """`pgval ARGS` as a real process, held to the same rules as run_cli."""
    proc = subprocess.run([*_entry_point(), *args], capture_output=True, text=True,
                          errors="replace", timeout=120, env={**os.environ, **env})
    assert proc.returncode in statuses(args), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    if proc.returncode:
        assert_plain_failure(proc.stderr)
    return proc


def test_entry_point_on_garbage_and_bad_flags(tmp_path: Path, good_files: tuple[Path, Path]
                                              ) -> None:
    inputs, outputs = good_files
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\xef\xbb\xbf\x00\xff\r\n[1]\nnull\n{\"id\":1e999}\n" + b"[" * 5000
                        + b"\n" + inputs.read_bytes() + b'{"id":-9223372036854775808,'
                        b'"type":"GET","resource":"r","event_ts":1,"ingress_ts":'
                        b'-9223372036854775808}\n')
    proc = run_process(check_args(garbage, garbage, "mst", 50, "--json"))
    summary = json.loads(proc.stdout)
    assert proc.returncode == 0 and summary["malformed_inputs"] == 6
    assert run_process(["oracle", "--topology", "sst", "--inputs", str(garbage)]).returncode == 0
    for flags in (["--window-ms=0"], ["--phases", "3,2,1"], ["--phases", "1,2"]):
        proc = run_process(check_args(inputs, outputs, "sst", 50, *flags), COLUMNS="40")
        assert proc.returncode == 2
    proc = run_process(check_args(tmp_path, outputs, "sst", 50))
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_entry_point_bad_database_is_one_line(tmp_path: Path, good_files: tuple[Path, Path]
                                              ) -> None:
    inputs, outputs = good_files
    proc = run_process(check_args(inputs, outputs, "sst", 50, "--db", str(inputs)))
    assert proc.returncode == 2 and "error:" in proc.stderr


def test_entry_point_version_and_help() -> None:
    assert run_process(["--version"]).returncode == 0
    assert "--phases" in run_process(["check", "--help"]).stdout




# --------------------------------------------------------------------------- stored runs
# `recheck`, `export` and `report` read files a user (or anyone with
# write access) can break: a run directory and a results database. Each example starts
# from a valid stored run (tests/test_evidence.py's one-event run, finished and sealed in
# a database) and breaks it; whatever the damage, the command answers (exit 0) or refuses
# in one plain sentence (exit 2, or 3 for evidence that is not what was sealed), never with
# a traceback.

import itertools  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402

_copies = itertools.count()
EVIDENCE_FILES = ("run.json", "get.parquet", "post.parquet", "output.parquet",
                  "progress.jsonl")
#: Run ids as a user may type them: Unicode digits Python's isdigit accepts, beyond SQLite.
RUN_IDS = ["²", "١", "٣", "𝟙", "1²", "10" + "0" * 22, str(1 << 63), str((1 << 63) - 1),
           "0", "-1", "+1", " 1", "1 ", "1.0", "1e3", "", "0x1", "١٢", "9" * 400]


@dataclass(frozen=True)
class StoredRun:
    run_dir: Path
    db: Path
    run_id: int


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> StoredRun:
    """One complete run: evidence (with a progress line) and its sealed row in a database,
    plus an OIR row, so that every table a report reads has a row to break."""
    from pgval.evidence import bundle as evidence
    from pgval.evidence.recheck import recheck
    from tests.test_evidence import stored_one_event_run

    base = tmp_path_factory.mktemp("stored")
    run_dir, db, store, run_id = stored_one_event_run(base)
    progress = [{"event": "started", "id": "q"},
                {"event": "progress", "batchId": 0, "numInputRows": 1,
                 "eventTime": {"watermark": "1970-01-01T00:00:00.000Z"},
                 "sources": [{"startOffset": {"pgval-get": {"0": 0}},
                              "endOffset": {"pgval-get": {"0": 1, "1": 0}}}]}]
    (run_dir / "evidence" / "progress.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in progress))
    m = evidence.Manifest.read(run_dir)
    m.run_id = run_id
    m.config = {"fault": "none", "rate": 10.0}
    m.write(run_dir)
    result = recheck(run_dir)
    seal = getattr(evidence, "seal", None)  # evidence hashes
    sealed = {"evidence": seal(run_dir, run_id)} if seal is not None else {}
    store.finish_run(run_id, result.evaluation, run_dir=run_dir, batches=progress,
                     fault_log=[{"step": "inject", "fault": "none", "intended_ms": 1}],
                     **sealed)
    store.db["oir"].insert({"topology": "sst", "pg": "a1", "rate": 100.0, "measured_at": 1.0,
                            "trials": "[]", "upper": 200.0, "precision": 0.1,
                            "bracketed": 1, "machine": "m", "shape": "{}"})
    store.close()
    assert run_cli(["recheck", str(run_id), "--db", str(db), "--json"]).exit_code == 0
    assert run_cli(["report", "--db", str(db), "--format", "csv", "--include-unknown"]
                   ).exit_code == 0
    return StoredRun(run_dir, db, run_id)


def _copy_run(stored: StoredRun, work: Path) -> StoredRun:
    """A fresh copy of the stored run whose database points at the copy."""
    n = next(_copies)
    run_dir = work / f"run-{n}"
    shutil.copytree(stored.run_dir, run_dir)
    db = work / f"db-{n}.db"
    shutil.copyfile(stored.db, db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET run_dir = ?, params = ?",
                     [str(run_dir), json.dumps({"run_dir": str(run_dir), "rate": 10.0})])
    conn.close()
    return StoredRun(run_dir, db, stored.run_id)


#: run.json fields: every one of them, and one pgval does not know.
MANIFEST_FIELDS = ("topology", "window_ms", "phases", "t4", "resources", "control_ids",
                   "control_events", "readback", "reconciliation", "valid",
                   "validity_reasons", "run_id", "config", "generator", "observed_reasons",
                   "not_a_field")
#: JSON values of the wrong type (or range) for some field, and huge numbers.
manifest_values = st.one_of(
    json_values, not_int, st.sampled_from(EXTREME_INTS),
    st.sampled_from([[0, 1], [2, 1, 0], [0, 0, 0], [0, 1, 2, 3], [-1, 0, 1], [0, 1, "2"],
                     [1, 0], [10**23, 10**23], ["sst"], "SST", "mst ", {"0": 1}, 10**23,
                     -(10**23), 1e308, "²", "١"]),
    st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "1E+400"]).map(Raw))
#: Lines of progress.jsonl: arbitrary JSON, and progress objects with fields of any type.
progress_fields = st.sampled_from(["event", "id", "batchId", "eventTime", "sources",
                                   "numInputRows", "stateOperators", "durationMs"])
progress_values = st.one_of(
    manifest_values, st.just("progress"), st.just("started"),
    st.fixed_dictionaries({"watermark": st.one_of(
        json_values, st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59Z",
                                      "x", "", "2024-13-01T00:00:00Z"]))}),
    st.lists(st.fixed_dictionaries({"startOffset": json_values, "endOffset": st.one_of(
        json_values, st.fixed_dictionaries({"pgval-get": st.dictionaries(
            st.sampled_from(["0", "1", "x", "²", "-1", "99999999999"]),
            st.one_of(st.integers(), json_values, st.sampled_from([10**23, 1e308])),
            max_size=2)}))}), max_size=2))
progress_line = st.one_of(
    st.sampled_from(ODD_LINES[:20]), st.binary(max_size=20),
    json_values.map(line_bytes),
    st.dictionaries(progress_fields, progress_values, min_size=1, max_size=4).map(
        lambda d: line_bytes({"event": "progress", **d})))


@st.composite
def run_damage(draw: st.DrawFn) -> list[tuple]:
    """One to three edits of a run directory."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["field", "drop-field", "manifest", "progress", "bytes",
                                     "truncate", "delete", "dir", "evidence-file", "nested"]))
        name = draw(st.sampled_from(EVIDENCE_FILES))
        if kind == "nested":  # a value deep inside what the re-check reads of run.json
            edits.append((kind, draw(st.sampled_from(NESTED_PATHS)), draw(manifest_values)))
        elif kind == "field":
            edits.append((kind, draw(st.sampled_from(MANIFEST_FIELDS)), draw(manifest_values)))
        elif kind == "drop-field":
            edits.append((kind, draw(st.sampled_from(MANIFEST_FIELDS))))
        elif kind == "manifest":  # the whole of run.json: not an object, not UTF-8, …
            edits.append((kind, draw(st.one_of(
                json_values.map(line_bytes), st.binary(max_size=30),
                st.sampled_from([b"\xff\xfe{}", b'{"topology": "sst\xff"}', b"[" * 100_000,
                                 b"", b"\xef\xbb\xbf{}", b"{" * 5000, b"null"])))))
        elif kind == "progress":
            edits.append((kind, draw(st.lists(progress_line, min_size=1, max_size=4))))
        elif kind == "bytes":
            edits.append((kind, name, draw(st.binary(max_size=64))))
        elif kind == "truncate":
            edits.append((kind, name, draw(st.integers(0, 4000))))
        else:
            edits.append((kind, name))
    return edits


#: Paths into run.json whose values the re-check reads (read-back proof, generator report,
#: config): each set to a value of the wrong type or range by the "nested" edit.
NESTED_PATHS = [("readback", "get", "end_offsets", "0"), ("readback", "get", "end_offsets"),
                ("readback", "get"), ("readback", "inputs", "delivered"),
                ("readback", "inputs", "control"), ("readback", "inputs"),
                ("readback", "output", "complete"), ("readback", "get", "problems"),
                ("generator", "errors"), ("generator", "failed"), ("generator", "undelivered"),
                ("config", "fault"), ("observed_reasons",)]


def _set_nested(data: dict, path: tuple[str, ...], value: object) -> None:
    for key in path[:-1]:
        if not isinstance(data.get(key), dict):
            data[key] = {}
        data = data[key]
    data[path[-1]] = value


def _damage(run_dir: Path, edits: list[tuple]) -> None:
    ev = run_dir / "evidence"
    for edit in edits:
        kind = edit[0]
        if not ev.is_dir():
            return
        if kind == "nested":
            try:
                data = json.loads((ev / "run.json").read_text())
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(data, dict):
                _set_nested(data, edit[1], edit[2])
                (ev / "run.json").write_bytes(line_bytes(data))
        elif kind in ("field", "drop-field"):
            try:
                data = json.loads((ev / "run.json").read_text())
            except (OSError, ValueError, RecursionError):
                continue
            if not isinstance(data, dict):
                continue
            pairs = [(k, v) for k, v in data.items() if k != edit[1]]
            if kind == "field":
                pairs.append((edit[1], edit[2]))
            (ev / "run.json").write_bytes(line_bytes(Obj(tuple(pairs))))
        elif kind == "manifest":
            _replace(ev / "run.json", edit[1])
        elif kind == "progress":
            _replace(ev / "progress.jsonl", b"\n".join(edit[1]) + b"\n")
        elif kind == "bytes":
            _replace(ev / edit[1], edit[2])
        elif kind == "truncate" and (ev / edit[1]).is_file():
            data = (ev / edit[1]).read_bytes()
            (ev / edit[1]).write_bytes(data[:edit[2] % (len(data) + 1)])
        elif kind == "delete":
            _remove(ev / edit[1])
        elif kind == "dir":  # a directory where a file belongs
            _remove(ev / edit[1])
            (ev / edit[1]).mkdir()
        elif kind == "evidence-file":  # a file where the evidence directory belongs
            shutil.rmtree(ev)
            ev.write_text("x")


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _replace(path: Path, data: bytes) -> None:
    _remove(path)
    path.write_bytes(data)


def _fatal(edits: list[tuple]) -> bool:
    """Damage no re-check can read past: run.json gone, or no object at all."""
    for edit in edits:
        if edit[0] == "evidence-file" or (edit[0] in ("delete", "dir")
                                          and edit[1] == "run.json"):
            return True
        if edit[0] == "manifest":
            try:
                if not isinstance(json.loads(edit[1]), dict):
                    return True
            except (ValueError, RecursionError):
                return True
    return False


@fuzz(150)
@given(edits=run_damage(), by_id=st.booleans())
def test_recheck_and_export_never_traceback_on_a_broken_run(
        work: Path, stored: StoredRun, edits: list[tuple], by_id: bool) -> None:
    """Whatever is broken in a run directory, `recheck` and `export` (by directory, or by
    run id through the database) answer or refuse in one sentence."""
    run = _copy_run(stored, work)
    _damage(run.run_dir, edits)
    where = [str(run.run_id), "--db", str(run.db)] if by_id else [str(run.run_dir)]
    checked = run_cli(["recheck", *where, "--json"])
    exported = run_cli(["export", *where, "--out", str(run.run_dir) + "-out"])
    if _fatal(edits):
        assert checked.exit_code != 0 and exported.exit_code != 0
    if checked.exit_code == 0:
        assert orjson.loads(checked.stdout)["expected"] >= 0


@fuzz(40)
@given(run_id=st.one_of(st.sampled_from(RUN_IDS), st.text(max_size=6)),
       command=st.sampled_from(["recheck", "recheck-store", "export"]),
       with_db=st.booleans())
def test_run_ids_are_used_or_refused_in_one_line(work: Path, stored: StoredRun, run_id: str,
                                                 command: str, with_db: bool) -> None:
    """`²` and `١` are digits to Python, 10^23 is one to SQLite: none may crash."""
    args = {"recheck": ["recheck", run_id, "--json"],
            "recheck-store": ["recheck", run_id, "--store"],
            "export": ["export", run_id, "--out", str(work / "ids-out")]}[command]
    result = run_cli([*args, *(["--db", str(stored.db)] if with_db else [])])
    if run_id != str(stored.run_id) and not _is_dir(run_id):
        assert result.exit_code != 0


def _is_dir(name: str) -> bool:
    try:
        return Path(name).is_dir()
    except (OSError, ValueError):
        return False


#: What may sit in a numeric or text cell of a stored row.
CELLS = [1e308, -1e308, float("inf"), float("-inf"), float("nan"), (1 << 63) - 1, -(1 << 63),
         0, -1, "", "x", "1e999", "NaN", "²", "{", "[]", "{}", "null", '"x"', "[1, 2]",
         '{"run_dir": 5}', '{"run_dir": ["a"]}', b"\xff\x00", "/nonexistent", "."]
#: Columns a report, recheck or export reads, per table.
COLUMNS = {
    "runs": ("topology", "pg", "fault", "kind", "status", "window_ms", "params", "summary",
             "valid", "validity_reasons", "run_dir", "expected", "processed", "reliability",
             "failure_cost_s", "downtime_s", "catchup_s", "recovered", "censored", "t2",
             "guarantee", "sealed", "created_at", "finished_at", "id"),
    "phase_results": ("phase", "expected", "processed", "reliability", "throughput",
                      "latency_p50_s", "latency_p99_s", "karimov_p99_s", "run_id"),
    "unprocessed_causes": ("cause", "count", "examples", "run_id"),
    "fault_log": ("step", "fault", "intended_ms", "actual_ms", "done_ms", "detail", "run_id"),
    "series": ("t_ms", "inputs", "outputs", "latency_p50_s", "run_id"),
    "batches": ("batch_id", "timestamp", "raw", "run_id"),
    "evidence_files": ("path", "sha256", "run_id"),
    "oir": ("topology", "pg", "rate", "measured_at", "trials", "upper", "machine", "shape"),
}


@st.composite
def db_damage(draw: st.DrawFn) -> list[tuple]:
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["cell", "cell", "cell", "drop-column", "drop-table",
                                     "rename-table", "bytes", "truncate", "version", "dir"]))
        table = draw(st.sampled_from(sorted(COLUMNS)))
        if kind == "cell":
            edits.append((kind, table, draw(st.sampled_from(COLUMNS[table])),
                          draw(st.one_of(st.sampled_from(CELLS), st.integers(-I64, I64 - 1),
                                         st.floats(), st.text(max_size=5)))))
        elif kind == "drop-column":
            edits.append((kind, table, draw(st.sampled_from(COLUMNS[table]))))
        elif kind in ("drop-table", "rename-table"):
            edits.append((kind, table))
        elif kind == "bytes":  # overwrite part of the file: a damaged database
            edits.append((kind, draw(st.integers(0, 20_000)), draw(st.binary(min_size=1,
                                                                              max_size=64))))
        elif kind == "truncate":
            edits.append((kind, draw(st.integers(0, 20_000))))
        elif kind == "version":
            edits.append((kind, draw(st.sampled_from([-1, 1, 2, 99, 1 << 31 - 1]))))
        else:
            edits.append((kind,))
    return edits


def _damage_db(db: Path, edits: list[tuple]) -> None:
    for edit in edits:
        kind = edit[0]
        if kind in ("bytes", "truncate", "dir"):
            if not db.is_file():
                continue
            data = db.read_bytes()
            if kind == "bytes":
                at = edit[1] % max(len(data), 1)
                data = data[:at] + edit[2] + data[at + len(edit[2]):]
                db.write_bytes(data)
            elif kind == "truncate":
                db.write_bytes(data[:edit[1] % (len(data) + 1)])
            else:
                db.unlink()
                db.mkdir()
            continue
        try:
            conn = sqlite3.connect(db)
            try:
                if kind == "cell":
                    conn.execute(f"UPDATE [{edit[1]}] SET [{edit[2]}] = ?", [edit[3]])
                elif kind == "drop-column":
                    conn.execute(f"ALTER TABLE [{edit[1]}] DROP COLUMN [{edit[2]}]")
                elif kind == "drop-table":
                    conn.execute(f"DROP TABLE [{edit[1]}]")
                elif kind == "rename-table":
                    conn.execute(f"ALTER TABLE [{edit[1]}] RENAME TO [{edit[1]}_old]")
                else:
                    conn.execute(f"PRAGMA user_version = {edit[1]}")
                conn.commit()
            finally:
                conn.close()
        except sqlite3.Error:
            pass  # a primary key, an index, a column already gone: that edit is skipped


@fuzz(150)
@given(edits=db_damage(), command=st.sampled_from(["report", "recheck", "export"]),
       fmt=st.sampled_from(["terminal", "markdown", "csv"]))
def test_report_recheck_export_never_traceback_on_a_broken_database(
        work: Path, stored: StoredRun, edits: list[tuple], command: str, fmt: str) -> None:
    """Cells of any type and size (1e308, NaN, 2^63 - 1, text in numbers), dropped columns
    and tables, damaged and truncated files: read, or refused in one sentence."""
    run = _copy_run(stored, work)
    _damage_db(run.db, edits)
    args = {"report": ["report", "--db", str(run.db), "--format", fmt, "--include-unknown"],
            "recheck": ["recheck", str(run.run_id), "--db", str(run.db), "--json"],
            "export": ["export", str(run.run_id), "--db", str(run.db), "--out",
                       str(run.run_dir) + "-out"]}[command]
    run_cli(args)


def test_recheck_names_a_blob_stored_where_a_figure_belongs(work: Path,
                                                           stored: StoredRun) -> None:
    """A phase's count damaged into bytes: `pgval recheck --json` says the stored row
    differs and shows the blob as SQLite writes one (it had no JSON form and crashed)."""
    run = _copy_run(stored, work)
    _damage_db(run.db, [("cell", "phase_results", "expected", b"\xff\x00")])
    result = run_cli(["recheck", str(run.run_id), "--db", str(run.db), "--json"])
    figures = json.loads(result.stdout)["stored_figures"]
    assert figures["same"] is False
    blobs = {k: d for k, d in figures["differ"].items() if k.endswith(".expected")}
    assert blobs and all(d["stored"] == "X'FF00'" for d in blobs.values()), figures


def test_report_html_and_plots_on_extreme_values(work: Path, stored: StoredRun) -> None:
    """The plots and the HTML page read the same extreme cells (1e308 overflowed fsum)."""
    run = _copy_run(stored, work)
    _damage_db(run.db, [("cell", "runs", c, 1e308) for c in COLUMNS["runs"][11:19]]
               + [("cell", "phase_results", c, -1e308) for c in COLUMNS["phase_results"][1:8]]
               + [("cell", "series", c, 1e308) for c in COLUMNS["series"][1:4]])
    res = run_cli(["report", "--db", str(run.db), "--format", "html", "--include-unknown", "--out",
                   str(work / "extreme.html"), "--plots", str(work / "extreme-plots")])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_unwritable_outputs_are_one_line(work: Path, stored: StoredRun, where: str) -> None:
    """`report --out/--plots` and `export --out` where nothing can be written."""
    blocker = work / "a-file"
    blocker.write_text("x")
    place = blocker / "sub" if where == "under-a-file" else Path("/proc/pgval-no/x")
    for args in (["report", "--db", str(stored.db), "--include-unknown", "--out",
                  str(place / "r.md"), "--format", "markdown"],
                 ["report", "--db", str(stored.db), "--include-unknown", "--plots",
                  str(place)],
                 ["export", str(stored.run_dir), "--out", str(place)]):
        res = run_cli(args)
        assert res.exit_code == 2 and "cannot write" in res.stderr, (args, res.output)
