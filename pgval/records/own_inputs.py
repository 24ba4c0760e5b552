"""pgval's own input records decoded with numpy, not a JSON parser.

The generator writes every input as one compact layout (``datasets/writers.py``)::

    {"id":<digits>,"type":"GET"|"POST","resource":"r<4 digits>","event_ts":<digits>}

Records of one length, one id width and one type have every byte at the same column, so a
group of them is one byte matrix (a strided view of the Arrow buffer, rows copied once):
its constant bytes are compared with the layout and its digits read as numbers, with no
per-record Python. A record is decoded here only when it matches the layout byte for byte
(no leading zeros, numbers that fit, times within ±MAX_MS), so it reads exactly as the JSON
parser would read it; every other record is left to the parser (``pgval.records.parse``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.lib.stride_tricks import sliding_window_view

from pgval.records.phases import MAX_MS

_PREFIX = b'{"id":'
_ID_COLUMN = len(_PREFIX)
#: Longest id decoded here: 18 digits always fit an int64.
_MAX_ID_DIGITS = 18
#: Longest time decoded here: MAX_MS has 15 digits (larger values are checked).
_MAX_TS_DIGITS = 15
_RESOURCE_DIGITS = 4
_SHORTEST = len(b'{"id":0,"type":"GET","resource":"r0000","event_ts":0}')
_LONGEST = _SHORTEST + _MAX_ID_DIGITS - 1 + 1 + _MAX_TS_DIGITS - 1


def value_bytes(arr: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, offsets as int64, n + 1 of them) of a binary array, without copying data."""
    _, offsets, data = arr.buffers()
    offs = (np.frombuffer(offsets, dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
            .astype(np.int64) if offsets is not None else np.zeros(len(arr) + 1, np.int64))
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return raw, offs


@dataclass
class OwnInputs:
    """The records decoded (``index``: their positions in the values, ascending) and the
    positions left to the JSON parser (``rest``, ascending)."""

    index: np.ndarray
    id: np.ndarray
    is_get: np.ndarray
    #: The resource's number: ``r0042`` is 42.
    resource_number: np.ndarray
    event_ts: np.ndarray
    rest: np.ndarray


@functools.lru_cache(maxsize=256)
def _layout(id_digits: int, is_post: bool, ts_digits: int
            ) -> tuple[np.ndarray, np.ndarray, slice, slice, slice]:
    """The layout with these widths: (base, limit, id, resource digits, time columns). A
    row fits when ``row - base <= limit`` byte for byte (uint8 arithmetic): constant bytes
    have base = the byte and limit 0, digits base ``0`` and limit 9."""
    kind = b"POST" if is_post else b"GET"
    parts = [_PREFIX, b"0" * id_digits, b',"type":"' + kind + b'","resource":"r',
             b"0" * _RESOURCE_DIGITS, b'","event_ts":', b"0" * ts_digits, b"}"]
    base = np.frombuffer(b"".join(parts), dtype=np.uint8)
    ends = np.cumsum([len(p) for p in parts]).tolist()
    digits = [slice(ends[0], ends[1]), slice(ends[2], ends[3]), slice(ends[4], ends[5])]
    limit = np.zeros(len(base), dtype=np.uint8)
    for cols in digits:
        limit[cols] = 9
    return base, limit, digits[0], digits[1], digits[2]


def _number(digits: np.ndarray) -> np.ndarray:
    """The int64 value of each row of ASCII digits (at most 18: exact in an int64), a
    column at a time. No matrix product: BLAS's threads spin on the other core while they
    wait, the core the Java reader and the broker need during the read-back."""
    value = digits[:, 0].astype(np.int64)
    value -= 48
    for j in range(1, digits.shape[1]):
        value *= 10
        value += digits[:, j]
        value -= 48
    return value


def _id_digits(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """How many digits follow ``{"id":`` in each record (0 where none, or too many)."""
    window = sliding_window_view(data, _MAX_ID_DIGITS + 1)[starts + _ID_COLUMN]
    is_digit = (window - 48) <= 9
    width = np.argmin(is_digit, axis=1)
    width[is_digit.all(axis=1)] = 0
    return width


def _decode_group(data: np.ndarray, starts: np.ndarray, id_digits: int, is_post: bool,
                  length: int) -> tuple[np.ndarray, ...] | None:
    """(ok mask, id, resource number, event_ts) of records of one layout, or None when the
    length leaves no room for a time."""
    ts_digits = length - _SHORTEST + 1 - (id_digits - 1) - int(is_post)
    if not 1 <= ts_digits <= _MAX_TS_DIGITS:
        return None
    base, limit, id_cols, res_cols, ts_cols = _layout(id_digits, is_post, ts_digits)
    rows = sliding_window_view(data, length)[starts]
    ok = ((rows - base) <= limit).all(axis=1)
    for cols, width in ((id_cols, id_digits), (ts_cols, ts_digits)):
        if width > 1:  # JSON allows no leading zero
            ok &= rows[:, cols.start] != 48
    event_ts = _number(rows[:, ts_cols])
    ok &= event_ts <= MAX_MS
    return ok, _number(rows[:, id_cols]), _number(rows[:, res_cols]), event_ts


def _nothing(n: int) -> OwnInputs:
    """None of ``n`` records decoded."""
    z = np.zeros(0, dtype=np.int64)
    return OwnInputs(z, z, np.zeros(0, dtype=bool), z, z, np.arange(n, dtype=np.int64))


def decode_chunk(arr: pa.BinaryArray) -> OwnInputs:
    """Decode the records of one binary array that have pgval's own layout."""
    n = len(arr)
    data, offs = value_bytes(arr)
    starts, lengths = offs[:-1], np.diff(offs)
    valid = arr.is_valid().to_numpy(zero_copy_only=False).astype(bool) if arr.null_count \
        else np.ones(n, dtype=bool)
    candidate = valid & (lengths >= _SHORTEST) & (lengths <= _LONGEST)
    cand = np.flatnonzero(candidate)
    if not len(cand):
        return _nothing(n)
    id_digits = _id_digits(data, starts[cand])
    head_ok = (data[starts[cand, None] + np.arange(_ID_COLUMN)] ==
               np.frombuffer(_PREFIX, np.uint8)).all(axis=1) & (id_digits > 0)
    cand, id_digits = cand[head_ok], id_digits[head_ok]
    is_post = data[starts[cand] + _ID_COLUMN + id_digits + len(b',"type":"')] == ord("P")
    key = (lengths[cand] * 32 + id_digits) * 2 + is_post
    parts: list[tuple[np.ndarray, ...]] = []
    for k in np.unique(key).tolist():
        sel = cand[key == k]
        decoded = _decode_group(data, starts[sel], (k // 2) % 32, bool(k % 2), k // 64)
        if decoded is None:
            continue
        ok, ids, res, ts = decoded
        post = np.full(int(ok.sum()), bool(k % 2))
        parts.append((sel[ok], ids[ok], ~post, res[ok], ts[ok]))
    if not parts:
        return _nothing(n)
    index, ids, is_get, res, ts = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.argsort(index, kind="stable")
    done = np.zeros(n, dtype=bool)
    done[index] = True
    return OwnInputs(index[order], ids[order], is_get[order], res[order], ts[order],
                     np.flatnonzero(~done))
