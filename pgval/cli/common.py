"""What several command groups share: the console (and its width in pipes), JSON and
validity output, the early check of ``--db``, and ``--rate`` (a number, or ``oir``: the
stored optimum ingestion rate).

Apart from the commands so each group's module imports only this, never another group.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
import orjson
from rich.console import Console, ConsoleDimensions, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from pgval.cli.errors import UserError, as_error, err_console
from pgval.core.errors import EnvironmentFailure, PgvalError

if TYPE_CHECKING:
    from pgval.checker.gate import Case
    from pgval.core.spec import RunSpec

#: The width of a pipe or CI log that no ``COLUMNS`` sizes.
PIPE_WIDTH = 140


class TableConsole(Console):
    """The console of every command. On a terminal, rich's own width; in a pipe or a CI log,
    ``COLUMNS`` when it is set (read at each print), else :data:`PIPE_WIDTH`. A table wider
    than that is printed as several tables of the same rows (:func:`fit`), never cut."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self.is_terminal:
            return size
        columns = os.environ.get("COLUMNS", "").strip()
        width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH
        return ConsoleDimensions(width, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        if not any(isinstance(o, Table) for o in objects):
            super().print(*objects, **kwargs)
            return
        for o in objects:
            for part in fit(o, self) if isinstance(o, Table) else [o]:
                super().print(part, **kwargs)


def _natural_width(table: Table, console: Console) -> int:
    return Measurement.get(console, console.options.update(width=100_000), table).maximum


def _part(table: Table, columns: list[int], first: bool) -> Table:
    """The table's rows in some of its columns, cells folded rather than cut; the title
    on the first part only, the caption on none (:func:`fit` prints it after the last)."""
    part = copy.copy(table)
    part.columns = []
    for k, i in enumerate(columns):
        column = copy.copy(table.columns[i])
        column._index = k  # noqa: SLF001 - rich numbers columns by it
        column.overflow = "fold"
        part.columns.append(column)
    part.title = table.title if first else None
    part.caption = None
    return part


def fit(table: Table, console: Console) -> list[RenderableType]:
    """``table`` if it fits the console's width; else the same rows as several tables, each
    with the row's key columns (the leading ``no_wrap`` ones, at least the first) and as
    many of the others as fit side by side, then the caption as a line of its own."""
    width = console.size.width
    keys = next((i for i, c in enumerate(table.columns) if not c.no_wrap), len(table.columns))
    key = list(range(max(keys, 1)))
    if len(table.columns) < len(key) + 2 or _natural_width(table, console) <= width:
        return [table]
    groups: list[list[int]] = [[]]
    for i in range(len(key), len(table.columns)):
        trial = _part(table, [*key, *groups[-1], i], True)
        if groups[-1] and _natural_width(trial, console) > width:
            groups.append([])
        groups[-1].append(i)
    parts: list[RenderableType] = [_part(table, [*key, *group], k == 0)
                                   for k, group in enumerate(groups)]
    if table.caption is not None:
        caption = (Text(table.caption, style="table.caption")
                   if isinstance(table.caption, str) else table.caption)
        parts.append(caption)
    return parts


console = TableConsole(emoji=False)  # a name or value ":x:" stays as typed

#: The rate a config holds until ``--rate oir`` is looked up (the config is checked, and
#: a matrix keyed, before the database is opened).
OIR_PENDING = 1.0


def print_json(obj: object) -> None:
    # Non-string keys as strings, as json.dumps writes them (and the store keeps them):
    # a broker crash's metadata snapshots are keyed by partition number.
    sys.stdout.buffer.write(orjson.dumps(
        obj, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) + b"\n")


def print_validity(validity: object) -> None:
    """One line: is the run evidence? With every reason when it is not."""
    reasons = getattr(validity, "reasons", [])
    if not reasons:
        console.print("[green]validity: valid[/]")
        return
    console.print(f"[bold yellow]validity: unknown[/] — the verdict above is not evidence "
                  f"({len(reasons)} reason{'s' if len(reasons) != 1 else ''}):")
    for r in reasons:
        console.print(f"  • {r}")


def print_views(summary: dict[str, object]) -> None:
    """The run's other readings, one line each: a file sink read raw, the outputs' clock
    when it is not Kafka's, whether a built-in job's two oracles agreed."""
    raw = summary.get("raw_read")
    if isinstance(raw, dict):
        console.print(f"  • read raw (listing the sink's directory, not through its log): "
                      f"{raw.get('guarantee')}, {raw.get('duplicate', 0):,} duplicated, "
                      f"{raw.get('unprocessed', 0):,} unprocessed, "
                      f"{raw.get('incorrect', 0):,} incorrect")
    if summary.get("latency_clock"):
        console.print(f"  • outputs timed by {summary['latency_clock']}")
    if "oracles_agree" in summary:
        said = ("agree" if summary["oracles_agree"]
                else f"DISAGREE: {summary.get('oracles_disagreement')}")
        console.print(f"  • the job's batch run and pgval's own oracle {said}")


def print_output_before_input(evaluation: object) -> None:
    """One line when outputs held IDs before their input arrived (part of incorrect)."""
    n = getattr(getattr(evaluation, "validation", None), "output_before_input", 0)
    if n:
        console.print(f"[bold]output before input:[/] {n:,} of the incorrect occurrences are "
                      "in their ID's own output, which arrived before the ID's input did")


def check_db(db: Path) -> None:
    """Open (create or migrate) the results database first: a bad --db is one line before
    a run directory exists or a cluster starts."""
    from pgval.store.results import ResultsStore

    ResultsStore(db).close()


def resolve_job(cfg: RunSpec) -> RunSpec:
    """The config with its ``--job`` and a user's ``--sink`` loaded and checked
    (:func:`pgval.run.setup.checked_job`): one sentence, exit 2, before anything starts."""
    from pgval.run.setup import checked_job

    return checked_job(cfg)


#: ``--lint/--no-lint`` of the commands that run a user's job (validate, matrix).
lint_option = click.option(
    "--lint/--no-lint", default=True, show_default=True,
    help="With --job: try the job on a sample of its input first, as `pgval lint` does (a "
         "local Spark, no Kafka, under a minute), and end with its problems before any "
         "cluster starts (skipped with --deploy compose).")


def lint_job_first(cfg: RunSpec, quiet: bool = False) -> None:
    """``pgval lint``'s checks of ``cfg``'s job before anything starts: its problems end
    the command, one sentence, exit 2 (:class:`pgval.run.lint.LintFailed`)."""
    from rich.markup import escape

    from pgval.run.lint import lint_before_run

    report = lint_before_run(cfg, None if quiet else
                             lambda line: err_console.print(escape(line), highlight=False))
    if report is not None and not quiet:
        err_console.print(f"lint: no problem found ({report.seconds:.1f} s)")


def parse_rate(text: str) -> float | None:
    """``--rate`` in events/s, or None for ``oir`` (read from the database later)."""
    if text.strip().lower() == "oir":
        return None
    try:
        value = float(text)
    except ValueError as exc:
        raise UserError(f"--rate must be a number of events/s or 'oir', not {text!r}") from exc
    if not 0 < value < float("inf"):
        raise UserError("--rate must be positive")
    return value


def stored_oir_rate(db: Path, cfg: RunSpec) -> float:
    """The optimum ingestion rate stored for the config's topology, pg and run shape, said
    on the console, or one line saying how to measure it (:class:`OirNotStored`)."""
    from pgval.campaigns.oir import oir_for

    stored = oir_for(db, cfg)
    # stderr: a status line, and `validate --json` keeps stdout to its one JSON object.
    err_console.print(f"{cfg.topology} {cfg.pg}: using the stored OIR, {stored.describe()}")
    return stored.rate


def gate_options(f):  # noqa: ANN001, ANN201 - click decorator
    """``--expect`` and ``--junit``: the CI gate of a command that gives verdicts."""
    from pgval.checker.gate import EXPECTATIONS

    f = click.option("--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="Also write a JUnit XML file: one test case per run (per cell in "
                          "a matrix) with its verdict, validity reasons and key numbers.")(f)
    return click.option("--expect", type=click.Choice(EXPECTATIONS),
                        help="Exit 0 when every run is valid and its verdict at least this "
                             "strong (exactly-once meets all three), 1 when a verdict is "
                             "weaker, 3 when a run's validity is unknown, 4 when a run did "
                             "not finish (validate, matrix); the first of 1, 4, 3 wins.")(f)


def why_not_finished(exc: BaseException) -> str:
    """The one sentence of an error that stopped a run (what ``pgval`` prints for it)."""
    error = as_error(exc)
    return str(error) if error is not None else f"{type(exc).__name__}: {exc}"


def gate_failed(exc: BaseException, case: Case, expect: str | None, junit_path: Path | None,
                suite: str) -> NoReturn:
    """A gated command whose run did not finish: ``--junit`` gets ``case`` as an error; the
    status is the error's own (2, 3 or 4), and 4 under ``--expect`` for any other
    (:class:`RunDidNotFinish`)."""
    if junit_path is not None:
        finish_gate([case], None, junit_path, suite)
    if expect is None or isinstance(exc, PgvalError):
        raise exc
    raise RunDidNotFinish(case.error or why_not_finished(exc)) from exc


class RunDidNotFinish(EnvironmentFailure):
    """A gated command's run stopped by an error outside pgval's family (a bug's
    exception, said in one line): exit 4 like every run that did not finish, so that 1
    under --expect only ever means a verdict weaker than expected."""


def finish_gate(cases: list[Case], expect: str | None, junit_path: Path | None,
                suite: str, *, quiet: bool = False) -> None:
    """Write ``--junit`` and exit with ``--expect``'s status (0 returns)."""
    from pgval.checker.gate import exit_status, sentence, write_junit

    if junit_path is not None:
        try:
            write_junit(junit_path, cases, expect, suite)
        except OSError as exc:
            raise UserError(f"cannot write the JUnit file {junit_path}: "
                            f"{exc.strerror or exc}") from exc
    if expect is None:
        return
    status = exit_status(cases, expect)
    (err_console if quiet else console).print(sentence(cases, expect))
    if status:
        sys.exit(status)


def require_spark(deploy: str = "local") -> None:
    """One sentence before anything starts when pyspark is missing (``pip install .``
    without the ``spark`` extra) or of a line pgval does not run on; ``--deploy compose``
    runs Spark in its containers."""
    from pgval.core.extras import require
    from pgval.host.jars import installed_spark

    if str(deploy) != "compose":
        require("spark")
        installed_spark()  # a pyspark line pgval does not run on: one sentence, now
