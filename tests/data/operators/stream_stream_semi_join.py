"""A stream-stream left semi join: the GETs with a POST on their resource in the 5 seconds
after them; each GET once at most."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds").alias("g")
    posts = sources["post"].withWatermark("event_ts", "2 seconds").alias("p")
    rows = gets.join(posts, F.expr("g.resource = p.resource AND p.event_ts BETWEEN "
                                   "g.event_ts AND g.event_ts + INTERVAL 5 SECONDS"),
                     "left_semi")
    return rows.select("id", "resource", F.array("id").alias("ids"))


build.key = ["id"]
