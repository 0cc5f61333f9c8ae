#!/usr/bin/env bash
# Lint as CI runs it: (a) clang-format (the committed .clang-format) over the C++
# sources, and no function of the code (tests/ and fuzz/ aside) longer than 120 lines
# (lizard, from PyPI: tools/setup.sh test installs it into the build folder's pydeps),
# (b) clang-tidy (the committed .clang-tidy) over the non-CUDA .cpp files
# of graph/ ops/ autodiff/ runtime/ distribution/ datasets/ training/ launch/ with the build's compile_commands.json.
# Any format difference, long function or tidy warning fails it (exit 1); a setup
# problem exits 2.
#
#   tools/ci_lint.sh                       # both parts, every file
#   tools/ci_lint.sh --changed origin/main # only files changed since that commit (committed or not)
#   tools/ci_lint.sh --format a.cpp b.h    # one part, only the files given
#   BUILD_DIR=build-asan JOBS=4 tools/ci_lint.sh --tidy
#
# Environment: BUILD_DIR (default build; configure it first, CMakeLists.txt exports
# compile_commands.json), JOBS (parallel clang-tidy processes, default 2),
# CLANG_FORMAT / CLANG_TIDY (default clang-format / clang-tidy, Debian's LLVM 14).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
build=${BUILD_DIR:-build}
jobs=${JOBS:-2}
clang_format=${CLANG_FORMAT:-clang-format}
clang_tidy=${CLANG_TIDY:-clang-tidy}

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
}

run_format=1 run_tidy=1 changed="" given=()
while [ $# -gt 0 ]; do
  case "$1" in
    --format) run_tidy=0 ;;
    --tidy) run_format=0 ;;
    --changed)
      [ $# -ge 2 ] || usage
      changed=$2
      shift
      ;;
    -h | --help) usage ;;
    -*) echo "ci_lint.sh: unknown option $1" >&2 && usage ;;
    *) given+=("$1") ;;
  esac
  shift
done

# The candidate files: those given, those changed since $changed, or all tracked ones.
candidates() {
  if [ ${#given[@]} -gt 0 ]; then
    printf '%s\n' "${given[@]}"
  elif [ -n "$changed" ]; then
    git diff --name-only --diff-filter=ACMR "$changed" -- "$@"
  else
    git ls-files -- "$@"
  fi
}

fails=0

if [ $run_format -eq 1 ]; then
  command -v "$clang_format" >/dev/null || { echo "ci_lint.sh: $clang_format not found" >&2 && exit 2; }
  mapfile -t files < <(candidates '*.cpp' '*.h' '*.cu' | grep -E '\.(cpp|h|cu)$')
  if [ ${#files[@]} -gt 0 ]; then
    if "$clang_format" --dry-run -Werror "${files[@]}"; then
      echo "clang-format: ${#files[@]} files formatted"
    else
      echo "FAIL clang-format: run $clang_format -i on the files above"
      fails=$((fails + 1))
    fi
  fi
  # A function longer than a screenful or two mixes several jobs: split it.
  mapfile -t files < <(candidates '*.cpp' '*.h' '*.cu' | grep -E '\.(cpp|h|cu)$' | grep -v -E '^(tests|fuzz)/')
  if [ ${#files[@]} -gt 0 ]; then
    lizard=(env PYTHONPATH="$build/pydeps" /usr/bin/python3 -m lizard)
    "${lizard[@]}" --version >/dev/null 2>&1 ||
      { echo "ci_lint.sh: lizard not found in $build/pydeps (tools/setup.sh test installs it)" >&2 && exit 2; }
    # Only the length counts here: the complexity and argument limits are set out of reach.
    if "${lizard[@]}" -l cpp --CCN 100000 --arguments 100000 --length 120 --warnings_only "${files[@]}"; then
      echo "function length: ${#files[@]} files, no function over 120 lines"
    else
      echo "FAIL function length: split the functions above (120 lines at most, tests aside)"
      fails=$((fails + 1))
    fi
  fi
fi

if [ $run_tidy -eq 1 ]; then
  command -v "$clang_tidy" >/dev/null || { echo "ci_lint.sh: $clang_tidy not found" >&2 && exit 2; }
  db=$build/compile_commands.json
  [ -f "$db" ] || { echo "ci_lint.sh: no $db: configure the build first (cmake -S . -B $build)" >&2 && exit 2; }
  # Non-CUDA sources of the core that this build compiles (runtime/cuda/ and distribution/cuda/
  # need the CUDA headers).
  mapfile -t files < <(candidates 'graph/*.cpp' 'ops/*.cpp' 'autodiff/*.cpp' 'runtime/*.cpp' 'distribution/*.cpp' 'datasets/*.cpp' 'training/*.cpp' 'launch/*.cpp' |
    grep -E '^(graph|ops|autodiff|runtime|distribution|datasets|training|launch)/.*\.cpp$' | grep -v -E '(^(runtime|distribution)/cuda/|_cuda\.cpp$)')
  if [ ${#files[@]} -gt 0 ]; then
    missing=$(/usr/bin/python3 - "$db" "${files[@]}" <<'PY'
import json, os, sys
compiled = {os.path.realpath(e["file"]) for e in json.load(open(sys.argv[1]))}
print(" ".join(f for f in sys.argv[2:] if os.path.realpath(f) not in compiled))
PY
    )
    [ -z "$missing" ] || { echo "ci_lint.sh: not in $db (reconfigure?): $missing" >&2 && exit 2; }
    # omp.h: the g++ commands name -fopenmp, and clang-tidy 14 has no omp.h of its own
    # once libomp-16-dev (the clang 16 sanitizer build's) has replaced libomp-14-dev, while
    # g++'s omp.h uses attributes clang rejects. A folder holding only an LLVM omp.h
    # (plain declarations) is searched last, so nothing else of that LLVM is seen.
    omp_dir=$(mktemp -d)
    omp_h=$(ls /usr/lib/llvm-*/lib/clang/*/include/omp.h 2>/dev/null | tail -1)
    [ -z "$omp_h" ] || ln -s "$omp_h" "$omp_dir/omp.h"
    start=$(date +%s)
    log=$(mktemp)
    printf '%s\n' "${files[@]}" |
      xargs -P "$jobs" -n 4 "$clang_tidy" -p "$build" --quiet --warnings-as-errors='*' \
        --extra-arg="-idirafter$omp_dir" >"$log" 2>&1
    rc=$?
    grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' "$log"
    rm -rf "$log" "$omp_dir"
    if [ $rc -eq 0 ]; then
      echo "clang-tidy: ${#files[@]} files clean in $(($(date +%s) - start)) s ($jobs jobs)"
    else
      echo "FAIL clang-tidy: warnings above (checks: .clang-tidy)"
      fails=$((fails + 1))
    fi
  fi
fi

exit $((fails > 0))
