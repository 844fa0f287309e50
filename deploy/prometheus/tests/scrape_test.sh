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
# (Not `--help | grep -q`: under pipefail, grep leaving early makes the pipeline fail.)
if [[ -n "${TESSERA_BINARY:-}" && -x "${TESSERA_BINARY}" ]] &&
   [[ $("$TESSERA_BINARY" server --help 2>/dev/null || true) == *--data-dir* ]]; then
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

# A second server with TLS and mutual TLS (docs/security.md, with its openssl commands),
# which Prometheus scrapes as deploy/prometheus/prometheus.yml's comment says: scheme https,
# the CA, and a client certificate.
TLS_JOB=""
if [[ $MODE == server ]] && command -v openssl >/dev/null; then
  P=$D/pki; mkdir -p "$P"
  ec() { openssl req "$@" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes 2>/dev/null; }
  ec -x509 -keyout "$P/ca.key" -out "$P/ca.pem" -days 2 -subj /CN=tessera-test-ca
  for who in server:serverAuth:IP:127.0.0.1 prometheus:clientAuth:DNS:prometheus; do
    IFS=: read -r name usage san_kind san <<<"$who"
    ec -keyout "$P/$name.key" -out "$P/$name.csr" -subj "/CN=$name"
    printf 'subjectAltName=%s:%s\nextendedKeyUsage=%s\n' "$san_kind" "$san" "$usage" >"$P/$name.cnf"
    openssl x509 -req -in "$P/$name.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial \
      -out "$P/$name.pem" -days 2 -extfile "$P/$name.cnf" 2>/dev/null
  done
  TLS_PORT=$(free_port)
  "$TESSERA_BINARY" server --data-dir "$D/data-tls" --listen "127.0.0.1:$TLS_PORT" \
    --tls-cert-file "$P/server.pem" --tls-key-file "$P/server.key" \
    --tls-client-ca-file "$P/ca.pem" >"$D/target-tls.log" 2>&1 &
  PIDS+=($!)
  CURL_TLS=(--cacert "$P/ca.pem" --cert "$P/prometheus.pem" --key "$P/prometheus.key")
  for _ in $(seq 1 300); do curl -sf "${CURL_TLS[@]}" -o /dev/null "https://127.0.0.1:$TLS_PORT/metrics" && break; sleep 0.1; done
  curl -sf "${CURL_TLS[@]}" -o /dev/null "https://127.0.0.1:$TLS_PORT/metrics" ||
    { echo "FAIL: the TLS server has no /metrics"; cat "$D/target-tls.log"; exit 1; }
  # Without a client certificate it answers nothing; over plain HTTP neither.
  if curl -sf --cacert "$P/ca.pem" -o /dev/null "https://127.0.0.1:$TLS_PORT/metrics" ||
     curl -sf -o /dev/null "http://127.0.0.1:$TLS_PORT/metrics"; then
    echo "FAIL: the TLS server answered a client without a certificate"; exit 1
  fi
  TLS_JOB="  - job_name: tessera-tls
    scheme: https
    tls_config: {ca_file: $P/ca.pem, cert_file: $P/prometheus.pem, key_file: $P/prometheus.key}
    static_configs: [{targets: [\"127.0.0.1:$TLS_PORT\"]}]"
  echo "target: a TLS server on 127.0.0.1:$TLS_PORT (mutual TLS)"
fi

PROM_PORT=$(free_port)
cp "$HERE/../tessera-rules.yml" "$D/"
cat >"$D/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [$D/tessera-rules.yml]
scrape_configs:
  - job_name: tessera
    static_configs: [{targets: ["127.0.0.1:$TARGET_PORT"]}]
$TLS_JOB
YAML
promtool check config "$D/prometheus.yml" >/dev/null
prometheus --config.file="$D/prometheus.yml" --storage.tsdb.path="$D/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$D/prom.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 300 || { echo "FAIL: prometheus not ready"; tail "$D/prom.log"; exit 1; }

expect_query 'up{job="tessera"}' 1
expect_query 'tessera_build_info{job="tessera"}' 1
if [[ -n $TLS_JOB ]]; then
  expect_query 'up{job="tessera-tls"}' 1
  expect_query 'tessera_build_info{job="tessera-tls"}' 1
fi
if [[ $MODE == server ]]; then
  # An agent registers a node and reports a busy device; a job that cannot fit is submitted.
  ADMIN=$(cat "$D/data/admin.token"); AGENT=$(cat "$D/data/agent.token")
  T=http://127.0.0.1:$TARGET_PORT
  EPOCH=$(curl -sf -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' -d '{"node": {"name": "prom-node", "pool": "own", "cpu": "32", "memory": "256Gi",
      "devices": [{"index": 0, "uuid": "GPU-p0", "model": "A100-80GB", "memory": "80Gi", "virtual": true}]},
      "agentVersion": "test", "bootId": "prom-boot"}' "$T/v1/agents/register" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["epoch"])')
  ( while true; do
      curl -sf -o /dev/null -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \
        -d "{\"epoch\": $EPOCH, \"devices\": [{\"index\": 0, \"utilPercent\": 93, \"memoryUsed\": 1073741824, \"powerMilliwatts\": 250000, \"healthy\": true}], \"tasks\": []}" \
        "$T/v1/agents/prom-node/heartbeat" || true
      sleep 1
    done ) &
  PIDS+=($!)
  curl -sf -o /dev/null -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/yaml' --data-binary @- "$T/v1/jobs" <<'JOB' ||
apiVersion: tessera.io/v1
kind: Job
metadata: {name: too-big}
spec:
  tasks: [{name: main, replicas: 1, resources: {cpu: 1, memory: 1Gi, nvidia.com/gpu: 4}, command: ["true"]}]
JOB
    { echo "FAIL: submit"; exit 1; }
  # A service's name comes through the scrape under its own label (a label `job` would be
  # renamed exported_job by Prometheus, and the alerts would name the scrape job instead).
  curl -sf -o /dev/null -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/yaml' --data-binary @- "$T/v1/jobs" <<'SVC' ||
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: web, image: x, command: ["sleep", "3600"], resources: {limits: {cpu: 1, memory: 1Gi, nvidia.com/gpu: 4}}}]
SVC
    { echo "FAIL: submit the service"; exit 1; }
  expect_query 'tessera_service_replicas{service="web",job="tessera"}' 2
  expect_query 'DCGM_FI_DEV_GPU_UTIL{node="prom-node",gpu="0",virtual="true"}' 93
  expect_query 'DCGM_FI_DEV_POWER_USAGE{node="prom-node"}' 250
  expect_query 'tessera_node_ready{node="prom-node"}' 1
  expect_query 'sum(tessera_jobs{state="pending"})' 2  # too-big and web
  expect_query 'sum(tessera_pending_jobs)' 2
  expect_query 'tessera_scheduling_cycle_duration_seconds_count > bool 0' 1
else
  expect_query 'sum(tessera_node_capacity_gpus)' 4
  expect_query 'DCGM_FI_DEV_GPU_UTIL{node="gpu-a",gpu="0"}' 93
  expect_query 'count(DCGM_FI_DEV_GPU_UTIL{virtual="true"})' 2
  expect_query 'tessera_pending_jobs{queue="training"}' 1
  expect_query 'tessera_queue_cost_per_hour{queue="training"}' 2
fi
# Every Grafana query is valid PromQL for this Prometheus (variables filled in), and the
# panels on devices, queues and jobs return data.
python3 - "$HERE/../../grafana/tessera-dashboard.json" "http://127.0.0.1:$PROM_PORT" <<'PY'
import json, sys, urllib.parse, urllib.request
dash, prom = json.load(open(sys.argv[1])), sys.argv[2]
def exprs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str): yield v
            else: yield from exprs(v)
    elif isinstance(node, list):
        for v in node: yield from exprs(v)
fill = {"$__rate_interval": "1m", "$__range": "5m", "$node": ".*", "$queue": ".*"}
errors, empty, n = [], [], 0
for e in exprs(dash["panels"]):
    q = e
    for k, v in fill.items(): q = q.replace(k, v)
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
    try:
        r = json.load(urllib.request.urlopen(url))
    except Exception as ex:
        errors.append(f"{e}: {ex}"); continue
    n += 1
    if r["status"] != "success": errors.append(f"{e}: {r}")
    elif not r["data"]["result"]: empty.append(e)
assert not errors, errors
for must in ["DCGM_FI_DEV_GPU_UTIL", "tessera_queue_subtree_allocated_gpus", "tessera_jobs{"]:
    hits = [e for e in exprs(dash["panels"]) if must in e and e not in empty]
    assert hits, f"no panel using {must} returned data"
print(f"ok: {n} Grafana queries are valid PromQL ({len(empty)} empty so far, e.g. rates)")
PY
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
