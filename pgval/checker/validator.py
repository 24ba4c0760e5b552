"""The validator: the paper's Algorithms 1–3 as vectorised set operations.

What is judged is each expected slot: an input ID in its expected output. A job's result
may fan out (one input in several rows: sliding windows, joins, ``explode``); a slot is
then an (input, row) pair, and the counts — expected, processed, unprocessed, duplicate —
are counts of pairs (``Validation.expected_inputs`` counts the inputs behind them).

Algorithm 1 walks every ID of every produced output: an ID found in its
expected output is processed the first time and a duplicate after that; an ID
not in the expected output is incorrect. Algorithm 3 counts expected IDs never
processed. Algorithm 2 (late side output) does not apply to Spark, which has no
late-data side output; see docs/semantics.md.

One refinement of Algorithm 1, which has no clock: an occurrence in the right output whose
output arrived before its input did (output ingress < input ingress) cannot be that
input's processing. It is *incorrect*, of its own sub-kind ``output_before_input``, and
does not make the ID processed (docs/semantics.md, "Output before input"). Another, for a
user's job: an occurrence in an output with the right key whose values differ from the
batch's row (``wrong_value``, :mod:`pgval.oracle.values`) is incorrect too, of the sub-kind
``wrong_value``, and does not make the ID processed either.

Here the walk is done for all occurrences at once: occurrences are put in
stream order (output ingress time, then position), each is looked up in the
sorted expected-ID index with ``searchsorted``, and "first own occurrence" is the
least stream index per slot (``np.minimum.at``). Cost: O(n log n) in numpy (the
lookups), no Python loop per ID.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pgval.core.schema import Topology
from pgval.oracle.expected import ExpectedOutputs
from pgval.oracle.rows import JOB
from pgval.records.parse import OutputRecords
from pgval.records.phases import CONTROL, FAILURE, PHASES, RECOVERY, Phases

WITNESSES_PER_WINDOW = 5
ANOMALIES = ("unprocessed", "duplicate", "incorrect")


@dataclass
class Occurrences:
    """Every anomalous occurrence and ID, for the full anomaly set
    (:mod:`pgval.checker.anomalies`); rows of outputs are indices into the
    :class:`OutputRecords` the validator read, slots index ``expected.id_sorted``.

    One row per counted anomaly: ``duplicate`` has ``Validation.duplicate`` rows,
    ``incorrect`` ``Validation.incorrect`` (those before their input among them), and
    ``unprocessed`` ``Validation.unprocessed``.
    """

    #: Duplicates: the expected slot, the output of the extra occurrence, and the output
    #: of the ID's first own occurrence (the one that made it processed).
    duplicate_slot: np.ndarray
    duplicate_output: np.ndarray
    duplicate_first: np.ndarray
    #: Incorrect occurrences: the ID, the output, the expected slot (-1: not expected) and
    #: whether it is there before its input arrived (else: wrong key, unknown key or ID).
    incorrect_id: np.ndarray
    incorrect_output: np.ndarray
    incorrect_slot: np.ndarray
    incorrect_early: np.ndarray
    #: Whether the incorrect occurrence is in an output with the right key and IDs but
    #: other values than expected (and not early).
    incorrect_wrong_value: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @classmethod
    def empty(cls) -> Occurrences:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z, z, z, np.zeros(0, dtype=bool))


@dataclass
class PhaseCounts:
    """One phase row; it has two clocks (docs/semantics.md, "Two clocks in a phase row").

    By the input's ingress time (the expected ID's phase): ``expected``, ``processed``,
    ``unprocessed``, ``reliable``, ``duplicated_ids``, ``incorrect_ids``. By the output's
    ingress time (when the anomaly appeared): ``duplicate`` and ``incorrect`` occurrences.
    """

    expected: int = 0
    processed: int = 0
    unprocessed: int = 0
    duplicate: int = 0
    incorrect: int = 0
    reliable: int = 0
    #: Expected IDs of this phase with more than one own occurrence.
    duplicated_ids: int = 0
    #: Expected IDs of this phase with at least one occurrence in a wrong output.
    incorrect_ids: int = 0

    @property
    def reliability(self) -> float | None:
        """None when the phase expected nothing: there is nothing to be reliable about."""
        return self.reliable / self.expected if self.expected else None

    def as_dict(self) -> dict[str, int]:
        return {"expected": self.expected, "processed": self.processed,
                "unprocessed": self.unprocessed, "duplicate": self.duplicate,
                "incorrect": self.incorrect, "reliable": self.reliable,
                "duplicated_ids": self.duplicated_ids, "incorrect_ids": self.incorrect_ids}


@dataclass
class Validation:
    """Everything the validator learned; metrics and the store read from it."""

    topology: str
    expected: int
    processed: int
    unprocessed: int
    duplicate: int
    incorrect: int
    malformed: int
    reliable: int
    outputs: int
    correct_outputs: int
    expected_outputs: int
    missing_outputs: int
    phases: dict[str, PhaseCounts]
    witnesses: dict[str, list[tuple[int, int]]]  # kind → [(window_start, id)]
    # Per-occurrence detail kept for metrics (stream order).
    first_own_ingress: np.ndarray = field(repr=False)  # output ingress of each first own occ.
    output_ingress: np.ndarray = field(repr=False)
    output_known_key: np.ndarray = field(repr=False)  # expected row of each output or -1
    unprocessed_slots: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, int))
    malformed_samples: list[str] = field(default_factory=list)
    malformed_inputs: int = 0
    duplicate_inputs: int = 0
    #: Expected IDs with more than one own occurrence / with an incorrect occurrence (the
    #: ID-level totals of the phase rows' ``duplicated_ids`` and ``incorrect_ids``).
    duplicated_ids: int = 0
    incorrect_ids: int = 0
    #: Incorrect occurrences in the ID's own output that arrived before the ID's input
    #: (a subset of ``incorrect``).
    output_before_input: int = 0
    #: Incorrect occurrences in an output of the right key whose values differ from the
    #: expected row's (a subset of ``incorrect``), and how many such outputs; None where
    #: values were not compared (a built-in topology, evidence without values).
    wrong_value: int | None = None
    wrong_value_outputs: int | None = None
    #: Where the expected outputs fan out, the distinct inputs behind ``expected`` pairs
    #: (None: one slot an input, ``expected`` counts inputs).
    expected_inputs: int | None = None
    #: Every anomaly, for the full set (:mod:`pgval.checker.anomalies`).
    occurrences: Occurrences = field(repr=False, default_factory=Occurrences.empty)
    # For :meth:`ids`: every expected slot's ID (ascending; an input of a fan-out once a
    # pair), its own-occurrence count, and the ID of every incorrect occurrence. Views of
    # arrays the validator builds anyway.
    expected_ids: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    own_count: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    incorrect_occurrence_ids: np.ndarray = field(
        repr=False, default_factory=lambda: np.zeros(0, np.int64))

    @property
    def reliability(self) -> float | None:
        """None when nothing was expected: 100 % of nothing is no evidence."""
        return self.reliable / self.expected if self.expected else None

    @property
    def correctness(self) -> float:
        return self.correct_outputs / self.outputs if self.outputs else 1.0

    @property
    def guarantee(self) -> str:
        """The verdict; ``unknown`` when nothing was expected (no input to judge by)."""
        return verdict_of(self)

    def ids(self, kind: str) -> np.ndarray:
        """All distinct IDs of one anomaly kind, ascending (the witnesses are only a sample).

        ``unprocessed``: expected IDs with no own occurrence; ``duplicate``: expected IDs
        with more than one; ``incorrect``: IDs of incorrect occurrences, expected or not.
        """
        if kind == "unprocessed":  # np.unique: an input of a fan-out has a slot per row
            return np.unique(self.expected_ids[self.own_count == 0])
        if kind == "duplicate":
            return np.unique(self.expected_ids[self.own_count > 1])
        check_kind(kind)
        return np.unique(self.incorrect_occurrence_ids)


def check_kind(kind: str) -> None:
    """A plain error for a kind that is none of :data:`ANOMALIES`."""
    if kind not in ANOMALIES:
        raise ValueError(f"unknown anomaly kind {kind!r} (expected one of {', '.join(ANOMALIES)})")


def verdict_of(counts: Any) -> str:
    """The verdict of a checker's counts (``expected``, ``unprocessed``, ``duplicate``,
    ``incorrect``, ``malformed``): ``unknown`` when nothing was expected, else
    :func:`guarantee_of`. One rule for the numpy and the Spark checker."""
    if counts.expected == 0:
        return "unknown"
    return guarantee_of(counts.unprocessed, counts.duplicate, counts.incorrect,
                        counts.malformed)


def guarantee_of(unprocessed: int, duplicate: int, incorrect: int, malformed: int) -> str:
    """The strongest guarantee the observed counts are consistent with."""
    if unprocessed == duplicate == incorrect == malformed == 0:
        return "exactly-once"
    if unprocessed == incorrect == malformed == 0:
        return "at-least-once"
    if duplicate == incorrect == malformed == 0:
        return "at-most-once"
    return "none"


def output_rows(expected: ExpectedOutputs, outputs: OutputRecords) -> np.ndarray:
    """For each produced output, the row of the expected output with the same key, or -1."""
    n = len(outputs)
    rows = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(expected) == 0:
        return rows
    # Map window_start → dense index among expected windows, then (index, resource) → int64.
    windows = np.unique(expected.window_start)
    widx = np.searchsorted(windows, outputs.window_start)
    widx_c = np.minimum(widx, len(windows) - 1)
    known_window = windows[widx_c] == outputs.window_start
    n_res = max(len(expected.resources), 1) + 1
    exp_widx = np.searchsorted(windows, expected.window_start)
    exp_key = exp_widx.astype(np.int64) * n_res + expected.resource
    out_key = widx_c.astype(np.int64) * n_res + outputs.resource
    order = np.argsort(exp_key, kind="stable")
    pos = np.searchsorted(exp_key[order], out_key)
    pos_c = np.minimum(pos, len(order) - 1)
    hit = known_window & (outputs.resource >= 0) & (exp_key[order][pos_c] == out_key)
    rows[hit] = order[pos_c[hit]]
    return rows


def _runs(id_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per slot, whether it starts its input's run of slots, and that run's first slot
    (slots are sorted by ID: an input of a fan-out has one slot per row, side by side)."""
    n = len(id_sorted)
    start = np.ones(n, dtype=bool)
    start[1:] = id_sorted[1:] != id_sorted[:-1]
    return start, np.maximum.accumulate(np.where(start, np.arange(n), 0))


