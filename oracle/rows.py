"""Expected outputs from rows another program computed: the result of a user's job run as a
batch over the run's inputs (Structured Streaming's promise: the streaming result equals
it, less what the watermark drops), as the validator's :class:`ExpectedOutputs`.

A row is an output key (the canonical JSON of the job's key columns, the same text the
streaming query writes) and the input IDs that made it. A result that lists an ID in
several rows (sliding windows, a join that matches one input with several rows, ``explode``)
fans out: the validator then judges each (input, row) pair. An ID that is no input of the
run is refused, with the first such ID.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pgval.core.errors import UserMistake
from pgval.core.schema import Topology
from pgval.oracle.expected import ExpectedOutputs, deduplicate_inputs
from pgval.records.parse import InputEvents, ResourceTable

#: The ``topology`` of expected outputs made from a job's rows.
JOB: str = Topology.JOB.value


class RowsError(UserMistake, ValueError):
    """A batch result the validator cannot use (one sentence): the user's job made it (a
    ``ValueError`` too)."""


def rows_of(table: pa.Table) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(keys, flat ids, offsets) of a table of rows (``key`` string, ``ids`` list<int64>:
    the batch oracle's), as :func:`expected_from_rows` takes them."""
    ids_col = table.column("ids").combine_chunks()
    lengths = pc.list_value_length(ids_col).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = pc.list_flatten(ids_col).to_numpy(zero_copy_only=False).astype(np.int64)
    return table.column("key").combine_chunks(), flat, offsets


