#!/usr/bin/env bash
# Runs NVML discovery on this machine once and prints what the agent saw, as JSON.
# Builds `tessera` first if needed (its own build dir; only the tessera target).
# Usage: scripts/nvml-discover.sh [extra `tessera agent --discover` flags]
# For docs/agent.md: run it on a GPU machine and paste the output with the date and machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${TESSERA_BUILD_DIR:-build/nvml-discover}
BIN=${TESSERA_BINARY:-$BUILD/src/cli/tessera}
if [[ ! -x "$BIN" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_BENCH=OFF >/dev/null
  cmake --build "$BUILD" --target tessera -j"$(nproc)" >/dev/null
fi
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(uname -r))" >&2
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,uuid,memory.total,mig.mode.current --format=csv >&2 || true
  nvidia-smi -L >&2 || true
fi
exec "$BIN" agent --discover -o json "$@"
