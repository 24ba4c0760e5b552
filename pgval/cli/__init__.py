"""pgval's command line: a thin layer of click commands over the library.

One module per command group, each importing only what the groups share
(:mod:`.common`, :mod:`.options`, :mod:`.errors`), never another group:

* :mod:`.offline` — ``oracle`` and ``check``: recorded streams, no cluster;
* :mod:`.validate` — ``validate``: one experiment;
* :mod:`.evidence` — ``recheck`` and ``export``: a stored run from its kept evidence;
* :mod:`.campaigns` — ``matrix`` and ``oir`` (their policy is :mod:`pgval.campaigns.matrix` and
  :mod:`pgval.campaigns.oir`: the commands parse, call and say);
* :mod:`.report` — ``report``;
* :mod:`.cluster` — ``cluster up|status|down``;
* :mod:`.housekeeping` — ``cleanup``, ``soak``, ``setup-jars``;
* :mod:`.bench` — ``bench offline|generator|readback``.

:mod:`.app` holds only the group and the entry point; :mod:`.docs` renders docs/cli.md.
"""

from pgval.host.memory import arrow_on_glibc

arrow_on_glibc()  # before pyarrow is imported, which fixes its pool for the process

from pgval.cli.app import main, run  # noqa: E402

__all__ = ["main", "run"]
