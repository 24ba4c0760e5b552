"""A stream-stream join: each POST with every GET of its resource in the 5 seconds before
it, one row per pair (the GET that led to the POST, say). A GET followed by two POSTs is
in two rows: the rows fan out, and pgval judges each (input, row) pair.

``pgval validate --job examples/jobs/post_after_get.py:build`` (docs/your-job.md)
"""

from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds").alias("g")
    posts = sources["post"].withWatermark("event_ts", "2 seconds").alias("p")
    pairs = gets.join(posts, F.expr("g.resource = p.resource AND g.event_ts BETWEEN "
                                    "p.event_ts - INTERVAL 5 SECONDS AND p.event_ts"))
    return pairs.select(F.col("p.id").alias("post_id"), F.col("g.id").alias("get_id"),
                        F.col("p.resource").alias("resource"),
                        F.array("g.id", "p.id").alias("ids"))


build.key = ["post_id", "get_id"]
