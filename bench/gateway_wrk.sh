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
# Each case's processes (the upstream for (a), nginx's workers, the `atrium
# dev` process, the floor) are charged their CPU time during its runs: user
# and system microseconds per request, read from /proc/PID/stat, medians.
#
# After the saturating rounds, a paced phase (WRK_PACED_REPS rounds, 0 to
# skip) offers every case the same load below saturation, by default half of
# what nginx sustained: each connection waits between requests (wrk's
# delay()), so the p99 each proxy adds is compared where none of them queues
# for CPU.
#
# usage: bench/gateway_wrk.sh [path/to/atrium]     (default build/apps/atrium/atrium)
# env:   WRK_THREADS=2 WRK_CONNECTIONS=64 WRK_DURATION=10s WRK_REPS=3
#        NGINX_WORKERS=2 GATEWAY_THREADS=2 (the same number of cores for both proxies)
#        WRK_PACED_REPS=3 WRK_PACED_RPS (default: half of nginx's median requests/s)
set -euo pipefail

BIN=${1:-build/apps/atrium/atrium}
THREADS=${WRK_THREADS:-2}
CONNECTIONS=${WRK_CONNECTIONS:-64}
DURATION=${WRK_DURATION:-10s}
REPS=${WRK_REPS:-3}
PACED_REPS=${WRK_PACED_REPS:-3}
NGINX_WORKERS=${NGINX_WORKERS:-2}
GATEWAY_THREADS=${GATEWAY_THREADS:-2}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LUA="$HERE/gateway_wrk.lua"
# shellcheck source=bench/gateway_env.sh
source "$HERE/gateway_env.sh"

for tool in wrk nginx curl python3; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin
  command -v "$tool" >/dev/null || { echo "gateway_wrk.sh: $tool not found" >&2; exit 2; }
done
[[ -x "$BIN" ]] || { echo "gateway_wrk.sh: no executable at $BIN" >&2; exit 2; }

gw_env_init gateway_wrk.sh

# (a) the fast upstream.
gw_start_sim "$BIN"
SIM_PID=${PIDS[-1]}

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
  FLOOR_PID=$!
  FLOOR_URL=$(await_line "$TMP/floor.out" 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "${PIDS[-1]}")
fi

# (c) the gateway, in `atrium dev`.
gw_start_dev "$BIN" "$GATEWAY_THREADS"

NAMES=(direct nginx gateway)
URLS=("$SIM_URL" "$NGINX_URL" "$GATEWAY_URL")
TOKENS=("" "" "$KEY")
# The processes each case is charged for; nginx's are its workers.
NGINX_PIDS=$(pgrep -d' ' -P "$(cat "$TMP/nginx.pid")")
CASE_PIDS=("$SIM_PID" "$NGINX_PIDS" "$DEV_PID")
if [[ -n "${FLOOR_URL:-}" ]]; then
  NAMES+=(floor)
  URLS+=("$FLOOR_URL")
  TOKENS+=("")
  CASE_PIDS+=("$FLOOR_PID")
