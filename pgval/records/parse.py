"""Columnar input events and output records, and fast tolerant readers for them.

Everything downstream (oracle, validator, metrics) works on numpy columns, so
the readers' job is to turn JSON lines or Kafka values into those columns fast
(pyarrow's multithreaded JSON reader) without ever failing on a bad record: a
block that pyarrow rejects is re-read line by line, and unusable records are
counted as malformed and skipped.

A record is one line: lines are separated by ``\n`` only (a ``\r`` is JSON whitespace,
never a separator). pyarrow is more permissive than that (several objects on one line,
one object over several lines, invalid UTF-8 inside strings, and it crashes on a
top-level ``null``), so a block reaches it only when every non-blank line looks like one
object, and its result is kept only when it has one row per line. Everything else takes
the exact per-line path, so a record's fate never depends on its neighbours.
"""

from __future__ import annotations

import io
import json
import math
import os
import select
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from pgval.core.schema import GET, POST
from pgval.records.own_inputs import OwnInputs, decode_chunk, value_bytes
from pgval.records.phases import MAX_MS

BLOCK_BYTES = 64 << 20  # pyarrow parses a file in blocks of this size
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
JSON_SPACE = b" \t\r"  # JSON whitespace other than the line separator
_SPACE_CODES = np.frombuffer(JSON_SPACE, dtype=np.uint8)
_MAX_TRIM = 64  # lines with more leading/trailing blanks go the exact per-line path
UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Defect:
    """A malformed record, for the sentence that names it: its number in the stream (from
    0: a file's non-blank lines, or the values read from Kafka), the field at fault (None:
    the record is no JSON object at all) and what is wrong, said after "input line N"."""

    record: int
    field: str | None
    problem: str


def first_defect(*defects: Defect | None) -> Defect | None:
    """The defect of the lowest record number, or None."""
    found = [d for d in defects if d is not None]
    return min(found, key=lambda d: d.record) if found else None


class ResourceTable:
    """Maps resource names to dense int32 codes, shared by inputs and outputs."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self.codes: dict[str, int] = {}
        for name in names:
            self.code(name)

    def code(self, name: str) -> int:
        code = self.codes.get(name)
        if code is None:
            code = len(self.names)
            self.codes[name] = code
            self.names.append(name)
        return code

    def encode(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Vectorised name → code for a string column (nulls become -1); names not seen
        before get the next codes, in order of first appearance."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if len(column) == 0:
            return np.zeros(0, dtype=np.int32)
        encoded = pc.dictionary_encode(column)
        names = encoded.dictionary
        if self.names:
            known = pc.index_in(names, value_set=pa.array(self.names, pa.string()))
        else:
            known = pa.nulls(len(names), pa.int32())
        is_new = pc.is_null(known).to_numpy(zero_copy_only=False)
        fresh = names.filter(pa.array(is_new)).to_pylist()
        start = len(self.names)
        self.names.extend(fresh)
        self.codes.update(zip(fresh, range(start, start + len(fresh)), strict=True))
        lookup = known.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int32)
        lookup[is_new] = np.arange(start, start + len(fresh), dtype=np.int32)
        lookup = np.r_[lookup, np.int32(-1)]
        indices = encoded.indices.fill_null(len(lookup) - 1)
        return lookup[indices.to_numpy(zero_copy_only=False)]

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class InputEvents:
    """Input events as columns; ``is_get`` is False for POST."""

    id: np.ndarray
    is_get: np.ndarray
    resource: np.ndarray
    event_ts: np.ndarray
    ingress_ts: np.ndarray
    resources: ResourceTable
    malformed: int = 0
    #: Malformed records that lacked a required field, per field (a record lacking two
    #: counts for both): ``pgval check`` refuses a file whose records lack a field rather
    #: than judge what is left (:mod:`pgval.checker.questions`).
    missing: dict[str, int] = field(default_factory=dict)
    #: The first malformed record (``pgval check`` names it), and the file read (None: Kafka).
    defect: Defect | None = None
    source: Path | None = None
    #: Where each event sits in Kafka (set when read from Kafka): topic code (0 get, 1 post),
    #: partition and offset. They let the explainer find the micro-batch that read it.
    topic: np.ndarray | None = None
    partition: np.ndarray | None = None
    offset: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.id)

    @classmethod
    def empty(cls, resources: ResourceTable | None = None) -> InputEvents:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int32), z, z,
                   resources or ResourceTable())

    def take(self, index: np.ndarray) -> InputEvents:
        def opt(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[index]

        return InputEvents(self.id[index], self.is_get[index], self.resource[index],
                           self.event_ts[index], self.ingress_ts[index], self.resources,
                           self.malformed, self.missing, self.defect, self.source,
                           opt(self.topic), opt(self.partition), opt(self.offset))

    @staticmethod
    def concat(parts: Sequence[InputEvents], resources: ResourceTable) -> InputEvents:
        if not parts:
            return InputEvents.empty(resources)

        def opt(name: str) -> np.ndarray | None:
            cols = [getattr(p, name) for p in parts]
            return None if any(c is None for c in cols) else np.concatenate(cols)

        full = [p for p in parts if len(p)]
        if len(full) == 1 and len(parts) > 1 and _own_columns(full[0]):
            one = full[0]  # the others are empty: its columns, not a copy of them
            coords = {name: None if any(getattr(p, name) is None for p in parts)
                      else getattr(one, name) for name in ("topic", "partition", "offset")}
            return InputEvents(
                one.id, one.is_get, one.resource, one.event_ts, one.ingress_ts, resources,
                sum(p.malformed for p in parts), add_counts(p.missing for p in parts),
                next((p.defect for p in parts if p.defect is not None), None), None, **coords)
        return InputEvents(
            np.concatenate([p.id for p in parts]),
            np.concatenate([p.is_get for p in parts]),
            np.concatenate([p.resource for p in parts]),
            np.concatenate([p.event_ts for p in parts]),
            np.concatenate([p.ingress_ts for p in parts]),
            resources,
            sum(p.malformed for p in parts),
            add_counts(p.missing for p in parts),
            next((p.defect for p in parts if p.defect is not None), None), None,
            opt("topic"), opt("partition"), opt("offset"),
        )


def _own_columns(events: InputEvents) -> bool:
    """Every column of ``events`` is numpy's own, writable (not a view Arrow lent), so a
    result may share it as a concatenation's copy would be."""
    columns = (events.id, events.is_get, events.resource, events.event_ts, events.ingress_ts,
               events.topic, events.partition, events.offset)
    return all(c.flags.writeable for c in columns if c is not None)


