"""Values compared: an output of a user's job whose key and IDs are right can still carry
wrong values (a sink that adds to a count instead of setting it, state that came back
wrong). Each output's value columns are compared with its batch run's row of the same
key, and an output that differs is *incorrect* (``wrong-value``, docs/semantics.md).

Both sides are Spark's ``to_json`` of the job's columns other than ``ids`` (the batch
oracle's ``value``; the streaming query's ``_pgval_value``, written with every output), or,
for a user's sink, the columns its ``read`` gives back, as JSON. Equal texts are equal
(compared in Arrow, no Python per output); a pair that differs is compared field by field:
integers exactly, other numbers within a relative tolerance (:data:`DEFAULT_TOLERANCE`,
``build.tolerance`` to change it: Spark may sum floating-point numbers in another order in
a stream than in a batch), times as instants, arrays as multisets (``collect_list`` keeps
the order rows came in, which a stream and a batch do not share), everything else exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: The relative tolerance of non-integer numbers when no ``build.tolerance`` is given:
#: far above the error of a sum of doubles in another order (about 1e-16 per term),
#: far below a value a job got wrong.
DEFAULT_TOLERANCE = 1e-9


def _number(value: Any) -> Decimal | None:
    """A JSON number as an exact decimal (None for anything else, booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    return None


def _text_number(value: Any) -> Decimal | None:
    """A sink's number given back as text (a decimal column read as a string)."""
    if not isinstance(value, str):
        return None
    try:
        number = Decimal(value)
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _instant(value: Any) -> datetime | None:
    """A full timestamp's instant to the millisecond (a date alone is no timestamp);
    without an offset it is UTC, as a sink's naive time read back from a UTC session."""
    if not isinstance(value, str) or len(value) < 16 or value[10] not in "T ":
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


#: Spark's ``to_json`` writes a double that is not a number as these strings.
_NOT_A_NUMBER = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}


def _close(a: Decimal, b: Decimal, tolerance: float, whole: bool) -> bool:
    """Within ``tolerance`` of the larger, or of an absolute floor (a sum that cancels to
    about zero is zero within the terms' rounding); integers exactly."""
    if a == b:
        return True
    if whole or tolerance <= 0:
        return False
    tol = Decimal(repr(tolerance))
    return abs(a - b) <= max(tol * max(abs(a), abs(b)), tol * ABSOLUTE_FLOOR)


#: The absolute floor of the tolerance, as a multiple of it: 1e-9 relative is 1e-12
#: absolute, where a sum of doubles that cancels leaves its rounding (about 1e-16 a term).
ABSOLUTE_FLOOR = Decimal("0.001")


def _order(value: Any) -> tuple[int, Any]:
    """A sort key for list items of any JSON type: numbers by value, anything else by its
    text (so items within the tolerance of each other pair up after sorting)."""
    number = _number(value)
    if number is not None:
        return (0, number)
    return (1, json.dumps(value, sort_keys=True, default=str))


