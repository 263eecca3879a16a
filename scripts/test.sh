#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   1. installs missing packages (scripts/install-deps.sh),
#   2. builds everything (CMake + Ninja + ccache) in build/,
#   3. starts a throwaway PostgreSQL on 127.0.0.1 in a temp dir, and a
#      one-host Slurm 22.05 with fake GPUs (scripts/slurm-dev.sh) in another,
#   4. runs every test with ctest — the store suites on SQLite AND on that
#      PostgreSQL (ATRIUM_TEST_REQUIRE_PG=1 makes a skipped PostgreSQL a failure),
#      the `slurm` backend's tests and the jobs' end-to-end test through
#      `atrium dev --slurm` on that Slurm (ATRIUM_TEST_REQUIRE_SLURM=1
#      likewise),
#      The official `openai` npm client (tests/node, `npm ci`) drives the gateway.
#   5. builds the libFuzzer targets with clang and runs each for a bounded time,
#   6. checks that every C++ file is formatted as .clang-format says
#      (scripts/check-format.sh), that src/ keeps the allowed-dependencies
#      table in docs/architecture.md (scripts/check-deps.py) and that the C++
#      files changed since the merge base with origin/main pass .clang-tidy
#      (scripts/check-tidy.sh); a failure fails the run after the tests ran,
#   7. stops what it started.
# Environment: ATRIUM_FUZZ_SECONDS (default 30 per target), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${ATRIUM_FUZZ_SECONDS:-30}

bash scripts/install-deps.sh

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
echo "== build (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build -j"$JOBS"

echo "== npm packages for the client tests (tests/node)"
if [[ ! -d tests/node/node_modules ]] || [[ tests/node/package-lock.json -nt tests/node/node_modules ]]; then
  (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
  touch tests/node/node_modules
fi

PGDIR=$(mktemp -d /tmp/atrium-pg.XXXXXX)
chmod 755 "$PGDIR"
# Not under /tmp: Slurm jobs get a private one (scripts/slurm-dev.sh).
SLURMDIR=$(mktemp -d /var/tmp/atrium-slurm.XXXXXX)
cleanup() {
  bash scripts/pg-test-server.sh stop "$PGDIR" >/dev/null 2>&1 || true
  rm -rf "$PGDIR"
  bash scripts/slurm-dev.sh stop "$SLURMDIR" >/dev/null 2>&1 || true
  rm -rf "$SLURMDIR"
}
trap cleanup EXIT

echo "== start PostgreSQL for the store tests"
PG_URL=$(bash scripts/pg-test-server.sh start "$PGDIR")
export ATRIUM_TEST_PG_URL="$PG_URL"
export ATRIUM_TEST_REQUIRE_PG=1

echo "== start a one-host Slurm for the slurm backend's tests"
# Prints SLURM_CONF, ATRIUM_TEST_SLURM_DIR and ATRIUM_SLURM_NODE exports. The
# node is named as the first node of `atrium dev --fleet 1xH100-80GBx4`, so
# the end-to-end test's scheduler places its jobs on it (slurm_e2e_test).
eval "$(SLURM_DEV_NODE=h100-80gb-0 bash scripts/slurm-dev.sh start "$SLURMDIR")"
export ATRIUM_TEST_REQUIRE_SLURM=1

echo "== unit, store, API and integration tests"
status=0
ctest --test-dir build -j"$JOBS" --output-on-failure --timeout 600 || status=$?

echo "== fuzz (${FUZZ_SECONDS}s per target)"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DATRIUM_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz -j"$JOBS" http_request_fuzz json_body_fuzz upstream_response_fuzz form_body_fuzz
fuzz_pass=0
fuzz_fail=0
for target in http_request_fuzz json_body_fuzz upstream_response_fuzz form_body_fuzz; do
  seeds="$ROOT/fuzz/corpus/${target%_fuzz}"
  work=$(mktemp -d /tmp/atrium-fuzz.XXXXXX)
  if (cd "$work" && "$ROOT/build-fuzz/fuzz/$target" -max_total_time="$FUZZ_SECONDS" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$work" "$seeds" \
        >"$work/log" 2>&1); then
    echo "fuzz $target: ok ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$') runs)"
    fuzz_pass=$((fuzz_pass + 1))
  else
    echo "fuzz $target: FAILED"; tail -40 "$work/log"
    fuzz_fail=$((fuzz_fail + 1))
    status=1
  fi
  rm -rf "$work"
done
echo "fuzz: ${fuzz_pass} passed, ${fuzz_fail} failed"

echo "== format (clang-format, check only)"
bash scripts/check-format.sh || status=1

echo "== dependencies (the table in docs/architecture.md)"
python3 scripts/check-deps.py || status=1

echo "== tidy (clang-tidy on the changed files)"
JOBS="$JOBS" bash scripts/check-tidy.sh || status=1
exit "$status"
