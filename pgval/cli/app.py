"""The ``pgval`` command group and its entry point; the commands are in one module per
group (:mod:`pgval.cli`).

Every command that fails ends in one plain sentence and the exit status of its error's
kind (:mod:`pgval.core.errors`), never a traceback; this module is the one place that maps them.
"""

from __future__ import annotations

import sys

import click

from pgval.cli import (
    bench,
    campaigns,
    cluster,
    housekeeping,
    lint,
    offline,
    recheck_export,
    report,
    streams,
    validate,
)
from pgval.cli.errors import UserError, as_error, exit_status, print_error

__all__ = ["UserError", "main", "print_error", "run"]


class _Main(click.Group):
    """The command group: any error of pgval's family a command ends with (or a Kafka
    error, a signal, a database error: :func:`as_error`) becomes its one line and its
    kind's exit status, for ``pgval`` and for click's test runner alike."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BaseException as exc:  # SystemExit and bugs go on as they are (as_error: None)
            error = as_error(exc)
            if error is None:
                raise
            print_error(str(error))
            raise click.exceptions.Exit(error.exit_status) from exc


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pgval")
def main() -> None:
    """Validate processing guarantees of stream-processing jobs, with evidence."""


def _with_exit_status(command: click.Command) -> None:
    """Give ``command`` (and a group's subcommands) its exit statuses as ``--help``
    epilog, so every command's help and docs/cli.md say them."""
    command.epilog = exit_status(command.name or "")
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_exit_status(sub)


main.epilog = exit_status("")
for command in (offline.oracle, offline.check, lint.lint, streams.generate, streams.record,
                validate.validate, recheck_export.recheck,
                recheck_export.export, campaigns.matrix, campaigns.oir, report.report,
                cluster.cluster, housekeeping.cleanup, housekeeping.soak,
                housekeeping.setup_jars, bench.bench):
    _with_exit_status(command)
    main.add_command(command)


def run() -> None:
    """Entry point: INT, TERM and HUP stop the command through its teardown
    (pgval.host.signals); numpy's huge-page advice is off where it stalls faults, and
    every thread allocates from one arena (pgval.host.memory); an error that ends it
    outside a command (:class:`_Main` maps those inside) is mapped the same way."""
    from pgval.host import signals
    from pgval.host.memory import one_arena, small_pages

    one_arena()  # before any thread of a command starts
    try:
        with signals.handled(), small_pages():
            main(standalone_mode=True)
    except BaseException as exc:  # SystemExit and bugs go on as they are (as_error: None)
        error = as_error(exc)
        if error is None:
            raise
        print_error(str(error))
        sys.exit(error.exit_status)


if __name__ == "__main__":
    run()
