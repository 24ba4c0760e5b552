"""The one error type a user's mistake or an environment problem becomes.

Why its own module: every layer raises it (the checker, the store, the processes, the
faults), and the CLI turns it into one plain sentence with a non-zero exit; kept here, at
the bottom, it costs no layer an import of the process runtime.
"""

from __future__ import annotations


class RuntimeErrorPlain(RuntimeError):
    """An error whose message is one plain sentence meant for the user (no traceback)."""


class BadInput(RuntimeErrorPlain):
    """A user's mistake that shows only once a command is under way (a job whose result
    pgval cannot judge, found when Spark builds its plan): exit 2, as a bad flag."""
