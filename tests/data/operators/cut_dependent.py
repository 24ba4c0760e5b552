"""A result that depends on how the input is cut into micro-batches: each GET with the
number of its resource's rows in the same call of the function (a whole group in a batch
run, a micro-batch's share of it in a stream)."""
import pandas as pd
from pyspark.sql.streaming.state import GroupStateTimeout


def with_call_size(key, frames, state):
    for frame in frames:
        yield pd.DataFrame({"id": frame["id"], "in_call": [len(frame)] * len(frame),
                            "ids": [[int(i)] for i in frame["id"]]})


def build(spark, sources):
    return (sources["get"].groupBy("resource")
            .applyInPandasWithState(with_call_size, "id long, in_call long, ids array<long>",
                                    "n long", "append", GroupStateTimeout.NoTimeout))


build.key = ["id"]
