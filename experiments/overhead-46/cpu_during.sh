#!/bin/bash
# A command's wall time and the share of all cores busy while it ran (/proc/stat before
# and after; the machine's other work counts too): is there an idle core to overlap with?
# Busy is user, nice, system, irq and softirq time; steal (the host running others on
# this guest's cores) is reported apart, not as busy.
#   experiments/overhead-46/cpu_during.sh .venv/bin/pgval cluster up --run-dir /tmp/cu1
set -u
snap() { read -r _ u n s i w x y z _ < /proc/stat; echo "$((u+n+s+x+y)) $z $((u+n+s+i+w+x+y+z))"; }
read -r b0 st0 t0 <<< "$(snap)"
s0=$(date +%s.%N)
"$@" > /tmp/cpu_during.out 2>&1
rc=$?
read -r b1 st1 t1 <<< "$(snap)"
s1=$(date +%s.%N)
echo "exit $rc, wall $(echo "$s1 - $s0" | bc) s, busy $((100 * (b1 - b0) / (t1 - t0)))%," \
     "steal $((100 * (st1 - st0) / (t1 - t0)))% of $(nproc) cores (output: /tmp/cpu_during.out)"
