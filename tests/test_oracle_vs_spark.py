"""Differential test: the oracle against PySpark batch DataFrames computing the same semantics.

Spark runs in local mode (no cluster needed); one session serves all examples. Inputs
repeat IDs (across types too): the oracle expects each ID once, from its first record by
ingress time (docs/semantics.md, "Input events"), which the restatement says with a
window function. The streaming plan pgval runs is tested in test_topology_streaming.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgval.oracle import expected_outputs
from tests.spark_local import local_session
from tests.strategies import input_events, to_inputs
from tests.test_oracle_properties import colliding_events

pyspark_sql = pytest.importorskip("pyspark.sql")
F = pyspark_sql.functions


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    yield from local_session("pgval-oracle-differential", cores=1)


def spark_expected(spark, events: list[dict], topology: str, w: int) -> dict:
    """Semantics of docs/semantics.md written as a Spark batch query."""
    schema = "id long, type string, resource string, event_ts long, ingress_ts long, pos long"
    df = spark.createDataFrame([(*(e[c] for c in ("id", "type", "resource", "event_ts",
                                                   "ingress_ts")), k)
                                for k, e in enumerate(events)], schema)
    if topology == "sst":  # SST reads GETs only: a POST never hides a GET
        df = df.where(F.col("type") == "GET")
    first = pyspark_sql.Window.partitionBy("id").orderBy("ingress_ts", "pos")
    df = (df.withColumn("nth", F.row_number().over(first)).where(F.col("nth") == 1)
          .withColumn("window_start", F.floor(F.col("event_ts") / w) * w))
    if topology == "sst":
        rows = (df.groupBy("window_start", "resource")
                .agg(F.count("*").alias("count"), F.sort_array(F.collect_list("id")).alias("ids"))
                .collect())
        return {(r.window_start, r.resource): (r["count"], list(r.ids)) for r in rows}
    gets = df.where(F.col("type") == "GET").alias("g")
    posts = df.where(F.col("type") == "POST").alias("p")
    keys = (gets.select("window_start", "resource").distinct()
            .join(posts.select("window_start", "resource").distinct(),
                  ["window_start", "resource"]))
    rows = (df.join(keys, ["window_start", "resource"]).groupBy("window_start", "resource")
            .agg(F.sum(F.when(F.col("type") == "GET", 1).otherwise(0)).alias("gets"),
                 F.sum(F.when(F.col("type") == "POST", 1).otherwise(0)).alias("posts"),
                 F.sort_array(F.collect_list("id")).alias("ids"))
            .collect())
    return {(r.window_start, r.resource): (r.gets, r.posts, list(r.ids)) for r in rows}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.one_of(input_events(max_size=40), colliding_events()),
       topology=st.sampled_from(["sst", "mst"]),
       w=st.sampled_from([7, 10, 100]))
def test_oracle_equals_spark_batch(spark, events: list[dict], topology: str, w: int) -> None:
    ours = {}
    for r in expected_outputs(to_inputs(events), topology, w).to_records():
        key = (r["window_start"], r["resource"])
        ours[key] = (r["count"], r["ids"]) if topology == "sst" else (r["gets"], r["posts"],
                                                                      r["ids"])
    assert ours == spark_expected(spark, events, topology, w)
