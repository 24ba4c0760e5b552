"""transformWithState with TimeMode ProcessingTime (timers on the stream's clock): each
GET ID once per resource (state: a value per ID seen)."""
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor


class FirstSight(StatefulProcessor):
    def init(self, handle):
        self.seen = handle.getMapState("seen", "id long", "one int")

    def handleInputRows(self, key, rows, timerValues):
        out = []
        for frame in rows:
            for i in frame["id"]:
                if not self.seen.containsKey((int(i),)):
                    self.seen.updateValue((int(i),), (1,))
                    out.append(int(i))
        yield pd.DataFrame({"id": out, "resource": [key[0]] * len(out),
                            "ids": [[i] for i in out]})

    def close(self):
        pass


def build(spark, sources):
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    return (sources["get"].groupBy("resource")
            .transformWithStateInPandas(FirstSight(), "id long, resource string, ids array<long>",
                                        "append", "ProcessingTime"))


build.key = ["id"]
