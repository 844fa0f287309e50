#!/usr/bin/env bash
# Runs the whole test suite against an already-built preset (default: release).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-release}
# Integration suites that need daemons (Slurm, Prometheus) start and stop them themselves
# from scripts/ and skip with a message where the packages are missing.
ctest --preset "$PRESET" -j2 --timeout 600
