"""Several faults in one run: ``--fault A+B``, ``--schedule FILE`` and ``--fault random``.

A schedule is data, as in Jepsen: a list of ``{fault, at, for, target}``, ``at`` and ``for``
in seconds from the start of the failure phase (T2; ``for`` omitted: until T3). ``A+B``
is the schedule with every fault at 0 until T3; ``random`` draws ``--fault-count`` faults of
random kinds, targets and intervals inside the failure phase from ``--seed`` (the drawn
schedule is the run's config, logged and stored before anything runs, so a re-run with the
same seed draws it again). The run keeps its three phases around the whole schedule: T2 is
the schedule's start (its first fault at 0 taking effect), T3 its end (the last removal).

:class:`CompositeFault` is one :class:`~pgval.faults.FaultHooks` over the parts' own
mechanisms (each a deployment's fault class, unchanged): the faults at 0 are injected at T2
in the calling thread, the later steps by a timer thread; every part step is a
``part-inject`` / ``part-remove`` entry of the fault log with its ``part`` index, its own
four clocks and its mechanism's detail, and :func:`part_logs` hands each part's entries to
its own rule (:func:`pgval.faults.took_effect.fault_reasons`). Removal at T3 (and at teardown)
stops the timer and removes every part still in place.

What is refused, in one sentence each: a kind a schedule cannot time (``driver-crash``:
the driver's restart is the run's timeline; crash points other than ``timed``), a fault
outside the failure phase, and two faults on one worker's packets at once (each needs the
worker's packet path to itself).

A part acts only on a target that can take it: each fault's descriptor says what its target
must be (a pause needs a live executor on its worker, a crash a running worker). A random
draw leaves a fault that needs a worker's executors ``recovery_s`` after a crash of that
worker ended (its executors come back after the worker), and each part, when due, waits
until its target can act (its descriptor's ``ready``), at most until its own end; the wait
is logged (``waited_ms``).
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.core.clock import now_ms
from pgval.core.errors import UserMistake
from pgval.core.schema import BROKER_TARGETS, Deploy, Fault, Restart
from pgval.core.spec import ScheduledFault
from pgval.faults.descriptor import NOTHING, FaultDescriptor, descriptor, descriptors
from pgval.faults.log import Entries, finding

#: The ``mechanism`` of a schedule's own inject/remove entries.
SCHEDULE_MECHANISM = "schedule"
#: How often a due part asks whether its target can act.
READY_POLL_S = 0.2


def schedulable() -> tuple[Fault, ...]:
    """The faults a schedule can place (their descriptors say; driver-crash is the run's
    timeline, not a part's)."""
    return tuple(k for k, d in descriptors().items() if d.schedulable)


#: The order ``--fault random`` picks from: a seed draws what it drew before a fault was
#: added (a drawn fault not named here comes after these, in the names' order).
DRAW_ORDER: tuple[Fault, ...] = (Fault.CRASH, Fault.DELAY_LT_TIMEOUT, Fault.PARTITION,
                                 Fault.PAUSE_LT_TIMEOUT, Fault.BROKER_CRASH)


def random_kinds() -> tuple[Fault, ...]:
    """What ``--fault random`` draws from, in :data:`DRAW_ORDER` (the descriptors'
    ``drawn``: not the ``-gt-`` faults, which lower the whole run's time-outs, a choice a
    draw should not make for the other parts)."""
    drawn = [k for k, d in descriptors().items() if d.drawn]
    return tuple(sorted(drawn, key=lambda k: (DRAW_ORDER.index(k) if k in DRAW_ORDER
                                              else len(DRAW_ORDER), list(Fault).index(k))))


def parse_plus(text: str) -> list[ScheduledFault]:
    """``A+B``: every fault at T2 until T3."""
    return [ScheduledFault(Fault.parse(name.strip())) for name in text.split("+")]


def load_schedule(path: str | Path) -> list[ScheduledFault]:
    """A schedule file: JSON (a list, or ``{"faults": [...]}``) or, with PyYAML installed,
    YAML of the same shape."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise UserMistake(f"cannot read the schedule {p}: {exc.strerror or exc}") from None
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise UserMistake(f"{p} is YAML, and PyYAML is not installed here: "
                                    "`pip install pyyaml`, or write the schedule as JSON"
                                    ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UserMistake(f"{p} is not valid YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserMistake(f"{p} is not valid JSON: {exc}") from None
    if isinstance(data, Mapping):
        data = data.get("faults")
    if not isinstance(data, list) or not data:
        raise UserMistake(f"{p}: a schedule is a non-empty list of "
                                "{fault, at, for, target}")
    return [ScheduledFault.from_record(rec, where=str(p)) for rec in data]


def draw_random(count: int, seed: int, phase_s: float, workers: int, brokers: int,
                kinds: Sequence[Fault] | None = None) -> list[ScheduledFault]:
    """``count`` faults of random kinds (by default :func:`random_kinds`), targets and
    intervals inside the failure phase, from ``seed`` alone (the same seed draws the same
    schedule). Each lasts between a quarter and a half of the phase; two faults on one
    target, or two broker crashes, never overlap, and a fault that needs a worker's
    executors never starts while a crash of that worker has them away (a redraw:
    :func:`_crowded`); broker-crash is drawn only with 2 brokers or more."""
    pool = [k for k in (random_kinds() if kinds is None else kinds)
            if k is not Fault.BROKER_CRASH or brokers >= 2]
    rng = random.Random(f"pgval-random-schedule-{seed}")

    def one() -> ScheduledFault:
        kind = rng.choice(pool)
        length = round(rng.uniform(0.25, 0.5) * phase_s, 1)
        at = round(rng.uniform(0.0, phase_s - length), 1)
        target: int | str | None = (BROKER_TARGETS[0] if kind is Fault.BROKER_CRASH
                                    else rng.randrange(max(1, workers)))
        return ScheduledFault(kind, at, length, target)

    for _ in range(200):  # fault by fault, each redrawn until it fits beside the others
        parts: list[ScheduledFault] = []
        for _ in range(count):
            for _ in range(100):
                trial = sorted([*parts, one()], key=lambda p: p.at_s)
                if schedule_problem(trial, phase_s, workers) is None and not _crowded(
                        trial, phase_s):
                    parts = trial
                    break
            else:
                break
        if len(parts) == count:
            return parts
    raise UserMistake(f"no valid random schedule of {count} faults fits "
                            f"{workers} workers in {phase_s:g} s; lower --fault-count")


def _crowded(parts: Sequence[ScheduledFault], phase_s: float) -> bool:
    """Two drawn faults on one target at once (the second would find its target already
    down or stopped: a part with nothing to act on), two brokers down at once (with 3
    brokers and min.insync.replicas 2 Kafka would refuse every write: the draw keeps
    Kafka available, as Jepsen's nemeses keep a majority), or a fault that needs a
    worker's executors (a pause) due before they are back from a crash of that worker:
    its end plus the crash's ``recovery_s``."""
    def target(p: ScheduledFault) -> tuple[str, object]:
        return ("broker", None) if p.fault is Fault.BROKER_CRASH else ("worker", p.target)

    def busy_until(a: ScheduledFault, b: ScheduledFault) -> float:
        """Until when ``a`` keeps ``b``'s target from acting."""
        if descriptor(a.fault).takes_executors and descriptor(b.fault).needs_executors:
            return a.end_s(phase_s) + descriptor(a.fault).recovery_s
        return a.end_s(phase_s)

    return any(target(a) == target(b) and a.at_s < busy_until(b, a)
               and b.at_s < busy_until(a, b)
               for i, a in enumerate(parts) for b in parts[i + 1:])


def schedule_problem(parts: Sequence[ScheduledFault], phase_s: float,
                     workers: int) -> str | None:
    """Why a schedule cannot run (one sentence), or None."""
    if not parts:
        return "a schedule needs at least one fault"
    for p in parts:
        if not descriptor(p.fault).schedulable:
            return (f"{p.fault} cannot be part of a schedule (use one of "
                    f"{', '.join(map(str, schedulable()))})")
        if p.end_s(phase_s) > phase_s + 1e-9:
            return (f"{p.label()} ends after the failure phase ({phase_s:g} s): a schedule "
                    "stays inside it")
        if p.for_s is not None and p.for_s <= 0:
            return f"{p.label()} lasts no time"
        if isinstance(p.target, int) and p.fault is not Fault.BROKER_CRASH and not (
                0 <= p.target < workers):
            return f"{p.label()}: the target must be a worker index from 0 to {workers - 1}"
    if sum(1 for p in parts if descriptor(p.fault).above_timeouts) and any(
            p.fault is Fault.DELAY_LT_TIMEOUT for p in parts):
        return ("delay-lt-timeout and a -gt-timeout fault cannot share a run: the -gt fault "
                "lowers the run's time-outs, and the delay below them is defined against "
                "Spark's defaults")
    network = [p for p in parts if descriptor(p.fault).network]
    for i, a in enumerate(network):
        for b in network[i + 1:]:
            if (a.target == b.target and a.target is not None
                    and a.at_s < b.end_s(phase_s) and b.at_s < a.end_s(phase_s)):
                return (f"{a.label()} and {b.label()} act on worker {a.target}'s packets at "
                        "the same time; give them different workers or times")
    return None


def schedule_label(parts: Sequence[ScheduledFault]) -> str:
    """``crash+partition`` for faults all at T2 until T3, else ``schedule(crash, ...)``."""
    names = "+".join(str(p.fault) for p in parts)
    whole = all(p.at_s == 0 and p.for_s is None for p in parts)
    return names if whole else f"schedule({', '.join(str(p.fault) for p in parts)})"



class CompositeFault:
    """The parts of a schedule, each through its own mechanism, on one timeline.

    Each part lives on a thread of its own from T2 until it is removed: it waits for its
    ``at``, injects, waits for its end (or T3), removes. One thread per part, living as
    long as the part, because what a part starts may be tied to the thread that started
    it: the packet holder asks for ``PR_SET_PDEATHSIG``, which Linux sends when the
    *thread* that forked it exits, not the process (a short-lived thread per step killed
    the holder at once: measured, "holder exited early (signal)"). Parts due together
    therefore also act together: a broker crash waiting for its new leaders holds back no
    other part."""

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.SCHEDULE})
    mechanisms: ClassVar[tuple[str, ...]] = (SCHEDULE_MECHANISM,)

    def __init__(self, parts: Sequence[tuple[ScheduledFault, Any]], phase_s: float,
                 log: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.name = str(Fault.SCHEDULE)
        self.parts = list(parts)
        self.phase_s = phase_s
        self._log = log or (lambda entry: None)
        self._state = ["pending"] * len(self.parts)
        self._stop = threading.Event()
        self._injected = [threading.Event() for _ in self.parts]
        self._threads: list[threading.Thread] = []
        self._t2_ms: int | None = None
        self._t3_ms: int | None = None
        self._intended: dict[str, int] = {}
        self._restore = True
        self._effective: dict[tuple[str, int], int] = {}

    def bind_log(self, log: Callable[[dict[str, Any]], None]) -> None:
        """Where the parts' steps go: the run's fault log (:class:`pgval.run.schedule.
        FaultSchedule` binds its own), so they are evidence like the schedule's."""
        self._log = log

    def intend(self, step: str, intended_ms: int) -> None:
        """The schedule's own time for ``step`` (T2 for inject, T3 for remove): the parts
        are timed from the intended T2, not from when the inject step began. On a loaded
        host that step begins late (0.8 s seen in CI), and parts timed from it ended that
        much late: a part due to end 0.1 s before T3 was cut by T3 instead."""
        self._intended[step] = intended_ms

    # -- the parts' steps ----------------------------------------------------------------
    def _step(self, kind: str, i: int, intended_ms: int, restore: bool = True,
              **extra: Any) -> None:
        spec, hooks = self.parts[i]
        entry: dict[str, Any] = {"step": f"part-{kind}", "part": i, "fault": str(spec.fault),
                                 "scheduled": spec.as_record(), "intended_ms": intended_ms,
                                 "actual_ms": now_ms(), **extra}
        if not restore:
            entry["teardown"] = True
        self._log(entry)
        self._state[i] = "injecting" if kind == "inject" else "removing"
        try:
            detail = hooks.inject() if kind == "inject" else hooks.remove(restore=restore)
            entry.update(detail or {})
        except Exception as exc:  # one part failing must not stop the others' removal
            entry["error"] = str(exc) or type(exc).__name__
        entry["done_ms"] = now_ms()
        if not isinstance(entry.get("effective_ms"), int):
            entry["effective_ms"] = entry["done_ms"]
        self._effective[(kind, i)] = entry["effective_ms"]
        self._state[i] = "in place" if kind == "inject" else "removed"

    def _wait_until(self, due_ms: int) -> bool:
        """Sleep until ``due_ms``; True if the schedule was stopped (T3) first."""
        return self._stop.wait(max(0.0, (due_ms - now_ms()) / 1000))

    def _until_ready(self, i: int, last_ms: int | None) -> tuple[bool, dict[str, Any]]:
        """Wait until part ``i``'s target can act (its descriptor's ``ready``), at most
        until ``last_ms`` (the part's end; None: T3). (stopped first, what to log)."""
        spec, hooks = self.parts[i]
        ready = descriptor(spec.fault).ready
        if ready is None:
            return False, {}
        began = now_ms()
        why = ready(hooks)
        while why is not None and (last_ms is None or now_ms() < last_ms):
            if self._stop.wait(READY_POLL_S):
                return True, {}
            why = ready(hooks)
        waited = now_ms() - began
        return False, ({"waited_ms": waited} if waited else {}) | (
            {"not_ready": why} if why else {})

    def _life(self, i: int) -> None:
        """One part from T2 to its removal (its own thread)."""
        assert self._t2_ms is not None
        spec, _ = self.parts[i]
        due = self._t2_ms + round(spec.at_s * 1000)
        last = None if spec.for_s is None else due + round(spec.for_s * 1000)
        try:
            if spec.at_s > 0 and self._wait_until(due):
                return  # T3 came first: never injected
            stopped, waited = self._until_ready(i, last)
            if stopped:
                return  # T3 came while its target could not act: never injected
            self._step("inject", i, due, **waited)
        finally:
            self._injected[i].set()
        if spec.for_s is not None:
            end = due + round(spec.for_s * 1000)
            if not self._wait_until(end):
                self._step("remove", i, end)
                return
        else:
            self._stop.wait()
        self._step("remove", i, self._intended.get("remove", self._t3_ms or now_ms()),
                   restore=self._restore)

    def inject(self) -> dict[str, Any]:
        """Start every part's thread; return once the parts due at 0 have acted."""
        self._t2_ms = self._intended.get("inject", now_ms())
        self._threads = [threading.Thread(target=self._life, args=(i,), daemon=True,
                                          name=f"pgval-schedule-part-{i}")
                         for i in range(len(self.parts))]
        for t in self._threads:
            t.start()
        at_zero = [i for i, (spec, _) in enumerate(self.parts) if spec.at_s == 0]
        for i in at_zero:
            self._injected[i].wait()
        took = [self._effective[("inject", i)] for i in at_zero
                if ("inject", i) in self._effective]
        return {"mechanism": SCHEDULE_MECHANISM,
                "schedule": [spec.as_record() for spec, _ in self.parts],
                "label": schedule_label([spec for spec, _ in self.parts]),
                "effective_ms": min(took) if took else self._t2_ms}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        """T3 (or teardown): every part still in place is removed by its thread; wait for
        them all."""
        self._t3_ms, self._restore = now_ms(), restore
        self._stop.set()
        for t in self._threads:
            t.join(timeout=600)
        stuck = [t.name for t in self._threads if t.is_alive()]
        ends = [ms for (kind, _), ms in self._effective.items() if kind == "remove"]
        never = [i for i, s in enumerate(self._state) if s == "pending"]
        return {"effective_ms": max(ends) if ends else self._t3_ms,
                **({"never_injected": never} if never else {}),
                **({"error": f"parts still acting after 600 s: {stuck}"} if stuck else {})}

    def problem(self) -> str | None:
        """A part that stopped acting early (its own ``problem``)."""
        for i, (spec, hooks) in enumerate(self.parts):
            check = getattr(hooks, "problem", None)
            why = check() if callable(check) and self._state[i] == "in place" else None
            if why:
                return f"part {i} ({spec.fault}): {why}"
        return None

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """The schedule's own findings: every part was injected (the parts' rules are run
        by :func:`pgval.faults.took_effect.fault_reasons`, on :func:`part_logs`)."""
        found = []
        removal = next((e for e in entries if e.get("step") == "remove"), {})
        never = removal.get("never_injected")
        if never:
            found.append(finding(f"parts {never} were never injected (the run ended first)"))
        return found


def part_logs(entries: Entries) -> list[tuple[int, Fault, list[dict[str, Any]]]]:
    """Each part's own log, as its mechanism's rule reads one: its ``part-inject`` /
    ``part-remove`` entries as ``inject`` / ``remove``, the run's ``timeouts`` scan (with
    the kinds of the other parts, which its rule may not blame on this one), and any
    ``holder-died`` naming this part."""
    parts: dict[int, list[dict[str, Any]]] = {}
    kinds: dict[int, Fault] = {}
    for e in entries:
        if e.get("step") in ("part-inject", "part-remove") and isinstance(e.get("part"), int):
            i = e["part"]
            kinds[i] = Fault.parse(e.get("fault"))
            parts.setdefault(i, []).append({**e, "step": str(e["step"])[5:]})
    timeouts = next((e for e in entries if e.get("step") == "timeouts"), None)
    out = []
    for i in sorted(parts):
        own = list(parts[i])
        others = sorted({str(k) for j, k in kinds.items() if j != i})
        if timeouts is not None:
            own.append({**timeouts, "fault": str(kinds[i]), "shared_with": others})
        own += [e for e in entries if e.get("step") == "holder-died"
                and str(e.get("error", "")).startswith(f"part {i} ")]
        out.append((i, kinds[i], own))
    return out


DESCRIPTORS = (
    FaultDescriptor(
        Fault.SCHEDULE, "several faults on one timeline (--fault A+B, --schedule, --fault "
        "random), each part through its own fault's mechanism",
        deployments=frozenset({Deploy.LOCAL}), owned_only=True,
        where=("a schedule of several faults runs on the embedded cluster pgval starts "
               "(--deploy local, no --cluster)"),
        # Each crashed process at its part's end; nothing when no part restarts one.
        restart=Restart.AT_REMOVE,
        restart_unless=lambda cfg: not any(descriptor(p.fault).restarts
                                           for p in cfg.schedule_parts),
        targets=NOTHING, schedulable=False, rules=(CompositeFault,)),
)
