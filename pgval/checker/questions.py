"""Is the question ``pgval check`` was asked one its files can answer?

A wrong question gives a confident wrong answer: 5 s windows over outputs of 10 s windows
judged 58 % of the IDs unprocessed, and `valid`; ``pgval oracle``'s output fed back as
``--outputs`` (no ``ingress_ts``) was 12 malformed records and "none"; phases in seconds
put every record in recovery. Each check here looks at the records alone and returns one
sentence saying what is wrong, or None; the command refuses (exit 2) on the first.
"""

from __future__ import annotations

import numpy as np

from pgval.checker.result import Reason
from pgval.records.parse import InputEvents, OutputRecords
from pgval.records.phases import Phases

#: Phase boundaries may lie this far outside the records' time span (and at least its
#: length): far enough for a START before the first record, never a factor of 1,000.
MIN_PHASE_MARGIN_MS = 60_000


def missing_fields(events: InputEvents, outputs: OutputRecords) -> str | None:
    """A required field that records lack (the count and a hint), or None."""
    for what, records, missing in (("output", outputs, outputs.missing),
                                   ("input", events, events.missing)):
        if not missing:
            continue
        name, n = max(missing.items(), key=lambda item: item[1])
        kept = len(records)
        hint = (" (is it `pgval oracle` output? recorded outputs need the ingress time of "
                "each output record)" if what == "output" and name == "ingress_ts" else "")
        return (f"{n:,} {what} record{'s' if n != 1 else ''} lack{'s' if n == 1 else ''} "
                f"the field {name!r}{hint}, {kept:,} {what}s are usable; pass "
                "--allow-malformed to judge what is left")
    return None


def window_mismatch(outputs: OutputRecords, window_ms: int) -> str | None:
    """The outputs' own window size, when they carry ``window_end`` and it is not
    ``window_ms`` in most of them."""
    has_end = outputs.window_end != -1
    if not has_end.any():
        return None
    sizes, n = np.unique(outputs.window_end[has_end] - outputs.window_start[has_end],
                         return_counts=True)
    size = int(sizes[np.argmax(n)])
    if size == window_ms:
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


def nothing_to_judge(outputs: OutputRecords, phases: Phases) -> Reason | None:
    """No usable output record and no phases: nothing shows the processor ran, so an
    "at-most-once" would only say the file is empty (or all malformed)."""
    if len(outputs) or phases.bounded():
        return None
    return Reason("data", "no usable output records and no phases: nothing shows that the "
                          "processor ran (an empty output file?)")
