#!/usr/bin/env bash
# The orders jobs with the driver halted after a micro-batch's outputs reached the sink and
# before Spark committed the batch (driver-crash@after-sink-write), for a1 and e1: by IDs
# from Kafka coordinates (orders.py) and by rows (orders_unmodified.py), one run a cell,
# into results.db beside this script, with the input model of run.sh.
#
# The crash point must be reached within half the failure phase: a windowed job writes
# only when a window closes (every 10 s here), so with 20 s phases the halt sometimes finds
# no batch with outputs in its 10 s, and the run is unknown, saying so. PHASE=30 gives it
# 15 s.
#
#   experiments/own-jobs/halted.sh
#   JOBS=orders_unmodified PGS=e1 PHASE=30 experiments/own-jobs/halted.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
for job in ${JOBS:-orders orders_unmodified}; do
    .venv/bin/pgval matrix --job "examples/jobs/$job.py:build" \
        --replay orders=examples/inputs/orders.jsonl --event-time-field ts \
        --skew customer=zipf:1.2 --disorder 0.2:4000 --window-ms 10000 \
        --pgs "${PGS:-a1,e1}" --faults driver-crash@after-sink-write \
        --phase-seconds "${PHASE:-20}" \
        --rate 1000 --brokers 1 --workers 2 --repeat 1 \
        --db "$here/results.db" --runs-dir "$root/runs/own-jobs" </dev/null
done
