#!/usr/bin/env bash
# HTTP load on loopback against a real `atrium dev`: requests/s, p50 and p99 of
#   (a) GET /healthz                  no credential: the baseline (HTTP + router)
#   (b) GET /api/v1/tenants/{id}      API key of a tenant-admin (verified-key cache hit)
#   (c) GET /api/v1/whoami            access token from login (session read from the store)
# Each case runs WRK_REPS times, interleaved (a b c a b c ...) so that noise on a
# shared machine lands on every case alike; the median of the repetitions is
# reported with the ratios (b)/(a) and (c)/(a). Builds nothing; stops the server
# with SIGTERM and removes its temp dir. Loopback only; about 100 s with defaults.
#
# usage: bench/api_wrk.sh [path/to/atrium]      (default build/apps/atrium/atrium)
# env:   WRK_THREADS=2 WRK_CONNECTIONS=32 WRK_DURATION=10s WRK_REPS=3
set -euo pipefail

BIN=${1:-build/apps/atrium/atrium}
THREADS=${WRK_THREADS:-2}
CONNECTIONS=${WRK_CONNECTIONS:-32}
DURATION=${WRK_DURATION:-10s}
REPS=${WRK_REPS:-3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LUA="$HERE/wrk_report.lua"

command -v wrk >/dev/null || { echo "api_wrk.sh: wrk not found (apt-get install wrk)" >&2; exit 2; }
command -v curl >/dev/null || { echo "api_wrk.sh: curl not found" >&2; exit 2; }
[[ -x "$BIN" ]] || { echo "api_wrk.sh: no executable at $BIN (build the atrium target)" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/atrium-wrk-XXXXXX")
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$BIN" dev --data "$TMP/data" --api-listen 127.0.0.1:0 --gateway-listen 127.0.0.1:0 >"$TMP/server.out" 2>"$TMP/server.err" &
SERVER_PID=$!
URL=""
for _ in $(seq 1 300); do  # up to 30 s
  URL=$(sed -n 's/^API: \(http:\/\/[^ ]*\)$/\1/p' "$TMP/server.out" | head -n1)
  [[ -n "$URL" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/server.err" >&2; echo "api_wrk.sh: server exited" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$URL" ]] || { echo "api_wrk.sh: no 'API:' line within 30 s" >&2; exit 1; }
case "$URL" in http://127.0.0.1:*) ;; *) echo "api_wrk.sh: not loopback: $URL" >&2; exit 1 ;; esac
ADMIN=$(cat "$TMP/data/admin.token")

# POST JSON with the admin key; prints the response body.
post() {
  curl -fsS --max-time 30 -X POST -H "Authorization: Bearer ${3:-$ADMIN}" \
    -H 'Content-Type: application/json' -d "$2" "$URL$1"
}
field() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

PASSWORD="wrk-bench-password-1"
TENANT_ID=$(post /api/v1/tenants '{"name":"wrk-bench","tier":"shared"}' | field id)
USER_ID=$(post "/api/v1/tenants/$TENANT_ID/users" \
  "{\"username\":\"alice\",\"role\":\"tenant-admin\",\"password\":\"$PASSWORD\"}" | field id)
API_KEY=$(post "/api/v1/tenants/$TENANT_ID/keys" \
  "{\"name\":\"wrk\",\"owner_user_id\":\"$USER_ID\"}" | field key)
ACCESS_TOKEN=$(curl -fsS --max-time 30 -X POST -H 'Content-Type: application/json' \
  -d "{\"tenant\":\"wrk-bench\",\"username\":\"alice\",\"password\":\"$PASSWORD\"}" \
  "$URL/api/v1/auth/login" | field access_token)

NAMES=(healthz tenant_by_api_key whoami_by_access_token)
PATHS=(/healthz "/api/v1/tenants/$TENANT_ID" /api/v1/whoami)
TOKENS=("" "$API_KEY" "$ACCESS_TOKEN")

# Every case must answer 200 before it is loaded.
for i in 0 1 2; do
  auth=()
  [[ -n "${TOKENS[$i]}" ]] && auth=(-H "Authorization: Bearer ${TOKENS[$i]}")
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "${auth[@]}" "$URL${PATHS[$i]}")
  [[ "$code" == 200 ]] || { echo "api_wrk.sh: ${NAMES[$i]} answered $code" >&2; exit 1; }
done

echo "server: $URL (atrium dev, SQLite in a temp dir); wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, $REPS repetitions"
RESULTS="$TMP/results"
: >"$RESULTS"
for rep in $(seq 1 "$REPS"); do
  for i in 0 1 2; do
    out=$(ATRIUM_BENCH_TOKEN="${TOKENS[$i]}" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" \
      --latency -s "$LUA" "$URL${PATHS[$i]}")
    line=$(grep '^RESULT ' <<<"$out" || true)
    [[ -n "$line" ]] || { echo "$out" >&2; echo "api_wrk.sh: wrk printed no RESULT" >&2; exit 1; }
    echo "  rep $rep ${NAMES[$i]}: ${line#RESULT }"
    echo "${NAMES[$i]} ${line#RESULT }" >>"$RESULTS"
  done
done

python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *kv = line.split()
    d = dict(x.split("=") for x in kv)
    rows.setdefault(name, []).append({k: float(v) for k, v in d.items()})
bad = [n for n, rs in rows.items() if any(r["errors"] > 0 for r in rs)]
med = {n: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50_us", "p99_us")}
       for n, rs in rows.items()}
base = med["healthz"]
print()
print("Medians of the repetitions; ratios against (a) healthz in the same run")
print(f"  {'case':<28} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'req/s / (a)':>12} {'p99 / (a)':>10}")
for n in ("healthz", "tenant_by_api_key", "whoami_by_access_token"):
    m = med[n]
    print(f"  {n:<28} {m['rps']:>10.0f} {m['p50_us']/1000:>8.2f} {m['p99_us']/1000:>8.2f}"
          f" {m['rps']/base['rps']:>12.2f} {m['p99_us']/base['p99_us']:>10.2f}")
if bad:
    print("ERRORS (socket errors or non-2xx answers) in:", ", ".join(bad))
    sys.exit(1)
PY
