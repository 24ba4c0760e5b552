"""Which optional parts of pgval are installed.

``pip install .`` (in a checkout: no package index serves pgval) gives the commands that
need no cluster — ``check``, ``oracle``,
``report``, ``recheck``, ``export``, ``generate``, ``record`` — without pyspark (485 MB),
the packet holder's C build or the Docker SDK. The extras bring the rest: ``spark`` for
``validate``, ``matrix``, ``oir``, ``cluster`` and ``soak``, ``netdelay`` for the delay
faults on the embedded cluster, ``docker`` for ``--deploy compose``; ``all`` is the three.
A command that needs a missing one says so in one sentence before it starts anything.
"""

from __future__ import annotations

import importlib.util

from pgval.core.errors import EnvironmentFailure

#: extra -> (the module it brings, what needs it).
EXTRAS = {
    "spark": ("pyspark", "Spark (validate, matrix, oir, cluster, soak)"),
    "netdelay": ("netfilterqueue", "the packet holder of the delay faults"),
    "docker": ("docker", "--deploy compose"),
}


def installed(extra: str) -> bool:
    """Whether ``extra``'s module can be imported here (without importing it)."""
    module = EXTRAS[extra][0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(extra: str) -> None:
    """Raise :class:`PgvalError` naming the extra to install when it is missing."""
    if installed(extra):
        return
    module, what = EXTRAS[extra]
    raise EnvironmentFailure(f"{what} needs the Python package {module}, which is not "
                            f"installed here: pip install '.[{extra}]' in pgval's checkout")
