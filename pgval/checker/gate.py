"""The CI gate: does a run keep the guarantee its job is expected to keep (``--expect``),
and the JUnit XML a CI system shows (``--junit``).

A verdict is *met* when the run is valid and its guarantee is at least as strong as the
expected one: exactly-once meets all three; at-least-once and at-most-once meet only
themselves (neither is stronger than the other); ``none`` meets nothing. A run whose
validity is unknown meets nothing either, but is not a failure of the job: the evidence
cannot say, and CI is told so by its own exit status.

A verdict read back from a stored run is met only by *verified* evidence (:attr:`Case.doubt`
says why not): a re-check whose evidence the results database did not vouch for (no
database, a run stored without hashes, an import), or whose stored figures differ from the
recomputed ones, is unknown whatever its verdict; so is a stored row of an imported run.

Exit statuses with ``--expect`` (:func:`exit_status`): 0 every case met, 1 a case weaker
than expected (a finding about the job), 3 a case unknown, 4 a run that did not finish (the
environment failed, or a signal stopped it: no verdict at all). The worst wins in that
order: 1, 4, 3, 0 — a weaker verdict is news whatever else happened; no case at all is 3.
An error keeps its own status (:mod:`pgval.core.errors`): 2 bad input, 3 evidence in doubt, 4
the environment; the gate's 3 and 4 are those kinds' statuses, so a CI script reads each
number one way.
"""

from __future__ import annotations

import re
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pgval.core.errors import EnvironmentFailure, EvidenceInDoubt
from pgval.core.files import open_public

#: What ``--expect`` accepts, strongest first.
EXPECTATIONS = ("exactly-once", "at-least-once", "at-most-once")
#: The exit statuses of a gated command, by outcome.
MET, WEAKER, UNKNOWN, FAILED = "met", "weaker", "unknown", "failed"
EXIT = {MET: 0, WEAKER: 1, UNKNOWN: EvidenceInDoubt.exit_status,
        FAILED: EnvironmentFailure.exit_status}
#: Which outcome decides a command's exit status when its cases differ: the first present.
PRECEDENCE = (WEAKER, FAILED, UNKNOWN, MET)
Outcome = Literal["met", "weaker", "unknown", "failed"]

#: ``runs.sealed`` of an imported run, as :mod:`pgval.store.results` writes it
#: (``SEALED_AT_IMPORT``, ``UNSEALED_IMPORT``; tests/test_gate.py holds them equal): no
#: verified evidence stands behind such a row.
IMPORTED_SEALS = {2: "imported: its hashes came from the run's own SHA256SUMS, not a seal "
                     "kept at the end of the run",
                  3: "imported without evidence hashes (unsealed)"}

#: The numbers a JUnit test case carries as properties, when the run has them.
KEY_NUMBERS = ("run_id", "expected", "processed", "duplicate", "incorrect", "unprocessed",
               "reliability", "failure_cost_s")


def meets(guarantee: str | None, expected: str) -> bool:
    """Whether verdict ``guarantee`` is at least as strong as ``expected``."""
    if expected not in EXPECTATIONS:
        raise ValueError(f"--expect must be one of {', '.join(EXPECTATIONS)}, not {expected!r}")
    return guarantee == "exactly-once" or guarantee == expected


