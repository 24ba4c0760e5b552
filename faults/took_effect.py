"""Did a fault take effect, and was it removed? Judged from the run's fault log alone, so a
re-check reaches the same answer from the stored evidence.

The common part is here: the fault was injected, injecting and removing did not fail. What
"took effect" means is each mechanism's own rule, a ``reasons(entries)`` on the class that
writes those entries (:class:`FaultEvidence`); :data:`RULE_CLASSES` lists them, and the
registry finds a rule by the fault's kind and the ``mechanism`` its inject entry logged.
Kind and mechanism together, since one mechanism can serve two faults with different
evidence (a SIGKILL of a worker's or of the driver's process group; pumba's kill or delay).
A mechanism no rule knows is itself a reason: a fault pgval cannot judge is never valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Protocol

from pgval.checker.result import Reason
from pgval.core.schema import Fault
from pgval.faults.composite import part_logs
from pgval.faults.descriptor import descriptors
from pgval.faults.log import Entries, first


class FaultEvidence(Protocol):
    """A fault mechanism's class, as the registry sees it: the faults it injects, the
    ``mechanism`` names its inject entries log, and its rule. The rule reads only the log
    and returns findings without the fault's name, which :func:`fault_reasons` puts in
    front (every fault sentence starts with it)."""

    kinds: ClassVar[frozenset[Fault]]
    mechanisms: ClassVar[tuple[str, ...]]

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]: ...


#: Every mechanism pgval injects a fault with: the rules the descriptors name.
RULE_CLASSES: tuple[type[FaultEvidence], ...] = tuple(dict.fromkeys(
    rule for d in descriptors().values() for rule in d.rules))

#: An inject entry that names no mechanism and no error (a log written before mechanisms
#: were told apart) is judged by the embedded cluster's rule for the fault (its
#: descriptor's first). One with an error failed before its mechanism acted: the error is
#: the reason, and no rule applies (another deployment's failed inject must not gather
#: the embedded cluster's findings).
UNNAMED: dict[Fault, type[FaultEvidence]] = {
    kind: d.rules[0] for kind, d in descriptors().items() if d.rules}


def _registry(classes: Iterable[type[FaultEvidence]]
              ) -> dict[tuple[Fault, str], type[FaultEvidence]]:
    """(fault kind, mechanism) → the class whose rule judges it; one class per key."""
    rules: dict[tuple[Fault, str], type[FaultEvidence]] = {}
    for cls in classes:
        for key in ((kind, name) for kind in cls.kinds for name in cls.mechanisms):
            if key in rules:
                raise ValueError(f"{cls.__name__} and {rules[key].__name__} both judge {key}")
            rules[key] = cls
    return rules


RULES = _registry(RULE_CLASSES)


def rule_for(fault: Fault | str, mechanism: object) -> type[FaultEvidence] | None:
    """The class whose rule judges ``fault`` injected by ``mechanism`` (None: no rule)."""
    try:
        kind = Fault(fault)
    except ValueError:
        return None
    if mechanism is None:
        return UNNAMED.get(kind)
    return RULES.get((kind, mechanism)) if isinstance(mechanism, str) else None


def fault_reasons(fault: Fault | str, log: Iterable[Mapping[str, Any]]) -> list[Reason]:
    """Did the fault take effect, and was it removed? Judged from the fault log only."""
    if fault == Fault.NONE:
        return []
    entries = list(log)
    if not first(entries, "inject"):
        return [Reason("fault", f"the {fault} fault was never injected")]
    inject, remove = first(entries, "inject"), first(entries, "remove")
    texts = []
    if inject.get("error"):
        texts.append(f"injecting {fault} failed: {inject['error']}")
    if not remove:
        texts.append(f"the {fault} fault was never removed")
    elif remove.get("error"):
        texts.append(f"removing {fault} failed: {remove['error']}")
    mechanism = inject.get("mechanism")
    if mechanism is None and inject.get("error"):
        return [Reason("fault", text) for text in texts]
    rule = rule_for(fault, mechanism)
    if rule is None:
        texts.append(f"{fault}: no rule knows mechanism {mechanism!r}")
    else:
        # Every entry names the fault it is about (the schedule writes it); one that does not
        # (a hand-made or older log) is about this run's fault, which some rules read.
        named = [{"fault": str(fault), **e} for e in entries]
        texts.extend(f"{fault}: {found.text}" for found in rule.reasons(named))
    if fault == Fault.SCHEDULE:  # each part by its own mechanism's rule
        texts.extend(f"part {i}: {reason.text}" for i, kind, own in part_logs(entries)
                     for reason in fault_reasons(kind, own))
    return [Reason("fault", text) for text in texts]
