"""A check's answer: ``valid`` or ``unknown``, with typed reasons.

Jepsen's checkers each return ``{:valid? …}`` and ``checker/compose`` merges them; pgval's
checks (the read-back, the reconciliation of inputs, the generator, the fault's evidence,
the data itself) do the same with :class:`Result`. A reason has a *kind*, fixed where the
reason is made, and a sentence for people: a re-check compares stored and recomputed
validity by kind, never by the sentence's wording. The stored form of a reason is a
``{"kind", "text"}`` object (:meth:`Reason.as_record`), in run.json and in the database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

#: What a reason is about. ``observed``: seen live (the drain, the driver's death) and kept
#: in the manifest, since nothing after the run can recompute it. ``other``: a reason stored
#: before reasons had kinds whose words no rule of :mod:`pgval.evidence.recheck`'s legacy reader
#: knows; a re-check carries it unchanged (no check of today makes one).
ReasonKind = Literal["data", "readback", "reconcile", "generator", "observed", "fault",
                     "other"]
REASON_KINDS: tuple[ReasonKind, ...] = ("data", "readback", "reconcile", "generator",
                                        "observed", "fault", "other")

Status = Literal["valid", "unknown"]


@dataclass(frozen=True)
class Reason:
    """Why a run is not evidence: what it is about (``kind``) and what happened (``text``)."""

    kind: ReasonKind
    text: str

    def __post_init__(self) -> None:
        if self.kind not in REASON_KINDS:
            raise ValueError(f"unknown reason kind {self.kind!r}")

    def __str__(self) -> str:
        return self.text

    def as_record(self) -> dict[str, str]:
        """The stored form: ``{"kind": …, "text": …}``."""
        return {"kind": self.kind, "text": self.text}


def reasons_from_records(value: object) -> list[Reason] | None:
    """Stored ``{"kind", "text"}`` records back as reasons; None unless ``value`` is a list
    of such records with known kinds (a damaged value is not guessed at)."""
    if not isinstance(value, list):
        return None
    reasons = []
    for record in value:
        if not (isinstance(record, dict) and record.get("kind") in REASON_KINDS
                and isinstance(record.get("text"), str)):
            return None
        reasons.append(Reason(record["kind"], record["text"]))
    return reasons


@dataclass(frozen=True)
class Result:
    """One check's answer; :func:`compose` merges several (unknown if any is)."""

    reasons: tuple[Reason, ...] = field(default_factory=tuple)

    @property
    def status(self) -> Status:
        return "valid" if not self.reasons else "unknown"

    @property
    def valid(self) -> bool:
        return not self.reasons

    def kinds(self) -> set[str]:
        return {r.kind for r in self.reasons}

    @property
    def texts(self) -> list[str]:
        """The reasons' sentences, in order (what ``--json`` shows as ``validity_reasons``)."""
        return [r.text for r in self.reasons]


def compose(*results: Result | Iterable[Reason]) -> Result:
    """All reasons of ``results`` in order, each once: valid only if every part is."""
    seen: dict[Reason, None] = {}
    for part in results:
        for reason in (part.reasons if isinstance(part, Result) else part):
            if not isinstance(reason, Reason):  # a plain string would lose its kind
                raise TypeError(f"a check returned {reason!r}, not a Reason")
            seen.setdefault(reason, None)
    return Result(tuple(seen))
