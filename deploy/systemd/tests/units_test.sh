#!/usr/bin/env bash
# ctest systemd_units: the unit files in deploy/systemd pass `systemd-analyze verify` (no
# warnings), and their ExecStart lines, expanded as systemd expands them (Environment=, then
# the settings a host would put in /etc/default), start a server and an agent that registers
# its node; SIGTERM (their KillSignal) stops both within TimeoutStopSec. Paths under /var/lib
# and /usr/local/bin are swapped for a temp dir and $TESSERA_BINARY. Exit 77 (skipped) where
# curl or python3 is missing. Every process it starts, it stops.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
for tool in curl python3; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not found"; exit 77; }
done
[[ -x "${TESSERA_BINARY:-}" ]] || { echo "FAIL: TESSERA_BINARY not set (run through ctest)"; exit 1; }
D=$(mktemp -d /tmp/tessera-units.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT

for unit in tessera-server tessera-agent; do
  sed -e "s#/usr/local/bin/tessera#$TESSERA_BINARY#g" "$HERE/$unit.service" >"$D/$unit.service"
done
if command -v systemd-analyze >/dev/null; then
  # It warns (exit 0) about unknown keys and bad values: any output is a failure.
  out=$(cd "$D" && systemd-analyze verify --man=no tessera-server.service tessera-agent.service 2>&1) ||
    { echo "FAIL: systemd-analyze verify: $out"; exit 1; }
  [[ -z "$out" ]] || { echo "FAIL: systemd-analyze verify: $out"; exit 1; }
  echo "ok: systemd-analyze verify"
else
  echo "note: systemd-analyze not found; unit syntax not verified"
fi

# The unit's command line as systemd runs it: ${VAR} replaced inside a word, a lone $VAR
# split on whitespace (gone when empty), Environment= first, then the host's settings.
command_of() {  # UNIT KEY=VALUE... -> NUL-separated argv
  python3 - "$@" <<'PY'
import re, shlex, sys
unit, overrides = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
env, exec_start = {}, None
for line in open(unit):
    line = line.strip()
    if line.startswith("Environment="):
        k, v = line[len("Environment="):].split("=", 1)
        env[k] = v
    elif line.startswith("ExecStart="):
        exec_start = line[len("ExecStart="):]
env.update(overrides)
argv = []
for word in shlex.split(exec_start):
    m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
    if m:
        argv += env.get(m.group(1), "").split()
    else:
        argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda g: env.get(g.group(1), ""), word))
sys.stdout.write("\0".join(argv))
PY
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
stops_within() {  # PID SECONDS: SIGTERM, then it must exit in time
  kill -TERM "$1"
  for _ in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || { wait "$1" || true; return 0; }; sleep 0.1; done
  return 1
}

PORT=$(free_port)
mkdir -p "$D/lib/tessera" "$D/lib/tessera-agent"
mapfile -d '' SERVER < <(command_of "$D/tessera-server.service" "TESSERA_LISTEN=127.0.0.1:$PORT" \
  "TESSERA_SERVER_ARGS=--bootstrap $TESSERA_SOURCE_DIR/examples/seed")
SERVER=("${SERVER[@]//\/var\/lib\/tessera/$D/lib/tessera}")
(cd "$D/lib/tessera" && exec "${SERVER[@]}") >"$D/server.log" 2>&1 &
PIDS+=($!)
SERVER_PID=$!
for _ in $(seq 1 300); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.1; done
curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" || { echo "FAIL: server from the unit did not start"; cat "$D/server.log"; exit 1; }
echo "ok: server from the unit: ${SERVER[*]}"

mapfile -d '' AGENT < <(command_of "$D/tessera-agent.service" "TESSERA_SERVER=http://127.0.0.1:$PORT" \
  "TESSERA_AGENT_ARGS=--inventory seed-minimal --node gpu-node-1 --cgroup-parent -")
AGENT=("${AGENT[@]//\/var\/lib\/tessera-agent/$D/lib/tessera-agent}")
(cd "$D/lib/tessera-agent" && TESSERA_AGENT_TOKEN=$(cat "$D/lib/tessera/agent.token") exec "${AGENT[@]}") >"$D/agent.log" 2>&1 &
PIDS+=($!)
AGENT_PID=$!
TOKEN=$(cat "$D/lib/tessera/admin.token")
for _ in $(seq 1 300); do
  curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/v1/nodes" | grep -q gpu-node-1 && break
  sleep 0.1
done
curl -sf -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/v1/nodes" | grep -q gpu-node-1 ||
  { echo "FAIL: the agent from the unit did not register"; cat "$D/agent.log"; exit 1; }
echo "ok: agent from the unit registered gpu-node-1: ${AGENT[*]}"

stops_within "$AGENT_PID" 30 || { echo "FAIL: agent ignored SIGTERM"; exit 1; }
stops_within "$SERVER_PID" 30 || { echo "FAIL: server ignored SIGTERM"; exit 1; }
echo "ok: both stop on SIGTERM"
