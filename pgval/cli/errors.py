"""How the ``pgval`` command ends in an error: one plain line on stderr (``error: …``) and
the exit status of the error's kind (:mod:`pgval.core.errors`), mapped in :mod:`pgval.cli.app`.

Apart from the commands so the generated options (:mod:`pgval.cli.options`) can raise the
same error while parsing, without importing a command module.
"""

from __future__ import annotations

import sqlite3

import click
from rich.console import Console
from rich.markup import escape

from pgval.core.errors import EnvironmentFailure, PgvalError, UserMistake

# No emoji codes: a value the user typed may hold ":x:" or ":ok:".
err_console = Console(stderr=True, emoji=False)


def print_error(message: str) -> None:
    """``error: MESSAGE`` on one line: never wrapped at the terminal's width, and never read
    as rich markup (a path or value the user typed may hold ``[...]``)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


def kafka_error_text(exc: BaseException) -> str:
    """The sentence of a ``KafkaException`` (its ``KafkaError``'s ``str()``)."""
    err = exc.args[0] if exc.args else exc
    return err.str() if hasattr(err, "str") else str(err)


def as_error(exc: BaseException) -> PgvalError | None:
    """``exc`` as the family error a command ends with: itself, or what pgval's own error
    would have said for a foreign one that reaches the command line (a Kafka error or a
    signal: the environment; a database error: the results database given). None for
    anything else: a bug, whose traceback is wanted."""
    from confluent_kafka import KafkaException

    if isinstance(exc, PgvalError):
        return exc
    if isinstance(exc, KafkaException):
        return EnvironmentFailure(f"Kafka: {kafka_error_text(exc)}")
    if isinstance(exc, KeyboardInterrupt):  # INT, TERM, HUP (pgval.host.signals)
        return EnvironmentFailure("interrupted by a signal")
    if isinstance(exc, sqlite3.Error):  # a damaged database met past opening it
        return UserMistake(f"the results database (--db) failed: {exc}")
    return None


class UserError(UserMistake, click.ClickException):
    """A user's mistake a command finds itself (a flag, a file): a :class:`UserMistake`
    (exit 2), and a click exception so that click shows it the same way wherever it is
    raised (an option's callback, a command invoked on its own)."""

    exit_code = UserMistake.exit_status

    def __init__(self, message: str) -> None:
        click.ClickException.__init__(self, message)  # RuntimeError's would skip .message

    def show(self, file: object = None) -> None:
        print_error(self.format_message())


#: Every command's exit status, shown under its ``--help`` (so docs/cli.md carries it).
EXIT_STATUS = ("Exit status: 0 done (a verdict and its validity are output, not a status); "
               "2 bad input (a flag, a file, a run directory, the results database); 3 "
               "evidence in doubt (edited since it was sealed, or not reproduced); 4 the "
               "environment failed (Kafka, Spark, a process, the disk, a signal).")
#: What a command adds to :data:`EXIT_STATUS`, by command name ("": ``pgval`` itself).
EXIT_STATUS_MORE = {
    "": "1 only under --expect (validate, matrix, check, recheck): a verdict weaker than "
        "expected.",
    "check": "2 also for a question the files cannot answer: --window-ms that is not the "
             "outputs' window, --phases that are no times of the records, and unless "
             "--allow-malformed records in doubt (malformed, named by their first line; "
             "another topology's outputs; windows or an output clock the inputs contradict).",
    "recheck": "3 for evidence edited since the run was sealed (with --store of a run "
               "directory: since its SHA256SUMS), a sealed run whose hashes the database no "
               "longer holds, a run.json naming a row that is not a run's (a check result), "
               "--store when the evidence is not verified or the re-check does not "
               "reproduce the stored counts, under --expect evidence not verified or a "
               "stored row that differs from the re-check, and under --checker both the "
               "Spark oracle and checker disagreeing with numpy's.",
    "export": "3 for evidence edited since the run was sealed.",
    "validate": "2 also when the run finished but could not be stored (the message says how "
                "to import it later).",
    "matrix": "4 also when a cell failed.",
    "lint": "2 also for each problem found in the job (one sentence each; the last is the "
            "error line).",
    "soak": "4 also when something was left behind.",
}


#: The commands with ``--expect`` (:mod:`pgval.checker.gate`) and what it does to their status.
GATED = ("validate", "matrix", "check", "recheck")
EXIT_STATUS_GATED = ("With --expect: 0 every run valid and at least as strong; 1 a verdict "
                     "weaker than expected; 3 a run's validity unknown; 4 a run that did not "
                     "finish (the environment failed); the first of 1, 4, 3 that applies "
                     "wins; an error's 2 or 3 stays as without it.")


def exit_status(name: str) -> str:
    """The ``--help`` epilog of command ``name``: its exit statuses."""
    text = " ".join(t for t in (EXIT_STATUS, EXIT_STATUS_MORE.get(name),
                                EXIT_STATUS_GATED if name in GATED else None) if t)
    return text
