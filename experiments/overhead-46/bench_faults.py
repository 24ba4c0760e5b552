"""`pgval bench readback`'s stages in this process, each with its user and system seconds
and page faults (what `--json` does not say): the allocator's effect shows in the system
time. pyarrow's pool is the environment's (ARROW_DEFAULT_MEMORY_POOL) as this script does
not go through the command line:

    cd /tmp && PYTHONPATH=/work/main /work/main/.venv/bin/python \
        /work/main/experiments/overhead-46/bench_faults.py 10000000
    cd /tmp && ARROW_DEFAULT_MEMORY_POOL=system PYTHONPATH=... bench_faults.py 10000000
"""
import resource
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    from pgval.host.memory import one_arena

    one_arena()  # as the command line does
    import pyarrow as pa

    from pgval.campaigns import kafka_bench as kb

    timed = kb._timed

    def usage():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime, r.ru_minflt

    def traced(result, name, fn, say):
        u0, s0, f0 = usage()
        t = time.perf_counter()
        out = timed(result, name, fn, say)
        u1, s1, f1 = usage()
        print(f"{name:20s} wall {time.perf_counter() - t:5.2f} user {u1 - u0:5.2f} "
              f"sys {s1 - s0:5.2f} faults {f1 - f0:7d}", flush=True)
        return out

    kb._timed = traced
    print("pyarrow pool", pa.default_memory_pool().backend_name)
    result = kb.bench_readback(Path(tempfile.mkdtemp(prefix="pgval-faults-")), int(sys.argv[1]))
    print(f"total {result.total_s:.2f} s")


if __name__ == "__main__":  # the generator's producers start by spawn
    main()
