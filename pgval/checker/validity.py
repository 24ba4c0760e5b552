"""Is this run evidence at all? ``valid`` or ``unknown``, with every reason.

Jepsen's checkers answer ``:valid? true | false | :unknown``; pgval's verdict (exactly-once,
…) is only worth something when the run behind it can be trusted. A run is *unknown* when
any of these holds, and each gives one plain reason of one kind
(:class:`pgval.checker.result.Reason`):

* ``readback``: the read-back of a topic did not reach every partition's end offset, or hit
  an error;
* ``reconcile``: the records read do not reconcile with what the generator and pgval itself
  wrote;
* ``generator``: the generator had failed or unacknowledged sends;
* ``data``: nothing was expected, a phase had no expected inputs (the load did not go
  through it: the judged run is not the experiment the phases describe), an input ID
  occurs more than once in the input topics (its duplicate outputs are not the job's doing),
  or ``pgval check --allow-malformed`` judged files it doubts (malformed records, …);
* ``observed``: the drain timed out, or the driver died outside a driver-crash fault (seen
  live, made by :mod:`pgval.run.monitor` and :mod:`pgval.run.experiment`);
* ``fault``: the fault has no evidence of taking effect, or its removal failed (made by
  :mod:`pgval.faults.took_effect` from the fault log).

A phase without outputs is no reason: it is a measurement (throughput 0, latency undefined,
:mod:`pgval.checker.metrics`), since every ID is still classified. A run is unknown only when
the verdict itself is in doubt.

Each check here returns a :class:`~pgval.checker.result.Result`; :class:`Validity` composes
them. What was read is stored either way; ``pgval report`` leaves unknown runs out of its
aggregates unless asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pgval.checker.evaluate import Evaluation
from pgval.checker.result import Reason, ReasonKind, Result, Status, compose
from pgval.core.schema import PHASES


class Validity:
    """A run's validity as it is built up: each check's :class:`Result` (or reasons) added
    as the run goes, composed like Jepsen's ``checker/compose`` (unknown if any part is,
    each reason once, in the order found)."""

    def __init__(self, *parts: Result | Iterable[Reason]) -> None:
        self.result = compose(*parts)

    def add(self, *parts: Reason | Result | Iterable[Reason]) -> None:
        self.result = compose(self.result, *(
            [p] if isinstance(p, Reason) else p for p in parts))

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return self.result.reasons

    @property
    def texts(self) -> list[str]:
        return self.result.texts

    @property
    def valid(self) -> bool:
        return self.result.valid

    @property
    def status(self) -> Status:
        return self.result.status

    def kinds(self) -> set[str]:
        return self.result.kinds()

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` keys (the contract: a list of sentences, no kinds)."""
        return {"valid": self.valid, "validity_reasons": self.texts}

    def records(self) -> list[dict[str, str]]:
        """The stored form, kinds included (run.json's and the database's ``validity``)."""
        return [r.as_record() for r in self.reasons]


def evaluation_reasons(ev: Evaluation) -> Result:
    """Reasons visible in the data alone (``pgval check`` has nothing else); none depends on
    the fault, since a silent phase is a measurement."""
    v = ev.validation
    if v.expected == 0:
        return Result((Reason("data", "nothing was expected: no usable inputs"),))
    reasons = []
    if ev.oracles:
        reasons.append(f"{ev.oracles}: the verdict rests on an expectation pgval cannot "
                       "confirm")
    late = ev.late or {}
    doubtful = ((ev.unprocessed_causes.get("counts") or {}).get("late or lost")
                or (ev.by_rows and v.unprocessed))  # a missing row may be a dropped one
    if late and not late.get("told_apart") and doubtful:
        reasons.append(f"Spark dropped {late.get('run_dropped_rows', 0):,} rows behind the "
                       "watermark and pgval could not tell them from losses "
                       f"({late.get('why')}): what they dropped is counted unprocessed")
    if v.duplicate_inputs:
        reasons.append(f"{v.duplicate_inputs:,} input records repeat an ID already in the "
                       "inputs: their outputs show duplicates the job did not make")
    if ev.phases.bounded():
        # By rows, a phase's load is its real input records (rows have no input time).
        load = ev.phase_inputs or {name: v.phases[name].expected for name in PHASES}
        reasons += [f"the {name} phase had no expected inputs: no load went through it, so "
                    "the verdict says nothing about it" for name in PHASES
                    if load.get(name, 0) == 0]
    return _of("data", reasons)


