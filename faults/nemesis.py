"""A user's own nemesis: commands that start and stop a packet delay on their cluster.

pgval cannot reach into a cluster it does not own, so ``--deploy external`` delay faults run
the user's commands (``--nemesis-inject`` at T2, ``--nemesis-remove`` at T3 and always on the
way out). Each is split like a shell would (:func:`shlex.split`) but never run by one, and
``{worker}`` / ``{delay_ms}`` are filled in per argument after the split, so a value can
never become two arguments or a shell command. Both are logged in the fault log with their
exit code and the tail of their output, like pgval's own faults, but with only the program
kept: every argument, and anything of them the output echoes, is ``<redacted>`` (a command
line may carry a token anywhere; :mod:`pgval.core.redact`). Errors name the program only.

pgval cannot see a link it does not own, so it has no probe here: a nemesis delay is judged
by the probe rule of pgval's own delay (:func:`pgval.faults.log.probe_reasons`), which
without a probe says there is no evidence the delay took effect, and the run stays unknown.
Which side of the time-outs it was on is read from the driver's log, which runs here
(:func:`pgval.faults.log.timeout_reasons`).
"""

from __future__ import annotations

import shlex
import string
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

from pgval.checker.result import Reason
from pgval.core.errors import EnvironmentFailure, UserMistake
from pgval.core.redact import redact_argv, scrub
from pgval.core.schema import Fault
from pgval.faults.broker_crash import NEMESIS_BROKER
from pgval.faults.log import Entries, first, probe_reasons, timeout_reasons
from pgval.host import undo

TIMEOUT_S = 120.0
#: The fault log's ``mechanism`` of a nemesis delay.
MECHANISM = "user nemesis"


def nemesis_argv(template: str, worker: int | None = None, delay_ms: int | None = None,
                 broker: int | None = None) -> list[str]:
    """The argv of ``template`` with its placeholders filled in (no shell involved): a
    delay's ``{worker}`` and ``{delay_ms}``, a broker crash's ``{broker}``. A template
    that cannot be filled is the user's mistake, said in one sentence naming the program
    only (its arguments may carry a token)."""
    try:
        parts = shlex.split(template)
    except ValueError as exc:
        raise UserMistake(f"cannot split a nemesis command: {exc}") from exc
    if not parts:
        raise UserMistake("the nemesis command is empty")
    values = {name: str(value) for name, value in
              (("worker", worker), ("delay_ms", delay_ms), ("broker", broker))
              if value is not None}
    return [_filled(part, values, parts[0]) for part in parts]


def _filled(part: str, values: dict[str, str], program: str) -> str:
    """One argument with its placeholders replaced, each a plain ``{name}`` of ``values``.

    Checked field by field, never handed to :meth:`str.format`: that would evaluate
    ``{worker.real}`` (an attribute, AttributeError), ``{worker[0]}`` or ``{worker!r}``, and
    build ``{worker:99999999999}`` (a width of 100 GB, MemoryError)."""
    try:
        fields = list(string.Formatter().parse(part))
    except ValueError:
        raise UserMistake(f"the nemesis command {program!r} has a lone brace in an argument "
                          "(write {{ or }} for a literal one)") from None
    out = []
    for literal, name, spec, conversion in fields:
        out.append(literal)
        if name is None:
            continue
        if name not in values or spec or conversion:
            allowed = " and ".join(f"{{{n}}}" for n in values) or "none"
            raise UserMistake(f"the nemesis command {program!r} has a placeholder other "
                              f"than {allowed} (each written just so: no attribute, index, "
                              "conversion or format)")
        out.append(values[name])
    return "".join(out)


