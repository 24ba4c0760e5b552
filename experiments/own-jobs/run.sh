#!/usr/bin/env bash
# The example jobs that read Kafka themselves, under a worker crash and a driver crash for
# a1 and e1: one run a cell, into results.db beside this script (docs/your-job.md cites
# their verdicts). 1,000 ev/s, 20 s phases, timed faults.
#
# - orders, orders_unmodified, orders_enriched: the orders sample replayed, customer
#   Zipf-skewed, 20 % of records up to 4 s out of order (within the jobs' 10 s watermark);
# - orders_dedup: orders made by examples/inputs/orders_resent.py (every tenth sent twice),
#   no skew (a skewed field is drawn per record, so a re-send would not repeat it);
# - orders_avro: the orders as Avro (examples/inputs/orders_avro.toml: the .avro sample,
#   the same skew and disorder), decoded by the job with from_avro.
#
#   experiments/own-jobs/run.sh                        # every cell not yet complete
#   JOBS=orders_dedup experiments/own-jobs/run.sh      # one job's cells only
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
replayed=(--replay orders=examples/inputs/orders.jsonl --event-time-field ts
          --skew customer=zipf:1.2 --disorder 0.2:4000)
for job in ${JOBS:-orders orders_unmodified orders_enriched orders_dedup orders_avro}; do
    inputs=("${replayed[@]}")
    [ "$job" = orders_dedup ] && inputs=(--input orders=examples/inputs/orders_resent.py:make)
    [ "$job" = orders_avro ] && inputs=(--inputs-spec examples/inputs/orders_avro.toml)
    .venv/bin/pgval matrix --job "examples/jobs/$job.py:build" "${inputs[@]}" \
        --window-ms 10000 --pgs a1,e1 --faults crash,driver-crash --phase-seconds 20 \
        --rate 1000 --brokers 1 --workers 2 --repeat 1 \
        --db "$here/results.db" --runs-dir "$root/runs/own-jobs" </dev/null
done
