#!/usr/bin/env bash
# A warm matrix cell's overhead with and without class-data sharing, in one
# sitting on a quiet machine (nothing else running). The cells of
# tests/test_deploy_cluster.py's warm matrix (SST a1, none then crash, 1 broker, 2 workers,
# 400 ev/s, 2 s windows), one `pgval matrix` with PGVAL_CLASS_SHARING=0, one with 1, each
# into its own results database here; `python warm_summary.py` prints the table of
# docs/performance.md ("A warm cluster").
#   bash experiments/overhead-26/warm.sh [PHASE_SECONDS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pgval="$here/../../.venv/bin/pgval"
phase="${1:-15}"
work="$(mktemp -d /tmp/pgval-warm-XXXX)"
for sharing in 0 1; do
  db="$here/warm-sharing-$sharing.db"
  rm -f "$db" "$db-wal" "$db-shm"
  echo "== class sharing $sharing: $(date -u +%H:%M:%S)"
  PGVAL_CLASS_SHARING="$sharing" "$pgval" matrix --topologies sst --pgs a1 \
    --faults none,crash --repeat 1 --rate 400 --resources 4 --phase-seconds "$phase" \
    --warmup-seconds 10 --warmup-max-seconds 12 --window-ms 2000 --watermark-ms 1000 \
    --trigger-ms 500 --brokers 1 --partitions 2 --workers 2 \
    --db "$db" --runs-dir "$work/$sharing"
  sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
done
rm -rf "$work"
python3 "$here/warm_summary.py"
