#!/usr/bin/env bash
# Real Slurm's submission rate on this machine, for docs/benchmarks.md beside
# `tessera bench-submit`: C concurrent clients each run `sbatch --parsable --hold --wrap true`
# in a loop (held jobs do not run, so this is the submit path only, like Tessera's). Uses a
# private cluster from scripts/slurm/up.sh (own dir and port) and stops it on exit.
# Usage: src/server/tools/sbatch-rate.sh [JOBS=2000] [CLIENTS=16]
set -euo pipefail
JOBS=${1:-2000}
CLIENTS=${2:-16}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
export TESSERA_SLURM_DIR=${TESSERA_SLURM_DIR:-/tmp/tessera-server-sbatch}
export TESSERA_SLURM_PORT=${TESSERA_SLURM_PORT:-26817}
trap '"$ROOT/scripts/slurm/down.sh" >/dev/null 2>&1 || true' EXIT
"$ROOT/scripts/slurm/up.sh" 2 32 8 >/dev/null
if [[ -f $TESSERA_SLURM_DIR/skip ]]; then
  echo "sbatch-rate: SKIP: $(cat "$TESSERA_SLURM_DIR/skip")"
  exit 0
fi
export SLURM_CONF=$TESSERA_SLURM_DIR/slurm.conf
OUT=$(mktemp -d)
per=$((JOBS / CLIENTS))
t0=$(date +%s%N)
for c in $(seq 1 "$CLIENTS"); do
  (
    for _ in $(seq 1 "$per"); do
      s=$(date +%s%N)
      if sbatch --parsable --hold --wrap true >/dev/null 2>>"$OUT/err"; then
        echo $(( ($(date +%s%N) - s) / 1000 )) >>"$OUT/lat.$c"
      fi
    done
  ) &
done
wait
t1=$(date +%s%N)
cat "$OUT"/lat.* | sort -n >"$OUT/all"
n=$(wc -l <"$OUT/all")
secs=$(echo "scale=3; ($t1 - $t0) / 1000000000" | bc)
p50=$(sed -n "$(( (n * 50 + 99) / 100 ))p" "$OUT/all")
p99=$(sed -n "$(( (n * 99 + 99) / 100 ))p" "$OUT/all")
echo "{\"tool\": \"sbatch --hold --wrap true\", \"clients\": $CLIENTS, \"jobs\": $n, \"seconds\": $secs," \
  "\"submissionsPerSecond\": $(echo "scale=1; $n / $secs" | bc), \"latencyMs\": {\"p50\": $(echo "scale=2; $p50/1000" | bc)," \
  "\"p99\": $(echo "scale=2; $p99/1000" | bc)}, \"errors\": $(wc -l <"$OUT/err")}"
scancel --quiet --user root >/dev/null 2>&1 || true
rm -rf "$OUT"
