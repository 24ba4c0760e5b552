"""applyInPandasWithState without a timeout: each GET ID once per resource, however often
it comes (state: the IDs seen)."""
import json

import pandas as pd
from pyspark.sql.streaming.state import GroupStateTimeout


def first_sight(key, frames, state):
    seen = set(json.loads(state.get[0])) if state.exists else set()
    out = []
    for frame in frames:
        for i in frame["id"]:
            if int(i) not in seen:
                seen.add(int(i))
                out.append(int(i))
    state.update((json.dumps(sorted(seen)),))
    yield pd.DataFrame({"id": out, "resource": [key[0]] * len(out),
                        "ids": [[i] for i in out]})


def build(spark, sources):
    return (sources["get"].groupBy("resource")
            .applyInPandasWithState(first_sight, "id long, resource string, ids array<long>",
                                    "seen string", "append", GroupStateTimeout.NoTimeout))


build.key = ["id"]
