"""Orders enriched with a static table: each order joined with its customer's region and
tier, its amount converted to euros. A stream-static join, stateless, one output an order.

It reads Kafka itself with its own JSON schema; the static tables are built from the
session as a production job builds its reference data. The only line added for pgval is
the ``ids`` column: ``F.array(record_id())``, the order's Kafka coordinates. No
``build.key``: a row with one ID is identified by it. Being stateless with Spark's Kafka
sink, it also runs in Real-time Mode (``--trigger "real-time:5 seconds"``, ``--pg a1``).
"""

from pyspark.sql import functions as F

from pgval.job import record_id

ORDER = "order_id STRING, customer STRING, amount DOUBLE, currency STRING, ts STRING"
REGIONS = ["north", "south", "east", "west"]
TO_EUR = [("EUR", 1.0), ("GBP", 1.17), ("USD", 0.92), ("CHF", 1.05)]


def build(spark, kafka):
    # Reference data: 40 customers (the sample's cust-000 … cust-039) and the rates.
    customers = spark.createDataFrame(
        [(f"cust-{n:03d}", REGIONS[n % 4], "gold" if n % 7 == 0 else "standard")
         for n in range(40)], "customer STRING, region STRING, tier STRING")
    rates = spark.createDataFrame(TO_EUR, "currency STRING, to_eur DOUBLE")
    orders = (kafka.reader("orders").load()
              .select(F.from_json(F.col("value").cast("string"), ORDER).alias("o"),
                      record_id().alias("rid"))
              .select("o.*", "rid"))
    enriched = (orders.join(F.broadcast(customers), "customer", "left")
                .join(F.broadcast(rates), "currency", "left"))
    return enriched.select(
        "order_id", "customer", F.coalesce("region", F.lit("unknown")).alias("region"),
        F.coalesce("tier", F.lit("standard")).alias("tier"),
        (F.col("amount") * F.col("to_eur")).cast("decimal(12,2)").alias("amount_eur"),
        F.array("rid").alias("ids"))
