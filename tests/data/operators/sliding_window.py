"""A sliding window (10 s every 5 s): each GET in two windows, a fan-out."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds")
    return (gets.groupBy(F.window("event_ts", "10 seconds", "5 seconds"), "resource")
            .agg(F.count("*").alias("n"), F.collect_list("id").alias("ids")))


build.key = ["window", "resource"]
