"""What a run's inputs cost pgval's own process on the numpy path: read-back, columns and
evaluation, as ``pgval bench readback`` runs them, with this process's resident memory
before the read-back and its peak after the evaluation (the peak is reset just before the
read-back through ``/proc/self/clear_refs``, so writing the bench's topics is not counted).

    .venv/bin/python experiments/overhead-46/numpy_memory.py 1000000 4000000

Prints one JSON line per size; the slope between two sizes is the bytes an input costs
(``pgval.core.spec.NUMPY_BYTES_PER_INPUT``, ``--spark-above``'s default).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from pgval.campaigns import kafka_bench


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise RuntimeError(key)


def main(sizes: list[int]) -> None:
    seen: dict[str, int] = {}
    read_back = kafka_bench._read_back

    def measured_read_back(*args, **kwargs):  # type: ignore[no-untyped-def]
        Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
        seen["before"] = _status("VmRSS:")
        return read_back(*args, **kwargs)

    kafka_bench._read_back = measured_read_back
    for events in sizes:
        with tempfile.TemporaryDirectory(prefix="pgval-numpy-memory-") as tmp:
            rate = kafka_bench.bench_readback(Path(tmp), events)
        peak = _status("VmHWM:")
        print(json.dumps({"events": events, "rss_before_mb": seen["before"] >> 20,
                          "peak_mb": peak >> 20,
                          "bytes_per_input": round((peak - seen["before"]) / events),
                          "stages_s": {k: round(v, 2) for k, v in rate.stages_s.items()}}),
              flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1_000_000, 4_000_000])
