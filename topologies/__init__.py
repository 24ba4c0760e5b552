"""The Spark side of pgval: SST/MST streaming topologies, their two sinks and the driver.

``python -m pgval.topologies.driver`` is the process the runner starts; the functions here
let tests and notebooks build the same plans inside their own SparkSession. Importing this
package does not import pyspark until a name below is used.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "INPUT_VALUE_DDL",
    "TopologyConfig",
    "TransactionalSink",
    "build_topology",
    "events",
    "kafka_records",
    "kafka_sink",
    "last_committed_batch",
    "main",
    "mst",
    "plan",
    "progress_record",
    "spark_conf",
    "sst",
    "transactional_sink",
]

_HOMES = {
    "INPUT_VALUE_DDL": "query", "TopologyConfig": "query", "build_topology": "query",
    "events": "query", "kafka_records": "query", "mst": "query", "plan": "query",
    "sst": "query",
    "TransactionalSink": "sinks", "kafka_sink": "sinks", "last_committed_batch": "sinks",
    "transactional_sink": "sinks",
    "main": "driver", "progress_record": "driver", "spark_conf": "driver",
}


def __getattr__(name: str) -> Any:
    """Lazy re-exports: the runner imports pgval.topologies without paying for pyspark."""
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
