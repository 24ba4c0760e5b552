"""first(): which row comes first depends on the order rows arrive in."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds")
    return (gets.groupBy(F.window("event_ts", "5 seconds"), "resource")
            .agg(F.first("id").alias("first_id"), F.collect_list("id").alias("ids")))


build.key = ["window", "resource"]
