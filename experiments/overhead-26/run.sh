#!/usr/bin/env bash
# pgval's overhead with and without class-data sharing, interleaved, in one
# sitting on a quiet machine (nothing else running). Each run prints one JSON line (--json);
# summary.py turns them into the table in docs/performance.md.
#   bash experiments/overhead-26/run.sh [PHASE_SECONDS]
#   bash experiments/overhead-26/run.sh 20 capped   # sharing on, the warm-up capped at 10 s
#                                                   # (runs-capped.jsonl): what an overhead
#                                                   # under 60 s costs in control's warmth
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pgval="$here/../../.venv/bin/pgval"
phase="${1:-20}"
mode="${2:-sharing}"
out="$here/runs.jsonl"
[ "$mode" = capped ] && out="$here/runs-capped.jsonl"
work="$(mktemp -d /tmp/pgval-overhead-XXXX)"
run() {  # LABEL SHARING ARGS...
  local label="$1" sharing="$2"; shift 2
  local t0; t0=$(date +%s.%N)
  PGVAL_CLASS_SHARING="$sharing" "$pgval" validate "$@" --phase-seconds "$phase" \
    --db "$here/results.db" --run-dir "$work/$label-$(date +%s)" --json >"$work/last.json" \
    2>"$work/$label.err" || true
  local wall; wall=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
  python3 - "$label" "$sharing" "$wall" "$phase" "$work/last.json" >>"$out" <<'PY'
import json, sys
label, sharing, wall, phase, path = sys.argv[1:]
try:
    d = json.load(open(path))
except ValueError:
    d = {}
print(json.dumps({"label": label, "class_sharing": sharing == "1", "wall_s": float(wall),
                  "phase_s": float(phase), "guarantee": d.get("guarantee"),
                  "valid": d.get("valid"), "run_id": d.get("run_id"),
                  "timings": d.get("timings", {}),
                  "p50_s": {p: v.get("p50_s") for p, v in d.get("latency", {}).items()}}))
PY
  tail -1 "$out"
}
if [ "$mode" = capped ]; then
  run sst-capped 1 --topology sst --warmup-max-seconds 10
  run mst-delay-gt-capped 1 --topology mst --fault delay-gt-timeout --warmup-max-seconds 10
else
  for rep in 1 2; do
    run sst 0 --topology sst
    run sst 1 --topology sst
  done
  run mst-delay-gt 0 --topology mst --fault delay-gt-timeout
  run mst-delay-gt 1 --topology mst --fault delay-gt-timeout
fi
rm -rf "$work"
