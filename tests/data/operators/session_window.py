"""A session window: GETs of a resource with gaps under 3 seconds in one session."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].withWatermark("event_ts", "2 seconds")
    return (gets.groupBy(F.session_window("event_ts", "3 seconds"), "resource")
            .agg(F.count("*").alias("n"), F.collect_list("id").alias("ids")))


build.key = ["session_window", "resource"]
