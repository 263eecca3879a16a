#!/usr/bin/env bash
# What budgets cost the gateway: wrk on loopback against one `atrium dev`
# gateway in front of the engine simulator (`instant` profile), with the
# demo tenant's requests priced and
#   off  no budget: a request's check finds no budget of its tenant
#   on   a tenant budget and a budget of the key (both far from spent):
#        every request holds its worst case against both before it runs,
#        settles its real cost after, and the keeper syncs its holds with
#        the store every 250 ms
# The cases alternate in the same process (the budgets are made and
# deleted between rounds, a second apart: two syncs), WRK_REPS rounds each,
# off first; medians of requests/s and p99, and on/off of both.
#
# usage: bench/gateway_budget.sh [path/to/atrium]   (default build/apps/atrium/atrium)
# env:   WRK_THREADS=2 WRK_CONNECTIONS=64 WRK_DURATION=10s WRK_REPS=5 GATEWAY_THREADS=2
set -euo pipefail

BIN=${1:-build/apps/atrium/atrium}
THREADS=${WRK_THREADS:-2}
CONNECTIONS=${WRK_CONNECTIONS:-64}
DURATION=${WRK_DURATION:-10s}
REPS=${WRK_REPS:-5}
GATEWAY_THREADS=${GATEWAY_THREADS:-2}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LUA="$HERE/gateway_wrk.lua"
# shellcheck source=bench/gateway_env.sh
source "$HERE/gateway_env.sh"

for tool in wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "gateway_budget.sh: $tool not found" >&2; exit 2; }
done
[[ -x "$BIN" ]] || { echo "gateway_budget.sh: no executable at $BIN" >&2; exit 2; }

gw_env_init gateway_budget.sh
gw_start_sim "$BIN"
gw_start_dev "$BIN" "$GATEWAY_THREADS"
gw_await_200 gateway "$GATEWAY_URL" "$KEY"

json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
ADMIN=$(cat "$TMP/data/admin.token")
api() {
  local out
  out=$(curl -sS --max-time 120 -w '\n%{http_code}' -X "$1" -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' ${3:+-d "$3"} "$API_URL$2")
  [[ "${out##*$'\n'}" == 2* ]] || { echo "gateway_budget.sh: $1 $2: ${out}" >&2; return 1; }
  echo "${out%$'\n'*}"
}
TENANT=$(curl -fsS -H "Authorization: Bearer $KEY" "$API_URL/api/v1/whoami" | json '["tenant"]["id"]')
KEY_ID=$(cut -d_ -f2 <<<"$KEY")  # atr_<key id>_<secret>
api POST /api/v1/price-books '{"name":"bench","currency":"USD","entries":[
  {"meter":"tokens.input","price_minor":"100"},{"meter":"tokens.output","price_minor":"300"}]}' >/dev/null
api PUT /api/v1/billing/default-price-book '{"price_book":"bench"}' >/dev/null

BUDGETS=()
budgets_on() {
  BUDGETS=()
  BUDGETS+=("$(api POST "/api/v1/tenants/$TENANT/budgets" \
    '{"scope":"tenant","amount_minor":1000000000000}' | json '["id"]')")
  BUDGETS+=("$(api POST "/api/v1/tenants/$TENANT/budgets" \
    "{\"scope\":\"key\",\"subject\":\"$KEY_ID\",\"amount_minor\":1000000000000}" | json '["id"]')")
  sleep 1
}
budgets_off() {
  for b in "${BUDGETS[@]}"; do api DELETE "/api/v1/tenants/$TENANT/budgets/$b" >/dev/null; done
  BUDGETS=()
  sleep 1
}
field() { sed "s/.*$1=\([0-9.]*\).*/\1/" <<<"$2"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A RPS P99
for r in $(seq 1 "$REPS"); do
  for c in off on; do
    if [[ $c == on ]]; then budgets_on; else budgets_off; fi
    LINE=$(ATRIUM_BENCH_TOKEN="$KEY" ATRIUM_BENCH_BODY="$BODY" \
      wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s "$LUA" "$GATEWAY_URL/v1/chat/completions" |
      grep '^RESULT')
    [[ "$LINE" == *"errors=0"* ]] || { echo "gateway_budget.sh: $c had errors: $LINE" >&2; exit 1; }
    RPS[$c]+="$(field rps "$LINE") "
    P99[$c]+="$(field p99_us "$LINE") "
    echo "round $r $c: $LINE"
  done
done
budgets_off
for c in off on; do
  printf '%-4s requests/s %9.0f  p99 %6.0f us   (rounds: %s)\n' "$c" \
    "$(median <<<"${RPS[$c]}")" "$(median <<<"${P99[$c]}")" "${RPS[$c]}"
done
python3 - "$(median <<<"${RPS[on]}")" "$(median <<<"${RPS[off]}")" \
  "$(median <<<"${P99[on]}")" "$(median <<<"${P99[off]}")" <<'PY'
import sys
on, off, p_on, p_off = map(float, sys.argv[1:])
print(f"on/off: requests/s {on / off:.3f}x, p99 {p_on / p_off:.3f}x")
PY
