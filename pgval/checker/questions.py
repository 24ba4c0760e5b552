"""Is the question ``pgval check`` was asked one its files can answer?

A wrong question gives a confident wrong answer: 5 s windows over outputs of 10 s windows
judged 58 % of the IDs unprocessed, and `valid`; ``pgval oracle``'s output fed back as
``--outputs`` (no ``ingress_ts``) was 12 malformed records and "none"; phases in seconds
put every record in recovery; an output clock in seconds put 60 of 60 outputs "before
their input"; MST outputs judged as SST, or one output whose window is 5 s long among
1 s windows, were judged as if nothing were wrong. Each check here looks at the records
and returns one sentence saying what is wrong (naming the field and the first line at
fault), or None.

Two kinds: a *wrong flag* (:func:`wrong_flags`: ``--window-ms`` other than the windows the
outputs carry, ``--phases`` that are no times of the records) is always refused; a *doubt*
about the records (:func:`doubts` before judging, :func:`judged_doubts` after: malformed
records, another topology's outputs, windows or an output clock the inputs contradict) is
refused unless ``--allow-malformed``, which judges the files anyway and makes the run
*unknown* with each doubt as its reason. All are vectorised over the columns; only the
one record a sentence names is looked at alone.
"""

from __future__ import annotations

import math

import numpy as np

from pgval.checker.evaluate import Evaluation
from pgval.checker.result import Reason
from pgval.core.schema import Topology
from pgval.oracle.expected import ExpectedOutputs
from pgval.records.parse import InputEvents, OutputRecords, line_of_record
from pgval.records.phases import Phases

#: Phase boundaries may lie this far outside the records' time span (and at least its
#: length): far enough for a START before the first record, never a factor of 1,000.
MIN_PHASE_MARGIN_MS = 60_000
#: What a clock is called by how many of its ticks make a millisecond (10^k).
UNITS = {-3: "seconds", 3: "microseconds", 6: "nanoseconds"}
#: What ``--allow-malformed`` does, said where a doubt is refused.
ALLOW = "pass --allow-malformed to judge the files anyway (the run is then unknown)"


def where(what: str, records: InputEvents | OutputRecords, record: int) -> str:
    """``input line 7`` (a file's line, from 1) or ``output record 7`` (no file to count
    lines in: Kafka, a pipe), for record number ``record`` (from 0)."""
    line = line_of_record(records.source, record) if records.source is not None else None
    return f"{what} line {line:,}" if line is not None else f"{what} record {record + 1:,}"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# --------------------------------------------------------------------------- wrong flags

def wrong_flags(events: InputEvents, outputs: OutputRecords, window_ms: int,
                phases: Phases) -> str | None:
    """The first flag the records contradict: ``--window-ms`` (unless the windows are on
    another clock altogether, which :func:`window_clock` says), then ``--phases``."""
    if window_clock(events, outputs, window_ms) is None:
        problem = window_mismatch(outputs, window_ms)
        if problem is not None:
            return problem
    return phases_off(phases, events, outputs, window_ms)


def window_mismatch(outputs: OutputRecords, window_ms: int) -> str | None:
    """The outputs' own window size, when they carry ``window_end`` and it is not
    ``window_ms`` in most of them."""
    has_end = outputs.window_end != -1
    if not has_end.any():
        return None
    sizes, n = np.unique(outputs.window_end[has_end] - outputs.window_start[has_end],
                         return_counts=True)
    size = int(sizes[np.argmax(n)])
    if size == window_ms or size <= 0:  # no size at all: window_defects names the output
        return None
    return (f"--window-ms is {window_ms:,} ms but the outputs' windows are {size:,} ms long "
            f"(window_end − window_start in {int(n.max()):,} of {int(has_end.sum()):,} "
            f"outputs); pass --window-ms {size}")


