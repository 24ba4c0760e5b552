#!/bin/bash
# A command's wall time and the share of all cores busy while it ran (/proc/stat before
# and after; the machine's other work counts too): is there an idle core to overlap with?
#   experiments/overhead-46/cpu_during.sh .venv/bin/pgval cluster up --run-dir /tmp/cu1
set -u
read -r _ u n s i w x y z _ < /proc/stat; b0=$((u+n+s+x+y+z)); t0=$((u+n+s+i+w+x+y+z))
s0=$(date +%s.%N)
"$@" > /tmp/cpu_during.out 2>&1
rc=$?
read -r _ u n s i w x y z _ < /proc/stat; b1=$((u+n+s+x+y+z)); t1=$((u+n+s+i+w+x+y+z))
s1=$(date +%s.%N)
echo "exit $rc, wall $(echo "$s1 - $s0" | bc) s, busy $((100 * (b1 - b0) / (t1 - t0)))% of $(nproc) cores (output: /tmp/cpu_during.out)"
