"""A stateless filter: the GETs of three resources, one output per kept event.
"""

from pyspark.sql import functions as F

KEPT = ["r0001", "r0002", "r0003"]


def build(spark, sources):
    gets = sources["get"].where((F.col("type") == "GET") & F.col("resource").isin(KEPT))
    return gets.select("id", "resource", "event_ts", F.array("id").alias("ids"))


build.key = ["id"]
