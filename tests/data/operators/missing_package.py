"""A job that imports a package this Python does not have."""
import pgval_no_such_package  # noqa: F401
from pyspark.sql import functions as F


def build(spark, sources):
    return sources["get"].select("id", F.array("id").alias("ids"))
