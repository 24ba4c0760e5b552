"""How long setting a replay's rows against the batch's takes (:func:`apply_replay`):
100,000 rows of 10 IDs each (1,000,000 pairs), 2 % of the pairs missing from the replay.

``.venv/bin/python experiments/late-data/bench_apply_replay.py``
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from pgval.oracle.replay import apply_replay


def table(keys: pa.Array, offsets: np.ndarray, ids: np.ndarray, value: str) -> pa.Table:
    return pa.table({"key": keys,
                     "ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids)),
                     "value": pa.array([value] * len(keys))})


def main(pairs: int = 1_000_000, per_row: int = 10, missing: float = 0.02) -> None:
    rows = pairs // per_row
    keys = pa.array([f'{{"w":{i}}}' for i in range(rows)])
    ids = np.arange(pairs, dtype=np.int64)
    offsets = np.arange(0, pairs + 1, per_row, dtype=np.int32)
    keep = np.random.default_rng(0).random(pairs) > missing
    kept = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(np.add.reduceat(keep.astype(np.int64), offsets[:-1]), out=kept[1:])
    batch = table(keys, offsets, ids, '{"n":10}')
    replay = table(keys, kept, ids[keep], '{"n":9}')
    t0 = time.perf_counter()
    applied = apply_replay(batch, replay, ids)
    print(f"{pairs:,} pairs, {len(applied.dropped):,} dropped: "
          f"{time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
