#!/usr/bin/env bash
# Users' jobs (`--job`) and sinks on the real cluster, into results.db beside this script:
#  1. the three example jobs and SST/MST as built-in jobs, each through `--job`, under a
#     worker crash and a driver crash (one repetition a cell: does each give a valid
#     verdict, and which?) with Spark's Kafka sink (a1); SST and MST as jobs with the
#     transactional sink (e1) too;
#  2. the sinks: the file sink and a Delta table under driver-crash@after-sink-write
#     (through their logs and raw), the two example foreachBatch sinks under
#     crash@during-sink-write (one repetition; tests/test_job_cluster.py repeats them).
# 20 s phases and a 30 s warm-up cap: what is judged is the verdict, not the latency.
# `pgval matrix` skips complete cells, so this resumes where it stopped.
#
#   experiments/jobs-24/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pgval="$root/.venv/bin/pgval"
common=(--phase-seconds 20 --warmup-max-seconds 30 --brokers 1 --workers 2
        --db "$here/results.db" --runs-dir "$root/runs/jobs-24")
jobs="
$root/examples/jobs/per_type_window.py:build 2000 5000 a1
$root/examples/jobs/enrich.py:build 2000 10000 a1
$root/examples/jobs/filter.py:build 2000 10000 a1
pgval.topologies.builtin:sst 2000 10000 a1,e1
pgval.topologies.builtin:mst 1750 10000 a1,e1
"
while read -r job rate window pgs; do
    [ -z "$job" ] && continue
    echo "== $(date -u +%H:%M:%S) $job"
    "$pgval" matrix --job "$job" --rate "$rate" --window-ms "$window" --pgs "$pgs" \
        --faults crash,driver-crash --repeat 1 "${common[@]}" </dev/null
done <<< "$jobs"

filter="$root/examples/jobs/filter.py:build"
sinks="
files driver-crash@after-sink-write
delta driver-crash@after-sink-write
$root/examples/sinks/sqlite_append.py:write crash@during-sink-write
$root/examples/sinks/sqlite_upsert.py:write crash@during-sink-write
"
while read -r sink fault; do
    [ -z "$sink" ] && continue
    echo "== $(date -u +%H:%M:%S) --sink $sink $fault"
    "$pgval" matrix --job "$filter" --sink "$sink" --rate 2000 --pgs a1 --faults "$fault" \
        --repeat 1 "${common[@]}" </dev/null
done <<< "$sinks"
