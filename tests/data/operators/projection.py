"""Projections and filters: one output per GET event, keyed by its ID."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].where(F.col("resource") != "r-none")
    return gets.select("id", F.upper("resource").alias("resource"), F.array("id").alias("ids"))


build.key = ["id"]
