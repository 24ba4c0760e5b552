"""MST's outputs without the join: GETs and POSTs in one stream, one windowed aggregation.

pgval's MST joins GET ⋈ POST per (window, resource) and then collapses the join's pairs:
a key with G GETs and P POSTs makes G × P joined rows (at 20,000 ev/s, 16 resources and
10 s windows: ~12,000 × 60 per key and window). A Spark user after the same rows would
skip the pairs: tag each event with its side, union the two streams, and count and list
each side per (window, resource), keeping the keys that have both. Every row is the same
as MST's (count of GETs, count of POSTs, their IDs); ``pgval_topology`` makes every run
also compare this job's expectation with pgval's own MST oracle, ID by ID
(docs/performance.md, "Where MST's time goes").

What differs is the operator under test: an aggregation's state, not a stream-stream
join's. That is why ``--topology mst`` stays the join (the paper's multi-stream topology)
and this is an example.
"""

from pyspark.sql import functions as F

WINDOW_MS = 10_000
WATERMARK = "2000 milliseconds"


def build(spark, sources):
    def side(kind):
        return (sources[kind.lower()].where(F.col("type") == kind)
                .withWatermark("event_ts", WATERMARK)
                .select("id", "resource", "event_ts", F.lit(kind == "GET").alias("is_get")))

    events = side("GET").unionByName(side("POST"))
    is_get = F.col("is_get")
    agg = events.groupBy(F.window("event_ts", f"{WINDOW_MS} milliseconds").alias("w"),
                         "resource").agg(
        F.sum(is_get.cast("long")).alias("gets"),
        F.sum((~is_get).cast("long")).alias("posts"),
        F.collect_list(F.when(is_get, F.col("id"))).alias("get_ids"),  # nulls are skipped
        F.collect_list(F.when(~is_get, F.col("id"))).alias("post_ids"))
    return agg.where((F.col("gets") > 0) & (F.col("posts") > 0)).select(
        F.unix_millis(F.col("w.start")).alias("window_start"),
        F.unix_millis(F.col("w.end")).alias("window_end"),
        "resource", "gets", "posts", F.concat("get_ids", "post_ids").alias("ids"))


build.key = ["window_start", "resource"]
build.pgval_topology = "mst"
build.window_ms = WINDOW_MS
