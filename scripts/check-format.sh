#!/usr/bin/env bash
# Checks that every tracked C++ source and header is formatted as
# .clang-format says; names each file that is not and exits 1. Fix with
#   git ls-files '*.cc' '*.h' | xargs clang-format -i
# Run by scripts/test.sh (and so by CI) before the build.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h')
if ! out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
  echo "$out" | grep -o '^[^:]*\.\(cc\|h\)' | sort -u | sed 's/^/not formatted: /'
  echo "run: git ls-files '*.cc' '*.h' | xargs clang-format -i"
  exit 1
fi
echo "format: ${#files[@]} files formatted as .clang-format says"
