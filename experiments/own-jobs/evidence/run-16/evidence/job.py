"""Re-sent orders dropped by their order id, as the job runs in production: Spark's
``dropDuplicatesWithinWatermark`` keeps the first copy of an order seen within the
watermark's delay. No ``ids`` column: pgval judges it by its rows (each order once, with its
customer, amount and currency), against the same job run as a batch, where the same call
keeps one copy of each order.

``pgval validate --job examples/jobs/orders_dedup.py:build --input
orders=examples/inputs/orders_resent.py:make`` (docs/your-job.md)
"""

from pyspark.sql import functions as F

ORDER = "order_id STRING, customer STRING, amount DOUBLE, currency STRING, ts STRING"


def build(spark, kafka):
    orders = (kafka.reader("orders").load()
              .select(F.from_json(F.col("value").cast("string"), ORDER).alias("o"))
              .select("o.*")
              .withColumn("event_time", F.to_timestamp("ts"))
              .where(F.col("event_time").isNotNull())
              .withWatermark("event_time", "10 seconds")
              .dropDuplicatesWithinWatermark(["order_id"]))
    return orders.select("order_id", "customer", "amount", "currency")


build.key = ["order_id"]