def phases_off(phases: Phases, events: InputEvents, outputs: OutputRecords,
               window_ms: int) -> str | None:
    """A phase boundary that is no time of these records (e.g. seconds for milliseconds):
    farther from every ingress time than the records' own span, or a minute, or a window."""
    times = np.concatenate([events.ingress_ts, outputs.ingress_ts])
    if not phases.bounded() or len(times) == 0:
        return None
    lo, hi = int(times.min()), int(times.max())
    margin = max(hi - lo, window_ms, MIN_PHASE_MARGIN_MS)
    bounds = {"START": phases.start, "T2": phases.t2, "T3": phases.t3}
    if phases.t4 is not None:
        bounds["T4"] = phases.t4
    for name, value in bounds.items():
        if lo - margin <= value <= hi + margin:
            continue
        seconds = lo - margin <= value * 1000 <= hi + margin
        hint = ("; it looks like seconds: --phases takes epoch milliseconds" if seconds
                else "; --phases takes epoch milliseconds of the records' ingress_ts")
        return (f"--phases {name} = {value} is no time of these records (their ingress times "
                f"run from {lo} to {hi}){hint}")
    return None


# --------------------------------------------------------------------------- doubts

def doubts(events: InputEvents, outputs: OutputRecords, topology: str,
           window_ms: int) -> list[str]:
    """Every doubt the records raise before judging, most basic first."""
    clock = window_clock(events, outputs, window_ms)
    found = [*malformed(events, outputs), topology_shape(outputs, topology), clock,
             window_defects(outputs, window_ms) if clock is None else None]
    return [f for f in found if f is not None]


def judged_doubts(ev: Evaluation, outputs: OutputRecords) -> list[str]:
    """Doubts that need each held ID's input (the oracle's index): an output clock in
    another unit or epoch, IDs in windows longer than ``--window-ms``."""
    held = _held(ev.expected, outputs)
    found = [output_clock(ev.expected, outputs, ev.window_ms, held),
             ids_outside_windows(ev.expected, outputs, ev.window_ms, held)]
    return [f for f in found if f is not None]


def refusal(doubt: str) -> str:
    """The sentence a doubt is refused with."""
    return f"{doubt}; {ALLOW}"


def malformed(events: InputEvents, outputs: OutputRecords) -> list[str]:
    """Outputs, then inputs, with malformed records: the first one's line, field and fault,
    and how many there are."""
    found = []
    for what, records in (("output", outputs), ("input", events)):
        n = records.malformed
        if not n:
            continue
        total = n + len(records)
        d = records.defect
        head = (f"{where(what, records, d.record)} {d.problem}" if d is not None
                else f"{what} records are malformed")
        if what == "output" and d is not None and d.problem == "lacks the field 'ingress_ts'":
            head += (" (is it `pgval oracle` output? recorded outputs need the ingress time of "
                     "each output record)")
        found.append(f"{head}: {n:,} of {_plural(total, what + ' record')} "
                     f"{'is' if n == 1 else 'are'} malformed")
    return found


def topology_shape(outputs: OutputRecords, topology: str) -> str | None:
    """Outputs with the other topology's count fields and not this one's: SST writes
    ``count``, MST ``gets`` and ``posts``."""
    has_count = outputs.count != -1
    has_split = (outputs.gets != -1) | (outputs.posts != -1)
    if topology == Topology.SST:
        other, theirs, mine, name = has_split & ~has_count, "'gets'/'posts'", "'count'", "mst"
    elif topology == Topology.MST:
        other, theirs, mine, name = has_count & ~has_split, "'count'", "'gets'/'posts'", "sst"
    else:
        return None
    k = int(other.sum())
    if not k:
        return None
    first = int(outputs.position[np.flatnonzero(other)[0]])
    return (f"{where('output', outputs, first)} has {theirs} and no {mine}, the fields of "
            f"{name.upper()} outputs, not {str(topology).upper()}'s ({k:,} of "
            f"{_plural(len(outputs), 'output')}); if they are {name.upper()}'s, pass "
            f"--topology {name}")


