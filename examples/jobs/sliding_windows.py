"""GETs counted per resource in sliding windows: 10 seconds long, one every 5 seconds, so
each event is in two windows. The batch run's rows fan out, and pgval judges each
(event, window) pair: a lost window leaves its pairs unprocessed although the same events
were counted in the windows beside it.

``pgval validate --job examples/jobs/sliding_windows.py:build`` (docs/your-job.md)
"""

from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds")
    counted = gets.groupBy(F.window("event_ts", "10 seconds", "5 seconds").alias("w"),
                           "resource").agg(F.count(F.lit(1)).alias("n"),
                                           F.collect_list("id").alias("ids"))
    return counted.select(F.col("w.start").alias("window_start"), "resource", "n", "ids")


build.key = ["window_start", "resource"]
