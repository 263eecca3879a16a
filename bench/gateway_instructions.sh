#!/usr/bin/env bash
# Instructions per request (user space, every thread: I/O loops, usage
# journal and shipper included) of the gateway and, beside it, of the
# proxy floor (bench/proxy_floor.cc: the same I/O design without the
# gateway's work), counted by valgrind's callgrind while wrk sends the
# bench request of gateway_wrk.sh. Unlike requests/s on a shared machine the
# count barely moves between runs (about ±4 %: batching in the shipper), so
# it shows what a change to the hot path saves.
#
# usage: bench/gateway_instructions.sh [path/to/atrium] [path/to/proxy_floor]
#        (defaults build-bench/apps/atrium/atrium, build-bench/bench/proxy_floor;
#         the floor is skipped when it is not built)
# env:   COUNT_SECONDS=15 COUNT_CONNECTIONS=8
#        KEEP_PROFILES=DIR  copy callgrind's files there (for callgrind_annotate)
set -euo pipefail

BIN=${1:-build-bench/apps/atrium/atrium}
FLOOR=${2:-build-bench/bench/proxy_floor}
SECONDS_COUNTED=${COUNT_SECONDS:-15}
CONNECTIONS=${COUNT_CONNECTIONS:-8}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LUA="$HERE/gateway_wrk.lua"
# shellcheck source=bench/gateway_env.sh
source "$HERE/gateway_env.sh"

for tool in wrk valgrind callgrind_control callgrind_annotate curl python3; do
  command -v "$tool" >/dev/null || { echo "gateway_instructions.sh: $tool not found" >&2; exit 2; }
done
[[ -x "$BIN" ]] || { echo "gateway_instructions.sh: no executable at $BIN" >&2; exit 2; }

gw_env_init gateway_instructions.sh
gw_start_sim "$BIN"
# Instrumentation starts off (start-up runs at near full speed) and is
# switched on for the counted load only.
CALLGRIND=(valgrind --tool=callgrind --instr-atstart=no)

# count NAME URL TOKEN PID PREFIX: warms up, counts, prints instructions per request.
count() {
  local name=$1 url=$2 token=$3 pid=$4 prefix=$5 line requests total file
  ATRIUM_BENCH_TOKEN="$token" ATRIUM_BENCH_BODY="$BODY" \
    wrk -t1 -c"$CONNECTIONS" -d5s -s "$LUA" "$url/v1/chat/completions" >/dev/null
  callgrind_control -i on "$pid" >/dev/null 2>&1
  line=$(ATRIUM_BENCH_TOKEN="$token" ATRIUM_BENCH_BODY="$BODY" \
    wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_COUNTED}s" -s "$LUA" "$url/v1/chat/completions" |
    grep '^RESULT')
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  [[ "$line" == *"errors=0"* ]] || { echo "gateway_instructions.sh: $name had errors: $line" >&2; exit 1; }
  requests=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
  sleep 1
  total=0
  for file in "$prefix".*.*; do  # <prefix>.<pid>.<n>: what each dump wrote; summed
    local ir
    ir=$(callgrind_annotate "$file" 2>/dev/null |
      awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}' || true)
    total=$((total + ${ir:-0}))
  done
  if [[ -n "${KEEP_PROFILES:-}" ]]; then
    mkdir -p "$KEEP_PROFILES" && cp "$prefix".*.* "$KEEP_PROFILES/"
  fi
  printf '%-8s %9d requests %14d instructions %9d per request\n' "$name" "$requests" "$total" \
    $((total / requests))
}

gw_start_dev "$BIN" 2 "${CALLGRIND[@]}" --callgrind-out-file="$TMP/gateway.cg.%p"
gw_await_200 gateway "$GATEWAY_URL" "$KEY"
count gateway "$GATEWAY_URL" "$KEY" "$DEV_PID" "$TMP/gateway.cg"

if [[ -x "$FLOOR" ]]; then
  "${CALLGRIND[@]}" --callgrind-out-file="$TMP/floor.cg.%p" "$FLOOR" 0 "$SIM_HOSTPORT" 2 \
    >"$TMP/floor.out" 2>&1 &
  PIDS+=($!)
  FLOOR_URL=$(await_line "$TMP/floor.out" 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "${PIDS[-1]}" 600)
  gw_await_200 floor "$FLOOR_URL" ""
  count floor "$FLOOR_URL" "" "${PIDS[-1]}" "$TMP/floor.cg"
fi
