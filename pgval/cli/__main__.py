"""``python -m pgval.cli``: the same as the ``pgval`` command."""

from pgval.cli import run

run()
