#!/usr/bin/env bash
# Runs clang-tidy with the repository's .clang-tidy on the C++ files a change
# touches, every warning an error; names each finding and exits 1 if any.
# Run by scripts/test.sh (and so by CI) after the build, which writes
# build/compile_commands.json.
#
# Which files (src/ and apps/, .cc and .h; a header is checked through the
# .cc of its name, and through every checked .cc that includes it):
#   * those changed since the merge base with origin/main, when that branch
#     exists, plus uncommitted changes;
#   * else (no origin/main, or HEAD is on it) those changed since HEAD~1,
#     plus uncommitted changes;
#   * else (a shallow clone or a lone commit) a fixed set: the pure cores'
#     sources in src/common, src/identity and src/gateway;
#   * ATRIUM_TIDY_BASE=main compares with that branch instead;
#   * ATRIUM_TIDY_FILES="a.cc b.cc" names them instead, `--all` checks every
#     source (slow: about 30 minutes on 2 cores).
# Environment: BUILD_DIR (default build), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
TIDY=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [[ -z "$TIDY" ]]; then
  echo "tidy: clang-tidy is not installed (scripts/install-deps.sh)"
  exit 1
fi
if [[ ! -f "$BUILD_DIR/compile_commands.json" ]]; then
  echo "tidy: $BUILD_DIR/compile_commands.json is missing: configure with CMake first"
  exit 1
fi

changed_since() {
  { git diff --name-only --diff-filter=ACMR "$1" HEAD --
    git diff --name-only --diff-filter=ACMR HEAD --; } | sort -u
}

if [[ "${1:-}" == "--all" ]]; then
  mapfile -t candidates < <(git ls-files 'src/*.cc' 'apps/*.cc')
  what="every source"
elif [[ -n "${ATRIUM_TIDY_FILES:-}" ]]; then
  read -r -a candidates <<<"$ATRIUM_TIDY_FILES"
  what="ATRIUM_TIDY_FILES"
elif [[ -n "${ATRIUM_TIDY_BASE:-}" ]]; then
  mapfile -t candidates < <(changed_since "$(git merge-base HEAD "$ATRIUM_TIDY_BASE")")
  what="changed since the merge base with $ATRIUM_TIDY_BASE"
elif base=$(git merge-base HEAD origin/main 2>/dev/null) && [[ -n "$base" && "$base" != "$(git rev-parse HEAD)" ]]; then
  mapfile -t candidates < <(changed_since "$base")
  what="changed since the merge base with origin/main (${base:0:12})"
elif git rev-parse -q --verify 'HEAD~1^{commit}' >/dev/null 2>&1; then
  mapfile -t candidates < <(changed_since HEAD~1)
  what="changed since HEAD~1"
else
  mapfile -t candidates < <(git ls-files 'src/common/*.cc' 'src/identity/*.cc' 'src/gateway/*.cc')
  what="no history to compare with: the pure cores' fixed set"
fi

# The translation units to run: the .cc files themselves, the .cc of a
# changed header's name; only those the build compiles (compile_commands).
mapfile -t compiled < <(python3 -c '
import json, os, sys
for entry in json.load(open(sys.argv[1])):
    print(os.path.relpath(os.path.join(entry["directory"], entry["file"])))
' "$BUILD_DIR/compile_commands.json" | sort -u)
declare -A in_build=()
for f in "${compiled[@]}"; do in_build[$f]=1; done
units=()
declare -A seen=()
for f in "${candidates[@]}"; do
  [[ "$f" == src/* || "$f" == apps/* ]] || continue
  case "$f" in
    *.h) f="${f%.h}.cc" ;;
    *.cc) ;;
    *) continue ;;
  esac
  [[ -n "${in_build[$f]:-}" && -z "${seen[$f]:-}" ]] || continue
  seen[$f]=1
  units+=("$f")
done

if [[ ${#units[@]} -eq 0 ]]; then
  echo "tidy: no C++ sources to check ($what)"
  exit 0
fi
echo "tidy: ${#units[@]} file(s), $what"
log=$(mktemp /tmp/atrium-tidy.XXXXXX)
trap 'rm -f "$log"' EXIT
status=0
printf '%s\0' "${units[@]}" |
  xargs -0 -n 1 -P "$JOBS" "$TIDY" -p "$BUILD_DIR" --quiet --warnings-as-errors='*' >"$log" 2>&1 ||
  status=$?
if [[ $status -ne 0 ]]; then
  grep -E '(warning|error):' "$log" | sort -u || cat "$log"
  echo "tidy: findings above (.clang-tidy); fix them or, for a check that is noise, say why in .clang-tidy"
  exit 1
fi
echo "tidy: ${#units[@]} file(s) pass .clang-tidy"
