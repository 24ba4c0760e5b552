#!/usr/bin/env bash
# The example grid remade under the current measurement model (warm control, faults timed
# from when they act, driver restarted at once as a supervisor would, bounds flagged): 43
# cells, 3 repetitions each (the flagship's 4), into results.db beside this script. `pgval
# matrix` skips cells already complete, so this script resumed where it stopped (about 19
# minutes a cell on a quiet 2-core machine). The grid is complete and its database is now
# the example report's (README.md beside this script): a run added now would change the
# committed report.
#
#   experiments/grid-23/run.sh              # every cell not yet complete
#   experiments/grid-23/run.sh "20:30 UTC"  # start no cell that could end after then (a
#                                           # cell is given 22 minutes); a time already past
#                                           # today means that time tomorrow
#
# After each cell: ship_evidence.py (copy its evidence beside the database), then
# stage_db.py (a snapshot of results.db, safe while `pgval matrix` writes it) and commit.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pgval="$root/.venv/bin/pgval"
until_s=$(date -d "${1:-tomorrow 23:59 UTC}" +%s)
[ "$until_s" -le "$(date +%s)" ] && until_s=$((until_s + 24 * 3600))
trap 'echo "== interrupted"; exit 130' INT TERM
common=(--phase-seconds 90 --brokers 1 --workers 2
        --db "$here/results.db" --runs-dir "$root/runs/grid-23")
sst=(--topologies sst --rate 12000)
mst=(--topologies mst --rate 1750)

# One line a cell: topology, guarantee, fault, restart ("-": the fault's default), and
# optionally how many repetitions (3 if not given).
# Most informative first: what the measurement model changed (driver restarts, delays),
# then the rest.
# "mst a1 delay-gt-timeout - 4", added after cell 21: a fourth repetition of the flagship's
# cell (`pgval validate --topology mst --fault delay-gt-timeout`), whose first three runs'
# evidence (runs 21-23) went with the machine that made them; ship_evidence.py keeps this
# one's beside the database.
# "mst m1 driver-crash - 4", added after the grid was complete: a fourth repetition of the
# at-most-once cell, so that every verdict the grid gives (exactly-once, at-least-once,
# at-most-once) re-checks from a fresh clone; its evidence is the one shipped for m1.
cells="
sst a1 driver-crash -
sst e1 driver-crash -
sst m1 driver-crash -
sst a1 driver-crash at-remove
sst e1 driver-crash at-remove
sst m1 driver-crash at-remove
mst a1 delay-gt-timeout -
mst e1 delay-gt-timeout -
mst m1 delay-gt-timeout -
sst a1 delay-lt-timeout -
sst e1 delay-lt-timeout -
sst m1 delay-lt-timeout -
mst a1 driver-crash -
mst e1 driver-crash -
mst m1 driver-crash - 4
sst a1 none -
sst e1 none -
sst m1 none -
mst a1 none -
mst e1 none -
mst m1 none -
mst a1 delay-gt-timeout - 4
sst a1 delay-gt-timeout -
sst e1 delay-gt-timeout -
sst m1 delay-gt-timeout -
mst a1 delay-lt-timeout -
mst e1 delay-lt-timeout -
mst m1 delay-lt-timeout -
sst a1 crash -
sst e1 crash -
sst m1 crash -
mst a1 crash -
mst e1 crash -
mst m1 crash -
sst a1 crash@during-sink-write -
sst m1 crash@during-sink-write -
mst a1 crash@during-sink-write -
mst m1 crash@during-sink-write -
sst a1 driver-crash@after-sink-write -
sst e1 driver-crash@after-sink-write -
sst m1 driver-crash@after-sink-write -
mst a1 driver-crash@after-sink-write -
mst e1 driver-crash@after-sink-write -
mst m1 driver-crash@after-sink-write -
"
while read -r topology pg fault restart repeat; do
    [ -z "$topology" ] && continue
    if [ $(( $(date +%s) + 22 * 60 )) -gt "$until_s" ]; then
        echo "== stopping: a cell started now could end after $(date -u -d @"$until_s" +%H:%M) UTC"
        break
    fi
    rate=("${sst[@]}"); [ "$topology" = mst ] && rate=("${mst[@]}")
    extra=(); [ "$restart" != - ] && extra=(--restart "$restart")
    echo "== $(date -u +%H:%M:%S) $topology $pg $fault ${extra[*]}"
    rc=0
    "$pgval" matrix "${rate[@]}" --pgs "$pg" --faults "$fault" "${extra[@]}" "${common[@]}" \
        --repeat "${repeat:-3}" </dev/null || rc=$?
    case $rc in
        0) ;;
        1) echo "== $topology $pg $fault: a run failed (exit 1); the cell is re-run next time" ;;
        *) echo "== $topology $pg $fault: pgval matrix exited $rc; stopping"; exit "$rc" ;;
    esac
done <<< "$cells"
