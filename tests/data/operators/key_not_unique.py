"""A key that does not identify an output: counts per window and resource, keyed by the
resource alone."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds")
    return (gets.groupBy(F.window("event_ts", "5 seconds"), "resource")
            .agg(F.count("*").alias("n"), F.collect_list("id").alias("ids")))


build.key = ["resource"]
