"""A floating-point key: a mean per window and resource, keyed by the mean."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds")
    return (gets.groupBy(F.window("event_ts", "5 seconds"), "resource")
            .agg(F.avg("id").alias("mean_id"), F.collect_list("id").alias("ids")))


build.key = ["mean_id"]
