#!/usr/bin/env bash
# Stops or starts slurmctld of the cluster scripts/slurm/up.sh started, keeping its saved
# state, as a production restart would: jobs survive. Tests use it to take the
# controller away under a running Tessera backend.
# Usage: scripts/slurm/ctld.sh stop|start
set -euo pipefail
DIR=${TESSERA_SLURM_DIR:-/tmp/tessera-slurm}
export SLURM_CONF=$DIR/slurm.conf
pid=$(head -1 "$DIR/pids")
alive() {
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)
  [[ -n "$s" && "$s" != Z ]]
}
case "${1:-}" in
  stop)
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -9 "$pid"
    echo "slurm ctld: stopped $pid"
    ;;
  start)
    alive "$pid" && { echo "slurm ctld: already running ($pid)"; exit 0; }
    nohup slurmctld -D -f "$SLURM_CONF" >>"$DIR/log/slurmctld.out" 2>&1 &
    new=$!
    sed -i "1s/.*/$new/" "$DIR/pids"  # down.sh stops it by this pid
    for _ in $(seq 1 100); do
      scontrol ping 2>/dev/null | grep -q 'is UP' && break
      sleep 0.1
    done
    echo "slurm ctld: started $new"
    ;;
  *)
    echo "usage: $0 stop|start" >&2
    exit 2
    ;;
esac
