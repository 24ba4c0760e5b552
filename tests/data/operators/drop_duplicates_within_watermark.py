"""dropDuplicatesWithinWatermark by the event's ID."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = (sources["get"].withWatermark("event_ts", "5 seconds")
            .dropDuplicatesWithinWatermark(["id"]))
    return gets.select("id", "resource", F.array("id").alias("ids"))


build.key = ["id"]
