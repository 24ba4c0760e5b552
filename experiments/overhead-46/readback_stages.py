"""The read-back's stages in one process, page faults and memory of each: fill a bench
broker once with N inputs (as `pgval bench readback`), then for each MODE read it back
("plain": no decoding, "len": a trivial note per chunk, "full": decoded during the read,
then records -> columns and the validation). ARENA1=1 sets glibc's M_ARENA_MAX to 1 before
anything starts (the code since e062653 does so within `kept_memory` itself).

    cd /tmp && PYTHONPATH=/work/main /work/main/.venv/bin/python \
        /work/main/experiments/overhead-46/readback_stages.py 10000000 plain,full,full
"""
import resource, time, sys, gc
def ru(): r=resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime, r.ru_stime, r.ru_minflt
def stage(name, fn):
    u0,s0,f0=ru(); t=time.perf_counter(); out=fn(); u1,s1,f1=ru()
    print(f"{name:32s} wall {time.perf_counter()-t:6.2f} user {u1-u0:5.2f} sys {s1-s0:5.2f} flt {f1-f0:8d} rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:6.0f}MB", flush=True)
    return out
if __name__ == "__main__":
    import ctypes, os
    if os.environ.get("ARENA1"): print("arena_max=1", ctypes.CDLL(None).mallopt(-8, 1))
    import tempfile
    from pathlib import Path
    from pgval.campaigns import kafka_bench as kb
    from pgval.core.schema import Topics
    from pgval.kafka.admin import create_topics
    from pgval.datasets import GeneratorConfig
    from pgval.core.clock import now_ms
    from pgval.kafka.reader import read_topics
    from pgval.records.own_inputs import decode_chunk
    from pgval.evidence.bundle import streams_from_records
    from pgval.checker.evaluate import evaluate
    from pgval.host.memory import bulk_arrays
    N=int(sys.argv[1]); modes=sys.argv[2].split(",")
    cfg = GeneratorConfig(rate=None, events=N, producers=1, event_time="synthetic",
                          synthetic_rate=100_000.0, start_ts_ms=now_ms() - 3_600_000)
    topics = Topics.with_prefix("bench-")
    with kb.bench_broker(Path(tempfile.mkdtemp(prefix="pgval-stages-")), 3) as cluster:
        create_topics(cluster.client_config, [*topics.inputs, topics.output], 3)
        kb._fill_bench_topics(cluster, topics, cfg, 1000, None)
        def rd(note):
            return read_topics(cluster.bootstrap, (topics.get, topics.post, topics.output), timeout_s=300,
                               config=cluster.auth_config, reader="jvm", on_chunk=note)
        with bulk_arrays():
          for m in modes:
            time.sleep(3)
            if m=="plain": r=stage("read, no notes", lambda: rd(None)); del r
            elif m=="len": r=stage("read, len notes", lambda: rd(len)); del r
            elif m=="full":
                r=stage("read, decode notes", lambda: rd(decode_chunk))
                inputs={"get": r[topics.get], "post": r[topics.post]}
                s=stage("records to columns", lambda: streams_from_records(inputs, r[topics.output], cfg.resources, None))
                del r, inputs
                e=stage("validation", lambda: evaluate(s.events, s.outputs, "sst", 1000))
                del s, e
            gc.collect()
