"""A pandas UDF (deterministic): each GET's resource name in upper case."""
import pandas as pd
from pyspark.sql import functions as F


@F.pandas_udf("string")
def shout(text: pd.Series) -> pd.Series:
    return text.str.upper()


def build(spark, sources):
    return sources["get"].select("id", shout("resource").alias("r"),
                                 F.array("id").alias("ids"))


build.key = ["id"]
