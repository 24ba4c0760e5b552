#!/bin/bash
# `pgval bench readback --events 10000000` with an old tree and this one, interleaved, in
# one sitting. BEFORE: a worktree of the old commit (git worktree add BEFORE eb307c6);
# OUT: where each run's --json goes. Run from the checkout's root:
#   experiments/overhead-46/readback_ab.sh /tmp/before46 /tmp/ab 3
set -u
before=$1; out=$2; rounds=${3:-3}; here=$(pwd)
mkdir -p "$out"
cd /tmp  # so that neither tree is imported from the working directory
for i in $(seq 1 "$rounds"); do
  for tree in before after; do
    if [ $tree = before ]; then pp=$before; else pp=$here; fi
    PYTHONPATH=$pp "$here/.venv/bin/python" -m pgval.cli bench readback --events 10000000 \
      --runs "$out/runs" --json > "$out/ab-$tree-$i.json" 2> "$out/ab-$tree-$i.err"
    echo "$tree $i rc=$?"
  done
done
