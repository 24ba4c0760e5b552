"""pgval's one error family: every error meant for the user is a :class:`PgvalError`, one
plain sentence and no traceback, of one of three kinds that the command line maps to its
exit status in one place (:mod:`pgval.cli.app`):

* :class:`UserMistake` (exit 2) — a flag, a file, a job or a question pgval cannot answer;
* :class:`EvidenceInDoubt` (exit 3) — a run's evidence edited, unsealed or not reproduced;
* :class:`EnvironmentFailure` (exit 4) — Kafka, Spark, a process, the disk, a signal.

Why its own module: every layer raises them (the checker, the store, the processes, the
faults); kept here, at the bottom, they cost no layer an import of the process runtime.
"""

from __future__ import annotations

from typing import ClassVar


class PgvalError(RuntimeError):
    """An error whose message is one plain sentence meant for the user (no traceback).
    Raise one of its three kinds, never this class itself."""

    #: The exit status of a command that ends with this error.
    exit_status: ClassVar[int] = 4


class UserMistake(PgvalError):
    """The user's mistake: a flag, a file, a job, a question the files cannot answer —
    found before a run or under way (a job whose result pgval cannot judge)."""

    exit_status: ClassVar[int] = 2


class EvidenceInDoubt(PgvalError):
    """A run's evidence cannot be trusted as given: edited since it was sealed, missing its
    seal, or not reproducing what was stored."""

    exit_status: ClassVar[int] = 3


class EnvironmentFailure(PgvalError):
    """The environment failed: Kafka, Spark, a process pgval started, the disk, a signal."""

    exit_status: ClassVar[int] = 4


#: The kinds a raised error must be one of (a test holds every error class to them).
KINDS: tuple[type[PgvalError], ...] = (UserMistake, EvidenceInDoubt, EnvironmentFailure)
