#!/usr/bin/env bash
# Installs the Debian 12 (bookworm) packages needed to build, test and
# benchmark Atrium. Idempotent: installs only what dpkg says is missing, runs
# `apt-get update` only then, and prints nothing when there is nothing to do.
# Uses sudo when not run as root.
set -euo pipefail

PACKAGES=(
  # Compilers and build tools: the C++20 build (CMake + Ninja), with ccache
  # to share object files between build folders.
  build-essential cmake ninja-build ccache pkg-config
  # clang + its runtime libraries: the libFuzzer/ASan/UBSan build (ATRIUM_FUZZ).
  clang libclang-rt-14-dev
  # clang-format: the test command checks that every C++ file is formatted
  # as .clang-format says (scripts/check-format.sh); clang-tidy runs the
  # .clang-tidy checks on the files a change touches (scripts/check-tidy.sh).
  clang-format clang-tidy
  # Header-only Boost: Beast/Asio for the HTTP server.
  libboost-dev
  # Cryptography: libsodium (password hashing, tokens), OpenSSL (TLS, hashes).
  libsodium-dev libssl-dev
  # The store's two drivers: SQLite (single node, tests) and libpq.
  libsqlite3-dev libpq-dev
  # A PostgreSQL server for the store tests (scripts/pg-test-server.sh).
  postgresql
  # JSON, logging, command line and TOML config parsing.
  nlohmann-json3-dev libspdlog-dev libcli11-dev libtomlplusplus-dev
  # simdjson: the gateway parses every request, response and stream chunk.
  libsimdjson-dev
  # Unit tests and micro-benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev
  # HTTP load generator for the gateway benchmarks, and nginx as the reverse
  # proxy the gateway's overhead is compared with (bench/gateway_wrk.sh).
  wrk nginx
  # Instruction counts per gateway request (callgrind; bench/gateway_instructions.sh).
  valgrind
  # Node.js (with npm, below): the official `openai` client in the gateway's
  # integration test (tests/node).
  nodejs
  # A real one-host Slurm 22.05 for the `slurm` execution backend's tests
  # (scripts/slurm-dev.sh): the controller and node daemons, accounting
  # (slurmdbd over MariaDB: accounts, QOS, GrpTRES, sacct), slurmrestd,
  # munge for authentication; the cgroup plugins are in slurm-wlm's
  # basic plugins.
  # slurm.conf names auth/jwt (slurmrestd's tokens): without its plugin
  # slurmdbd and slurmctld refuse to start.
  slurm-wlm slurm-wlm-jwt-plugin slurmdbd slurmrestd munge mariadb-server
  # libarchive: tenants' uploaded job archives are read and rewritten with
  # it before they are kept (src/jobs/archive_check.cc).
  libarchive-dev
  # Small helper scripts (free-port lookup in pg-test-server.sh).
  python3
  # bubblewrap: the local execution backend runs every workload in a bwrap
  # sandbox (namespaces, only its GPUs in /dev, private /tmp); its tests run
  # real sandboxes and fail without it (src/exec_local). Slurm nodes run
  # environment templates' jobs in it too (src/slurm).
  bubblewrap
  # A static busybox: the root filesystem of the tests' environment
  # template (tests/exec/backend_conformance.h), on both backends.
  busybox-static
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$pkg")
done
# Some Node.js builds ship npm inside the nodejs package; Debian's own needs
# the separate npm package.
command -v npm >/dev/null || missing+=(npm)
[[ ${#missing[@]} -eq 0 ]] && exit 0

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || {
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  }
  SUDO=(sudo)
fi

echo "install-deps: installing ${missing[*]}" >&2
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
