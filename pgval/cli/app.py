"""The ``pgval`` command group and its entry point; the commands are in one module per
group (:mod:`pgval.cli`).

Every command ends in one plain sentence and a non-zero exit on bad input or a
bad environment (:class:`UserError`), never a traceback.
"""

from __future__ import annotations

import sqlite3
import sys

import click

from pgval.cli import (
    bench,
    campaigns,
    cluster,
    evidence,
    housekeeping,
    offline,
    report,
    streams,
    validate,
)
from pgval.cli.errors import UserError, exit_status, kafka_error_text, print_error
from pgval.dbfile import StoreError
from pgval.errors import PgvalError, UserMistake

__all__ = ["UserError", "main", "print_error", "run"]


class _Main(click.Group):
    """The command group; a results database that cannot be used is a :class:`UserError`
    wherever a command meets it (``--db`` of any command)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except StoreError as exc:
            raise UserError(str(exc)) from exc
        except sqlite3.Error as exc:  # a damaged database met past opening it
            raise UserError(f"the results database (--db) failed: {exc}") from exc


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
for command in (offline.oracle, offline.check, streams.generate, streams.record,
                validate.validate, evidence.recheck,
                evidence.export, campaigns.matrix, campaigns.oir, report.report,
                cluster.cluster, housekeeping.cleanup, housekeeping.soak,
                housekeeping.setup_jars, bench.bench):
    _with_exit_status(command)
    main.add_command(command)


def run() -> None:
    """Entry point: plain runtime and Kafka errors become one line and exit code 1 (a
    mistake of the user's found under way, :class:`UserMistake`, exit 2); INT,
    TERM and HUP stop the command through its teardown (pgval.host.signals)."""
    from confluent_kafka import KafkaException

    from pgval.host import signals

    try:
        with signals.handled():
            main(standalone_mode=True)
    except UserMistake as exc:
        print_error(str(exc))
        sys.exit(2)
    except PgvalError as exc:
        print_error(str(exc))
        sys.exit(1)
    except KafkaException as exc:
        print_error(f"Kafka: {kafka_error_text(exc)}")
        sys.exit(1)


if __name__ == "__main__":
    run()