def same_value(expected: Any, written: Any, tolerance: float = DEFAULT_TOLERANCE,
               from_sink: bool = False, fields: frozenset[str] | None = None) -> bool:
    """Whether ``written`` (parsed JSON, numbers as :class:`Decimal`) is ``expected``
    (Spark's ``to_json``, parsed the same way): integers exactly, other numbers within
    ``tolerance`` (relative, with an absolute floor), lists as multisets (``collect_list``
    has no order), objects field by field, a missing field as null (``to_json`` leaves
    null fields out), everything else exactly. ``from_sink``: ``written`` is what a user's
    sink gave back, in its own types: a number as text, a time without an offset (UTC) or
    with microseconds, a boolean as 0 or 1 are the same values, and only the fields it gave
    back are compared (a sink may keep some of the job's columns), of ``fields`` (the
    job's columns; a sink's own, a row id, are not compared)."""
    if isinstance(expected, dict) and isinstance(written, dict):
        if from_sink:  # what the sink gave back (a null too), of the job's columns
            names = set(written) if fields is None else fields & set(written)
        else:
            names = set(expected) | set(written)
        return all(same_value(expected.get(n), written.get(n), tolerance, from_sink)
                   for n in names)
    if isinstance(expected, list) and isinstance(written, list):
        if len(expected) != len(written):
            return False
        pairs = zip(expected, written, strict=True)
        if all(same_value(a, b, tolerance, from_sink) for a, b in pairs):
            return True
        return all(same_value(a, b, tolerance, from_sink) for a, b in zip(
            sorted(expected, key=_order), sorted(written, key=_order), strict=True))
    if expected is None or written is None:
        return expected is None and written is None
    a, b = _number(expected), _number(written)
    if from_sink:
        if isinstance(expected, str) and expected in _NOT_A_NUMBER:
            return isinstance(written, float) and repr(written) == _NOT_A_NUMBER[expected]
        if isinstance(written, bool) and not isinstance(expected, bool):
            return a is not None and a == int(written)
        if isinstance(expected, bool) and type(written) is int and written in (0, 1):
            return expected == bool(written)  # SQLite gives a boolean back as 0 or 1
        b = b if b is not None else _text_number(written)
        x, y = _instant(expected), _instant(written)
        if x is not None and y is not None:
            return x == y
    if a is not None and b is not None:
        return _close(a, b, tolerance, isinstance(expected, int) and isinstance(written, int))
    return type(expected) is type(written) and expected == written


def _parse(text: str) -> Any:
    return json.loads(text, parse_float=Decimal)


def wrong_values(expected: pa.Array, written: pa.Array, tolerance: float = DEFAULT_TOLERANCE,
                 from_sink: bool = False, fields: frozenset[str] | None = None
                 ) -> np.ndarray:
    """Per output, whether its written value text is not its expected one (False where
    either is null: nothing to compare). Vectorised for the equal texts; only the pairs
    whose texts differ are parsed and compared field by field (:func:`same_value`)."""
    n = len(written)
    if n == 0:
        return np.zeros(0, dtype=bool)
    both = pc.and_(pc.is_valid(expected), pc.is_valid(written))
    differ = pc.and_(both, pc.not_equal(expected, written)).fill_null(False)
    rows = np.flatnonzero(differ.to_numpy(zero_copy_only=False))
    wrong = np.zeros(n, dtype=bool)
    if not len(rows):
        return wrong
    exp_texts = expected.take(pa.array(rows)).to_pylist()
    out_texts = written.take(pa.array(rows)).to_pylist()
    for k, (a, b) in enumerate(zip(exp_texts, out_texts, strict=True)):
        try:
            wrong[rows[k]] = not same_value(_parse(a), _parse(b), tolerance, from_sink,
                                            fields)
        except ValueError:  # a text that is no JSON differs from one that is
            wrong[rows[k]] = True
    return wrong


@dataclass(frozen=True)
class ValueCheck:
    """The values of a run's outputs compared: per output (in the validator's order), its
    expected and its written value text (null: not compared) and whether they differ."""

    expected: pa.Array
    written: pa.Array
    wrong: np.ndarray
    tolerance: float
    #: What was compared: ``"all"`` (the stream's every value column) or ``"read"`` (the
    #: columns a user's sink gives back).
    compared: str = "all"

    @classmethod
    def of(cls, expected: pa.Array, written: pa.Array, tolerance: float = DEFAULT_TOLERANCE,
           compared: str = "all", columns: Sequence[str] | None = None) -> ValueCheck:
        """``columns``: the job's columns (but ids) a sink's value is compared on; its
        other fields (a row id, an update time of the sink's own) are not the job's."""
        fields = frozenset(columns) if compared == "read" and columns is not None else None
        return cls(expected, written, wrong_values(expected, written, tolerance,
                                                   compared == "read", fields),
                   tolerance, compared)

    def as_dict(self) -> dict[str, object]:
        both = pc.and_(pc.is_valid(self.expected), pc.is_valid(self.written))
        return {"compared_outputs": int(pc.sum(both.cast(pa.int64())).as_py() or 0),
                "wrong_outputs": int(self.wrong.sum()), "tolerance": self.tolerance,
                "columns": self.compared}
