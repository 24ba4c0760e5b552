#!/usr/bin/env bash
# Where MST's time goes. The OIR of MST (a1, 1 broker, 2 workers, 30 s
# control runs) for each variant a Spark user would try, one after the other on the quiet
# machine, into results.db beside this script; every trial's run directory (with the
# driver's progress events: batch durations, state rows and memory per operator) stays
# under runs/mst-26/<variant>.
#
#   experiments/mst-26/run.sh                  # every variant not yet measured
#   experiments/mst-26/run.sh "19:40 UTC"      # start no variant after then
#
# Variants: the default (stream-stream join, HDFS-backed state store, 3 shuffle
# partitions = the Kafka partitions); RocksDB state store with changelog checkpointing;
# 2 shuffle partitions (one task per executor core); MST's rows without the join
# (examples/jobs/mst_by_aggregation.py, checked against pgval's MST oracle on every run).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pgval="$root/.venv/bin/pgval"
until_s=$(date -d "${1:-tomorrow 23:59 UTC}" +%s)
trap 'echo "== interrupted"; exit 130' INT TERM
common=(--pg a1 --brokers 1 --workers 2 --phase-seconds 30 --start-rate 4000
        --precision 0.2 --max-trials 7 --db "$here/results.db")
rocksdb=(--spark-conf spark.sql.streaming.stateStore.providerClass=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider
         --spark-conf spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true)

run() {  # variant name, then its options
  local name=$1; shift
  if [ -e "$here/done-$name" ]; then echo "== $name: measured already"; return; fi
  if [ "$(date +%s)" -ge "$until_s" ]; then echo "== $name: past the deadline, not started"; return; fi
  echo "== $name: $(date -u +%H:%M:%S)"
  # A search that ends in an error (the by-aggregation job's batch oracle out of heap at
  # 200,000 ev/s) keeps its runs; the next variant still runs.
  if "$pgval" oir "${common[@]}" --runs-dir "$root/runs/mst-26/$name" "$@"; then
    touch "$here/done-$name"
  else
    echo "== $name: the search ended in an error (its runs are kept)"
  fi
  sqlite3 "$here/results.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
}

run join-default --topology mst
run join-rocksdb --topology mst "${rocksdb[@]}"
run join-2-shuffle --topology mst --shuffle-partitions 2
run by-aggregation --job "$root/examples/jobs/mst_by_aggregation.py:build"
echo "== done: $(date -u +%H:%M:%S)"
