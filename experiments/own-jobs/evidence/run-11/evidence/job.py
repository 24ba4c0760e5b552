"""Orders summed per customer in tumbling windows: a job as it runs in production.

It reads Kafka itself (``build(spark, kafka)``) with its own source option and parses the
orders with its own JSON schema; the only lines added for pgval are the ``ids`` column
(``record_id()``: each order's Kafka coordinates) and ``build.key``. Its inputs come from
an input model, e.g. ``--replay orders=examples/inputs/orders.jsonl --event-time-field ts``
(docs/your-job.md).
"""

from pyspark.sql import functions as F

from pgval.job import record_id

ORDER = "order_id STRING, customer STRING, amount DOUBLE, currency STRING, ts STRING"


def build(spark, kafka):
    orders = (kafka.reader("orders").option("maxOffsetsPerTrigger", "20000").load()
              .select(F.from_json(F.col("value").cast("string"), ORDER).alias("o"),
                      record_id().alias("rid"))
              .select("o.*", "rid")
              .withColumn("event_time", F.to_timestamp("ts"))
              .where(F.col("event_time").isNotNull())
              .withWatermark("event_time", "10 seconds"))
    totals = orders.groupBy(F.window("event_time", "10 seconds"), "customer").agg(
        F.count("*").alias("orders"), F.sum("amount").alias("total"),
        F.collect_list("rid").alias("ids"))
    return totals.select(F.col("window.start").alias("window_start"), "customer", "orders",
                         "total", "ids")


build.key = ["window_start", "customer"]
