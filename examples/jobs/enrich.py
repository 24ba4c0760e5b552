"""A stream-static enrichment join: each GET joined with the team that owns its resource,
from a static table; resources no team owns are dropped by the inner join (their IDs are
expected in no output).
"""

from pyspark.sql import functions as F

#: The static side: 12 of the generator's 16 resources have an owner.
OWNERS = [(f"r{i:04d}", f"team-{i % 3}") for i in range(12)]


def build(spark, sources):
    owners = spark.createDataFrame(OWNERS, "resource STRING, team STRING")
    gets = sources["get"].where(F.col("type") == "GET")
    return gets.join(owners, "resource").select(
        "id", "resource", "team", F.array("id").alias("ids"))


build.key = ["id"]
