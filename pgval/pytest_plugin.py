"""pgval's pytest plugin, loaded by pytest wherever pgval is installed: a job's processing
guarantee held as a test.

* ``pgval_cluster`` (session-scoped): a :class:`pgval.api.Cluster`, one embedded Kafka and
  Spark cluster for every validation of the session, started by the first and stopped,
  every process of it, when the session ends;
* ``pgval.api.assert_guarantee(result, "exactly-once")``: the verdict as an assertion.

::

    from pgval import api

    def test_orders_is_exactly_once_under_a_worker_crash(pgval_cluster):
        result = pgval_cluster.validate(job="jobs/orders.py:build", pg="e1",
                                        fault="crash", inputs_spec="inputs/orders.toml")
        api.assert_guarantee(result, "exactly-once")

Nothing is imported or started until a test asks for the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pgval.api import Cluster


@pytest.fixture(scope="session")
def pgval_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One embedded cluster for the test session's validations (their run directories
    under a temporary folder of the session)."""
    from pgval.api import Cluster

    with Cluster(tmp_path_factory.mktemp("pgval")) as cluster:
        yield cluster
