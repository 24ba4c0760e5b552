"""How the ``pgval`` command reports a user's mistake: one plain line on stderr, exit 2.

Apart from the commands so the generated options (:mod:`pgval.cli.options`) can raise the
same error while parsing, without importing a command module.
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)


def print_error(message: str) -> None:
    """``error: MESSAGE`` on one line: never wrapped at the terminal's width, and never read
    as rich markup (a path or value the user typed may hold ``[...]``)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


def kafka_error_text(exc: BaseException) -> str:
    """The sentence of a ``KafkaException`` (its ``KafkaError``'s ``str()``)."""
    err = exc.args[0] if exc.args else exc
    return err.str() if hasattr(err, "str") else str(err)


class UserError(click.ClickException):
    """A plain one-sentence error for the user; exit code 2 like click's usage errors."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        print_error(self.format_message())


#: Every command's exit status, shown under its ``--help`` (so docs/cli.md carries it).
EXIT_STATUS = ("Exit status: 0 done (a verdict, valid or unknown, is output, not a status); "
               "1 the environment failed (Kafka, Spark, a process, a signal); 2 bad input (a "
               "flag, a file, a run's evidence, the results database).")
#: What a command adds to :data:`EXIT_STATUS`, by command name.
EXIT_STATUS_MORE = {
    "check": "2 also for a question the files cannot answer: --window-ms that is not the "
             "outputs' window, records lacking a required field (unless --allow-malformed), "
             "--phases that are no times of the records.",
    "recheck": "2 also for evidence edited since the run was stored, and for --store when "
               "the re-check does not reproduce the stored counts.",
    "validate": "2 also when the run finished but could not be stored (the message says how "
                "to import it later).",
    "matrix": "1 also when a cell failed.",
    "soak": "1 also when something was left behind.",
}


#: The commands with ``--expect`` (:mod:`pgval.gate`) and what it does to their status.
GATED = ("validate", "matrix", "check", "recheck")
EXIT_STATUS_GATED = ("With --expect: 0 every run valid and at least as strong; 1 a verdict "
                     "weaker than expected; 3 a run's validity unknown; 4 a run that did not "
                     "finish (the environment failed); the first of 1, 4, 3 that applies "
                     "wins; 2 stays bad input.")


def exit_status(name: str) -> str:
    """The ``--help`` epilog of command ``name``: its exit statuses."""
    text = " ".join(t for t in (EXIT_STATUS, EXIT_STATUS_MORE.get(name),
                                EXIT_STATUS_GATED if name in GATED else None) if t)
    return text
