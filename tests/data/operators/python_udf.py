"""A Python UDF (deterministic): each GET's resource name reversed."""
from pyspark.sql import functions as F
from pyspark.sql.types import StringType


@F.udf(StringType())
def backwards(text):
    return text[::-1]


def build(spark, sources):
    return sources["get"].select("id", backwards("resource").alias("r"),
                                 F.array("id").alias("ids"))


build.key = ["id"]
