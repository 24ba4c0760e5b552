#!/usr/bin/env bash
# The faults beyond the paper, measured on SST — broker-crash (the output's
# leader, and the e1 sink's transaction coordinator), partition (a worker cut from the
# brokers), pause below and above the time-outs — × a1/e1/m1, 3 repetitions, into
# results.db beside this script. Breadth first: every cell once, then a second and a
# third repetition (`pgval matrix` skips what is complete, so the script resumes where it
# stopped). About 2.5 minutes a run on a quiet 2-core machine.
#
#   experiments/faults-25/run.sh              # everything not yet complete
#   experiments/faults-25/run.sh "13:10 UTC"  # start no cell that could end after then
#
# Commit results.db only between cells (not while `pgval matrix` writes it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pgval="$root/.venv/bin/pgval"
until_s=$(date -d "${1:-tomorrow 23:59 UTC}" +%s)
[ "$until_s" -le "$(date +%s)" ] && until_s=$((until_s + 24 * 3600))
trap 'echo "== interrupted"; exit 130' INT TERM
# 3 brokers: topics get 3 replicas and min.insync.replicas 2, so one broker down loses
# nothing acknowledged (docs/faults.md, "Broker crash"); the same cluster for every cell.
common=(--topologies sst --rate 2000 --phase-seconds 20 --brokers 3 --workers 2
        --db "$here/results.db" --runs-dir "$root/runs/faults-25")

# One line a cell: guarantee, fault, extra options ("-": none).
cells="
e1 broker-crash --target=coordinator
a1 broker-crash -
e1 broker-crash -
a1 partition -
e1 partition -
m1 partition -
a1 pause-gt-timeout -
e1 pause-gt-timeout -
m1 pause-gt-timeout -
a1 pause-lt-timeout -
e1 pause-lt-timeout -
m1 pause-lt-timeout -
"
for repeat in 1 2 3; do
    while read -r pg fault extra; do
        [ -z "$pg" ] && continue
        if [ $(( $(date +%s) + 4 * 60 )) -gt "$until_s" ]; then
            echo "== stopping: a run started now could end after $(date -u -d @"$until_s" +%H:%M) UTC"
            exit 0
        fi
        opts=(); [ "$extra" != - ] && opts=("$extra")
        echo "== $(date -u +%H:%M:%S) repetition $repeat: sst $pg $fault ${opts[*]}"
        rc=0
        "$pgval" matrix --pgs "$pg" --faults "$fault" --repeat "$repeat" "${opts[@]}" \
            "${common[@]}" </dev/null || rc=$?
        case $rc in
            0) ;;
            1) echo "== $pg $fault: a run failed (exit 1); it is re-run next time" ;;
            *) echo "== $pg $fault: pgval matrix exited $rc; stopping"; exit "$rc" ;;
        esac
    done <<< "$cells"
done
