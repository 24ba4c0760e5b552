#!/usr/bin/env bash
# The same stateless job (examples/jobs/orders_enriched.py: orders joined with a static
# customer table, Spark's Kafka sink, --pg a1) in micro-batch and in Spark's Real-time
# Mode, under a worker crash and a driver crash, 3 repetitions a cell, into results.db
# beside this script (docs/example-report/README.md, "Micro-batch and Real-time Mode",
# shows them; docs/your-job.md sums them up).
# One cluster size for both: 2 workers x 2 cores, enough for the 3 partitions Real-time
# Mode holds a core for; the orders sample replayed at 1,000 ev/s, 20 s phases.
#
#   experiments/real-time/run.sh                  # every cell not yet complete (resumes)
#   MODES=real-time experiments/real-time/run.sh  # one mode only
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
for mode in ${MODES:-micro-batch real-time}; do
    trigger=()
    [ "$mode" = real-time ] && trigger=(--trigger "real-time:5 seconds")
    .venv/bin/pgval matrix --job examples/jobs/orders_enriched.py:build \
        --replay orders=examples/inputs/orders.jsonl --event-time-field ts "${trigger[@]}" \
        --pgs a1 --faults crash,driver-crash --phase-seconds 20 --rate 1000 \
        --brokers 1 --workers 2 --cores-per-worker 2 --repeat 3 \
        --db "$here/results.db" --runs-dir "$root/runs/real-time" </dev/null
done
