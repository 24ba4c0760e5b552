"""SST and MST written against the job interface (:mod:`pgval.topologies.job`), as a user
would write them: ``--job pgval.topologies.builtin:sst`` runs the same plan as
``--topology sst`` (the rows of :func:`pgval.topologies.query.sst_rows`), judged the way
every user's job is — its ``build`` run as a batch is the oracle.

Each built-in job carries ``pgval_topology`` and ``window_ms``: with them a run also
computes pgval's own single-process oracle (:mod:`pgval.oracle.expected`) over the same
inputs and compares the two expectations ID by ID. They must agree on every run; a
disagreement makes the run unknown, never a verdict (docs/your-job.md, "The oracle").

``sst`` and ``mst`` use pgval's default 10 s windows and 2 s watermark; :func:`make_sst` and
:func:`make_mst` make the same jobs for other sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pgval.core import schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Build = Callable[["SparkSession", Mapping[str, "DataFrame"]], "DataFrame"]


def _events(source: DataFrame, kind: str, watermark_ms: int) -> DataFrame:
    """A job source as the topologies read it: one request type, event time ``ts`` with
    the watermark."""
    from pyspark.sql import functions as F

    return (source.where(F.col("type") == kind).withColumnRenamed("event_ts", "ts")
            .withWatermark("ts", f"{int(watermark_ms)} milliseconds"))


def _builtin(build: Any, topology: schema.Topology, window_ms: int) -> Build:
    build.key = ["window_start", "resource"]
    build.pgval_topology = topology.value
    build.window_ms = int(window_ms)
    return build


def make_sst(window_ms: int = 10_000, watermark_ms: int = 2_000) -> Build:
    """SST as a job: GETs per (window, resource), counted, with their IDs."""
    def sst(spark: SparkSession, sources: Mapping[str, DataFrame]) -> DataFrame:
        from pgval.topologies.query import sst_rows

        return sst_rows(_events(sources["get"], schema.GET, watermark_ms), window_ms)

    return _builtin(sst, schema.Topology.SST, window_ms)


def make_mst(window_ms: int = 10_000, watermark_ms: int = 2_000) -> Build:
    """MST as a job: GET ⋈ POST per (window, resource), counted per side, with their IDs."""
    def mst(spark: SparkSession, sources: Mapping[str, DataFrame]) -> DataFrame:
        from pgval.topologies.query import mst_rows

        return mst_rows(_events(sources["get"], schema.GET, watermark_ms),
                        _events(sources["post"], schema.POST, watermark_ms), window_ms)

    return _builtin(mst, schema.Topology.MST, window_ms)


sst = make_sst()
mst = make_mst()


def builtin_of(build: Any) -> dict[str, Any] | None:
    """``{"topology", "window_ms"}`` of a built-in job's ``build``, else None."""
    topology = getattr(build, "pgval_topology", None)
    window = getattr(build, "window_ms", None)
    if topology in schema.BUILTIN_TOPOLOGIES and isinstance(window, int) and window > 0:
        return {"topology": topology, "window_ms": window}
    return None