def _event_span(events: InputEvents, window_ms: int) -> tuple[int, int, int]:
    """(first window start, last event time, margin) of the inputs' event times."""
    lo = int(events.event_ts.min()) // window_ms * window_ms
    hi = int(events.event_ts.max())
    return lo, hi, max(hi - lo, window_ms, MIN_PHASE_MARGIN_MS)


def _unit_in_range(value: float, lo: float, hi: float) -> str | None:
    """The clock ``value`` is in when, read in milliseconds, it lands in [lo, hi]."""
    return next((name for k, name in UNITS.items() if lo <= value / 10.0 ** k <= hi), None)


def _unit_by_ratio(value: float, reference: float) -> str | None:
    """The clock ``value`` is in when it is ~10^k times a ``reference`` in milliseconds."""
    if value <= 0 or reference <= 0:
        return None
    ratio = math.log10(value / reference)
    return next((name for k, name in UNITS.items() if abs(ratio - k) < 0.5), None)


def _looks(unit: str | None) -> str:
    return f"; it looks like {unit}" if unit is not None else ""


def window_clock(events: InputEvents, outputs: OutputRecords, window_ms: int) -> str | None:
    """Most outputs' ``window_start`` farther from every input's event time than the
    inputs' own span (a minute, a window): windows in seconds, or another epoch."""
    if not len(outputs) or not len(events):
        return None
    lo, hi, margin = _event_span(events, window_ms)
    ws = outputs.window_start
    off = (ws < lo - margin) | (ws > hi + margin)
    k = int(off.sum())
    if k * 2 <= len(outputs):
        return None
    i = int(np.flatnonzero(off)[0])
    value = int(ws[i])
    unit = _looks(_unit_in_range(float(value), lo - margin, hi + margin))
    return (f"{where('output', outputs, int(outputs.position[i]))} has 'window_start': "
            f"{value}, no window of the inputs' event times (event_ts from {lo} to {hi}), "
            f"and so do {k:,} of {_plural(len(outputs), 'output')}{unit}: window_start and "
            "window_end are epoch milliseconds, as event_ts")


def window_defects(outputs: OutputRecords, window_ms: int) -> str | None:
    """Outputs whose window is no window of ``--window-ms``: a ``window_start`` that is not
    a multiple of it, or a ``window_end`` that is not ``window_start + window_ms``."""
    if not len(outputs):
        return None
    has_end = outputs.window_end != -1
    wrong_length = has_end & (outputs.window_end - outputs.window_start != window_ms)
    unaligned = outputs.window_start % window_ms != 0
    bad = wrong_length | unaligned
    k = int(bad.sum())
    if not k:
        return None
    i = int(np.flatnonzero(bad)[0])
    start, end = int(outputs.window_start[i]), int(outputs.window_end[i])
    if wrong_length[i]:
        fault = (f"has 'window_end': {end}, not after its 'window_start' {start}" if end <= start
                 else f"has a window {end - start:,} ms long (window_end − window_start), "
                      f"not --window-ms {window_ms:,}")
    else:
        fault = (f"has 'window_start': {start}, not a multiple of --window-ms {window_ms:,} "
                 "(where the question's windows start)")
    return (f"{where('output', outputs, int(outputs.position[i]))} {fault}: "
            f"{k:,} of {_plural(len(outputs), 'output')} {'is' if k == 1 else 'are'} "
            "no window of the question")


#: The held IDs :func:`_held` looks at, at most: evenly spaced through the outputs, so a
#: majority of outputs is judged as well from them as from all (a sample can only make an
#: output look later than its newest input, never earlier) at a fraction of the cost.
SAMPLE_IDS = 200_000


#: What :func:`_held` answers: each sampled held ID's output, oracle slot and place.
Held = tuple[np.ndarray, np.ndarray, np.ndarray]


