#!/bin/bash
# The docs' 4-cell job matrix with the JVMs' defaults, then with C1 alone; wall time of each.
cd /work/main
for mode in ${MODES:-default c1}; do
  out=/tmp/mx/$mode${ROUND:-}; rm -rf $out; mkdir -p $out
  if [ $mode = c1 ]; then export JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1; else unset JAVA_TOOL_OPTIONS; fi
  s=$(date +%s.%N)
  .venv/bin/pgval matrix --job examples/jobs/per_type_window.py:build --pgs a1,e1 \
    --faults crash,driver-crash --profile ci --window-ms 5000 \
    --expect exactly-once --junit $out/ci.xml --db $out/ci.db --runs-dir $out/runs --json > $out/matrix.json 2> $out/stderr.txt
  rc=$?
  e=$(date +%s.%N)
  echo "$mode exit $rc wall $(echo "$e - $s" | bc) s $(date +%H:%M:%S)" | tee -a /tmp/mx/walls.txt
done