def pair_slots(expected: ExpectedOutputs, rows: np.ndarray, first: np.ndarray,
               found: np.ndarray) -> np.ndarray:
    """For occurrences of expected IDs (``first``: each one's first slot, ``found``: it is
    expected at all) in outputs of expected rows ``rows`` (-1: no expected row), the slot
    of their (input, row) pair where the input is expected in that row, else ``first``
    (the occurrence is then in a wrong output). Slots are sorted by ID, then row
    (:func:`pgval.oracle.rows.expected_from_rows`), so a pair is one ``searchsorted`` on
    (the input's first slot, row + 1)."""
    _, run_start = _runs(expected.id_sorted)
    width = np.int64(len(expected) + 2)
    pair_key = run_start.astype(np.int64) * width + expected.id_output.astype(np.int64) + 1
    occ_key = first.astype(np.int64) * width + rows.astype(np.int64) + 1
    at = np.minimum(np.searchsorted(pair_key, occ_key), len(pair_key) - 1)
    hit = found & (rows >= 0) & (pair_key[at] == occ_key)
    return np.where(hit, at, first)


def first_processed_pair(id_sorted: np.ndarray, own_count: np.ndarray) -> np.ndarray:
    """Per slot, its input's first processed pair (its first pair if none is): where an
    occurrence in a wrong output is charged, so that an input with one is not reliable
    in a pair it was processed in."""
    n = len(id_sorted)
    start, run_start = _runs(id_sorted)
    candidate = np.where(own_count > 0, np.arange(n), n)
    first = np.minimum.reduceat(candidate, np.flatnonzero(start))[np.cumsum(start) - 1]
    return np.where(first < n, first, run_start)