def expected_from_rows(keys: Sequence[str] | pa.Array, ids: np.ndarray, offsets: np.ndarray,
                       events: InputEvents, keys_table: ResourceTable | None = None
                       ) -> ExpectedOutputs:
    """The expected outputs ``keys[k]`` ← ``ids[offsets[k]:offsets[k+1]]`` over ``events``.

    Keys are coded with ``keys_table`` (a new table if None), the table the streaming
    outputs' keys must be coded with too; rows come out in key order with their IDs
    ascending, like :func:`~pgval.oracle.expected_outputs`' (``window_start`` is 0:
    a job's key carries its window, if any). Two rows with one key are refused.
    """
    table = keys_table if keys_table is not None else ResourceTable()
    ids = np.asarray(ids, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(offsets) != len(keys) + 1 or offsets[0] != 0 or offsets[-1] != len(ids) or (
            np.diff(offsets) < 0).any():
        raise ValueError("offsets must run from 0 to len(ids), one more than keys")
    keys = keys if isinstance(keys, pa.Array) else pa.array(list(keys), pa.string())
    if keys.null_count:
        raise RowsError("the batch result has a row whose key is null")
    codes = table.encode(keys).astype(np.int32)
    if len(np.unique(codes)) != len(codes):
        _, first_at, counts = np.unique(codes, return_index=True, return_counts=True)
        first = keys[int(first_at[np.flatnonzero(counts > 1)[0]])].as_py()
        raise RowsError(f"the batch result has two rows with the key {first}: the key "
                        "columns do not identify an output (declare build.key)")
    sizes = np.diff(offsets)
    row_of_id = np.repeat(np.arange(len(keys)), sizes)
    order = np.lexsort((ids, codes[row_of_id]))  # by key, then ID
    ids_sorted_by_row = ids[order]
    row_sorted = row_of_id[order]
    # Rows in key order: the new row index of old row r is its rank by code.
    rank = np.empty(len(keys), dtype=np.int64)
    rank[np.argsort(codes, kind="stable")] = np.arange(len(keys))
    new_sizes = np.zeros(len(keys), dtype=np.int64)
    np.add.at(new_sizes, rank[row_sorted], 1)
    new_offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(new_sizes, out=new_offsets[1:])

    # One slot per (input, row) pair, by ID then row: an ID of a fan-out has several.
    by_id = np.lexsort((rank[row_of_id], ids))
    id_sorted = ids[by_id]
    if len(id_sorted) > 1 and (twice := np.flatnonzero(
            (id_sorted[1:] == id_sorted[:-1])
            & (row_of_id[by_id][1:] == row_of_id[by_id][:-1]))).size:
        raise RowsError(f"the batch result lists input ID {int(id_sorted[twice[0]])} twice in "
                        "one row (collect_list after an explode or a join can; collect_set "
                        "or array_distinct lists each input once)")
    inputs, duplicates = deduplicate_inputs(events)
    in_order = np.argsort(inputs.id, kind="stable")
    at = np.searchsorted(inputs.id[in_order], id_sorted)
    found = (at < len(in_order)) & (inputs.id[in_order][np.minimum(at, len(in_order) - 1)]
                                    == id_sorted) if len(in_order) else np.zeros(
        len(id_sorted), dtype=bool)
    if not found.all():
        stray = int(id_sorted[np.flatnonzero(~found)[0]])
        raise RowsError(f"the batch result lists ID {stray}, which is no input of the run")
    src = in_order[at]
    n_rows = len(keys)
    return ExpectedOutputs(
        topology=JOB,
        window_ms=1,
        window_start=np.zeros(n_rows, dtype=np.int64),
        resource=np.sort(codes).astype(np.int32),
        gets=new_sizes,
        posts=np.zeros(n_rows, dtype=np.int64),
        ids=ids_sorted_by_row,
        offsets=new_offsets,
        id_sorted=id_sorted,
        id_output=rank[row_of_id[by_id]],
        id_ingress=inputs.ingress_ts[src],
        id_event_ts=inputs.event_ts[src],
        resources=table,
        duplicate_inputs=duplicates,
    )


#: Between a row's key text and its one ID when rows are keyed by their ID.
ID_SEPARATOR = "#id="


def key_by_single_id(rows: pa.Table) -> tuple[pa.Table, bool]:
    """Rows keyed by their one ID when their key texts repeat and every row has exactly
    one ID (a job with one output per input, no key declared: two outputs may share every
    column, and the ID is what tells them apart); else the rows as they are. True when
    re-keyed: the streaming outputs are then keyed the same way (:func:`single_id_keys`)."""
    if rows.num_rows == 0:
        return rows, False
    keys = rows.column("key").combine_chunks()
    if pc.count_distinct(keys).as_py() == rows.num_rows:
        return rows, False
    ids = rows.column("ids").combine_chunks()
    if not pc.all(pc.equal(pc.list_value_length(ids), 1)).as_py():
        return rows, False
    return rows.set_column(rows.schema.get_field_index("key"), "key",
                           single_id_keys(keys, ids)), True


def single_id_keys(keys: pa.Array, ids: pa.Array) -> pa.Array:
    """``key#id=ID`` for each row with exactly one ID; other rows keep their key text (an
    output listing several IDs where each expected row has one then matches no key)."""
    lengths = pc.list_value_length(ids).fill_null(0)
    one = pc.equal(lengths, 1)
    first = pc.list_element(pc.if_else(one, ids, pa.scalar([0], ids.type)), 0)
    joined = pc.binary_join_element_wise(keys, pc.cast(first, pa.string()), ID_SEPARATOR)
    return pc.if_else(one, joined, keys)


def set_aside_rows(rows: pa.Table, control_ids: Sequence[int] | np.ndarray | None
                   ) -> pa.Table:
    """The batch oracle's rows without pgval's own IDs (an inclusive range), by the rule
    the outputs are cleaned with (:func:`pgval.evidence.bundle.set_aside_control`; a range
    of negative IDs, or the IDs themselves as a sorted array): those IDs
    leave every row, and a row left without an ID — it held only pgval's events — goes.
    The batch ran over every record, pgval's priming and closing events too, exactly as
    the stream did, so whatever those events do to a job's rows they do on both sides."""
    if control_ids is None or len(control_ids) == 0 or rows.num_rows == 0:
        return rows
    ids_col = rows.column("ids").combine_chunks()
    flat = pc.list_flatten(ids_col).to_numpy(zero_copy_only=False).astype(np.int64)
    parent = pc.list_parent_indices(ids_col).to_numpy(zero_copy_only=False)
    if isinstance(control_ids, np.ndarray):  # the IDs themselves (coordinates)
        keep = ~np.isin(flat, control_ids)
    else:
        lo, hi = int(control_ids[0]), int(control_ids[1])
        keep = (flat < lo) | (flat > hi)
    if keep.all():
        return rows
    old = pc.list_value_length(ids_col).fill_null(0).to_numpy(zero_copy_only=False)
    new = np.bincount(parent[keep], minlength=rows.num_rows)
    kept_rows = ~((new == 0) & (old > 0))
    offsets = np.zeros(int(kept_rows.sum()) + 1, dtype=np.int32)
    np.cumsum(new[kept_rows], out=offsets[1:])
    values = flat[keep & kept_rows[parent]]
    out = {"key": rows.column("key").combine_chunks().filter(pa.array(kept_rows)),
           "ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int64()))}
    if "value" in rows.column_names:  # a row's values: those of every record, own ones too
        out["value"] = rows.column("value").combine_chunks().filter(pa.array(kept_rows))
    return pa.table(out)


def disagreement(batch: ExpectedOutputs, own: ExpectedOutputs) -> str | None:
    """Where a built-in job's batch expectation (keys ``{"window_start", "resource"}``)
    and pgval's own oracle of that topology differ, in one sentence; None when every
    expected ID is expected in the same output by both."""
    if not np.array_equal(batch.id_sorted, own.id_sorted):
        only_batch = np.setdiff1d(batch.id_sorted, own.id_sorted)
        only_own = np.setdiff1d(own.id_sorted, batch.id_sorted)
        which = (f"ID {int(only_batch[0])} only in the batch's" if len(only_batch)
                 else f"ID {int(only_own[0])} only in pgval's own" if len(only_own)
                 else "an ID expected a different number of times")
        return (f"the two oracles disagree: {len(batch.id_sorted):,} IDs expected by the "
                f"job's batch run, {len(own.id_sorted):,} by pgval's own; {which}")
    # Each batch row's key in the own oracle's terms (rows are few: windows x resources).
    window = np.zeros(len(batch), dtype=np.int64)
    resource = np.full(len(batch), -1, dtype=np.int64)
    for row, code in enumerate(batch.resource.tolist()):
        try:
            key = json.loads(batch.resources.names[code])
            window[row] = int(key["window_start"])
            resource[row] = own.resources.codes.get(str(key["resource"]), -1)
        except (ValueError, KeyError, TypeError):
            return (f"the two oracles disagree: the batch's key {batch.resources.names[code]!r} "
                    "is not a window_start and a resource")
    same = ((window[batch.id_output] == own.window_start[own.id_output])
            & (resource[batch.id_output] == own.resource[own.id_output]))
    if same.all():
        return None
    first = int(np.flatnonzero(~same)[0])
    return (f"the two oracles disagree on {int((~same).sum()):,} IDs' outputs, e.g. ID "
            f"{int(batch.id_sorted[first])}: the batch's "
            f"{batch.resources.names[batch.resource[batch.id_output[first]]]}, pgval's own "
            f"window {int(own.window_start[own.id_output[first]])} resource "
            f"{own.resources.names[own.resource[own.id_output[first]]]}")


# ---------------------------------------------------------------- a job judged by its rows
@dataclass
class RowsMatch:
    """A streaming job's rows matched with its batch run's rows, each expected row one
    synthetic input (IDs 1..n): what the ID validator then judges."""

    expected_keys: pa.Array  # unique key texts, ascending
    expected_ids: np.ndarray  # synthetic IDs by key
    expected_offsets: np.ndarray
    events: InputEvents  # one per expected row; ingress = its first equal output's time
    output_ids: pa.Array  # list<int64> per kept output: the row it equals, or a foreign ID
    kept: np.ndarray  # outputs not set aside (those equal to pgval's own rows)
    set_aside: int


def occurrence_ranks(codes: np.ndarray) -> np.ndarray:
    """Each element's occurrence number among equal codes, in the given order."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.r_[True, sorted_codes[1:] != sorted_codes[:-1]] if len(codes) else np.zeros(
        0, dtype=bool)
    first = np.maximum.accumulate(np.where(starts, np.arange(len(codes)), 0))
    ranks = np.empty(len(codes), dtype=np.int64)
    ranks[order] = np.arange(len(codes)) - first
    return ranks


def match_rows(exp_keys: pa.Array, exp_values: pa.Array, exp_own: np.ndarray,
               out_keys: pa.Array, out_values: pa.Array, out_ts: np.ndarray) -> RowsMatch:
    """Match outputs (in stream order) with expected rows by their whole text (key and
    value): the k-th output equal to a row text takes the k-th expected copy's ID, an
    output beyond the copies repeats the last one's (a duplicate), an output equal to no
    expected row gets an ID of its own that no input has (incorrect). Outputs equal to
    pgval's own rows (``exp_own``: rows only pgval's own records made) are set aside: all
    of them, or where a real row has the same text, as many as there are own rows.
    Vectorised: no per-row Python."""
    exp_keys, exp_values, out_keys, out_values = (
        a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
        for a in (exp_keys, exp_values, out_keys, out_values))
    sep = "\x00"
    exp_text = pc.binary_join_element_wise(exp_keys, exp_values, sep)
    out_text = pc.binary_join_element_wise(out_keys, out_values, sep)
    encoded = pc.dictionary_encode(pa.concat_arrays([exp_text.cast(pa.string()),
                                                     out_text.cast(pa.string())]))
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n_exp = len(exp_text)
    exp_codes, out_codes = codes[:n_exp], codes[n_exp:]
    size = len(encoded.dictionary)
    exp_own = np.asarray(exp_own, dtype=bool)
    own_count = np.bincount(exp_codes[exp_own], minlength=size)
    real = np.flatnonzero(~exp_own)
    real_count = np.bincount(exp_codes[real], minlength=size)
    # Synthetic IDs 1..m for the real expected rows, by key text, copies of one text
    # next to each other (so a text's k-th copy is its first copy's ID + k).
    key_rank = np.unique(exp_keys.to_numpy(zero_copy_only=False), return_inverse=True)[1]
    order = real[np.lexsort((exp_codes[real], key_rank[real]))]
    syn = np.zeros(n_exp, dtype=np.int64)
    syn[order] = np.arange(1, len(order) + 1)
    first_copy = np.full(size, -1, dtype=np.int64)
    is_first = occurrence_ranks(exp_codes[order]) == 0
    first_copy[exp_codes[order][is_first]] = syn[order][is_first]
    rank = occurrence_ranks(out_codes)
    has = real_count[out_codes] > 0
    # pgval's own rows are not judged: every output equal to a row only pgval's records
    # made is set aside, however often (a dedup whose state the watermark evicted writes
    # the priming's row again for the closing records; the batch writes it once); a text
    # that is also a real row's gives up only as many copies as pgval's records made.
    aside = (own_count[out_codes] > 0) & (~has | (rank < own_count[out_codes]))
    r = rank - own_count[out_codes]
    pick = np.where(has, np.minimum(r, real_count[out_codes] - 1), 0)
    # Copies of one text are consecutive in ``order``: first copy + k.
    out_ids = np.where(has, first_copy[out_codes] + pick, 0)
    foreign = ~has & ~aside
    out_ids[foreign] = len(order) + 1 + np.arange(int(foreign.sum()))
    kept = ~aside
    # Each expected row's ingress: the time of its first equal output (-1: none).
    ingress = np.full(len(order) + 1, -1, dtype=np.int64)
    first_match = kept & has & (r < real_count[out_codes])
    ingress[out_ids[first_match]] = np.asarray(out_ts, dtype=np.int64)[first_match]
    keys_sorted = exp_keys.take(pa.array(order))
    unique_keys, starts = np.unique(keys_sorted.to_numpy(zero_copy_only=False),
                                    return_index=True)
    offsets = np.r_[starts, len(order)].astype(np.int64)
    m = len(order)
    table = ResourceTable(["row"])
    events = InputEvents(np.arange(1, m + 1, dtype=np.int64), np.ones(m, dtype=bool),
                         np.zeros(m, dtype=np.int32), ingress[1:], ingress[1:], table)
    kept_ids = out_ids[kept]
    return RowsMatch(pa.array(unique_keys.tolist(), pa.string()), syn[order], offsets,
                     events, pa.ListArray.from_arrays(
                         pa.array(np.arange(len(kept_ids) + 1, dtype=np.int32)),
                         pa.array(kept_ids, pa.int64())), kept, int(aside.sum()))
