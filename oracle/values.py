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
from dataclasses import dataclass
from datetime import datetime
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
    """A number, from a JSON number or a text holding one (a sink's decimal)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if isinstance(value, Decimal):
        return value
    if isinstance(value, str):
        try:
            number = Decimal(value)
        except InvalidOperation:
            return None
        return number if number.is_finite() else None
    return None


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str) or len(value) < 10:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return None
    return when


def _order(value: Any) -> str:
    """A sort key for list items of any JSON type."""
    return json.dumps(value, sort_keys=True, default=str)


def same_value(expected: Any, written: Any, tolerance: float = DEFAULT_TOLERANCE,
               written_fields_only: bool = False) -> bool:
    """Whether ``written`` (parsed JSON) is ``expected`` (parsed JSON): integers exactly,
    other numbers within ``tolerance`` (relative), times as the same instant, lists as
    multisets (item by item in some order: ``collect_list`` has none), objects field by
    field (``written_fields_only``: only the fields ``written`` has, for a sink that keeps
    some of the job's columns)."""
    if isinstance(expected, dict) and isinstance(written, dict):
        names = set(written) if written_fields_only else set(expected) | set(written)
        return all(name in expected and name in written
                   and same_value(expected[name], written[name], tolerance)
                   for name in names)
    if isinstance(expected, list) and isinstance(written, list):
        if len(expected) != len(written):
            return False
        if all(same_value(a, b, tolerance) for a, b in zip(expected, written, strict=True)):
            return True
        # As multisets: Spark's collect_list and collect_set promise no order, and a stream
        # collects in the order its batches came.
        return all(same_value(a, b, tolerance) for a, b in zip(
            sorted(expected, key=_order), sorted(written, key=_order), strict=True))
    if expected == written and type(expected) is type(written):
        return True
    a, b = _number(expected), _number(written)
    if a is not None and b is not None:
        if a == b:
            return True
        whole = (isinstance(expected, int) and isinstance(written, int))
        if whole or tolerance <= 0:
            return False
        return abs(a - b) <= Decimal(repr(tolerance)) * max(abs(a), abs(b))
    if isinstance(expected, float) and isinstance(written, float):
        return math.isnan(expected) and math.isnan(written)
    x, y = _instant(expected), _instant(written)
    if x is not None and y is not None:
        if (x.tzinfo is None) != (y.tzinfo is None):
            return False
        return x == y
    return False


def wrong_values(expected: pa.Array, written: pa.Array, tolerance: float = DEFAULT_TOLERANCE,
                 written_fields_only: bool = False) -> np.ndarray:
    """Per output, whether its written value text is not its expected one (False where
    either is null: nothing to compare). Vectorised for the equal texts; only the pairs
    whose texts differ are parsed and compared field by field."""
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
            wrong[rows[k]] = not same_value(json.loads(a), json.loads(b), tolerance,
                                            written_fields_only)
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
           compared: str = "all") -> ValueCheck:
        return cls(expected, written, wrong_values(expected, written, tolerance,
                                                   compared == "read"), tolerance, compared)

    def as_dict(self) -> dict[str, object]:
        both = pc.and_(pc.is_valid(self.expected), pc.is_valid(self.written))
        return {"compared_outputs": int(pc.sum(both.cast(pa.int64())).as_py() or 0),
                "wrong_outputs": int(self.wrong.sum()), "tolerance": self.tolerance,
                "columns": self.compared}
