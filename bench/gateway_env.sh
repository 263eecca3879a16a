# Shared set-up of the gateway benchmarks (sourced, not run): a temp dir
# cleaned up on exit, the engine simulator as a fast upstream, `atrium dev`
# with a deployment of it the demo tenant may use without limits biting, and
# the request every case sends.
#
#   gw_env_init NAME                  temp dir, cleanup trap; NAME prefixes errors
#   gw_start_sim BIN                  sets SIM_URL, SIM_HOSTPORT
#   gw_start_dev BIN THREADS [LAUNCHER...]
#                                     `atrium dev` (under LAUNCHER, e.g. valgrind, when
#                                     given); sets GATEWAY_URL, API_URL, KEY, DEV_PID and
#                                     configures the deployment of SIM_URL
#   await_line FILE SED_EXPR PID [TRIES]  waits for a matching line; prints it
# Sets MODEL and BODY. PIDS holds what cleanup stops; TMP the temp dir.

MODEL=bench-instant
BODY="{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"How fast is the gateway?\"}],\"max_tokens\":8}"

gw_env_init() {
  GW_ENV_NAME=$1
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/atrium-gwbench-XXXXXX")
  PIDS=()
  trap gw_env_cleanup EXIT
  trap 'exit 130' INT TERM
}

gw_env_cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  [[ -f "$TMP/nginx.pid" ]] && kill -QUIT "$(cat "$TMP/nginx.pid")" 2>/dev/null || true
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}

await_line() {
  local file=$1 expr=$2 pid=$3 tries=${4:-300} got=""
  for _ in $(seq 1 "$tries"); do
    got=$(sed -n "$expr" "$file" | head -n1)
    [[ -n "$got" ]] && { echo "$got"; return 0; }
    kill -0 "$pid" 2>/dev/null || { cat "$file" >&2; return 1; }
    sleep 0.1
  done
  return 1
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

gw_start_sim() {
  "$1" engine-sim --listen 127.0.0.1:0 --profile instant --model "$MODEL" --threads 2 \
    >"$TMP/sim.out" 2>&1 &
  PIDS+=($!)
  SIM_URL=$(await_line "$TMP/sim.out" 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "${PIDS[-1]}")
  SIM_HOSTPORT=${SIM_URL#http://}
}

gw_start_dev() {
  local bin=$1 threads=$2
  shift 2
  "$@" "$bin" dev --data "$TMP/data" --api-listen 127.0.0.1:0 --gateway-listen 127.0.0.1:0 \
    --gateway-threads "$threads" >"$TMP/dev.out" 2>"$TMP/dev.err" &
  PIDS+=($!)
  DEV_PID=${PIDS[-1]}
  # Under a launcher such as valgrind start-up takes much longer.
  await_line "$TMP/dev.out" 's/^Demo tenant key: \([^ ]*\).*/\1/p' "$DEV_PID" 3000 >/dev/null ||
    { echo "$GW_ENV_NAME: atrium dev did not start: $(cat "$TMP/dev.err")" >&2; exit 1; }
  API_URL=$(sed -n 's/^API: \(.*\)$/\1/p' "$TMP/dev.out")
  GATEWAY_URL=$(sed -n 's/^Gateway: \(.*\)$/\1/p' "$TMP/dev.out")
  local admin
  admin=$(cat "$TMP/data/admin.token")
  KEY=$(cat "$TMP/data/demo.key")
  gw_api() {
    curl -fsS --max-time 120 -X "$1" -H "Authorization: Bearer $admin" \
      -H 'Content-Type: application/json' ${3:+-d "$3"} "$API_URL$2"
  }
  local tenant
  tenant=$(curl -fsS --max-time 120 -H "Authorization: Bearer $KEY" "$API_URL/api/v1/whoami" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tenant"]["id"])')
  gw_api POST /api/v1/deployments "{\"model\":\"$MODEL\",\"version\":\"bench\",\"endpoints\":[{\"url\":\"$SIM_URL\",\"capacity\":4096}],\"region\":\"local\",\"latency_tier\":\"interactive\",\"visibility\":\"shared\"}" >/dev/null
  gw_api PUT "/api/v1/tenants/$tenant/entitlements/$MODEL" >/dev/null
  gw_api PUT "/api/v1/tenants/$tenant/gateway-limits" \
    '{"requests_per_minute":1000000000,"tokens_per_minute":1000000000000,"max_concurrent":100000,"max_queued":100000}' >/dev/null
}

# Waits until URL answers the bench request with 200 (TOKEN: a bearer key or "").
gw_await_200() {
  local name=$1 url=$2 token=$3 code=""
  for _ in $(seq 1 100); do
    code=$(curl -s -o "$TMP/check" -w '%{http_code}' --max-time 60 -H 'Content-Type: application/json' \
      ${token:+-H "Authorization: Bearer $token"} -d "$BODY" "$url/v1/chat/completions")
    [[ "$code" == 200 ]] && return 0
    sleep 0.1
  done
  echo "$GW_ENV_NAME: $name answered $code: $(cat "$TMP/check")" >&2
  exit 1
}
