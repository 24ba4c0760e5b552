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


class UserError(click.ClickException):
    """A plain one-sentence error for the user; exit code 2 like click's usage errors."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        print_error(self.format_message())