def _held(expected: ExpectedOutputs, outputs: OutputRecords) -> Held:
    """Held IDs that are expected inputs, up to :data:`SAMPLE_IDS` of them evenly spaced:
    (their output, their slot in the oracle's index, their place in ``outputs.ids``), in
    output order."""
    n_exp, n_ids = len(expected.id_sorted), len(outputs.ids)
    if n_exp == 0 or n_ids == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    at = np.arange(0, n_ids, -(-n_ids // SAMPLE_IDS), dtype=np.int64)
    owner = np.searchsorted(outputs.offsets, at, side="right") - 1
    ids = outputs.ids[at]
    slot = np.minimum(np.searchsorted(expected.id_sorted, ids), n_exp - 1)
    found = expected.id_sorted[slot] == ids
    return owner[found], slot[found], at[found]


def output_clock(expected: ExpectedOutputs, outputs: OutputRecords, window_ms: int,
                 held: Held | None = None) -> str | None:
    """An output clock that is not the inputs' ingress clock: most outputs stamped before
    the newest input they hold (seconds, or another epoch), or ~1,000× later than it
    (microseconds, nanoseconds). ``held``: :func:`_held`'s answer, when already known."""
    owner, slot, _ = held if held is not None else _held(expected, outputs)
    if len(owner) == 0:
        return None
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    holders = owner[starts]
    newest = np.maximum.reduceat(expected.id_ingress[slot], starts)
    stamped = outputs.ingress_ts[holders]
    lag = stamped - newest
    span = int(expected.id_ingress.max()) - int(expected.id_ingress.min())
    margin = max(span, window_ms, MIN_PHASE_MARGIN_MS)
    med_out, med_in = float(np.median(stamped)), float(np.median(newest))
    unit = _unit_by_ratio(med_out, med_in)
    early = lag < 0
    late = lag > margin
    if int(early.sum()) * 2 > len(holders):
        off, how = early, "before"
    elif unit in ("microseconds", "nanoseconds") and int(late.sum()) * 2 > len(holders):
        off, how = late, "far after"
    else:
        return None
    i = int(np.flatnonzero(off)[0])
    return (f"{where('output', outputs, int(outputs.position[holders[i]]))} has 'ingress_ts': "
            f"{int(stamped[i])}, {how} the newest input it holds (ingress_ts "
            f"{int(newest[i])}), and so do {int(off.sum()):,} of "
            f"{_plural(len(holders), 'output')} holding inputs{_looks(unit)}: the outputs' "
            "ingress_ts must be epoch milliseconds on the inputs' clock")


def ids_outside_windows(expected: ExpectedOutputs, outputs: OutputRecords, window_ms: int,
                        held: Held | None = None) -> str | None:
    """Most outputs holding IDs whose event time lies outside the output's window of
    ``--window-ms``: the job's windows are longer (or not tumbling windows of it)."""
    owner, slot, occurrence = held if held is not None else _held(expected, outputs)
    if len(owner) == 0:
        return None
    own_start = expected.window_start[expected.id_output[slot]]
    off = own_start != outputs.window_start[owner]
    bad = np.unique(owner[off])
    n = len(np.unique(owner))
    if len(bad) * 2 <= n:
        return None
    j = int(np.flatnonzero(off)[0])
    i = int(owner[j])
    at = where("output", outputs, int(outputs.position[i]))
    return (f"--window-ms is {window_ms:,} ms but {at} (window_start "
            f"{int(outputs.window_start[i])}) holds ID {int(outputs.ids[occurrence[j]])} of "
            f"event_ts {int(expected.id_event_ts[slot[j]])}, outside its window, and so do "
            f"{len(bad):,} of {_plural(n, 'output')} holding inputs (are the job's windows "
            "longer, or not tumbling windows of --window-ms?)")


def nothing_to_judge(outputs: OutputRecords, phases: Phases) -> Reason | None:
    """No usable output record and no phases: nothing shows the processor ran, so an
    "at-most-once" would only say the file is empty (or all malformed)."""
    if len(outputs) or phases.bounded():
        return None
    return Reason("data", "no usable output records and no phases: nothing shows that the "
                          "processor ran (an empty output file?)")
