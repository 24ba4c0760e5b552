"""docs/cli.md: every command's ``--help``, rendered at a fixed width so it is reproducible.

Refresh it with ``python -m pgval.cli.docs > docs/cli.md``; ``tests/test_cli_options.py``
fails when the committed file differs from what this renders.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

#: Help is wrapped at this width, whatever the terminal.
WIDTH = 100
REFRESH = "python -m pgval.cli.docs > docs/cli.md"


def _commands(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[str, str]]:
    """``(command path, help text)`` of ``cmd`` and, for a group, of every visible
    subcommand, depth first in the order ``pgval --help`` lists them."""
    yield ctx.command_path, cmd.get_help(ctx)
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx))


#: Every command's exit status (tests/test_fuzz_cli.py holds every outcome to it).
EXIT_CODES = """
## Exit codes

Without `--expect` every command ends in one of four, and a failure is one plain line on
stderr (`error: …`, or click's usage block ending in one `Error: …` line), never a
traceback. The status is the kind of the error (`pgval/core/errors.py`, mapped in
`pgval/cli/app.py`):

* **0** — done. A verdict (at-most-once, …) and its validity (unknown, …) are output, not
  an exit status, unless `--expect` says which verdict the job must keep (below).
* **2** — bad input: a flag, a file, a question the files cannot answer (`check`: a
  window size the outputs contradict, phases in another unit, malformed records or
  records the inputs contradict unless `--allow-malformed`),
  a run directory or run id without usable evidence (missing, unreadable, damaged),
  a results database that cannot be used (damaged, newer, another program's), or one that
  failed to store a finished run (the message says how to import the run later).
* **3** — evidence in doubt: a run's evidence edited since it was sealed (a file changed,
  missing, added, another run's), a sealed run whose hashes the database no longer holds,
  a run directory whose `run.json` names a row that cannot be its own (a `check` result),
  `recheck --store` of evidence that is not verified or whose re-check does not reproduce
  the stored counts.
* **4** — the environment failed: Kafka, Spark, Docker, a process, the disk, a signal
  (INT, TERM, HUP); `matrix` with a failed run; `soak` that found something left behind.

`1` is never an error: only `--expect` gives it, for a verdict weaker than expected.

**The CI gate.** `validate`, `matrix`, `check` and `recheck` take `--expect
exactly-once|at-least-once|at-most-once`. A run meets it when it is valid and its verdict
is at least as strong: exactly-once meets all three, at-least-once and at-most-once only
themselves, `none` nothing; a matrix cell is judged by its weakest repetition, including
repetitions stored by an earlier (resumed) invocation. Then the status is:

* **0** — every run met it;
* **1** — a verdict weaker than expected (only this: a finding about the job);
* **3** — a run's validity unknown (the evidence cannot say; the reasons are printed), or
  a re-checked verdict that verified evidence does not back: no `--db`, a run stored
  without hashes or imported, a stored row whose figures differ from its re-check (each
  named);
* **4** — a run that did not finish (the environment failed, or a signal stopped it);
* **2** — bad input, and **3** for evidence in doubt, as without `--expect`.

When cases differ the first of 1, 4, 3 that applies wins. `--junit FILE` (with or
without `--expect`) writes JUnit XML that the JUnit schema of Jenkins' xUnit plugin
accepts: one `testcase` per run (per cell in a matrix), a weaker verdict as `failure`, an
unknown or unfinished run as `error` (`type="unknown"` / `"failed"`), the verdict line with
the anomaly counts as the message, and its real duration as `time`. A case's name is the
same from build to build, so a CI system follows it over time: what ran (the job's file
name and function, or the topology), the sink, the guarantee, the fault and its crash
point, e.g. `orders.py:build kafka a1 driver-crash@after-sink-write` (a `check` names its
topology and `--label` or outputs file). The suite's properties hold `expect` and each
case's verdict and key numbers (run id, expected, duplicate, unprocessed, incorrect,
reliability, failure cost), named `CASE.KEY`, or `CASE.#R.KEY` for a matrix repetition R.
Under `--json` the gate's line goes to stderr, so stdout stays one JSON object.
"""


def render() -> str:
    """The Markdown page: one section per command, its help in a text block."""
    from pgval.cli import main

    root = click.Context(main, info_name="pgval", terminal_width=WIDTH,
                         max_content_width=WIDTH, **main.context_settings)
    parts = ["# pgval command reference\n\n"
             f"Every command's `--help`, generated by `{REFRESH}`\n"
             "(do not edit by hand; `tests/test_cli_options.py` checks it is up to date).\n"
             "The options of `validate`, `matrix` and `oir` are made from the fields of\n"
             "`RunSpec` and `ClusterSpec`\n"
             "(`pgval/core/spec.py`), so they share their names, defaults and help.\n"
             + EXIT_CODES]
    for path, text in _commands(main, root):
        parts.append(f"\n## `{path}`\n\n```text\n{text.rstrip()}\n```\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
