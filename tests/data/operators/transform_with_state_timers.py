"""transformWithState with TimeMode ProcessingTime (timers on the stream's clock): the same
processor as transform_with_state.py, in another time mode."""
from transform_with_state import FirstSight


def build(spark, sources):
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    return (sources["get"].groupBy("resource")
            .transformWithStateInPandas(FirstSight(), "id long, resource string, ids array<long>",
                                        "append", "ProcessingTime"))


build.key = ["id"]