def doubt_reasons(doubts: Iterable[str]) -> Result:
    """What ``pgval check --allow-malformed`` judged in spite of a doubt about its files
    (:mod:`pgval.checker.questions`: malformed records, another topology's outputs, windows
    or an output clock the inputs contradict): the verdict stands on records pgval could
    not take at their word, so the run is unknown, each doubt with its count a reason."""
    return _of("data", (f"{d} (judged anyway: --allow-malformed)" for d in doubts))


def _of(kind: ReasonKind, texts: Iterable[str]) -> Result:
    """One check's sentences as its result, each of the check's own kind."""
    return Result(tuple(Reason(kind, t) for t in texts))


def readback_reasons(readback: Mapping[str, Mapping[str, Any]]) -> Result:
    """One reason per topic whose read did not provably reach its end."""
    reasons = []
    for topic, info in readback.items():
        if not info.get("complete"):
            why = "; ".join(info.get("problems") or []) or "partitions not reached"
            reasons.append(f"read-back of topic {topic} incomplete: {why}")
    return _of("readback", reasons)


def sink_reasons(kind: str, read: Mapping[str, Any]) -> Result:
    """A sink read back through its own log (``files``, ``delta``) that cannot show it saw
    everything: the log ends before the query's last committed batch, or names files that
    are missing or unreadable. ``read``: what the read recorded (run.json's
    ``sink.read``), so a re-check judges it as the run did."""
    counts = read.get("problem_counts") if isinstance(read.get("problem_counts"), Mapping) \
        else {}
    named = read.get("problems") if isinstance(read.get("problems"), Mapping) else {}
    what = "the file sink's log" if kind == "files" else "the Delta log"
    reasons = []
    batches, committed = read.get("log_batches"), read.get("committed_batches")
    if isinstance(batches, int) and isinstance(committed, int) and batches < committed:
        reasons.append(f"{what} names {batches} batches, the query committed {committed}")
    for problem, said in (("missing", "that are not there"),
                          ("unreadable_logged", "that cannot be read")):
        n = counts.get(problem) or 0
        if n:
            first = (named.get(problem) or ["?"])[0]
            reasons.append(f"{what} names {n} files {said} ({first}, …): their rows are "
                           "not judged")
    return _of("readback", reasons)


def reconcile_inputs(read: int, end_offsets_total: int, delivered: int, control: int,
                     generator_clean: bool) -> tuple[dict[str, Any], Result]:
    """Compare the input records read with what the producers say they wrote.

    Input topics are written by idempotent, non-transactional producers, so offsets are
    dense: records read must equal the sum of end offsets. And every delivered event plus
    pgval's own control events must be there; with a clean generator, nothing else may be.
    """
    expected_min = delivered + control
    info = {"read": read, "end_offsets": end_offsets_total, "delivered": delivered,
            "control": control, "expected": expected_min}
    reasons = []
    if read != end_offsets_total:
        reasons.append(f"input records read ({read:,}) differ from the topics' end offsets "
                       f"({end_offsets_total:,})")
    if read < expected_min:
        reasons.append(f"input topics hold {read:,} records, fewer than the {delivered:,} "
                       f"delivered plus {control:,} control events")
    elif generator_clean and read != expected_min:
        reasons.append(f"input topics hold {read:,} records, more than the {delivered:,} "
                       f"delivered plus {control:,} control events")
    info["ok"] = not reasons
    return info, _of("reconcile", reasons)


def generator_reasons(report: Mapping[str, Any]) -> Result:
    """The generator's own failures: inputs it counted may not be in Kafka."""
    reasons = []
    failed, undelivered = int(report.get("failed") or 0), int(report.get("undelivered") or 0)
    if failed:
        reasons.append(f"the generator had {failed:,} failed sends")
    if undelivered:
        reasons.append(f"the generator had {undelivered:,} sends never acknowledged")
    for err in report.get("errors") or []:
        reasons.append(f"a generator process failed: {err}")
    return _of("generator", reasons)
