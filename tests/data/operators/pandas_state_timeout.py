"""applyInPandasWithState with a processing-time timeout: a resource's count written when
it has been quiet for 5 seconds of the stream's clock."""
import pandas as pd
from pyspark.sql.streaming.state import GroupStateTimeout


def count_until_quiet(key, frames, state):
    if state.hasTimedOut:
        (n, ids) = state.get
        state.remove()
        yield pd.DataFrame({"resource": [key[0]], "n": [n], "ids": [list(ids)]})
        return
    n, ids = state.get if state.exists else (0, [])
    for frame in frames:
        n += len(frame)
        ids = list(ids) + [int(i) for i in frame["id"]]
    state.update((n, ids))
    state.setTimeoutDuration(5000)
    yield pd.DataFrame({"resource": [], "n": [], "ids": []})


def build(spark, sources):
    return (sources["get"].groupBy("resource")
            .applyInPandasWithState(count_until_quiet, "resource string, n long, ids array<long>",
                                    "n long, ids array<long>", "append",
                                    GroupStateTimeout.ProcessingTimeTimeout))


build.key = ["resource"]
