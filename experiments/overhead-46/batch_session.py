"""One local batch session's start and first query, and what became of its class archive
(pgval.topologies.batch.batch_session); one JSON line."""

from __future__ import annotations

import json
import time

t0 = time.monotonic()
from pgval.topologies.batch import batch_session, stop_batch_session  # noqa: E402

spark = batch_session({}, heap_mb=1024)
assert spark.range(100).count() == 100
up = time.monotonic() - t0
note = stop_batch_session(spark)
print(json.dumps({"up_s": round(up, 2), "note": note,
                  "total_s": round(time.monotonic() - t0, 2)}))
