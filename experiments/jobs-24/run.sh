#!/usr/bin/env bash
# Issue 24's acceptance on the real cluster: the three example jobs and SST/MST as built-in
# jobs, each through `--job`, under a worker crash and a driver crash, on a1 and e1, into
# results.db beside this script (one repetition a cell: the question is whether each gives
# a valid verdict, and which). `pgval matrix` skips complete cells, so this resumes.
#
#   experiments/jobs-24/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pgval="$root/.venv/bin/pgval"
common=(--pgs a1,e1 --faults crash,driver-crash --repeat 1 --phase-seconds 30
        --brokers 1 --workers 2 --db "$here/results.db" --runs-dir "$root/runs/jobs-24")
jobs="
$root/examples/jobs/per_type_window.py:build 2000 5000
$root/examples/jobs/enrich.py:build 2000 10000
$root/examples/jobs/filter.py:build 2000 10000
pgval.topologies.builtin:sst 2000 10000
pgval.topologies.builtin:mst 1750 10000
"
while read -r job rate window; do
    [ -z "$job" ] && continue
    echo "== $(date -u +%H:%M:%S) $job"
    "$pgval" matrix --job "$job" --rate "$rate" --window-ms "$window" "${common[@]}" </dev/null
done <<< "$jobs"