@dataclass(frozen=True)
class Case:
    """One verdict to judge: a run (``validate``, ``check``, ``recheck``) or a matrix cell
    (its repetitions in ``runs``, the cell judged by its weakest). ``error`` is set when
    the run did not finish, and then there is no verdict. ``doubt`` is set when the
    verdict was read back from evidence that is not verified: it meets nothing."""

    name: str
    classname: str
    guarantee: str | None = None
    valid: bool = False
    reasons: tuple[str, ...] = ()
    numbers: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    runs: tuple[Case, ...] = ()
    doubt: str | None = None

    @classmethod
    def of_summary(cls, name: str, classname: str, summary: Mapping[str, Any],
                   seconds: float = 0.0) -> Case:
        """A case from a ``--json`` object (or a stored run's row); a re-check's evidence
        check and stored-figure comparison, or a row's import mark, set :attr:`doubt`."""
        reasons = summary.get("validity_reasons") or ()
        if isinstance(reasons, str):
            reasons = (reasons,)
        return cls(name, classname, guarantee=summary.get("guarantee"),
                   valid=bool(summary.get("valid")), reasons=tuple(map(str, reasons)),
                   numbers={k: summary[k] for k in KEY_NUMBERS if summary.get(k) is not None},
                   seconds=seconds, doubt=doubt_of(summary))

    @classmethod
    def failed(cls, name: str, classname: str, error: str, seconds: float = 0.0) -> Case:
        return cls(name, classname, error=error, seconds=seconds)

    @classmethod
    def cell(cls, name: str, classname: str, runs: Sequence[Case]) -> Case:
        """A matrix cell: its runs, judged together (:meth:`outcome` is the worst)."""
        return cls(name, classname, runs=tuple(runs),
                   seconds=sum(r.seconds for r in runs))

    def outcome(self, expected: str | None) -> Outcome:
        """MET, WEAKER, UNKNOWN or FAILED against ``expected`` (None: only the run's
        validity and completion are judged)."""
        if self.runs:
            return worst(r.outcome(expected) for r in self.runs)
        if self.error is not None:
            return FAILED
        if not self.valid or self.doubt is not None:
            return UNKNOWN
        if expected is not None and not meets(self.guarantee, expected):
            return WEAKER
        return MET

    def as_json(self, expected: str | None) -> dict[str, Any]:
        """The case as one JSON object (``matrix --json`` prints one a cell): its name, its
        outcome against ``expected``, its verdict line and, for a run, the guarantee,
        validity and key numbers; a matrix cell lists its repetitions so."""
        out: dict[str, Any] = {"name": self.name, "outcome": self.outcome(expected),
                               "verdict": self.verdict(), "seconds": round(self.seconds, 3)}
        if self.runs:
            return {**out, "runs": [{k: v for k, v in r.as_json(expected).items()
                                     if k != "verdict"} for r in self.runs]}
        return {**out, "guarantee": self.guarantee, "valid": self.valid,
                "validity_reasons": list(self.reasons), **dict(self.numbers),
                "error": self.error, "doubt": self.doubt}

    def verdict(self) -> str:
        """One line: the guarantee and validity, or why there is none."""
        if self.runs:
            return "; ".join(f"{r.name}: {r.verdict()}" for r in self.runs)
        if self.error is not None:
            return f"did not finish: {self.error}"
        n = self.numbers
        counts = (f" ({n['duplicate']:,} duplicate, {n['unprocessed']:,} unprocessed, "
                  f"{n['incorrect']:,} incorrect of {n['expected']:,} IDs)"
                  if all(isinstance(n.get(k), int) for k in
                         ("duplicate", "unprocessed", "incorrect", "expected")) else "")
        verdict = f"{self.guarantee or 'no verdict'}{counts}"
        if self.doubt is not None:
            return f"{verdict}, not verified: {self.doubt}"
        if not self.valid:
            return (f"{verdict}, validity unknown: " + "; ".join(self.reasons)
                    if self.reasons else f"{verdict}, validity unknown")
        return f"{verdict}, valid"


def doubt_of(summary: Mapping[str, Any]) -> str | None:
    """Why a summary's verdict is not backed by verified evidence, or None: a re-check's
    ``evidence`` not verified, its ``stored_figures`` not the recomputed ones, or a stored
    row marked imported (:data:`IMPORTED_SEALS`). A summary with none of these (a live run,
    ``check`` of a user's files) is not in doubt."""
    evidence = summary.get("evidence")
    if isinstance(evidence, Mapping) and evidence.get("verified") is not True:
        return str(evidence.get("note") or "evidence not verified")
    figures = summary.get("stored_figures")
    if isinstance(figures, Mapping) and figures.get("same") is False:
        return str(figures.get("note") or "the stored figures differ from the evidence")
    sealed = summary.get("sealed")
    if isinstance(sealed, int) and not isinstance(sealed, bool) and sealed in IMPORTED_SEALS:
        return IMPORTED_SEALS[sealed]
    return None


def worst(outcomes: Iterable[Outcome]) -> Outcome:
    """The outcome that decides the exit status (:data:`PRECEDENCE`); MET when none."""
    seen = set(outcomes)
    return next((o for o in PRECEDENCE if o in seen), MET)


def exit_status(cases: Sequence[Case], expected: str) -> int:
    """The exit status of a command gated by ``--expect expected`` over ``cases``; no case
    at all (a grid whose every cell was left out) is unknown, not a pass."""
    if not cases:
        return EXIT[UNKNOWN]
    return EXIT[worst(c.outcome(expected) for c in cases)]


