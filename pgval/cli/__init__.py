"""pgval's command line: a thin layer of click commands over the library (one file per
command group, their shared option set in :mod:`pgval.cli.options`)."""

from pgval.cli.app import main, run

__all__ = ["main", "run"]
