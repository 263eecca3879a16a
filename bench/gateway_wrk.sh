#!/usr/bin/env bash
# The gateway's overhead, measured with wrk on loopback against:
#   (a) direct   the engine simulator with the `instant` profile (a fast upstream)
#   (b) nginx    Debian's nginx reverse-proxying to (a) with upstream keep-alive
#   (c) gateway  Atrium's gateway in front of (a): API-key authentication, the
#                tenant's limits (set high, so they are checked but never bite),
#                the fair queue, routing and metering (usage journal) all on
# Every case sends the same non-streamed chat completion (max_tokens 8). The
# cases run WRK_REPS times interleaved (a b c a b c ...) so that noise on a
# shared machine lands on each alike; medians are reported with the ratio
# (c)/(b) of requests/s and the p99 each proxy adds over (a). With
# PROXY_FLOOR=path/to/proxy_floor (bench/proxy_floor.cc) a fourth case runs:
#   (d) floor    the gateway's I/O design alone (Asio coroutines, Beast
#                streams and parsers, a keep-alive pool) without its work
#
# usage: bench/gateway_wrk.sh [path/to/atrium]     (default build/apps/atrium/atrium)
# env:   WRK_THREADS=2 WRK_CONNECTIONS=64 WRK_DURATION=10s WRK_REPS=3
#        NGINX_WORKERS=2 GATEWAY_THREADS=2 (the same number of cores for both proxies)
set -euo pipefail

BIN=${1:-build/apps/atrium/atrium}
THREADS=${WRK_THREADS:-2}
CONNECTIONS=${WRK_CONNECTIONS:-64}
DURATION=${WRK_DURATION:-10s}
REPS=${WRK_REPS:-3}
NGINX_WORKERS=${NGINX_WORKERS:-2}
GATEWAY_THREADS=${GATEWAY_THREADS:-2}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LUA="$HERE/gateway_wrk.lua"
MODEL=bench-instant

for tool in wrk nginx curl python3; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin
  command -v "$tool" >/dev/null || { echo "gateway_wrk.sh: $tool not found" >&2; exit 2; }
