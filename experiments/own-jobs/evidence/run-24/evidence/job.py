"""Orders summed per customer in tumbling windows, the orders being Avro: a job as it runs
where producers write Avro with a schema file.

It reads Kafka itself (``build(spark, kafka)``) and decodes each value with Spark's
``from_avro`` and the shop's schema (``examples/inputs/orders.avsc``: a decimal amount, an
enum currency, an optional coupon, a timestamp-millis event time). The only lines added
for pgval are the ``ids`` column (``record_id()``: each order's Kafka coordinates) and
``build.key``. Its input: ``--inputs-spec examples/inputs/orders_avro.toml`` (the Avro
sample, which carries its schema) or ``--replay orders=examples/inputs/orders.jsonl
--avro-schema orders=examples/inputs/orders.avsc`` (JSON lines sent as Avro).
"""

from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from pgval.job import record_id

SCHEMA = (Path(__file__).resolve().parents[1] / "inputs" / "orders.avsc").read_text()


def build(spark, kafka):
    orders = (kafka.reader("orders").option("maxOffsetsPerTrigger", "20000").load()
              .select(from_avro(F.col("value"), SCHEMA).alias("o"), record_id().alias("rid"))
              .select("o.*", "rid")
              .withWatermark("ts", "10 seconds"))
    totals = orders.groupBy(F.window("ts", "10 seconds"), "customer").agg(
        F.count("*").alias("orders"), F.sum("amount").alias("total"),
        F.count("coupon").alias("with_coupon"), F.collect_list("rid").alias("ids"))
    return totals.select(F.col("window.start").alias("window_start"), "customer", "orders",
                         "total", "with_coupon", "ids")


build.key = ["window_start", "customer"]
