#!/usr/bin/env bash
# Installs what is missing, builds, and starts `atrium dev` (every role in
# one process, state in ./.atrium). Extra arguments go to `atrium dev`, e.g.
#   scripts/dev.sh --api-listen 127.0.0.1:0
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build atrium
exec ./build/apps/atrium/atrium dev "$@"
