"""An aggregation without a watermark: Spark writes it only in update or complete mode."""
from pyspark.sql import functions as F


def build(spark, sources):
    return sources["get"].groupBy("resource").agg(F.count("*").alias("n"),
                                                  F.collect_list("id").alias("ids"))


build.key = ["resource"]
