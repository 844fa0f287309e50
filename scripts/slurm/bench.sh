#!/usr/bin/env bash
# End-to-end jobs/s onto a real Slurm: plain sbatch vs Tessera's SlurmPool, on a private
# cluster of 4 emulated nodes x 32 CPUs (scripts/slurm/up.sh), stopped again on exit.
# Usage: scripts/slurm/bench.sh BUILD_DIR [N=200]
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR [N]}
N=${2:-200}
HERE=$(cd "$(dirname "$0")" && pwd)
export TESSERA_SLURM_DIR=${TESSERA_SLURM_DIR:-/tmp/tessera-slurm-bench}
trap '"$HERE/down.sh"' EXIT
"$HERE/up.sh" 4 32 8
[[ -f "$TESSERA_SLURM_DIR/skip" ]] && exit 0
# MinJobAge=300 keeps finished jobs in squeue: every run's jobs stay visible.
SLURM_CONF=$TESSERA_SLURM_DIR/slurm.conf "$BUILD/src/backends/slurm_bench" "$N"
