"""dropDuplicates by the event's ID: one output per ID (its copies agree on every column)."""
from pyspark.sql import functions as F


def build(spark, sources):
    gets = sources["get"].dropDuplicates(["id"])
    return gets.select("id", "resource", F.array("id").alias("ids"))


build.key = ["id"]
