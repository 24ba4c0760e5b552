"""A windowed aggregation keyed differently from SST: every event of both streams, counted
per 5-second window and request type (GET, POST), with the IDs that made each count.
"""

from pyspark.sql import functions as F


def build(spark, sources):
    events = (sources["get"].unionByName(sources["post"])
              .withWatermark("event_ts", "2 seconds"))
    counted = events.groupBy(F.window("event_ts", "5 seconds").alias("w"), "type").agg(
        F.count(F.lit(1)).alias("n"), F.collect_list("id").alias("ids"))
    return counted.select(F.col("w.start").alias("window_start"),
                          F.col("w.end").alias("window_end"), "type", "n", "ids")


build.key = ["window_start", "type"]
