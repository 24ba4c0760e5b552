"""The full anomaly set: every unprocessed, duplicated and incorrect ID of a run, one row each.

The counts say how many; a user (and a re-check) needs *which*: each anomaly with its kind,
the phase it is counted in, its cause and the outputs involved. Witnesses keep five IDs per
kind and window; run 117 of the example report had 119,421 duplicates. The set is built
from what the validator already holds (:class:`pgval.checker.validator.Occurrences`), in
numpy, and is an Arrow table: the evidence keeps it as Parquet, ``pgval export`` and
``pgval check --anomalies`` write it as JSON lines.

One row per counted anomaly, so the rows of a kind add up to the run's count of it:

* ``unprocessed`` — one row per unprocessed expected ID; ``phase`` is its input's phase,
  ``ts_ms`` its input's ingress time, ``cause`` why (late, skipped, in-flight at end,
  lost: :mod:`pgval.checker.explain`; null without the driver's batch progress);
* ``duplicate`` — one row per own occurrence beyond the first; ``phase``/``ts_ms`` are the
  output's (when the duplicate appeared), ``first_*`` names the output that processed it;
* ``incorrect`` — one row per occurrence in a wrong output; ``cause`` says which wrong:
  ``another key`` (the ID belongs to another output), ``unknown key`` (no output with
  this window and resource was expected), ``not expected`` (no expected input has this
  ID);
* ``output-before-input`` — an occurrence in the ID's own output that arrived before its
  input did. The run's ``incorrect`` count includes these rows (docs/semantics.md);
* ``wrong-value`` — an occurrence in an output of the right key whose values differ from
  the batch run's row (:mod:`pgval.oracle.values`): ``expected_value`` and
  ``written_value`` hold both, as JSON text. The run's ``incorrect`` count includes these
  rows too.

``input_phase`` is the ID's input's phase whatever the kind (null when no expected input
has the ID): the phase row's ``duplicated_ids``/``incorrect_ids`` clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgval.checker.validator import Validation
from pgval.oracle.expected import ExpectedOutputs
from pgval.records.parse import OutputRecords
from pgval.records.phases import Phases

KINDS = ("unprocessed", "duplicate", "incorrect", "output-before-input", "wrong-value")
#: Phase names by :meth:`pgval.records.phases.Phases.of`'s codes.
PHASE_NAMES = ("warm-up", "control", "failure", "recovery")
INCORRECT_CAUSES = ("another key", "unknown key", "not expected")

SCHEMA = pa.schema([
    ("kind", pa.string()), ("id", pa.int64()), ("phase", pa.string()),
    ("input_phase", pa.string()), ("ts_ms", pa.int64()), ("cause", pa.string()),
    ("window_start", pa.int64()), ("resource", pa.string()),
    # The output's place in the output stream (a file's record number; from Kafka, its
    # order by timestamp, partition, offset), and its partition and offset in Kafka.
    ("output", pa.int64()), ("output_partition", pa.int64()), ("output_offset", pa.int64()),
    ("first_output", pa.int64()), ("first_partition", pa.int64()),
    ("first_offset", pa.int64()),
    # A wrong-value anomaly's two values (null for every other kind).
    ("expected_value", pa.string()), ("written_value", pa.string()),
])
#: The columns every kept anomaly set has (the two values came later: null when absent).
REQUIRED = tuple(name for name in SCHEMA.names if not name.endswith("_value"))


def _names(codes: np.ndarray, names: Sequence[str]) -> pa.Array:
    """Codes as strings (-1: null), through a dictionary so no Python loop runs per row."""
    codes = np.asarray(codes, dtype=np.int32)
    table = pa.array(list(names), type=pa.string())
    return pa.DictionaryArray.from_arrays(
        pa.array(codes, mask=codes < 0), table).cast(pa.string())


def _ints(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    values = np.asarray(values, dtype=np.int64)
    return pa.array(values, mask=None if valid is None else ~valid)


def _at(column: np.ndarray | None, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``column[rows]`` where ``rows`` ≥ 0 and the column exists, with its validity."""
    ok = rows >= 0
    if column is None:
        return np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows), dtype=bool)
    return np.where(ok, column[np.maximum(rows, 0)] if len(column) else 0, 0), ok


