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
#     source (slow: tens of minutes).
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
logs=$(mktemp -d /tmp/atrium-tidy.XXXXXX)
trap 'rm -rf "$logs"' EXIT
# One log per file: a file clang 14 cannot compile (g++-only C++20: Boost.Asio
# coroutines, lambdas capturing structured bindings) is named and skipped,
# not failed; its headers are still checked through the files that parse.
export TIDY BUILD_DIR logs
printf '%s\0' "${units[@]}" | xargs -0 -n 1 -P "$JOBS" bash -c '
  "$TIDY" -p "$BUILD_DIR" --quiet --warnings-as-errors="*" "$1" >"$logs/$(echo "$1" | tr / _).log" 2>&1 ||
    echo "$1" >>"$logs/failed"' _ || true
failed=0
skipped=0
if [[ -f "$logs/failed" ]]; then
  while read -r f; do
    log="$logs/$(echo "$f" | tr / _).log"
    if grep -q 'clang-diagnostic-error' "$log"; then
      echo "tidy: skipped $f: clang $("$TIDY" --version | grep -o 'version [0-9]*' | head -1) cannot compile it"
      skipped=$((skipped + 1))
    else
      grep -E '(warning|error):' "$log" || cat "$log"
      failed=$((failed + 1))
    fi
  done < <(sort "$logs/failed")
fi
if [[ $failed -ne 0 ]]; then
  echo "tidy: findings above in $failed file(s) (.clang-tidy); fix them or, for a check that is noise, say why in .clang-tidy"
  exit 1
fi
echo "tidy: $((${#units[@]} - skipped)) file(s) pass .clang-tidy, $skipped skipped"
