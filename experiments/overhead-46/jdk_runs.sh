#!/usr/bin/env bash
# The default SST and MST (delay-gt-timeout) runs with JDK 17 and JDK 25, interleaved in one
# sitting; each run's --json into OUT, then a table of their own overhead, warm-up and
# control p50: `bash experiments/overhead-46/jdk_runs.sh /tmp/jdk-runs` (Temurin 25 where
# the env notes put it; JAVA17 and JAVA25 override the homes).
set -uo pipefail
out=${1:?usage: jdk_runs.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
pgval="$here/../../.venv/bin/pgval"
java17=${JAVA17:-/usr/lib/jvm/java-17-openjdk-amd64}
java25=${JAVA25:-/usr/lib/jvm/temurin-25-jdk-amd64}
mkdir -p "$out"
for name in sst-j17 sst-j25 mst-j17 mst-j25 sst-j17b sst-j25b; do
  topology=${name%%-*}
  case $name in *j17*) home=$java17 ;; *) home=$java25 ;; esac
  fault=(); [ "$topology" = mst ] && fault=(--fault delay-gt-timeout)
  echo "$(date +%T) $name"
  JAVA_HOME=$home PATH=$home/bin:$PATH "$pgval" validate --topology "$topology" "${fault[@]}" \
    --db "$out/runs.db" --run-dir "$out/$name" --json > "$out/$name.json" 2> "$out/$name.err"
done
python3 "$here/jdk_table.py" "$out"/*.json