fi
CASES=$(seq 0 $((${#NAMES[@]} - 1)))
for i in $CASES; do  # every case must answer 200 before it is loaded
  gw_await_200 "${NAMES[$i]}" "${URLS[$i]}" "${TOKENS[$i]}"
done

# cpu_ticks PID...: "user system" clock ticks of these processes so far.
cpu_ticks() {
  local pid user=0 sys=0 fields
  for pid in "$@"; do
    read -r -a fields <"/proc/$pid/stat"  # comm has no spaces here
    user=$((user + fields[13]))
    sys=$((sys + fields[14]))
  done
  echo "$user $sys"
}
TICK_US=$((1000000 / $(getconf CLK_TCK)))

declare -A RPS P50 P99 USER_US SYS_US PACED_RPS PACED_P99
# load I DURATION: one wrk run of case I; sets LINE, and CPU to the user and
# system microseconds per request of the case's processes.
load() {
  local i=$1 duration=$2 before after requests
  # shellcheck disable=SC2086  # the pid list splits on purpose
  read -r -a before <<<"$(cpu_ticks ${CASE_PIDS[$i]})"
  LINE=$(ATRIUM_BENCH_TOKEN="${TOKENS[$i]}" ATRIUM_BENCH_BODY="$BODY" \
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$duration" -s "$LUA" "${URLS[$i]}/v1/chat/completions" |
    grep '^RESULT')
  # shellcheck disable=SC2086
  read -r -a after <<<"$(cpu_ticks ${CASE_PIDS[$i]})"
  [[ "$LINE" == *"errors=0"* ]] || { echo "gateway_wrk.sh: ${NAMES[$i]} had errors: $LINE" >&2; exit 1; }
  requests=$(field requests "$LINE")
  CPU="$(((after[0] - before[0]) * TICK_US / requests)) $(((after[1] - before[1]) * TICK_US / requests))"
}
field() { sed "s/.*$1=\([0-9.]*\).*/\1/" <<<"$2"; }

echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION, $REPS interleaved rounds; nginx workers $NGINX_WORKERS, gateway threads $GATEWAY_THREADS"
for rep in $(seq 1 "$REPS"); do
  for i in $CASES; do
    load "$i" "$DURATION"
    read -r user sys <<<"$CPU"
    echo "round $rep ${NAMES[$i]}: $LINE cpu_user_us=$user cpu_sys_us=$sys"
    RPS[$i]+="$(field rps "$LINE") "
    P50[$i]+="$(field p50_us "$LINE") "
    P99[$i]+="$(field p99_us "$LINE") "
    USER_US[$i]+="$user "
    SYS_US[$i]+="$sys "
  done
done
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
printf '%-8s %12s %10s %10s %12s %12s\n' case "requests/s" "p50 us" "p99 us" "user us/req" "sys us/req"
for i in $CASES; do
  printf '%-8s %12s %10s %10s %12s %12s\n' "${NAMES[$i]}" "$(median "${RPS[$i]}")" "$(median "${P50[$i]}")" \
    "$(median "${P99[$i]}")" "$(median "${USER_US[$i]}")" "$(median "${SYS_US[$i]}")"
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

[[ "$PACED_REPS" -gt 0 ]] || exit 0
# The paced phase: each connection waits CONNECTIONS/RATE seconds before each
# request, which offers about RATE requests/s (a little less: the answer's own
# time adds to each connection's cycle).
PACED_TARGET=${WRK_PACED_RPS:-$(python3 -c "print(int(float('$(median "${RPS[1]}")') / 2))")}
export ATRIUM_BENCH_DELAY_MS
ATRIUM_BENCH_DELAY_MS=$(python3 -c "print(f'{$CONNECTIONS * 1000 / $PACED_TARGET:.3f}')")
echo
echo "paced: about $PACED_TARGET requests/s offered ($CONNECTIONS connections, each waiting ${ATRIUM_BENCH_DELAY_MS} ms before a request), $PACED_REPS interleaved rounds"
for rep in $(seq 1 "$PACED_REPS"); do
  for i in $CASES; do
    load "$i" "$DURATION"
    echo "paced round $rep ${NAMES[$i]}: $LINE"
    PACED_RPS[$i]+="$(field rps "$LINE") "
    PACED_P99[$i]+="$(field p99_us "$LINE") "
  done
done
printf '%-8s %12s %10s %14s\n' case "requests/s" "p99 us" "p99 added us"
for i in $CASES; do
  printf '%-8s %12s %10s %14s\n' "${NAMES[$i]}" "$(median "${PACED_RPS[$i]}")" \
    "$(median "${PACED_P99[$i]}")" $(($(median "${PACED_P99[$i]}") - $(median "${PACED_P99[0]}")))
done
python3 -c 'import sys; a, b, c = map(float, sys.argv[1:]); print(f"paced p99 added over direct: nginx {(b - a) / 1000:.2f} ms, gateway {(c - a) / 1000:.2f} ms")' \
  "$(median "${PACED_P99[0]}")" "$(median "${PACED_P99[1]}")" "$(median "${PACED_P99[2]}")"
