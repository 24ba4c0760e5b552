#!/usr/bin/env bash
# A warm matrix cell's overhead with a fresh driver per cell and with one
# driver shared by the cells (`--driver shared`), in one sitting on a quiet machine. The
# cells of warm.sh (SST a1, none and crash, 1 broker, 2 workers, 400 ev/s, 2 s windows),
# twice each, class sharing on; fresh, shared, fresh, shared, each matrix into its own
# database here. The table: python3 warm_summary.py warm-*-driver-*.db
#   bash experiments/overhead-26/warm_shared.sh [PHASE_SECONDS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pgval="$here/../../.venv/bin/pgval"
phase="${1:-15}"
work="$(mktemp -d /tmp/pgval-warm-XXXX)"
n=0
for driver in fresh shared fresh shared; do
  n=$((n + 1))
  db="$here/warm-$n-driver-$driver.db"
  rm -f "$db" "$db-wal" "$db-shm"
  echo "== $n: driver $driver: $(date -u +%H:%M:%S)"
  "$pgval" matrix --driver "$driver" --topologies sst --pgs a1 \
    --faults none,crash --repeat 2 --rate 400 --resources 4 --phase-seconds "$phase" \
    --warmup-seconds 10 --warmup-max-seconds 12 --window-ms 2000 --watermark-ms 1000 \
    --trigger-ms 500 --brokers 1 --partitions 2 --workers 2 \
    --db "$db" --runs-dir "$work/$n"
  sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
done
rm -rf "$work"
python3 "$here/warm_summary.py" "$here"/warm-*-driver-*.db