done
[[ -x "$BIN" ]] || { echo "gateway_wrk.sh: no executable at $BIN" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/atrium-gwbench-XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  [[ -f "$TMP/nginx.pid" ]] && kill -QUIT "$(cat "$TMP/nginx.pid")" 2>/dev/null || true
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits for a line matching a sed expression in a file; prints the match.
await_line() {
  local file=$1 expr=$2 pid=$3 got=""
  for _ in $(seq 1 300); do
    got=$(sed -n "$expr" "$file" | head -n1)
    [[ -n "$got" ]] && { echo "$got"; return 0; }
    kill -0 "$pid" 2>/dev/null || { cat "$file" >&2; return 1; }
    sleep 0.1
  done
  return 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# (a) the fast upstream.
"$BIN" engine-sim --listen 127.0.0.1:0 --profile instant --model "$MODEL" --threads 2 \
  >"$TMP/sim.out" 2>&1 &
PIDS+=($!)
SIM_URL=$(await_line "$TMP/sim.out" 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "${PIDS[-1]}")
SIM_HOSTPORT=${SIM_URL#http://}

# (b) nginx.
NGINX_PORT=$(free_port)
mkdir -p "$TMP/nginx"
cat >"$TMP/nginx.conf" <<EOF
worker_processes $NGINX_WORKERS;
pid $TMP/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path $TMP/nginx/body;
  proxy_temp_path $TMP/nginx/proxy;
  upstream sim { server $SIM_HOSTPORT; keepalive 256; }
  server {
    listen 127.0.0.1:$NGINX_PORT reuseport;
    location / {
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
nginx -p "$TMP/nginx" -c "$TMP/nginx.conf"
NGINX_URL="http://127.0.0.1:$NGINX_PORT"

# (d) the floor, when asked for.
if [[ -n "${PROXY_FLOOR:-}" ]]; then
  "$PROXY_FLOOR" 0 "$SIM_HOSTPORT" "$GATEWAY_THREADS" >"$TMP/floor.out" 2>&1 &
  PIDS+=($!)
  FLOOR_URL=$(await_line "$TMP/floor.out" 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "${PIDS[-1]}")
fi

# (c) the gateway, in `atrium dev`.
"$BIN" dev --data "$TMP/data" --api-listen 127.0.0.1:0 --gateway-listen 127.0.0.1:0 \
  --gateway-threads "$GATEWAY_THREADS" >"$TMP/dev.out" 2>"$TMP/dev.err" &
PIDS+=($!)
await_line "$TMP/dev.out" 's/^Demo tenant key: \([^ ]*\).*/\1/p' "${PIDS[-1]}" >/dev/null
API_URL=$(sed -n 's/^API: \(.*\)$/\1/p' "$TMP/dev.out")
GATEWAY_URL=$(sed -n 's/^Gateway: \(.*\)$/\1/p' "$TMP/dev.out")
ADMIN=$(cat "$TMP/data/admin.token")
KEY=$(cat "$TMP/data/demo.key")
api() {
  curl -fsS --max-time 30 -X "$1" -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' ${3:+-d "$3"} "$API_URL$2"
}
TENANT_ID=$(curl -fsS -H "Authorization: Bearer $KEY" "$API_URL/api/v1/whoami" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["tenant"]["id"])')
api POST /api/v1/deployments "{\"model\":\"$MODEL\",\"version\":\"bench\",\"endpoints\":[{\"url\":\"$SIM_URL\",\"capacity\":4096}],\"region\":\"local\",\"latency_tier\":\"interactive\",\"visibility\":\"shared\"}" >/dev/null
api PUT "/api/v1/tenants/$TENANT_ID/entitlements/$MODEL" >/dev/null
api PUT "/api/v1/tenants/$TENANT_ID/gateway-limits" \
  '{"requests_per_minute":1000000000,"tokens_per_minute":1000000000000,"max_concurrent":100000,"max_queued":100000}' >/dev/null

BODY="{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"How fast is the gateway?\"}],\"max_tokens\":8}"
NAMES=(direct nginx gateway)
URLS=("$SIM_URL" "$NGINX_URL" "$GATEWAY_URL")
TOKENS=("" "" "$KEY")
if [[ -n "${FLOOR_URL:-}" ]]; then
  NAMES+=(floor)
  URLS+=("$FLOOR_URL")
  TOKENS+=("")
fi
CASES=$(seq 0 $((${#NAMES[@]} - 1)))
for i in $CASES; do  # every case must answer 200 before it is loaded
  for _ in $(seq 1 50); do
    code=$(curl -s -o "$TMP/check" -w '%{http_code}' --max-time 10 -H 'Content-Type: application/json' \
      ${TOKENS[$i]:+-H "Authorization: Bearer ${TOKENS[$i]}"} -d "$BODY" "${URLS[$i]}/v1/chat/completions")
    [[ "$code" == 200 ]] && break
    sleep 0.1
  done
  [[ "$code" == 200 ]] || { echo "gateway_wrk.sh: ${NAMES[$i]} answered $code: $(cat "$TMP/check")" >&2; exit 1; }
done

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $REPS interleaved rounds; nginx workers $NGINX_WORKERS, gateway threads $GATEWAY_THREADS"
declare -A RPS P50 P99
for rep in $(seq 1 "$REPS"); do
  for i in $CASES; do
    line=$(ATRIUM_BENCH_TOKEN="${TOKENS[$i]}" ATRIUM_BENCH_BODY="$BODY" \
      wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s "$LUA" "${URLS[$i]}/v1/chat/completions" |
      grep '^RESULT')
    echo "round $rep ${NAMES[$i]}: $line"
    [[ "$line" == *"errors=0"* ]] || { echo "gateway_wrk.sh: ${NAMES[$i]} had errors" >&2; exit 1; }
    RPS[$i]+="$(sed 's/.*rps=\([0-9.]*\).*/\1/' <<<"$line") "
    P50[$i]+="$(sed 's/.*p50_us=\([0-9]*\).*/\1/' <<<"$line") "
    P99[$i]+="$(sed 's/.*p99_us=\([0-9]*\).*/\1/' <<<"$line") "
  done
done
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
printf '%-8s %12s %10s %10s\n' case "requests/s" "p50 us" "p99 us"
for i in $CASES; do
  printf '%-8s %12s %10s %10s\n' "${NAMES[$i]}" "$(median "${RPS[$i]}")" "$(median "${P50[$i]}")" "$(median "${P99[$i]}")"
done
python3 - "$(median "${RPS[0]}")" "$(median "${RPS[1]}")" "$(median "${RPS[2]}")" \
  "$(median "${P99[0]}")" "$(median "${P99[1]}")" "$(median "${P99[2]}")" <<'EOF'
import sys
a, b, c, pa, pb, pc = map(float, sys.argv[1:])
print(f"gateway/nginx requests/s: {c / b:.2f}x   (bar: >= 1.0)")
print(f"p99 added over direct: nginx {(pb - pa) / 1000:.2f} ms, gateway {(pc - pa) / 1000:.2f} ms   (bar: gateway < 1 ms)")
EOF
if [[ -n "${FLOOR_URL:-}" ]]; then
  python3 -c 'import sys; f, b, c = map(float, sys.argv[1:]); print(f"floor/nginx requests/s: {f / b:.2f}x   gateway/floor: {c / f:.2f}x")' \
    "$(median "${RPS[3]}")" "$(median "${RPS[1]}")" "$(median "${RPS[2]}")"
fi
