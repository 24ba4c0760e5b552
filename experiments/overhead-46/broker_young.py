"""Start and stop a 3-broker KafkaCluster (as the default run's) N times, alternating JVM
flag variants for the brokers; print start time and the brokers' page faults after start:

    cd /tmp && PYTHONPATH=/work/main /work/main/.venv/bin/python \
        /work/main/experiments/overhead-46/broker_young.py 2 default,young16,young32
"""
import sys, time, tempfile, shutil
from pathlib import Path
if __name__ == "__main__":
    from pgval.kafka import broker as b
    variants = {"default": [], "young32": ["-XX:MaxNewSize=32m"], "young16": ["-XX:MaxNewSize=16m"]}
    orig = b.KafkaCluster._broker_argv
    order = sys.argv[2].split(",")
    for r in range(int(sys.argv[1])):
        for name in order:
            extra = variants[name]
            def argv(self, node, extra=extra):
                a = orig(self, node)
                return [a[0], *extra, *a[1:]]
            b.KafkaCluster._broker_argv = argv
            d = Path(tempfile.mkdtemp(prefix="pgval-bf-"))
            c = b.KafkaCluster(d, brokers=3, partitions=3, sasl=True)
            time.sleep(3)
            t = time.monotonic()
            c.start()
            dt = time.monotonic() - t
            flt = 0
            for p in c.procs:
                pid = getattr(p, "pid", None)
                try:
                    flt += int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[7])
                except Exception as e:
                    pass
            c.stop()
            shutil.rmtree(d, ignore_errors=True)
            print(f"{name:8s} start {dt:6.2f} s  broker minflt {flt}", flush=True)
