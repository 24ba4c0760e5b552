#!/usr/bin/env bash
# The example jobs that read Kafka themselves, on the orders input model, under a worker
# crash and a driver crash for a1 and e1: one run a cell, into results.db beside this
# script (docs/your-job.md cites their verdicts). The orders sample is replayed at
# 1,000 ev/s with a Zipf-skewed customer and 20 % of records up to 4 s out of order
# (within the jobs' 10 s watermark), 20 s phases.
#
#   experiments/own-jobs/run.sh                 # every cell not yet complete (matrix resumes)
#   JOBS=orders experiments/own-jobs/run.sh     # one job's cells only
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
for job in ${JOBS:-orders orders_unmodified}; do
    .venv/bin/pgval matrix --job "examples/jobs/$job.py:build" \
        --replay orders=examples/inputs/orders.jsonl --event-time-field ts \
        --skew customer=zipf:1.2 --disorder 0.2:4000 --window-ms 10000 \
        --pgs a1,e1 --faults crash,driver-crash --phase-seconds 20 --rate 1000 \
        --brokers 1 --workers 2 --repeat 1 \
        --db "$here/results.db" --runs-dir "$root/runs/own-jobs" </dev/null
done
