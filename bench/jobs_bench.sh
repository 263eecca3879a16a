#!/usr/bin/env bash
# The jobs benchmarks of BENCHMARKS.md §8, from a checkout, as root:
#
#   bench/jobs_bench.sh throughput [--jobs N] [--reps R] [...]   # §8.1, bench/jobs_throughput.py
#   bench/jobs_bench.sh scale [--levels ...] [...]                # §8.2, bench/jobs_scale.py
#
# Builds what the benchmark runs (atrium and its workload helpers) in
# BUILD_DIR (default build/, configured RelWithDebInfo if it is not yet), and
# for `throughput` starts a one-host Slurm whose node is the simulated
# fleet's (SLURM_DEV_NODE=h100-80gb-0) in a fresh directory under /var/tmp,
# stopped (by recorded PIDs) and removed when the benchmark ends. Other
# arguments go to the Python driver.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
what=${1:-}
shift || true
case "$what" in
  throughput | scale) ;;
  *) echo "usage: $0 throughput|scale [driver arguments]" >&2; exit 2 ;;
esac

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
fi
nice ninja -C "$BUILD_DIR" -j2 atrium atrium-workload-supervisor atrium-sandbox-init >&2
ATRIUM="$BUILD_DIR/apps/atrium/atrium"

echo "# $(date -u +%FT%TZ) commit $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo '+dirty'), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ "$what" == scale ]]; then
  exec python3 "$ROOT/bench/jobs_scale.py" --atrium "$ATRIUM" "$@"
fi

SLURM_DIR=$(mktemp -d /var/tmp/atrium-bench-slurm.XXXXXX)
cleanup() {
  bash "$ROOT/scripts/slurm-dev.sh" stop "$SLURM_DIR" >&2 || true
  rm -rf "$SLURM_DIR"
}
trap cleanup EXIT
SLURM_DEV_NODE=h100-80gb-0 bash "$ROOT/scripts/slurm-dev.sh" start "$SLURM_DIR" >/dev/null
echo "# slurm confinement: $(cat "$SLURM_DIR/confinement" 2>/dev/null || echo unknown)"
python3 "$ROOT/bench/jobs_throughput.py" --atrium "$ATRIUM" --slurm-dir "$SLURM_DIR" "$@"
