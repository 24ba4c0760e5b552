"""GETs counted per 5-second window twice over: per resource and for the whole site, in
one aggregation (``explode`` makes each event a row of its resource's scope and one of
the site's). Each event is in two outputs: the rows fan out, and pgval judges each
(event, output) pair.

``pgval validate --job examples/jobs/rollups.py:build`` (docs/your-job.md)
"""

from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds")
    scoped = gets.select("id", "event_ts",
                         F.explode(F.array(F.col("resource"), F.lit("site"))).alias("scope"))
    counted = scoped.groupBy(F.window("event_ts", "5 seconds").alias("w"), "scope").agg(
        F.count(F.lit(1)).alias("n"), F.collect_list("id").alias("ids"))
    return counted.select(F.col("w.start").alias("window_start"), "scope", "n", "ids")


build.key = ["window_start", "scope"]