def _sample_per_window(windows: np.ndarray, ids: np.ndarray, k: int) -> list[tuple[int, int]]:
    """Up to ``k`` smallest IDs per window: a bounded, reproducible witness sample."""
    if len(ids) == 0:
        return []
    order = np.lexsort((ids, windows))
    w = windows[order]
    starts = np.r_[True, w[1:] != w[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(w)), 0))
    keep = (np.arange(len(w)) - group_start) < k
    sel = order[keep]
    return list(zip(windows[sel].tolist(), ids[sel].tolist(), strict=True))


def stream_order(outputs: OutputRecords) -> tuple[np.ndarray, np.ndarray]:
    """Every ID occurrence in stream order: outputs by ingress time, then position in the
    output stream; an output's IDs in the order it lists them. Returns each occurrence's
    output and its index into ``outputs.ids``.

    Only the outputs are sorted: each output's IDs are one run of ``outputs.ids``, so the
    occurrences' order is those runs laid end to end in the outputs' order (a gather, no
    sort of the occurrences: for 10M IDs a sort cost seconds).
    """
    out_order = np.lexsort((outputs.position, outputs.ingress_ts)).astype(np.int64)
    lengths = outputs.lengths[out_order]
    # Where each run starts among the ordered occurrences, and where in ``outputs.ids``.
    ordered_start = np.cumsum(lengths) - lengths
    stored_start = outputs.offsets[:-1][out_order]
    occ_order = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
        stored_start - ordered_start, lengths)
    return np.repeat(out_order, lengths), occ_order


