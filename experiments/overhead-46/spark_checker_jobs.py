"""The Spark checker's cost on a tiny run: six calls of ``validate_on_spark`` in a row on
the case of ``test_every_planted_anomaly_is_counted_by_the_spark_checker`` (six pairs, five
outputs, every anomaly planted), in the tests' ``local[1]`` session; each call's seconds,
then the Spark jobs all of them ran (on a run this small a job costs its scheduling).

    PYTHONPATH=. .venv/bin/python experiments/overhead-46/spark_checker_jobs.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from pgval.scale.checker import validate_on_spark
from pgval.scale.frames import write_frames
from tests.spark_local import local_session
from tests.strategies import to_outputs
from tests.test_oracle_rows import _out, _sliding


def main(calls: int = 6) -> None:
    session = local_session("pgval-checker-jobs")
    spark = next(session)
    table, expected = _sliding()
    outputs = to_outputs([
        _out('{"w":1}', [1, 2], at=10), _out('{"w":1}', [1], at=11),
        _out('{"w":2}', [2, 3, 1, 99], at=12), _out('{"w":3}', [4], at=3),
        _out('{"w":3}', [3], at=13)], table)
    wrong = np.array([False, False, False, False, True])
    for i in range(calls):
        tmp = Path(tempfile.mkdtemp(prefix="pgval-checker-jobs-"))
        frames = write_frames(expected, outputs, tmp / "frames", wrong)
        t0 = time.perf_counter()
        validate_on_spark(spark, frames, expected.topology, None, tmp / "sets", 0, True)
        print(f"call {i}: {time.perf_counter() - t0:.2f} s", flush=True)
    print("Spark jobs in all:", len(spark.sparkContext.statusTracker().getJobIdsForGroup(None)))
    session.close()


if __name__ == "__main__":
    main()
