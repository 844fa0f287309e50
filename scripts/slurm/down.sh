#!/usr/bin/env bash
# Stops what scripts/slurm/up.sh started, by the pids it recorded: SIGTERM, then SIGKILL
# after 5 s (a slurmd that never reached slurmctld ignores SIGTERM while it backs off).
# munged is stopped only if up.sh started it. Idempotent.
set -uo pipefail
DIR=${TESSERA_SLURM_DIR:-/tmp/tessera-slurm}
pids=$(cat "$DIR/pids" "$DIR/munged.pid" 2>/dev/null | sort -u | tr '\n' ' ')
[[ -n "${pids// /}" ]] || exit 0
alive() { # a zombie counts as stopped: PID 1 may reap late here
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)
  [[ -n "$s" && "$s" != Z ]]
}
for p in $pids; do alive "$p" && kill "$p" 2>/dev/null; done
left=""
for _ in $(seq 1 50); do
  left=""
  for p in $pids; do alive "$p" && left="$left $p"; done
  [[ -z "$left" ]] && break
  sleep 0.1
done
if [[ -n "$left" ]]; then
  echo "slurm down: SIGKILL$left"
  for p in $left; do kill -9 "$p" 2>/dev/null; done
fi
rm -f "$DIR/pids" "$DIR/munged.pid"
echo "slurm down: stopped $(echo $pids | wc -w) processes"