def first_occurrences(slots: np.ndarray, n_slots: int) -> np.ndarray:
    """For each of ``n_slots`` slots, the index in ``slots`` of its first occurrence;
    ``len(slots)`` for a slot that does not occur. An unbuffered minimum (``ufunc.at``
    applies every index in turn): linear, where ``np.unique(..., return_index=True)`` sorts
    (for 10M occurrences 0.3 s against 2–4 s)."""
    first = np.full(n_slots, len(slots), dtype=np.int64)
    np.minimum.at(first, slots, np.arange(len(slots), dtype=np.int64))
    return first


def validate(expected: ExpectedOutputs, outputs: OutputRecords, phases: Phases | None = None,
             witnesses_per_window: int = WITNESSES_PER_WINDOW,
             wrong_value: np.ndarray | None = None) -> Validation:
    """Classify every produced ID occurrence and every expected ID (docs/semantics.md).

    ``wrong_value``: per output, whether its values differ from its expected row's (None:
    values not compared); its occurrences are then incorrect, not processed."""
    phases = phases or Phases.unbounded()
    n_exp = len(expected.id_sorted)
    fans_out = expected.fans_out
    n_out = len(outputs)

    occ_output, occ_order = stream_order(outputs)
    occ_id = outputs.ids[occ_order]

    # Algorithm 1: membership of each occurrence in its expected output.
    out_row = output_rows(expected, outputs)
    if n_exp:
        slot = np.searchsorted(expected.id_sorted, occ_id)
        slot_c = np.minimum(slot, n_exp - 1)
        found = expected.id_sorted[slot_c] == occ_id
        if fans_out:  # the (input, row) pair's slot, else the input's first
            slot_c = pair_slots(expected, out_row[occ_output], slot_c, found)
    else:
        slot_c = np.zeros(len(occ_id), dtype=np.int64)
        found = np.zeros(len(occ_id), dtype=bool)
    own_key = found & (expected.id_output[slot_c] == out_row[occ_output]) if n_exp else found
    # An output that arrived before the ID's input cannot hold its processing.
    early = (own_key & (outputs.ingress_ts[occ_output] < expected.id_ingress[slot_c])
             if n_exp else found)
    if wrong_value is not None:
        bad_value = own_key & ~early & np.asarray(wrong_value, dtype=bool)[occ_output]
    else:
        bad_value = np.zeros(len(occ_id), dtype=bool)
    own = own_key & ~early & ~bad_value
    own_slots = slot_c[own]
    own_count = np.bincount(own_slots, minlength=n_exp)
    if fans_out:  # in no row of its input: charged to the input's first processed pair
        slot_c = np.where(found & ~own_key,
                          first_processed_pair(expected.id_sorted, own_count)[slot_c], slot_c)
    foreign_count = np.bincount(slot_c[found & ~own], minlength=n_exp)
    first_seen = first_occurrences(own_slots, n_exp)
    is_first = first_seen[own_slots] == np.arange(len(own_slots))
    own_output = occ_output[own]

    processed_mask = own_count > 0
    reliable_mask = (own_count == 1) & (foreign_count == 0)
    incorrect_occ = ~own

    # Per phase: expected-side counts by input ingress, occurrence-side by output ingress.
    in_phase = phases.of(expected.id_ingress)
    out_phase = phases.of(outputs.ingress_ts)
    dup_phase = out_phase[own_output[~is_first]]
    inc_phase = out_phase[occ_output[incorrect_occ]]
    duplicated_mask = own_count > 1
    misplaced_mask = foreign_count > 0
    phase_counts: dict[str, PhaseCounts] = {}
    for name, code in zip(PHASES, (CONTROL, FAILURE, RECOVERY), strict=True):
        in_p = in_phase == code
        exp_p = int(in_p.sum())
        proc_p = int((processed_mask & in_p).sum())
        phase_counts[name] = PhaseCounts(
            expected=exp_p, processed=proc_p, unprocessed=exp_p - proc_p,
            duplicate=int((dup_phase == code).sum()), incorrect=int((inc_phase == code).sum()),
            reliable=int((reliable_mask & in_p).sum()),
            duplicated_ids=int((duplicated_mask & in_p).sum()),
            incorrect_ids=int((misplaced_mask & in_p).sum()))

    # Correctness: does the output's count field equal the oracle's?
    known = out_row >= 0
    rows_c = np.maximum(out_row, 0)
    if expected.topology == JOB:  # a job's own columns are not read: its number of IDs
        counts_ok = outputs.lengths == (expected.gets[rows_c] if len(expected) else -2)
    elif expected.topology == Topology.SST:
        counts_ok = outputs.count == (expected.gets[rows_c] if len(expected) else -2)
    else:
        counts_ok = ((outputs.gets == expected.gets[rows_c])
                     & (outputs.posts == expected.posts[rows_c])) if len(expected) else known
    correct = known & counts_ok
    if wrong_value is not None:
        correct &= ~np.asarray(wrong_value, dtype=bool)
    missing = int(len(expected) - len(np.unique(out_row[known])))

    # Witnesses: a bounded sample per anomaly kind and window.
    k = witnesses_per_window
    unproc_slots = np.flatnonzero(~processed_mask)
    dup_occ_out = own_output[~is_first]
    # Under fan-out an input has several unprocessed pairs: witnessed once.
    witness_slots = (unproc_slots[_runs(expected.id_sorted[unproc_slots])[0]] if fans_out
                     else unproc_slots)
    witnesses = {
        "unprocessed": _sample_per_window(
            expected.window_start[expected.id_output[witness_slots]],
            expected.id_sorted[witness_slots], k),
        "duplicate": _sample_per_window(
            outputs.window_start[dup_occ_out], expected.id_sorted[own_slots[~is_first]], k),
        "incorrect": _sample_per_window(
            outputs.window_start[occ_output[incorrect_occ]], occ_id[incorrect_occ], k),
    }

    # Index len(own_slots), a slot never processed, finds the -1 appended.
    first_output = np.append(own_output, -1)[first_seen]
    dup_slots = own_slots[~is_first]
    occurrences = Occurrences(
        duplicate_slot=dup_slots, duplicate_output=dup_occ_out,
        duplicate_first=first_output[dup_slots],
        incorrect_id=occ_id[incorrect_occ], incorrect_output=occ_output[incorrect_occ],
        incorrect_slot=np.where(found[incorrect_occ], slot_c[incorrect_occ], -1),
        incorrect_early=early[incorrect_occ],
        incorrect_wrong_value=bad_value[incorrect_occ])

    processed = int(processed_mask.sum())
    return Validation(
        topology=expected.topology,
        expected=n_exp,
        processed=processed,
        unprocessed=n_exp - processed,
        duplicate=int(len(own_slots) - processed),
        incorrect=int(incorrect_occ.sum()),
        malformed=outputs.malformed,
        reliable=int(reliable_mask.sum()),
        outputs=n_out,
        correct_outputs=int(correct.sum()),
        expected_outputs=len(expected),
        missing_outputs=missing,
        phases=phase_counts,
        witnesses=witnesses,
        first_own_ingress=outputs.ingress_ts[own_output[is_first]],
        output_ingress=outputs.ingress_ts,
        output_known_key=out_row,
        unprocessed_slots=unproc_slots,
        malformed_samples=outputs.malformed_samples,
        duplicate_inputs=expected.duplicate_inputs,
        duplicated_ids=int(duplicated_mask.sum()),
        incorrect_ids=int(misplaced_mask.sum()),
        expected_ids=expected.id_sorted,
        own_count=own_count,
        incorrect_occurrence_ids=occ_id[incorrect_occ],
        output_before_input=int(early.sum()),
        occurrences=occurrences,
        wrong_value=None if wrong_value is None else int(bad_value.sum()),
        wrong_value_outputs=(None if wrong_value is None
                             else int(np.asarray(wrong_value, dtype=bool).sum())),
        expected_inputs=int(_runs(expected.id_sorted)[0].sum()) if fans_out else None,
    )
