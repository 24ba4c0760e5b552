#!/usr/bin/env bash
# Does writing the priming events before the driver starts (so that a1's
# first batch reads them, instead of running empty while they are written) make a warm
# matrix cell cheaper? "before": OLD_ROOT, a checkout of d834053 with its own .venv;
# "after": NEW_ROOT, the same commit with priming-before-start.patch applied and its own
# .venv. One sitting on a quiet machine, in the order before, after, after, before, after a
# first matrix that fills the class archives (not kept). The cells are warm.sh's (SST a1,
# none then crash, 1 broker, 2 workers, 400 ev/s, 2 s windows, class sharing on); each
# matrix into its own database here; the table at the end is warm_summary.py's.
#   OLD_ROOT=/work/old NEW_ROOT=/work/new bash experiments/overhead-26/warm_priming.sh [PHASE_SECONDS]
# Measured 2026-11-28: no gain (docs/performance.md, "A warm cluster"), so the patch was
# not applied.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
old_root="${OLD_ROOT:?a checkout of d834053 with its own .venv}"
new_root="${NEW_ROOT:?that checkout with priming-before-start.patch applied, its own .venv}"
phase="${1:-15}"
work="$(mktemp -d /tmp/pgval-warm-XXXX)"
n=0
for side in cache before after after before; do
  n=$((n + 1))
  root="$new_root"; [ "$side" = before ] && root="$old_root"
  db="$here/warm-priming-$n-$side.db"
  rm -f "$db" "$db-wal" "$db-shm"
  echo "== $n $side: $(date -u +%H:%M:%S)"
  (cd "$root" && .venv/bin/pgval matrix --topologies sst --pgs a1 \
    --faults none,crash --repeat 1 --rate 400 --resources 4 --phase-seconds "$phase" \
    --warmup-seconds 10 --warmup-max-seconds 12 --window-ms 2000 --watermark-ms 1000 \
    --trigger-ms 500 --brokers 1 --partitions 2 --workers 2 \
    --db "$db" --runs-dir "$work/$n")
  sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
  [ "$side" = cache ] && rm -f "$db"
done
rm -rf "$work"
python3 "$here/warm_summary.py" "$here"/warm-priming-*.db