class NemesisDelay:
    """The delay fault through the user's commands."""

    kinds: ClassVar[frozenset[Fault]] = frozenset({Fault.DELAY_LT_TIMEOUT,
                                                     Fault.DELAY_GT_TIMEOUT})
    mechanisms: ClassVar[tuple[str, ...]] = (MECHANISM,)

    def __init__(self, name: str, inject_cmd: str, remove_cmd: str, worker: int,
                 delay_ms: int, run_dir: Path | None = None) -> None:
        self.name = name
        #: Where the remove command is persisted before inject runs (an undo record,
        #: 0600, the real argv): the run's reaper runs it if pgval is killed meanwhile.
        self.run_dir = run_dir
        self.inject_argv = nemesis_argv(inject_cmd, worker=worker, delay_ms=delay_ms)
        self.remove_argv = nemesis_argv(remove_cmd, worker=worker, delay_ms=delay_ms)
        self.worker = worker
        self.delay_ms = delay_ms
        self._injected = False

    def inject(self) -> dict[str, Any]:
        self._injected = True  # before running: an interrupted inject is still undone
        if self.run_dir is not None:
            undo.record(self.run_dir, "nemesis", {"argv": self.remove_argv,
                                                  "what": "the nemesis remove command"})
        detail = _run_ok(self.inject_argv, "inject")
        return {"mechanism": MECHANISM, "target": f"worker {self.worker}",
                "delay_ms": self.delay_ms, **detail}

    def remove(self, restore: bool = True) -> dict[str, Any]:
        if not self._injected:
            return {}
        detail = _run_ok(self.remove_argv, "remove")
        self._injected = False
        if self.run_dir is not None:
            undo.done(self.run_dir, "nemesis")
        return {"mechanism": MECHANISM, **detail}

    @staticmethod
    def reasons(entries: Entries) -> list[Reason]:
        """The probe rule (see the module docstring): no probe, no evidence; and the
        time-out rule."""
        return probe_reasons(first(entries, "inject")) + timeout_reasons(entries)


def _run_ok(argv: list[str], which: str) -> dict[str, Any]:
    """:func:`_run`, a non-zero exit being a plain error that names the command's role."""
    detail = _run(argv)
    if detail["exit_code"] != 0:
        raise EnvironmentFailure(f"the nemesis {which} command failed (exit "
                                f"{detail['exit_code']}): {detail['output_tail']}")
    return detail


def _run(argv: list[str]) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError as exc:
        raise EnvironmentFailure(f"the nemesis command {argv[0]!r} was not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentFailure(f"the nemesis command {argv[0]!r} did not finish in "
                                f"{TIMEOUT_S:.0f} s") from exc
    tail = " ".join(scrub(proc.stdout + proc.stderr, argv[1:]).split())[-300:]
    return {"argv": redact_argv(argv), "exit_code": proc.returncode, "output_tail": tail,
            "took_s": round(time.monotonic() - t0, 3)}


class NemesisBrokers:
    """``broker-crash`` on an external cluster: the user's inject command stops broker
    ``{broker}`` at T2, the remove command starts it again at T3 (and, as an undo record,
    if pgval dies meanwhile). pgval cannot see the process, so the evidence is the
    cluster's own: the broker leaves the metadata's broker list (fenced) and the partitions
    it led get other leaders (:class:`pgval.faults.broker_crash.BrokerCrash`)."""

    def __init__(self, inject_cmd: str, remove_cmd: str, client_config: dict[str, str],
                 timeout_s: float = 90.0) -> None:
        self.inject_cmd, self.remove_cmd = inject_cmd, remove_cmd
        for command in (inject_cmd, remove_cmd):
            nemesis_argv(command, broker=0)  # a wrong placeholder is an error before T2
        self.client_config = dict(client_config)
        self.timeout_s = timeout_s
        self._ids: list[int] | None = None
        self._admin: Any = None

    mechanism = NEMESIS_BROKER

    @property
    def node_ids(self) -> list[int]:
        if self._ids is None:
            from pgval.kafka.admin import broker_ids

            self._ids = broker_ids(self.client_config)
        return self._ids

    def kill(self, node_id: int) -> dict[str, Any]:
        detail = _run_ok(nemesis_argv(self.inject_cmd, broker=node_id), "inject")
        return {"killed": True, "nemesis": detail}

    def restart(self, node_id: int) -> dict[str, Any]:
        from pgval.kafka.admin import wait_for_brokers

        detail = _run_ok(nemesis_argv(self.remove_cmd, broker=node_id), "remove")
        back = wait_for_brokers(self.client_config, {node_id}, self.timeout_s)
        return {"nemesis": detail, "registered": back}

    def running(self, node_id: int) -> bool | None:
        """Whether the cluster lists the broker (asked about once a second by the run's
        loop: one client, a short time-out)."""
        from confluent_kafka import KafkaException

        from pgval.kafka.admin import admin_client

        if self._admin is None:
            self._admin = admin_client(self.client_config)
        try:
            return node_id in self._admin.list_topics(timeout=1.0).brokers
        except KafkaException:
            return None

    def undo_argv(self, node_id: int) -> list[str] | None:
        return nemesis_argv(self.remove_cmd, broker=node_id)
