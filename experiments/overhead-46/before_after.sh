#!/usr/bin/env bash
# pgval's own overhead before and after, in one sitting: the default SST run and the default
# MST run with delay-gt-timeout, each with the old code (OLD_PY: a venv whose pgval is a
# checkout of the commit the issue measured) and with this checkout's, interleaved
# old/new so the machine's drift falls on both; each run's --json into OUT, then the table.
#   git worktree add /tmp/old 1f7aa9f && cp -a .venv /tmp/oldvenv &&
#   /tmp/oldvenv/bin/python -m pip install --no-deps -e /tmp/old
#   OLD_PY=/tmp/oldvenv/bin/python OLD_CACHE=/tmp/oldcache \
#     bash experiments/overhead-46/before_after.sh /tmp/ba
# OLD_CACHE is the old code's own PGVAL_CACHE (the jar cache copied in), so that neither
# code's class archives push out the other's; a first run of each (a name ending in
# -prime, left out of the table) records its archives.
set -uo pipefail
out=${1:?usage: before_after.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
new_py="$here/../../.venv/bin/python"
old_py=${OLD_PY:?OLD_PY: the python of a venv with the old pgval}
mkdir -p "$out"
for name in ${RUNS:-sst-old sst-new mst-old mst-new}; do
  topology=${name%%-*}
  env=()
  case $name in *old*) py=$old_py; env=(PGVAL_CACHE="${OLD_CACHE:?}") ;; *) py=$new_py ;; esac
  fault=(); [ "$topology" = mst ] && fault=(--fault delay-gt-timeout)
  case $name in *-prime) fault+=(--phase-seconds 15) ;; esac  # archives, not timings
  echo "$(date +%T) $name"
  # From /tmp: the old code must not import this checkout's pgval from the working folder.
  (cd /tmp && env "${env[@]}" "$py" -m pgval.cli validate --topology "$topology" "${fault[@]}" \
    --db "$out/$name.db" --run-dir "$out/$name" --json > "$out/$name.json" 2> "$out/$name.err")
done
python3 "$here/jdk_table.py" $(ls "$out"/*.json | grep -v -- -prime)
