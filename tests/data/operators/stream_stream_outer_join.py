"""A stream-stream left outer join by ID with a time range: each GET with a GET of the
same ID up to 1 s later (itself), or nulls; one row per GET."""
from pyspark.sql import functions as F


def build(spark, sources):
    left = sources["get"].withWatermark("event_ts", "2 seconds").alias("a")
    right = sources["get"].withWatermark("event_ts", "2 seconds").alias("b")
    rows = left.join(right, F.expr("a.id = b.id AND b.event_ts BETWEEN a.event_ts AND "
                                   "a.event_ts + INTERVAL 1 SECOND"), "left_outer")
    return rows.select(F.col("a.id").alias("id"), F.col("b.resource").alias("matched"),
                       F.array("a.id").alias("ids"))


build.key = ["id"]