@dataclass
class OutputRecords:
    """Produced outputs as columns; ``ids`` is flattened, ``offsets`` has len(outputs)+1 entries.

    ``count``/``gets``/``posts`` hold -1 where the record did not carry the field.
    ``position`` is the record's place in the output stream (file line, or the
    order of (timestamp, partition, offset) when read from Kafka).
    """

    window_start: np.ndarray
    window_end: np.ndarray
    resource: np.ndarray
    count: np.ndarray
    gets: np.ndarray
    posts: np.ndarray
    ingress_ts: np.ndarray
    position: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray
    resources: ResourceTable
    malformed: int = 0
    malformed_samples: list[str] = field(default_factory=list)
    #: As :attr:`InputEvents.missing`: malformed records that lacked a required field.
    missing: dict[str, int] = field(default_factory=dict)
    #: As :attr:`InputEvents.defect` and :attr:`InputEvents.source`.
    defect: Defect | None = None
    source: Path | None = None
    #: Where each output sits in Kafka (set when read from Kafka), so an anomaly can name
    #: the record: partition and offset.
    partition: np.ndarray | None = None
    offset: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.window_start)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def add_counts(parts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Per-field counts of several parts added up."""
    total: dict[str, int] = {}
    for part in parts:
        for name, n in part.items():
            total[name] = total.get(name, 0) + n
    return total


# --------------------------------------------------------------------------- reading

INPUT_SCHEMA = pa.schema([
    ("id", pa.int64()), ("type", pa.string()), ("resource", pa.string()),
    ("event_ts", pa.int64()), ("ingress_ts", pa.int64()),
])
OUTPUT_SCHEMA = pa.schema([
    ("window_start", pa.int64()), ("window_end", pa.int64()), ("resource", pa.string()),
    ("count", pa.int64()), ("gets", pa.int64()), ("posts", pa.int64()),
    ("ids", pa.list_(pa.int64())), ("ingress_ts", pa.int64()),
])


#: How long a FIFO with no writer is waited for before it reads as empty.
FIFO_WAIT_S = 2.0


def open_stream(path: Path) -> io.BufferedReader | io.BytesIO:
    """Open a file to read whatever it is, without hanging: a FIFO is opened without
    waiting for a writer (O_NONBLOCK, then cleared for the reads), and one that has no
    writer and no data within :data:`FIFO_WAIT_S` reads as empty. A FIFO whose writer
    is there (``<(zcat in.jsonl.gz)``) is read to its end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            poll = select.poll()
            poll.register(fd, select.POLLIN)
            if not poll.poll(FIFO_WAIT_S * 1000):
                os.close(fd)
                return io.BytesIO(b"")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _iter_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Yield chunks of whole lines, each about ``block_bytes`` long."""
    with open_stream(path) as fh:
        rest = b""
        first = True
        while True:
            data = fh.read(block_bytes)
            end = not data
            if first:  # a byte-order mark (Windows tools) is not part of the first record
                data = data.removeprefix(UTF8_BOM)
                first = False
            if end:
                if rest.strip(JSON_SPACE):  # same blank rule as every other line
                    yield rest
                return
            data = rest + data
            cut = data.rfind(b"\n")
            if cut < 0:
                rest = data
                continue
            yield data[: cut + 1]
            rest = data[cut + 1:]


def _object_lines(block: bytes) -> int | None:
    """Number of non-blank lines if each one can only be a single JSON object, else None.

    A line (split on ``\n`` only) qualifies when, without JSON whitespace around it, it
    starts with ``{`` and ends with ``}``: no top-level ``null`` (which crashes pyarrow 26
    at the start of its internal chunks) and no object continued on the next line
    (after a ``}``, a ``{`` cannot continue a value). Several objects on one line are
    caught afterwards by the row count. Vectorised over the block's newline positions.
    """
    data = np.frombuffer(block, dtype=np.uint8)
    nl = np.flatnonzero(data == 0x0A)
    starts = np.r_[0, nl + 1]
    ends = np.r_[nl, len(data)]
    lines = np.flatnonzero(starts < ends)
    # Usually every line is exactly {...}; only the others are trimmed and looked at again.
    odd = lines[(data[starts[lines]] != 0x7B) | (data[ends[lines] - 1] != 0x7D)]
    if len(odd) == 0:
        return len(lines)
    starts, ends = starts[odd], ends[odd]
    for bound, step, peek in ((starts, 1, 0), (ends, -1, -1)):  # trim blanks, both sides
        idx = np.arange(len(odd))
        for _ in range(_MAX_TRIM):
            idx = idx[starts[idx] < ends[idx]]
            idx = idx[np.isin(data[bound[idx] + peek], _SPACE_CODES)]
            if len(idx) == 0:
                break
            bound[idx] += step
        else:
            return None
    live = starts < ends
    if not ((data[starts[live]] == 0x7B).all() and (data[ends[live] - 1] == 0x7D).all()):
        return None
    return len(lines) - int((~live).sum())


def _is_utf8(block: bytes) -> bool:
    if block.isascii():  # the common case, at memory speed
        return True
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _read_exact(block: bytes, schema: pa.Schema, behaviours: Sequence[str],
                lines: int | None = None, block_size: int = 16 << 20) -> pa.Table | None:
    """pyarrow's table of ``block`` with one row per non-blank line, or None.

    None means the exact per-line path must decide: a line that is not one object, a
    block pyarrow rejects, invalid UTF-8 (pyarrow lets it through inside strings), or a
    row count that differs from the line count (pyarrow reads ``{..} {..}`` as two).
    ``lines``: the caller already knows that every line can only be one object and how
    many there are (what :func:`_object_lines` would say).
    """
    if lines is None:
        lines = _object_lines(block)
    if lines is None or not _is_utf8(block):
        return None
    if lines == 0:
        return schema.empty_table()
    read_opts = pajson.ReadOptions(block_size=block_size)
    for behaviour in behaviours:
        opts = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior=behaviour,
                                   newlines_in_values=False)
        try:
            table = pajson.read_json(io.BytesIO(block), parse_options=opts,
                                     read_options=read_opts)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            continue
        return table if len(table) == lines else None
    return None


def _split_lines(block: bytes) -> list[bytes]:
    """Lines of a block, separated by ``\n`` only (``splitlines`` would also cut at ``\r``)."""
    lines = block.split(b"\n")
    return lines[:-1] if lines and lines[-1] == b"" else lines


def _parse_block(block: bytes, schema: pa.Schema
                 ) -> tuple[pa.Table, int, list[str], np.ndarray, int, Defect | None]:
    """Parse one block of JSON lines; fall back to per-line parsing if pyarrow cannot.

    Returns (table, malformed, samples, each row's record number in the block, records, the
    first bad record's defect): a record is a non-blank line. The strict attempt (unknown
    fields are an error) is ~15 % faster than ignoring them; a block with extra fields pays
    for a second, lenient attempt, still in C++.
    """
    table = _read_exact(block, schema, ("error", "ignore"))
    if table is not None:
        return table, 0, [], np.arange(len(table), dtype=np.int64), len(table), None
    lines = [line for line in _split_lines(block) if line.strip(JSON_SPACE)]
    table, malformed, samples, kept, first = _parse_lines_tolerant(lines, schema)
    return table, malformed, samples, kept, len(lines), first


def _is_int64(value: object) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            and INT64_MIN <= value <= INT64_MAX)


#: Finer clocks a time may be in by mistake, and how many of their ticks make a millisecond.
OTHER_UNITS = (("microseconds", 1_000), ("nanoseconds", 1_000_000))
#: Fields that hold epoch milliseconds (said so when one holds something else).
TIME_FIELDS = ("event_ts", "ingress_ts", "window_start", "window_end")


def _show(value: object) -> str:
    """A value as JSON, short enough for a sentence (NaN and lone surrogates included)."""
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _wanted(name: str, typ: pa.DataType) -> str:
    if pa.types.is_int64(typ):
        return "epoch milliseconds (an integer)" if name in TIME_FIELDS else "a 64-bit integer"
    if pa.types.is_string(typ):
        return "a string of UTF-8 text"
    return "a list of 64-bit integers"


def _coerce(value: object, typ: pa.DataType) -> object:
    """Return the value if it fits the column type, else raise ValueError.

    Integers outside int64 are refused here (pyarrow refuses them too), not left to
    overflow when the column is built.
    """
    if value is None:
        return None
    if pa.types.is_int64(typ):
        if not _is_int64(value):
            raise ValueError("not a 64-bit integer")
        return value
    if pa.types.is_string(typ):
        if not isinstance(value, str):
            raise ValueError("not a string")
        if not value.isascii():
            value.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError (a ValueError)
        return value
    if pa.types.is_list(typ):
        if not isinstance(value, list) or not all(_is_int64(v) for v in value):
            raise ValueError("not a list of 64-bit integers")
        return value
    raise ValueError(f"unsupported type {typ}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _loads(line: bytes) -> object:
    """orjson, plus the NaN/Infinity literals pyarrow accepts (in fields pgval ignores).

    Without the retry a line carrying ``"x": NaN`` would be fine in a block pyarrow reads
    and malformed in a block read line by line.
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        if b"NaN" not in line and b"Infinity" not in line:
            raise
    return json.loads(line, parse_float=_finite)


def _row(line: bytes, schema: pa.Schema) -> dict[str, object]:
    """One line's values by column; ValueError (or Overflow/RecursionError) if it is bad.

    A line the Python parsers refuse gets pyarrow's verdict on that line alone: what it
    gets in a block of its own. pyarrow reads things Python does not (nesting deeper than
    orjson's 1024 levels, ``-NaN`` in an ignored field), and a record must not be lost
    because a bad neighbour sent its block here. Only refused lines pay for this.
    """
    try:
        obj = _loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        table = _read_exact(line + b"\n", schema, ("error", "ignore"))
        if table is None or len(table) != 1:
            raise
        return table.to_pylist()[0]
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    return {f.name: _coerce(obj.get(f.name), f.type) for f in schema}


def _lenient(line: bytes) -> object:
    """The line's value as leniently as Python reads JSON (lone surrogates, NaN), or None:
    only to say which field of a refused line is at fault."""
    for load in (_loads, json.loads):
        try:
            return load(line)
        except (ValueError, RecursionError):
            continue
    return None


def _line_defect(k: int, line: bytes, schema: pa.Schema) -> Defect:
    """What is wrong with a line the exact path refused (``k``: its record number): the
    first field that does not fit its column, else why the line is no object."""
    obj = _lenient(line)
    if isinstance(obj, dict):
        for f in schema:
            value = obj.get(f.name)
            try:
                _coerce(value, f.type)
            except ValueError:
                return Defect(k, f.name, f"has {f.name!r}: {_show(value)}, not "
                                         f"{_wanted(f.name, f.type)}")
    text = line.strip(JSON_SPACE)
    if obj is None and text.startswith(b"{") and not text.endswith(b"}"):
        return Defect(k, None, "is cut short (not a whole JSON object)")
    if not _is_utf8(text):
        return Defect(k, None, "is not UTF-8 text")
    return Defect(k, None, "is not one JSON object")


def _parse_lines_tolerant(lines: Iterable[bytes], schema: pa.Schema
                          ) -> tuple[pa.Table, int, list[str], np.ndarray, Defect | None]:
    """Slow path, used only for blocks with bad lines: keep the good ones, count the rest.

    Returns (table, malformed, samples, the index among ``lines`` of each row kept, and the
    first bad line's defect, numbered by its index among ``lines``)."""
    columns: dict[str, list[object]] = {name: [] for name in schema.names}
    malformed = 0
    samples: list[str] = []
    kept: list[int] = []
    first: Defect | None = None
    for k, line in enumerate(lines):
        if not line.strip(JSON_SPACE):
            continue
        try:
            row = _row(line, schema)
        except (ValueError, OverflowError, RecursionError):  # JSONDecodeError, Unicode*Error
            malformed += 1
            if first is None:
                first = _line_defect(k, line, schema)
            if len(samples) < 5:
                samples.append(line[:200].decode(errors="replace"))
            continue
        kept.append(k)
        for name, value in row.items():
            columns[name].append(value)
    table = pa.table({f.name: pa.array(columns[f.name], type=f.type) for f in schema},
                     schema=schema)
    return table, malformed, samples, np.array(kept, dtype=np.int64), first


def read_table(path: Path, schema: pa.Schema
               ) -> tuple[pa.Table, int, list[str], np.ndarray, Defect | None]:
    """Read a JSON-lines file into an Arrow table; returns (table, malformed, samples,
    record numbers, first defect): each row's place among the file's records (its
    non-blank lines, from 0), so a judged output can be found in the file, and the first
    record the parser refused."""
    tables: list[pa.Table] = []
    records: list[np.ndarray] = []
    malformed = 0
    samples: list[str] = []
    first: Defect | None = None
    base = 0
    for block in _iter_blocks(Path(path)):
        table, bad, bad_samples, kept, lines, defect = _parse_block(block, schema)
        tables.append(table)
        records.append(base + kept)
        if first is None and defect is not None:
            first = replace(defect, record=base + defect.record)
        base += lines
        malformed += bad
        samples.extend(bad_samples[: 5 - len(samples)])
    if not tables:
        return schema.empty_table(), 0, [], np.zeros(0, dtype=np.int64), None
    return pa.concat_tables(tables), malformed, samples, np.concatenate(records), first


def line_of_record(path: Path, record: int, block_bytes: int = BLOCK_BYTES) -> int | None:
    """The line (from 1) of a file on which its record number ``record`` stands (records
    are its non-blank lines, from 0), or None past its end: what a sentence about a bad
    record names. One vectorised pass over the blocks, only when a record is named."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a pipe cannot be read twice
            return None
    except OSError:
        return None
    lines_before = records_before = 0
    for block in _iter_blocks(Path(path), block_bytes):
        data = np.frombuffer(block, dtype=np.uint8)
        nl = np.flatnonzero(data == 0x0A)
        n = len(nl) + (not block.endswith(b"\n"))
        starts, ends = np.r_[0, nl + 1][:n], np.r_[nl, len(data)][:n]
        filled = ends > starts
        spaced = np.flatnonzero(filled)
        spaced = spaced[np.isin(data[starts[spaced]], _SPACE_CODES)]
        for i in spaced.tolist():  # only lines that start with a blank are looked at
            filled[i] = bool(block[starts[i]:ends[i]].strip(JSON_SPACE))
        at = np.flatnonzero(filled)
        if record - records_before < len(at):
            return lines_before + int(at[record - records_before]) + 1
        records_before += len(at)
        lines_before += n
    return None


KAFKA_INPUT_SCHEMA = pa.schema([f for f in INPUT_SCHEMA if f.name != "ingress_ts"])
KAFKA_OUTPUT_SCHEMA = pa.schema([f for f in OUTPUT_SCHEMA if f.name != "ingress_ts"])


#: Kafka values are parsed in blocks of about this many bytes, each cut by pyarrow into
#: pieces of VALUE_PIECE_BYTES that its threads parse in parallel.
VALUE_BLOCK_BYTES = 32 << 20
VALUE_PIECE_BYTES = 4 << 20
_EMPTY = pa.scalar(b"", type=pa.binary())
_NEWLINE = pa.scalar(b"\n", type=pa.binary())
Values = Sequence[bytes | None] | pa.Array | pa.ChunkedArray


def binary_chunks(values: Values) -> list[pa.BinaryArray]:
    """Kafka keys or values as Arrow binary arrays (a list of bytes is converted once)."""
    if isinstance(values, pa.ChunkedArray):
        chunks = list(values.chunks)
    elif isinstance(values, pa.Array):
        chunks = [values]
    else:
        chunks = [pa.array(list(values), type=pa.binary())]
    return [c if c.type == pa.binary() else c.cast(pa.binary()) for c in chunks]


def _usable(arr: pa.BinaryArray) -> np.ndarray:
    """Values that can be one line of a block: present, without a newline, not blank.

    Vectorised; only values that start with JSON whitespace (never pgval's own) are looked
    at one by one.
    """
    ok = arr.is_valid().to_numpy(zero_copy_only=False).astype(bool)
    if not len(arr):
        return ok
    data, offs = value_bytes(arr)
    starts, ends = offs[:-1], offs[1:]
    ok &= ends > starts
    newlines = np.flatnonzero(data[offs[0]:offs[-1]] == 0x0A) + offs[0]
    if len(newlines):
        ok[np.searchsorted(offs, newlines, side="right") - 1] = False
    spaced = np.flatnonzero(ok)
    spaced = spaced[np.isin(data[starts[spaced]], _SPACE_CODES)]
    for i in spaced.tolist():
        if not arr[i].as_py().strip(JSON_SPACE):
            ok[i] = False
    return ok


def _parse_value_block(good: pa.BinaryArray, schema: pa.Schema
                       ) -> tuple[pa.Table, np.ndarray, int, list[str]]:
    """Usable values, one JSON object each: pyarrow reads them as one newline-joined block;
    if it refuses, every value is judged alone (so a value's fate never depends on its
    neighbours). Returns (table, parsed mask, malformed, samples)."""
    joined = pc.binary_join_element_wise(good, _EMPTY, _NEWLINE)  # value + "\n", in C++
    data, offs = value_bytes(joined)
    block = data[offs[0]:offs[-1]].tobytes()
    # Each usable value is exactly one non-blank line; it can only be one object when it
    # starts with { and ends with } (else _object_lines trims blanks and decides).
    first, last = data[offs[:-1]], data[offs[1:] - 2]
    lines = len(good) if ((first == 0x7B) & (last == 0x7D)).all() else None
    table = _read_exact(block, schema, ("ignore",), lines=lines, block_size=VALUE_PIECE_BYTES)
    if table is not None:
        return table, np.ones(len(good), dtype=bool), 0, []
    return _parse_lines_with_mask(good.to_pylist(), schema)


def parse_values(values: Values, schema: pa.Schema
                 ) -> tuple[pa.Table, np.ndarray, int, list[str]]:
    """Parse Kafka record values (one JSON object each), in blocks, with pyarrow.

    Returns (table, kept, malformed, samples): ``kept`` are the indices of the values
    that became rows, so per-record metadata (timestamps, offsets) can be aligned.
    ``values`` is an Arrow binary column (as :func:`pgval.kafka.reader.read_topic`
    returns it) or a sequence of bytes.
    """
    tables: list[pa.Table] = []
    kept: list[np.ndarray] = []
    malformed = 0
    samples: list[str] = []
    pending: list[tuple[pa.BinaryArray, np.ndarray]] = []
    pending_bytes = 0

    def parse_pending() -> None:
        nonlocal malformed, pending_bytes
        if not pending:
            return
        good = pa.concat_arrays([g for g, _ in pending]) if len(pending) > 1 else pending[0][0]
        index = np.concatenate([i for _, i in pending])
        table, ok, bad, bad_samples = _parse_value_block(good, schema)
        tables.append(table)
        kept.append(index[ok])
        malformed += bad
        samples.extend(bad_samples[: 5 - len(samples)])
        pending.clear()
        pending_bytes = 0

    base = 0
    for chunk in binary_chunks(values):
        ok = _usable(chunk)
        index = base + np.flatnonzero(ok)
        base += len(chunk)
        malformed += len(chunk) - len(index)
        if len(index):
            good = chunk if len(index) == len(chunk) else chunk.filter(pa.array(ok))
            pending.append((good, index))
            pending_bytes += good.nbytes
            if pending_bytes >= VALUE_BLOCK_BYTES:
                parse_pending()
    parse_pending()
    if not tables:
        return schema.empty_table(), np.zeros(0, dtype=np.int64), malformed, samples
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return table, np.concatenate(kept), malformed, samples


def _parse_lines_with_mask(lines: Sequence[bytes], schema: pa.Schema
                           ) -> tuple[pa.Table, np.ndarray, int, list[str]]:
    ok = np.zeros(len(lines), dtype=bool)
    good: list[bytes] = []
    for k, line in enumerate(lines):
        table, bad, _, _, _ = _parse_lines_tolerant([line], schema)
        if not bad and len(table):
            ok[k] = True
            good.append(line)
    table, _, _, _, _ = _parse_lines_tolerant(good, schema)
    samples = [lines[k][:200].decode(errors="replace") for k in np.flatnonzero(~ok)[:5]]
    return table, ok, int((~ok).sum()), samples


@dataclass
class KafkaInputColumns:
    """One input topic's records as read from Kafka: the values, the broker's timestamps
    (the ingress time), where each record sits, the topic's code in the events (0 get,
    1 post) and each chunk's :func:`decode_chunk`, done already during the read (or None)."""

    values: Values
    timestamps: np.ndarray
    partitions: np.ndarray | None = None
    offsets: np.ndarray | None = None
    topic_code: int = 0
    decoded: Sequence[object] | None = None


@dataclass
class _TopicInputs:
    """One topic's records: those in pgval's own layout decoded chunk by chunk (positions
    within their chunk, the chunk's first record at ``bases[k]``), the rest parsed
    (``parsed``, at record positions ``parsed_at``), and the per-record columns."""

    notes: list[OwnInputs]
    bases: list[int]
    parsed: InputEvents
    parsed_at: np.ndarray
    timestamps: np.ndarray
    partitions: np.ndarray | None
    offsets: np.ndarray | None
    code: int


def _own_notes(chunks: Sequence[pa.BinaryArray], timestamps: np.ndarray,
               decoded: Sequence[object] | None) -> tuple[list[OwnInputs], list[int]]:
    """Each chunk's records in pgval's own layout, decoded, and each chunk's first record
    position; a record whose ingress time is out of range is left to the parser, which says
    why it is malformed. ``decoded``: :func:`decode_chunk` of each chunk, done already
    (while the read went on); used only where it covers every chunk, record for record."""
    done = _predecoded(chunks, decoded)
    notes, bases, base = [], [], 0
    for k, chunk in enumerate(chunks):
        own = done[k] if done is not None else decode_chunk(chunk)
        ingress = timestamps[own.index + base]
        late = (ingress < -MAX_MS) | (ingress > MAX_MS)
        if late.any():
            keep = ~late
            own = OwnInputs(own.index[keep], own.id[keep], own.is_get[keep],
                            own.resource_number[keep], own.event_ts[keep],
                            np.sort(np.concatenate([own.rest, own.index[late]])))
        notes.append(own)
        bases.append(base)
        base += len(chunk)
    return notes, bases


def _predecoded(chunks: Sequence[pa.BinaryArray], decoded: Sequence[object] | None
                ) -> list[OwnInputs] | None:
    """``decoded`` if it is one :class:`OwnInputs` per chunk, each accounting for every
    record of its chunk once; else None (the chunks are decoded again)."""
    if decoded is None or len(decoded) != len(chunks):
        return None
    done = [d for d in decoded if isinstance(d, OwnInputs)]
    if len(done) != len(chunks) or any(
            len(d.index) + len(d.rest) != len(c) for d, c in zip(done, chunks, strict=True)):
        return None
    return done


def _present_numbers(notes: Sequence[OwnInputs]) -> list[int]:
    """The resource numbers the decoded records name, ascending."""
    counts = np.zeros(1, dtype=np.int64)
    for own in notes:
        if len(own.resource_number):
            here = np.bincount(own.resource_number)
            if len(here) > len(counts):
                here[:len(counts)] += counts
                counts = here
            else:
                counts[:len(here)] += here
    return np.flatnonzero(counts).tolist() if counts.any() else []


def _resource_lookup(numbers: Sequence[int], resources: ResourceTable) -> np.ndarray:
    """Codes of the resources ``r0000``…``r9999`` by number, -1 where none is named
    (every name already in ``resources``: :func:`_register_new_names`)."""
    lookup = np.full(max(numbers, default=0) + 1, -1, dtype=np.int32)
    for k in numbers:
        lookup[k] = resources.codes[f"r{k:04d}"]
    return lookup


def _first_unknown(names: pa.Array, at: np.ndarray, resources: ResourceTable
                   ) -> dict[str, int]:
    """Each name of ``names`` (at record positions ``at``) not in ``resources``: the
    position where it first appears."""
    if not len(names):
        return {}
    known = pa.array(resources.names, pa.string())
    unknown = np.flatnonzero(pc.is_null(pc.index_in(names, value_set=known))
                             .to_numpy(zero_copy_only=False))
    if not len(unknown):
        return {}
    encoded = pc.dictionary_encode(names.take(pa.array(unknown)))
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    _, first = np.unique(codes, return_index=True)
    return {encoded.dictionary[int(codes[i])].as_py(): int(at[unknown[i]]) for i in first}


def _register_new_names(notes: Sequence[OwnInputs], bases: Sequence[int],
                        parsed_names: pa.Array, parsed_at: np.ndarray,
                        resources: ResourceTable) -> None:
    """Give the names ``resources`` does not know their codes in order of first appearance
    over all the records of a topic, decoded or parsed, as the parser alone would number
    them."""
    fresh = [k for k in _present_numbers(notes) if f"r{k:04d}" not in resources.codes]
    seen: dict[str, int] = {}
    for own, base in zip(notes, bases, strict=True) if fresh else ():
        sel = np.flatnonzero(np.isin(own.resource_number, fresh))
        numbers, first = np.unique(own.resource_number[sel], return_index=True)
        for k, i in zip(numbers.tolist(), first.tolist(), strict=True):
            seen.setdefault(f"r{k:04d}", int(own.index[sel[i]]) + base)
    for name, at in _first_unknown(parsed_names, parsed_at, resources).items():
        seen[name] = min(at, seen.get(name, at))
    for name in sorted(seen, key=seen.__getitem__):
        resources.code(name)


def _in_order(first: InputEvents, first_at: np.ndarray, second: InputEvents,
              second_at: np.ndarray) -> InputEvents:
    """Two sets of events from one list of records (``*_at``: their record positions,
    ascending) as one, in record order."""
    both = InputEvents.concat([first, second], first.resources)
    if not len(second) or not len(first):
        return both  # one part: its columns as they are
    at = np.searchsorted(first_at, second_at) + np.arange(len(second_at))
    placed = np.zeros(len(both), dtype=bool)
    placed[at] = True
    order = np.empty(len(both), dtype=np.int64)
    order[at] = np.arange(len(first), len(both))
    order[~placed] = np.arange(len(first))
    return both.take(order)


def _topic_inputs(topic: KafkaInputColumns, resources: ResourceTable) -> _TopicInputs:
    """One topic's records decoded or parsed, the names they bring registered."""
    timestamps = np.asarray(topic.timestamps, dtype=np.int64)
    chunks = binary_chunks(topic.values)
    notes, bases = _own_notes(chunks, timestamps, topic.decoded)
    where = topic.partitions is not None and topic.offsets is not None
    rest = (np.concatenate([own.rest + base for own, base in zip(notes, bases, strict=True)])
            if notes else np.zeros(0, dtype=np.int64))
    table, kept, malformed, _ = parse_values(_values_at(chunks, rest), KAFKA_INPUT_SCHEMA)
    at = rest[kept]
    table = table.append_column("ingress_ts", pa.array(timestamps[at], type=pa.int64()))
    if where:
        for name, column in (("_partition", topic.partitions), ("_offset", topic.offsets)):
            table = table.append_column(name, pa.array(np.asarray(column)[at], pa.int64()))
        table = table.append_column("_topic", pa.array(np.full(len(at), topic.topic_code),
                                                       type=pa.int64()))
    ok, _, _ = _judged_rows(table, at, None)
    _register_new_names(notes, bases,
                        table.column("resource").combine_chunks().filter(pa.array(ok)),
                        at[ok], resources)
    parsed, ok = _inputs_kept(table, resources, malformed, at, None)
    return _TopicInputs(
        notes, bases, parsed, at[ok], timestamps,
        np.asarray(topic.partitions) if where else None,  # any integer type: no copy
        np.asarray(topic.offsets) if where else None, topic.topic_code)


def _decoded_events(topics: Sequence[_TopicInputs], resources: ResourceTable,
                    control: Callable[[np.ndarray], np.ndarray] | None
                    ) -> tuple[InputEvents, int]:
    """The decoded records of ``topics``, in topic then record order, written once into
    columns of their final size (no per-topic copy to concatenate; on a guest whose fresh
    memory is dear, docs/performance.md, that is most of the cost), those ``control``
    names set aside: (events, how many were set aside)."""
    lookup = _resource_lookup(_present_numbers([o for t in topics for o in t.notes]), resources)
    keeps = [[None if control is None else _kept(control(own.id)) for own in t.notes]
             for t in topics]
    sizes = [[len(o.index) if k is None else int(k.sum()) for o, k in zip(t.notes, ks,
                                                                           strict=True)]
             for t, ks in zip(topics, keeps, strict=True)]
    total = sum(map(sum, sizes))
    where = all(t.partitions is not None for t in topics)
    cols = {name: np.empty(total, dtype=kind) for name, kind in _EVENT_COLUMNS
            if where or name not in ("topic", "partition", "offset")}
    at = 0
    for t, ks, ns in zip(topics, keeps, sizes, strict=True):
        for own, base, keep, m in zip(t.notes, t.bases, ks, ns, strict=True):
            _fill_events(cols, slice(at, at + m), own, base, keep, t, lookup)
            at += m
    decoded = sum(len(o.index) for t in topics for o in t.notes)
    return InputEvents(cols["id"], cols["is_get"], cols["resource"], cols["event_ts"],
                       cols["ingress_ts"], resources, topic=cols.get("topic"),
                       partition=cols.get("partition"), offset=cols.get("offset")
                       ), decoded - total


#: The columns of :class:`InputEvents` read from Kafka, and their types.
_EVENT_COLUMNS = (("id", np.int64), ("is_get", bool), ("resource", np.int32),
                  ("event_ts", np.int64), ("ingress_ts", np.int64), ("topic", np.int64),
                  ("partition", np.int64), ("offset", np.int64))


def _kept(control: np.ndarray) -> np.ndarray | None:
    """The records to keep given which are control records (None: all of them)."""
    return ~control if control.any() else None


def _fill_events(cols: dict[str, np.ndarray], into: slice, own: OwnInputs, base: int,
                 keep: np.ndarray | None, topic: _TopicInputs, lookup: np.ndarray) -> None:
    """Write one chunk's decoded records (``keep`` of them) into ``cols[into]``."""
    def kept(a: np.ndarray) -> np.ndarray:
        return a if keep is None else a[keep]

    at = kept(own.index) + base
    cols["id"][into] = kept(own.id)
    cols["is_get"][into] = kept(own.is_get)
    np.take(lookup, kept(own.resource_number), out=cols["resource"][into])
    cols["event_ts"][into] = kept(own.event_ts)
    np.take(topic.timestamps, at, out=cols["ingress_ts"][into])
    if "topic" in cols and topic.partitions is not None and topic.offsets is not None:
        cols["topic"][into] = topic.code
        cols["partition"][into] = topic.partitions[at]
        cols["offset"][into] = topic.offsets[at]


def inputs_from_topics(topics: Sequence[KafkaInputColumns], resources: ResourceTable,
                       control: Callable[[np.ndarray], np.ndarray] | None = None
                       ) -> tuple[InputEvents, int]:
    """Input events from the input topics' Kafka values, in topic then record order;
    ingress time = the record timestamp (LogAppendTime). ``control`` marks the IDs pgval
    wrote itself, set aside: (events, how many were set aside).

    Records in pgval's own layout are decoded with numpy (:mod:`pgval.records.own_inputs`,
    ~4× faster) straight into the events' columns; the rest are parsed as JSON. Where a
    topic holds parsed records, its events are put in record order and the topics joined
    (a copy: a job's own data, not pgval's).
    """
    if not topics:
        return InputEvents.concat([], resources), 0
    parts = [_topic_inputs(t, resources) for t in topics]  # names registered in topic order
    malformed = sum(p.parsed.malformed for p in parts)
    missing = add_counts(p.parsed.missing for p in parts)
    defect = next((p.parsed.defect for p in parts if p.parsed.defect is not None), None)
    if all(not len(p.parsed) for p in parts):
        events, dropped = _decoded_events(parts, resources, control)
        return replace(events, malformed=malformed, missing=missing, defect=defect), dropped
    whole, dropped = [], 0
    for p in parts:
        decoded, _ = _decoded_events([p], resources, None)
        own_at = (np.concatenate([o.index + b for o, b in zip(p.notes, p.bases, strict=True)])
                  if p.notes else np.zeros(0, dtype=np.int64))
        events = _in_order(decoded, own_at, p.parsed, p.parsed_at)
        mine = control(events.id) if control is not None else np.zeros(len(events), bool)
        dropped += int(mine.sum())
        whole.append(events.take(np.flatnonzero(~mine)) if mine.any() else events)
    return InputEvents.concat(whole, resources), dropped


def inputs_from_kafka(values: Values, timestamps: np.ndarray,
                      resources: ResourceTable, partitions: np.ndarray | None = None,
                      offsets: np.ndarray | None = None, topic_code: int = 0,
                      decoded: Sequence[object] | None = None) -> InputEvents:
    """Input events from one topic's Kafka values (:func:`inputs_from_topics`), in record
    order. ``decoded``: each chunk of ``values`` already decoded by
    :func:`~pgval.records.own_inputs.decode_chunk` (during the read-back).
    """
    events, _ = inputs_from_topics(
        [KafkaInputColumns(values, timestamps, partitions, offsets, topic_code, decoded)],
        resources)
    return events


def _values_at(chunks: Sequence[pa.BinaryArray], index: np.ndarray) -> pa.ChunkedArray:
    """The values at positions ``index`` (ascending) of the chunks taken as one list."""
    taken, base = [], 0
    bounds = np.searchsorted(index, np.cumsum([len(c) for c in chunks]))
    lo = 0
    for chunk, hi in zip(chunks, bounds.tolist(), strict=True):
        if hi > lo:
            taken.append(chunk.take(pa.array(index[lo:hi] - base)))
        base += len(chunk)
        lo = hi
    return pa.chunked_array(taken, type=pa.binary())


def outputs_from_kafka(values: Values, timestamps: np.ndarray,
                       partitions: np.ndarray, offsets: np.ndarray, resources: ResourceTable
                       ) -> OutputRecords:
    """Output records from Kafka; stream position = order of (timestamp, partition, offset)."""
    timestamps = np.asarray(timestamps, dtype=np.int64)
    order = np.lexsort((np.asarray(offsets), np.asarray(partitions), timestamps))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    table, kept, malformed, samples = parse_values(values, KAFKA_OUTPUT_SCHEMA)
    table = table.append_column("ingress_ts", pa.array(timestamps[kept], type=pa.int64()))
    return outputs_from_table(table, resources, malformed, samples, position=position[kept],
                              partition=np.asarray(partitions)[kept],
                              offset=np.asarray(offsets)[kept])


#: The field of a user's job's output value that holds its canonical key text
#: (``to_json`` of the key columns: :mod:`pgval.topologies.batch`).
JOB_KEY = "_pgval_key"
#: The field of a job's Kafka output that holds its value columns as JSON text (all its
#: columns but ``ids``), which the batch oracle's rows hold too: values are compared.
JOB_VALUE = "_pgval_value"
KAFKA_JOB_OUTPUT_SCHEMA = pa.schema([(JOB_KEY, pa.string()), ("ids", pa.list_(pa.int64()))])


def job_outputs_from_kafka(values: Values, timestamps: np.ndarray, partitions: np.ndarray,
                           offsets: np.ndarray, keys: ResourceTable) -> OutputRecords:
    """A user's job's outputs from Kafka: each value's key text (coded with ``keys``, the
    table the batch oracle's rows were coded with) and ``ids``; every other column is the
    job's own and not read. ``window_start`` is 0, as in the job's expected outputs."""
    timestamps = np.asarray(timestamps, dtype=np.int64)
    order = np.lexsort((np.asarray(offsets), np.asarray(partitions), timestamps))
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    table, kept, malformed, samples = parse_values(values, KAFKA_JOB_OUTPUT_SCHEMA)
    n = len(table)
    table = pa.table({
        "window_start": pa.array(np.zeros(n, dtype=np.int64)),
        "window_end": pa.nulls(n, pa.int64()), "resource": table.column(JOB_KEY),
        "count": pa.nulls(n, pa.int64()), "gets": pa.nulls(n, pa.int64()),
        "posts": pa.nulls(n, pa.int64()), "ids": table.column("ids"),
        "ingress_ts": pa.array(timestamps[kept], type=pa.int64())})
    return outputs_from_table(table, keys, malformed, samples, position=position[kept],
                              partition=np.asarray(partitions)[kept],
                              offset=np.asarray(offsets)[kept])


def job_outputs_from_rows(rows: pa.Table, keys: ResourceTable) -> OutputRecords:
    """A user's job's outputs from a sink other than Kafka: rows of ``key`` (the key text),
    ``ids``, ``written_ms`` (the sink's clock: the output's ingress) and ``batch``; stream
    position = order of (written_ms, batch, row); ``partition`` holds the batch (-1: none),
    ``offset`` the row's index in what was read."""
    n = rows.num_rows
    written = rows.column("written_ms").to_numpy(zero_copy_only=False).astype(np.int64)
    batch = (rows.column("batch").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
             if "batch" in rows.column_names else np.full(n, -1, dtype=np.int64))
    index = np.arange(n, dtype=np.int64)
    order = np.lexsort((index, batch, written))
    position = np.empty(n, dtype=np.int64)
    position[order] = index
    table = pa.table({
        "window_start": pa.array(np.zeros(n, dtype=np.int64)),
        "window_end": pa.nulls(n, pa.int64()), "resource": rows.column("key"),
        "count": pa.nulls(n, pa.int64()), "gets": pa.nulls(n, pa.int64()),
        "posts": pa.nulls(n, pa.int64()), "ids": rows.column("ids"),
        "ingress_ts": pa.array(written, type=pa.int64())})
    return outputs_from_table(table, keys, position=position, partition=batch, offset=index)


def _is_time(table: pa.Table, name: str) -> pa.ChunkedArray:
    """True where the column holds a time within ±MAX_MS (year 9999 either side of 1970).

    Farther "times" are typos; near the int64 limits they would overflow the oracle's
    window arithmetic and the metrics' differences (silently, or with an OverflowError).
    """
    col = table.column(name)
    return pc.and_(pc.greater_equal(col, -MAX_MS), pc.less_equal(col, MAX_MS))


#: The fields without which a record cannot be judged (a record lacking one is malformed).
INPUT_REQUIRED = ("id", "type", "resource", "event_ts", "ingress_ts")
OUTPUT_REQUIRED = ("window_start", "resource", "ids", "ingress_ts")


def _missing(table: pa.Table, names: Sequence[str]) -> dict[str, int]:
    """Records lacking each field (absent or null), for the fields some record lacks."""
    counts = {name: table.column(name).null_count for name in names}
    return {name: n for name, n in counts.items() if n}


def _int_column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).combine_chunks().fill_null(-1).to_numpy(zero_copy_only=False)


