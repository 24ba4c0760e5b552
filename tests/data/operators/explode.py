"""explode: each GET as two rows (its resource's two halves), both listing its ID."""
from pyspark.sql import functions as F


def build(spark, sources):
    parts = sources["get"].select("id", F.explode(F.array(F.lit("a"), F.lit("b"))).alias("half"))
    return parts.select("id", "half", F.array("id").alias("ids"))


build.key = ["id", "half"]