def build(expected: ExpectedOutputs, outputs: OutputRecords, validation: Validation,
          phases: Phases, cause_codes: np.ndarray | None = None,
          cause_names: Sequence[str] = (),
          values: tuple[pa.Array, pa.Array] | None = None) -> pa.Table:
    """Every anomaly of a validation as one table (:data:`SCHEMA`), ordered by kind, then
    time, then ID.

    ``cause_codes``: per unprocessed ID (in ``validation.unprocessed_slots`` order), an
    index into ``cause_names``; None without batch progress (causes null). ``values``:
    per output, its expected and its written value text (values compared)."""
    occ = validation.occurrences
    exp_window = expected.window_start[expected.id_output] if len(expected.id_sorted) else \
        np.zeros(0, dtype=np.int64)
    exp_resource = expected.resource[expected.id_output] if len(expected.id_sorted) else \
        np.zeros(0, dtype=np.int32)
    in_phase = phases.of(expected.id_ingress).astype(np.int32)

    unproc = validation.unprocessed_slots
    inc_early = occ.incorrect_early
    inc_value = (occ.incorrect_wrong_value if len(occ.incorrect_wrong_value)
                 == len(inc_early) else np.zeros(len(inc_early), dtype=bool))
    inc_other = ~inc_early & ~inc_value
    out_row = validation.output_known_key[occ.incorrect_output]
    inc_cause = np.where(occ.incorrect_slot < 0, 2, np.where(out_row < 0, 1, 0))
    parts = [
        # kind, id, slot, output, first output, ts, cause code, cause names
        (0, expected.id_sorted[unproc], unproc, np.full(len(unproc), -1),
         np.full(len(unproc), -1), expected.id_ingress[unproc],
         np.full(len(unproc), -1) if cause_codes is None else cause_codes, cause_names),
        (1, expected.id_sorted[occ.duplicate_slot], occ.duplicate_slot, occ.duplicate_output,
         occ.duplicate_first, outputs.ingress_ts[occ.duplicate_output],
         np.full(len(occ.duplicate_slot), -1), ()),
        (2, occ.incorrect_id[inc_other], occ.incorrect_slot[inc_other],
         occ.incorrect_output[inc_other], np.full(int(inc_other.sum()), -1),
         outputs.ingress_ts[occ.incorrect_output[inc_other]], inc_cause[inc_other],
         INCORRECT_CAUSES),
        (3, occ.incorrect_id[inc_early], occ.incorrect_slot[inc_early],
         occ.incorrect_output[inc_early], np.full(int(inc_early.sum()), -1),
         outputs.ingress_ts[occ.incorrect_output[inc_early]],
         np.full(int(inc_early.sum()), -1), ()),
        (4, occ.incorrect_id[inc_value], occ.incorrect_slot[inc_value],
         occ.incorrect_output[inc_value], np.full(int(inc_value.sum()), -1),
         outputs.ingress_ts[occ.incorrect_output[inc_value]],
         np.full(int(inc_value.sum()), -1), ()),
    ]
    tables = [_part(kind, ids, slots, out, first, ts, causes, names, expected, outputs,
                    phases, in_phase, exp_window, exp_resource,
                    values if kind == 4 else None)
              for kind, ids, slots, out, first, ts, causes, names in parts]
    table = pa.concat_tables(tables)
    order = np.lexsort((table.column("id").to_numpy(), table.column("ts_ms").to_numpy(),
                        np.repeat(np.arange(len(parts)), [len(t) for t in tables])))
    return table.take(pa.array(order))


def _part(kind: int, ids: np.ndarray, slots: np.ndarray, out: np.ndarray, first: np.ndarray,
          ts: np.ndarray, causes: np.ndarray, cause_names: Sequence[str],
          expected: ExpectedOutputs, outputs: OutputRecords, phases: Phases,
          in_phase: np.ndarray, exp_window: np.ndarray, exp_resource: np.ndarray,
          values: tuple[pa.Array, pa.Array] | None = None) -> pa.Table:
    n = len(ids)
    slots = np.asarray(slots, dtype=np.int64)
    out = np.asarray(out, dtype=np.int64)
    first = np.asarray(first, dtype=np.int64)
    has_out = out >= 0
    # Where: the output's key for occurrences, the expected key for an unprocessed ID.
    window = np.where(has_out, _at(outputs.window_start, out)[0],
                      _at(exp_window, slots)[0])
    res_code = np.where(has_out, _at(outputs.resource, out)[0], _at(exp_resource, slots)[0])
    phase = phases.of(ts).astype(np.int32) if kind else _at(in_phase, slots)[0]
    input_phase = np.where(slots >= 0, _at(in_phase, slots)[0], -1)
    columns = {
        "kind": _names(np.zeros(n, dtype=np.int32), [KINDS[kind]]),
        "id": _ints(ids),
        "phase": _names(phase, PHASE_NAMES),
        "input_phase": _names(input_phase, PHASE_NAMES),
        "ts_ms": _ints(ts),
        "cause": _names(np.asarray(causes), list(cause_names) or [""]),
        "window_start": _ints(window),
        "resource": _names(res_code, outputs.resources.names or [""]),
        "output": _ints(*_at(outputs.position, out)),
        "output_partition": _ints(*_at(outputs.partition, out)),
        "output_offset": _ints(*_at(outputs.offset, out)),
        "first_output": _ints(*_at(outputs.position, first)),
        "first_partition": _ints(*_at(outputs.partition, first)),
        "first_offset": _ints(*_at(outputs.offset, first)),
        "expected_value": (values[0].take(pa.array(out, pa.int64())) if values is not None
                           else pa.nulls(n, pa.string())),
        "written_value": (values[1].take(pa.array(out, pa.int64())) if values is not None
                          else pa.nulls(n, pa.string())),
    }
    return pa.table(columns, schema=SCHEMA)


def per_second(table: pa.Table, start_ms: int, seconds: int) -> dict[str, np.ndarray]:
    """Anomalies per kind in each 1 s bin from ``start_ms`` (the run's 1 s series), by
    ``ts_ms``; anomalies outside the series are not binned."""
    sec = (table.column("ts_ms").to_numpy() - start_ms) // 1000
    inside = (sec >= 0) & (sec < seconds)
    return {kind: np.bincount(sec[inside & _is(table, kind)], minlength=seconds)[:seconds]
            for kind in KINDS}


def _is(table: pa.Table, kind: str) -> np.ndarray:
    return pc.equal(table.column("kind"), kind).to_numpy(zero_copy_only=False).astype(bool)


def counts(table: pa.Table) -> dict[str, int]:
    """Rows per kind (what a re-check compares first)."""
    return {kind: int(_is(table, kind).sum()) for kind in KINDS}
