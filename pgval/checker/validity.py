"""Is this run evidence at all? ``valid`` or ``unknown``, with every reason.

Jepsen's checkers answer ``:valid? true | false | :unknown``; pgval's verdict (exactly-once,
…) is only worth something when the run behind it can be trusted. A run is *unknown* when
any of these holds, and each gives one plain reason:

* the read-back of a topic did not reach every partition's end offset, or hit an error;
* the records read do not reconcile with what the generator and pgval itself wrote;
* the drain timed out (the query never showed it had processed everything);
* the generator had failed or unacknowledged sends;
* the driver died (outside a driver-crash fault) or the query stopped;
* the fault has no evidence of taking effect (no process killed, no executor lost or
  killed executor still listed by the driver, no delay seen by the probe), or its removal
  failed;
* nothing was expected, or a phase had no expected inputs or no outputs (so that phase
  measured nothing: e.g. latency longer than warm-up plus a phase).

What was read is stored either way; ``pgval report`` leaves unknown runs out of its
aggregates unless asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pgval.checker.evaluate import Evaluation
from pgval.schema import PHASES


@dataclass
class Validity:
    reasons: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.reasons

    @property
    def label(self) -> str:
        return "valid" if self.valid else "unknown"

    def add(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def extend(self, reasons: Iterable[str]) -> None:
        for r in reasons:
            self.add(r)

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "validity_reasons": list(self.reasons)}


#: What each reason is about, by the start of its text (pgval's reasons are plain strings;
#: a re-check compares stored and recomputed validity by these kinds, not by wording).
#: ``observed``: seen live (the drain, the driver's death) and kept in the manifest, since
#: nothing after the run can recompute them.
REASON_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("data", ("nothing was expected", "the control phase had no", "the failure phase had no",
              "the recovery phase had no")),
    ("readback", ("read-back of topic",)),
    ("reconcile", ("input records read", "input topics hold")),
    ("generator", ("the generator had", "a generator process failed")),
    ("observed", ("the drain timed out", "the driver died")),
    ("fault", ("injecting ", "removing ", "crash:", "driver-crash:", "delay")),
)


def reason_kind(reason: str) -> str:
    """The kind of one validity reason (``other`` for one no rule knows)."""
    for kind, starts in REASON_KINDS:
        if reason.startswith(starts):
            return kind
    if reason.startswith("the ") and " fault was never " in reason:
        return "fault"
    return "other"


#: Faults that stop every output for the failure phase by design (the driver is down from
#: T2 until its restart at T3): a failure phase without outputs is then the fault's effect
#: (at-most-once shows it as lost input), not a latency longer than the phase.
SILENCING_FAULTS = ("driver-crash",)


def evaluation_reasons(ev: Evaluation, fault: str | None = None) -> list[str]:
    """Reasons visible in the data alone (``pgval check`` has nothing else), given the
    run's fault when there was one."""
    v = ev.validation
    reasons = []
    if v.expected == 0:
        reasons.append("nothing was expected: no usable inputs")
        return reasons
    if not ev.phases.bounded():
        return reasons
    out_phase = ev.phases.of(v.output_ingress)
    for code, name in enumerate(PHASES, start=1):
        if v.phases[name].expected == 0:
            reasons.append(f"the {name} phase had no expected inputs")
        if not (out_phase == code).any() and not (name == "failure"
                                                   and fault in SILENCING_FAULTS):
            reasons.append(f"the {name} phase had no outputs (latency longer than the phase?)")
    return reasons


def readback_reasons(readback: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One reason per topic whose read did not provably reach its end."""
    reasons = []
    for topic, info in readback.items():
        if not info.get("complete"):
            why = "; ".join(info.get("problems") or []) or "partitions not reached"
            reasons.append(f"read-back of topic {topic} incomplete: {why}")
    return reasons


def reconcile_inputs(read: int, end_offsets_total: int, delivered: int, control: int,
                     generator_clean: bool) -> tuple[dict[str, Any], list[str]]:
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
    return info, reasons


def generator_reasons(report: Mapping[str, Any]) -> list[str]:
    reasons = []
    failed, undelivered = int(report.get("failed") or 0), int(report.get("undelivered") or 0)
    if failed:
        reasons.append(f"the generator had {failed:,} failed sends")
    if undelivered:
        reasons.append(f"the generator had {undelivered:,} sends never acknowledged")
    for err in report.get("errors") or []:
        reasons.append(f"a generator process failed: {err}")
    return reasons
