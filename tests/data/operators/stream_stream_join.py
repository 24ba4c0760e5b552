"""A stream-stream inner join with a time range: each POST with the GETs of its resource
in the 5 seconds before it, one row per pair (a POST in several rows: a fan-out)."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds").alias("g")
    posts = sources["post"].withWatermark("event_ts", "2 seconds").alias("p")
    pairs = gets.join(posts, F.expr("g.resource = p.resource AND g.event_ts BETWEEN "
                                    "p.event_ts - INTERVAL 5 SECONDS AND p.event_ts"))
    return pairs.select(F.col("g.id").alias("get_id"), F.col("p.id").alias("post_id"),
                        F.array("g.id", "p.id").alias("ids"))


build.key = ["get_id", "post_id"]
