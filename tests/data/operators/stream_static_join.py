"""A stream-static join: each GET with its resource's owner from a static table."""
from pyspark.sql import functions as F


def build(spark, sources):
    owners = spark.createDataFrame([(f"r-{k}", f"team-{k % 3}") for k in range(16)],
                                   "resource string, owner string")
    return (sources["get"].join(owners, "resource", "left")
            .select("id", "owner", F.array("id").alias("ids")))


build.key = ["id"]