def sentence(cases: Sequence[Case], expected: str) -> str:
    """What the gate decided, in one line for the terminal."""
    outcomes = [c.outcome(expected) for c in cases]
    counts = {o: outcomes.count(o) for o in PRECEDENCE if o in outcomes}
    what = ", ".join(f"{n} {o}" for o, n in counts.items()) or "nothing to judge"
    doubts = [f"{c.name}: {c.doubt}" for c in _leaves(cases) if c.doubt is not None]
    why = f" ({'; '.join(doubts)})" if doubts else ""
    return f"expect {expected}: {what} — exit {exit_status(cases, expected)}{why}"


def _leaves(cases: Sequence[Case]) -> list[Case]:
    """The runs of ``cases``: a matrix cell's repetitions, else the case itself."""
    return [r for c in cases for r in (c.runs or (c,))]


#: What XML 1.0 cannot hold: control characters, lone surrogates (a file name that is not
#: UTF-8 reaches Python as them), U+FFFE and U+FFFF.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: object) -> str:
    """``value`` as XML 1.0 character data: control characters it cannot hold dropped, and
    line ends as a parser gives them back (a bare CR becomes LF on reading)."""
    return _XML_ILLEGAL.sub("", str(value)).replace("\r\n", "\n").replace("\r", "\n")


def _properties(case: Case) -> list[tuple[str, str]]:
    """A case's verdict and key numbers as (name, value) pairs, each name prefixed with
    the case's (and a matrix repetition's) name: they go on the suite, where the JUnit
    schema allows properties (:func:`junit`)."""
    out = []
    for run in case.runs or (case,):
        prefix = f"{case.name}.{run.name}." if case.runs else f"{case.name}."
        values: dict[str, object] = {"guarantee": run.guarantee,
                                     "valid": str(run.valid).lower(), **run.numbers}
        if run.error is not None:
            values = {"error": run.error}
        out += [(_text(f"{prefix}{key}"), _text("" if value is None else value))
                for key, value in values.items()]
    return out


def _testcase(case: Case, expected: str | None) -> ET.Element:
    el = ET.Element("testcase", classname=_text(case.classname), name=_text(case.name),
                    time=f"{case.seconds:.3f}")
    outcome = case.outcome(expected)
    verdict = _text(case.verdict())
    if outcome == WEAKER:
        failure = ET.SubElement(el, "failure", type="weaker",
                                message=_text(f"expected {expected}, got {case.verdict()}"))
        failure.text = verdict
    elif outcome in (UNKNOWN, FAILED):
        error = ET.SubElement(el, "error", type=outcome, message=verdict)
        error.text = verdict
    out = ET.SubElement(el, "system-out")
    out.text = verdict
    return el


def junit(cases: Sequence[Case], expected: str | None, suite: str) -> ET.ElementTree:
    """The JUnit XML of ``cases`` (one ``testsuite`` named ``suite``), valid against the
    JUnit schema Jenkins' xUnit plugin checks (tests/data/junit.xsd holds its element
    structure): a weaker verdict is a ``failure``, an unknown or unfinished run an
    ``error``, every case's verdict line its ``system-out``; the expectation and each
    case's verdict and key numbers are the suite's properties (``CASE.guarantee``,
    ``CASE.#0.run_id`` for a matrix repetition), since a ``testcase`` may hold none."""
    outcomes = [c.outcome(expected) for c in cases]
    attrs = {"name": _text(suite), "tests": str(len(cases)),
             "failures": str(outcomes.count(WEAKER)),
             "errors": str(outcomes.count(UNKNOWN) + outcomes.count(FAILED)),
             "skipped": "0", "time": f"{sum(c.seconds for c in cases):.3f}",
             "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
             "hostname": _text(socket.gethostname())}
    root = ET.Element("testsuites", {k: attrs[k] for k in
                                     ("name", "tests", "failures", "errors", "time")})
    ts = ET.SubElement(root, "testsuite", attrs)
    props = ET.SubElement(ts, "properties")
    ET.SubElement(props, "property", name="expect", value=expected or "")
    for case in cases:
        for name, value in _properties(case):
            ET.SubElement(props, "property", name=name, value=value)
    for case in cases:
        ts.append(_testcase(case, expected))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: Path, cases: Sequence[Case], expected: str | None, suite: str) -> None:
    """Write :func:`junit` to ``path`` (OSError for the caller to say)."""
    tree = junit(cases, expected, suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_public(path) as fh:
        tree.write(fh, encoding="utf-8", xml_declaration=True)
