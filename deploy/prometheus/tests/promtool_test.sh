#!/usr/bin/env bash
# ctest prometheus_rules: Tessera's alert rules pass `promtool check rules` and their unit
# tests (`promtool test rules`), and the example prometheus.yml passes `promtool check config`.
# Exit 77 (skipped) where promtool (Debian package prometheus) is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v promtool >/dev/null; then
  echo "SKIP: promtool not found (apt-get install prometheus; scripts/deps.d/obs.list)"
  exit 77
fi
promtool check rules tessera-rules.yml
promtool check config prometheus.yml
cd tests
promtool test rules tessera-rules_test.yml
