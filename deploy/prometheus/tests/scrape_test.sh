#!/usr/bin/env bash
# ctest prometheus_scrape: a real Prometheus (Debian package) on loopback scrapes a running
# Tessera, loads Tessera's alert rules, and answers queries through /api/v1/query with the
# values Tessera exports. The target is `$TESSERA_BINARY server` when that binary serves
# /metrics, else tessera_metrics_test_exporter on a fixed cluster (tests/cluster.yaml).
# Exit 77 (skipped) where prometheus, promtool or curl is missing. Every process it starts,
# it stops.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
for tool in prometheus promtool curl python3; do
  if ! command -v $tool >/dev/null; then
    echo "SKIP: $tool not found (apt-get install prometheus curl; scripts/deps.d/obs.list)"
    exit 77
  fi
done
D=$(mktemp -d /tmp/tessera-prom.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$D"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() {  # URL [tries of 0.1 s]
  for _ in $(seq 1 "${2:-100}"); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
  return 1
}
query() {  # PROMQL -> the first result's value, or "" when the result is empty
  curl -sf --get --data-urlencode "query=$1" "http://127.0.0.1:$PROM_PORT/api/v1/query" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
expect_query() {  # PROMQL WANT: polls until Prometheus answers WANT (scrapes are 1 s apart)
  local got=""
  for _ in $(seq 1 150); do
    got=$(query "$1" || true)
    [[ "$got" == "$2" ]] && { echo "ok: $1 = $got"; return 0; }
    sleep 0.2
  done
  echo "FAIL: $1 = '$got', want '$2'"; tail -20 "$D/prom.log"; return 1
}

TARGET_PORT=$(free_port)
MODE=exporter
if [[ -n "${TESSERA_BINARY:-}" && -x "${TESSERA_BINARY}" ]] &&
   "$TESSERA_BINARY" server --help 2>/dev/null | grep -q -- --data-dir; then
  MODE=server
fi
if [[ $MODE == server ]]; then
  "$TESSERA_BINARY" server --data-dir "$D/data" --listen "127.0.0.1:$TARGET_PORT" >"$D/target.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$TARGET_PORT/metrics" 300 || { echo "FAIL: server has no /metrics"; cat "$D/target.log"; exit 1; }
else
  EXPORTER=${TESSERA_METRICS_TEST_EXPORTER:-}
  [[ -x "$EXPORTER" ]] || { echo "FAIL: no server binary and no test exporter"; exit 1; }
  "$EXPORTER" "$TARGET_PORT" "$HERE/cluster.yaml" >"$D/target.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$TARGET_PORT/metrics" || { echo "FAIL: exporter did not start"; cat "$D/target.log"; exit 1; }
fi
echo "target: $MODE on 127.0.0.1:$TARGET_PORT"

# The exposition text passes Prometheus' own parser and linter. The one finding allowed is
# the camelCase labels (UUID, modelName, Hostname) of the DCGM_FI_* metrics: they are
# dcgm-exporter's own names, kept so that NVIDIA's dashboards work unchanged.
curl -sf "http://127.0.0.1:$TARGET_PORT/metrics" >"$D/metrics.txt"
promtool check metrics <"$D/metrics.txt" >"$D/lint.txt" 2>&1 || true
if grep -v "^DCGM_FI_[A-Z_]* label names should be written in 'snake_case' not 'camelCase'$" "$D/lint.txt" | grep -q .; then
  echo "FAIL: promtool check metrics:"; cat "$D/lint.txt"; exit 1
fi
python3 - "$D/metrics.txt" <<'PY' || exit 1
import sys
text = open(sys.argv[1]).read()
assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text and "# TYPE tessera_jobs gauge" in text, "families missing"
PY
echo "ok: exposition parses ($(grep -c '^# TYPE' "$D/metrics.txt") families)"

PROM_PORT=$(free_port)
cp "$HERE/../tessera-rules.yml" "$D/"
cat >"$D/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [$D/tessera-rules.yml]
scrape_configs:
  - job_name: tessera
    static_configs: [{targets: ["127.0.0.1:$TARGET_PORT"]}]
YAML
promtool check config "$D/prometheus.yml" >/dev/null
prometheus --config.file="$D/prometheus.yml" --storage.tsdb.path="$D/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$D/prom.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 300 || { echo "FAIL: prometheus not ready"; tail "$D/prom.log"; exit 1; }

expect_query 'up{job="tessera"}' 1
expect_query 'tessera_build_info' 1
if [[ $MODE == server ]]; then
  # A job submitted through the API shows up in Prometheus as pending.
  "$TESSERA_BINARY" submit --server "http://127.0.0.1:$TARGET_PORT" -f "$HERE/job.yaml" >"$D/submit.log" 2>&1 ||
    { echo "FAIL: submit"; cat "$D/submit.log"; exit 1; }
  expect_query 'sum(tessera_jobs{queue="default"})' 1
else
  expect_query 'sum(tessera_node_capacity_gpus)' 4
  expect_query 'DCGM_FI_DEV_GPU_UTIL{node="gpu-a",gpu="0"}' 93
  expect_query 'count(DCGM_FI_DEV_GPU_UTIL{virtual="true"})' 2
  expect_query 'tessera_pending_jobs{queue="training"}' 1
  expect_query 'tessera_queue_cost_per_hour{queue="training"}' 2
fi
# Tessera's rules are loaded and evaluate without errors.
curl -sf "http://127.0.0.1:$PROM_PORT/api/v1/rules" | python3 -c '
import json, sys
groups = json.load(sys.stdin)["data"]["groups"]
rules = [r for g in groups for r in g["rules"]]
names = sorted(r["name"] for r in rules)
bad = [r["name"] + ": " + r.get("lastError", "") for r in rules if r.get("health") == "err"]
assert not bad, bad
for want in ["HighGpuUtilization", "TaskPendingTooLong", "NodeNotReady", "IdleGpuAllocated", "QueueOverLimit"]:
    assert want in names, (want, names)
print("ok: rules loaded:", ", ".join(names))'
echo "PASS"