def _table_defect(table: pa.Table, ok: np.ndarray, records: np.ndarray | None,
                  required: Sequence[str]) -> Defect | None:
    """The first row that ``ok`` refuses, said field by field (its record number from
    ``records``, else its row number); a Python look at that one row only."""
    bad = np.flatnonzero(~ok)
    if len(bad) == 0:
        return None
    k = int(bad[0])
    row = table.slice(k, 1).to_pylist()[0]
    record = int(records[k]) if records is not None else k
    for name in required:
        if row.get(name) is None:
            return Defect(record, name, f"lacks the field {name!r}")
    if "type" in row and row["type"] not in (GET, POST):
        return Defect(record, "type", f"has 'type': {_show(row['type'])}, not "
                                      f'"{GET}" or "{POST}"')
    for name in ("event_ts", "ingress_ts"):
        value = row.get(name)
        if isinstance(value, int) and not -MAX_MS <= value <= MAX_MS:
            unit = next((f" (it looks like {unit})" for unit, per_ms in OTHER_UNITS
                         if abs(value) // per_ms <= MAX_MS), "")
            return Defect(record, name, f"has {name!r}: {value}, beyond the year 9999 in "
                                        f"epoch milliseconds{unit}")
    if None in (row.get("ids") or []):
        return Defect(record, "ids", f"has 'ids': {_show(row['ids'])}, not a list of 64-bit "
                                     "integers")
    return Defect(record, None, "is malformed")


def _judged_rows(table: pa.Table, records: np.ndarray | None, defect: Defect | None
                 ) -> tuple[np.ndarray, int, Defect | None]:
    """(mask of the rows that can be judged, how many cannot, the first defect): rows
    missing a field, with a bad type or with a time beyond ±MAX_MS cannot."""
    t = table.column("type").combine_chunks()
    ok = pc.and_(
        pc.and_(pc.is_valid(table.column("id")), pc.is_valid(table.column("resource"))),
        pc.and_(pc.and_(_is_time(table, "event_ts"), _is_time(table, "ingress_ts")),
                pc.is_in(t, value_set=pa.array([GET, POST]))),
    )
    ok_np = pc.fill_null(ok, False).to_numpy(zero_copy_only=False).astype(bool)
    bad = len(table) - int(ok_np.sum())
    if bad:
        defect = first_defect(defect, _table_defect(table, ok_np, records, INPUT_REQUIRED))
    return ok_np, bad, defect


def inputs_from_table(table: pa.Table, resources: ResourceTable, malformed: int = 0,
                      records: np.ndarray | None = None, defect: Defect | None = None
                      ) -> InputEvents:
    """Validate and convert an input table; rows missing a field, with a bad type or with a
    time beyond ±MAX_MS are dropped (counted malformed). ``records``: each row's record
    number, ``defect``: the first record the parser refused, for :attr:`InputEvents.defect`."""
    return _inputs_kept(table, resources, malformed, records, defect)[0]


def _inputs_kept(table: pa.Table, resources: ResourceTable, malformed: int,
                 records: np.ndarray | None, defect: Defect | None
                 ) -> tuple[InputEvents, np.ndarray]:
    """:func:`inputs_from_table` and the mask of the rows it kept."""
    ok, bad, defect = _judged_rows(table, records, defect)
    good = table.filter(pa.array(ok)) if bad else table
    coords = {}
    for name in ("topic", "partition", "offset"):
        if f"_{name}" in good.column_names:
            coords[name] = _int_column(good, f"_{name}").astype(np.int64, copy=False)
    return InputEvents(
        **coords,
        id=_int_column(good, "id").astype(np.int64, copy=False),
        is_get=pc.equal(good.column("type"), GET).combine_chunks()
        .to_numpy(zero_copy_only=False).astype(bool),
        resource=resources.encode(good.column("resource")),
        event_ts=_int_column(good, "event_ts").astype(np.int64, copy=False),
        ingress_ts=_int_column(good, "ingress_ts").astype(np.int64, copy=False),
        resources=resources,
        malformed=malformed + int(bad),
        missing=_missing(table, INPUT_REQUIRED),
        defect=defect,
    ), ok


def outputs_from_table(table: pa.Table, resources: ResourceTable, malformed: int = 0,
                       samples: list[str] | None = None, position: np.ndarray | None = None,
                       partition: np.ndarray | None = None, offset: np.ndarray | None = None,
                       defect: Defect | None = None) -> OutputRecords:
    """Validate and convert an output table; records lacking required fields, or with an
    ingress time beyond ±MAX_MS, are malformed. ``position``, ``partition`` and
    ``offset`` are per row of ``table``; ``defect``: the first record the parser refused
    (a row's defect is numbered by its ``position``)."""
    n = len(table)
    if position is None:
        position = np.arange(n, dtype=np.int64)
    ok = pc.and_(
        pc.and_(pc.is_valid(table.column("window_start")), pc.is_valid(table.column("resource"))),
        pc.and_(pc.is_valid(table.column("ids")), _is_time(table, "ingress_ts")),
    ) if n else pa.array([], type=pa.bool_())
    ok = pc.fill_null(ok, False)
    ok_np = ok.to_numpy(zero_copy_only=False).astype(bool) if n else np.zeros(0, dtype=bool)
    good = table.filter(ok)
    ids_col = good.column("ids").combine_chunks() if len(good) else pa.array(
        [], type=pa.list_(pa.int64()))
    flat = pc.list_flatten(ids_col)
    if flat.null_count:  # "ids": [1, null] is not a list of integers: the record is malformed
        hole = np.zeros(len(good), dtype=bool)
        parent = pc.list_parent_indices(ids_col).to_numpy(zero_copy_only=False)
        hole[parent[flat.is_null().to_numpy(zero_copy_only=False)]] = True
        ok_np[np.flatnonzero(ok_np)[hole]] = False
        good = good.filter(pa.array(~hole))
        ids_col = good.column("ids").combine_chunks()
        flat = pc.list_flatten(ids_col)
    bad = int(n - ok_np.sum())
    if bad:
        defect = first_defect(defect, _table_defect(table, ok_np, np.asarray(position),
                                                    OUTPUT_REQUIRED))
    lengths = pc.list_value_length(ids_col).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = flat.to_numpy(zero_copy_only=False).astype(np.int64) if len(flat) else np.zeros(
        0, dtype=np.int64)
    return OutputRecords(
        window_start=_int_column(good, "window_start").astype(np.int64, copy=False),
        window_end=_int_column(good, "window_end").astype(np.int64, copy=False),
        resource=resources.encode(good.column("resource")),
        count=_int_column(good, "count").astype(np.int64, copy=False),
        gets=_int_column(good, "gets").astype(np.int64, copy=False),
        posts=_int_column(good, "posts").astype(np.int64, copy=False),
        ingress_ts=_int_column(good, "ingress_ts").astype(np.int64, copy=False),
        position=np.asarray(position, dtype=np.int64)[ok_np],
        ids=ids,
        offsets=offsets,
        resources=resources,
        malformed=malformed + bad,
        malformed_samples=list(samples or []),
        missing=_missing(table, OUTPUT_REQUIRED),
        defect=defect,
        partition=None if partition is None else np.asarray(partition, np.int64)[ok_np],
        offset=None if offset is None else np.asarray(offset, np.int64)[ok_np],
    )


def read_inputs(path: Path, resources: ResourceTable | None = None) -> InputEvents:
    """Read input events from JSON lines (id, type, resource, event_ts, ingress_ts)."""
    resources = resources if resources is not None else ResourceTable()
    table, malformed, _, records, defect = read_table(path, INPUT_SCHEMA)
    events = inputs_from_table(table, resources, malformed, records, defect)
    events.source = Path(path)
    return events


def read_outputs(path: Path, resources: ResourceTable) -> OutputRecords:
    """Read produced outputs from a JSON-lines file (the output record plus ``ingress_ts``);
    an output's ``position`` is its record number in the file."""
    table, malformed, samples, records, defect = read_table(path, OUTPUT_SCHEMA)
    outputs = outputs_from_table(table, resources, malformed, samples, position=records,
                                 defect=defect)
    outputs.source = Path(path)
    return outputs


def read_streams(inputs: Path, outputs: Path) -> tuple[InputEvents, OutputRecords]:
    """A recorded run's two JSON-lines files (what ``pgval check`` reads), sharing one
    resource table so that inputs and outputs name resources alike."""
    resources = ResourceTable()
    return read_inputs(inputs, resources), read_outputs(outputs, resources)

