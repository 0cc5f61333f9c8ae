#!/usr/bin/env bash
# Reliability phase of CI: fuzzing, ASan+UBSan over the test suite, TSan over the
# threaded code. Called by `bash tools/setup.sh test` after ctest; runs alone too:
#
#   bash tools/ci_reliability.sh                    # fuzz, asan and tsan (what CI runs)
#   bash tools/ci_reliability.sh fuzz tsan          # any subset, in this order
#   FUZZ_SECONDS=10 bash tools/ci_reliability.sh fuzz
#
# Why: hostile files must end in a one-line error, never a crash, a hang, a leak or
# undefined behaviour, and the data pipeline's threads must not race. Any sanitizer
# report or fuzz finding fails this script (exit 1); each phase prints its time.
# docs/reliability.md describes the phases, their budget and the suppressions.
#
# Build folders (their own, next to the normal build; all compiled through ccache,
# cmake/ccache.cmake): build-fz (clang 16, libFuzzer hooks + ASan + UBSan: the fuzz
# targets first, then everything else for the asan phase, so the libraries are
# compiled once for both), build-ts (clang 16, TSan: clang compiles instrumented code
# about three times faster than g++). Override
# the prefix with TRAINRT_RELIABILITY_PREFIX (default "build-"), the compiler with
# CLANG_CC / CLANG_CXX (default clang-16 / clang++-16: Debian's clang 14 cannot capture
# structured bindings in lambdas, which the tests do).
#
# Each phase's time is printed and, when TRAINRT_PHASE_LOG names a file (tools/setup.sh
# sets it), appended there for setup.sh's table. Work that runs on one core (a fuzz
# target, a TSan test program with oneDNN on one thread) runs JOBS at a time. The
# budget (CI: 45 min for all of setup.sh test on 2 cores) and the measured times are
# in docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

prefix=${TRAINRT_RELIABILITY_PREFIX:-build-}
JOBS=${TRAINRT_JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
CLANG_CC=${CLANG_CC:-clang-16}
CLANG_CXX=${CLANG_CXX:-clang++-16}
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(fuzz asan tsan)
for p in "${phases[@]}"; do
  case "$p" in fuzz|asan|tsan) ;; *) echo "ci_reliability.sh: unknown phase '$p' (fuzz, asan, tsan)" >&2; exit 2 ;; esac
done

summary=()
failed=0
phase_start=0
begin() { phase_start=$(date +%s); echo "== reliability: $1"; }
end() {  # end NAME STATUS [SECONDS [INDENT]]: INDENT marks a part of a phase that ran beside others
  local t=${3:-$(($(date +%s) - phase_start))}
  summary+=("$(printf '%-24s %-4s %4d s' "$1" "$2" "$t")")
  echo "== reliability: $1 $2 in ${t} s"
  [ -z "${TRAINRT_PHASE_LOG:-}" ] ||
    printf '%-32s %5d s%s\n' "${4:-}$1" "$t" "$([ "$2" = ok ] || echo " $2")" >>"$TRAINRT_PHASE_LOG"
  [ "$2" = ok ] || failed=1
}
# A phase whose parts ran JOBS at a time: its wall time, under its parts' indented lines.
group_line() {  # group_line NAME SECONDS
  [ -z "${TRAINRT_PHASE_LOG:-}" ] || printf '%-32s %5d s\n' "$1" "$2" >>"$TRAINRT_PHASE_LOG"
}

# in_pool RUN REPORT ITEM...: `RUN ITEM` in the background, at most JOBS at once, the
# next starting as soon as one ends (a fuzz target or a TSan program is one core; the
# TSan programs take 3 to 200 s, so batches of JOBS would wait for each batch's longest);
# then `REPORT ITEM STATUS SECONDS` for every item in order, STATUS ok or FAIL from RUN's
# exit status.
in_pool() {
  local run=$1 report=$2 item st t running=0
  shift 2
  local stamps
  stamps=$(mktemp -d)
  for item in "$@"; do
    if ((running >= JOBS)); then
      wait -n
      running=$((running - 1))
    fi
    (
      t0=$(date +%s) st=ok
      "$run" "$item" || st=FAIL
      echo "$st $(($(date +%s) - t0))" >"$stamps/${item##*/}"
    ) &
    running=$((running + 1))
  done
  wait
  for item in "$@"; do
    read -r st t <"$stamps/${item##*/}"
    "$report" "$item" "$st" "$t"
  done
  rm -rf "$stamps"
}

# The test sources at -O0 in both sanitizer builds: clang with ASan+UBSan took 5x as long
# on a test source at -O1 (tests/ops/test_elementwise.cpp: 40 s against 7.5 s, its
# doctest cases are large functions), while the programs spend their time in the
# libraries' kernels, still at -O2: test_runtime under ASan took 194 s against 189.
configure() {  # configure DIR CMAKE_ARGS...
  local dir=$1
  shift
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINRT_CUDA=OFF -DTRAINRT_TEST_OPT=-O0 "$@" \
    >/dev/null
}

# ---------------------------------------------------------------- fuzz
# Each target runs FUZZ_SECONDS from a fresh seed corpus (fuzz/make_corpus.py);
# -timeout catches hangs (one input > 10 s), -rss_limit_mb and -malloc_limit_mb
# memory blow-ups, LeakSanitizer leaks. A finding leaves crash-*/leak-*/timeout-*/
# oom-* in $dir/findings and fails the phase.
# A finding, repeated under the summary (the end of a CI log is what survives): the
# first error line, libFuzzer's seed and, when small, the input itself in base64, so
# it reproduces without the build tree (base64 -d > input; fuzz_<name> input).
findings=()
note_finding() {  # note_finding DIR NAME
  local log=$1/findings/$2.log f
  findings+=("fuzz $2: $(grep -m1 -E "runtime error|ERROR|fuzz finding" "$log" | cut -c1-300)")
  findings+=("  $(grep -m1 -E "^INFO: Seed:" "$log" || true)")
  for f in "$1"/findings/"$2"-*; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -le 8192 ]; then
      findings+=("  input ${f##*/} (base64):" "$(base64 -w 120 "$f")")
    else
      findings+=("  input ${f##*/}: $(stat -c %s "$f") bytes, not printed")
    fi
  done
}

# The one clang build folder of the fuzz and asan phases.
clang_dir=${prefix}fz
configure_clang() {
  configure "$clang_dir" -DTRAINRT_FUZZ=ON -DCMAKE_C_COMPILER="$CLANG_CC" -DCMAKE_CXX_COMPILER="$CLANG_CXX"
}

run_fuzz() {
  local dir=$clang_dir
  begin "fuzz build"
  local st=ok
  configure_clang && nice cmake --build "$dir" -j "$JOBS" --target trainrt_fuzz || st=FAIL
  end "fuzz build" $st
  [ $st = ok ] || return 0
  rm -rf "$dir/corpus"
  mkdir -p "$dir/findings"
  /usr/bin/python3 fuzz/make_corpus.py "$dir/corpus"
  # Each target for FUZZ_SECONDS, JOBS of them at a time.
  local exes=("$dir"/fuzz/fuzz_*) t0
  t0=$(date +%s)
  in_pool fuzz_one fuzz_report "${exes[@]}"
  group_line "fuzz, all (${#exes[@]} targets, $JOBS at a time)" $(($(date +%s) - t0))
}

fuzz_one() {  # fuzz_one EXE: runs one target into findings/NAME.log; fails on a finding
  local dir=$clang_dir name=${1##*/fuzz_}
  [ -d "$dir/corpus/$name" ] || mkdir -p "$dir/corpus/$name"
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$1" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$dir/findings/${name}-" "$dir/corpus/$name" \
    >"$dir/findings/$name.log" 2>&1
}

fuzz_report() {  # fuzz_report EXE STATUS SECONDS
  local dir=$clang_dir name=${1##*/fuzz_} st=$2
  echo "== reliability: fuzz $name"
  echo "   $(grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)" "$dir/findings/$name.log" | tr -s ' \n' ' ')"
  if [ "$st" = FAIL ]; then
    grep -m1 -E "ERROR|runtime error|fuzz finding|==[0-9]+==" "$dir/findings/$name.log" || true
    ls "$dir/findings" | grep -v '\.log$' || true
    echo "   full log: $dir/findings/$name.log"
    note_finding "$dir" "$name"
  fi
  end "fuzz $name" "$st" "$3" "  "
}

# ---------------------------------------------------------------- ASan + UBSan
# The whole suite but the slow and heavy labels (ctest -LE "gpu|slow|heavy": the
# torchvision models' fp64 runs, train_precision's eight training runs; tests/CMakeLists.txt
# says why) on the clang ASan+UBSan build of the fuzz phase: unit tests, the CLI
# scripts (which run the instrumented trainrt binary) and ONNX conformance. The unit
# tests' full-size comparisons with the fp64 reference take smaller images there
# (tests/test_util.h, kSanitized).
# Why one build for both: the libraries are most of a build, and clang compiles them
# with ASan about three times faster than g++ does. The fuzz phase's coverage hooks
# (-fsanitize=fuzzer-no-link) stay in the libraries: without libFuzzer linked, the
# counters are plain increments and the comparison hooks the sanitizer runtime's
# empty defaults. The tests see the same code, but the kernel-heavy ones run 2-3x
# slower than on a g++ ASan build (docs/reliability.md).
san_env() {
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0"
  export LSAN_OPTIONS="suppressions=$src/fuzz/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  # Python-driven CLI tests load torch/onnx (uninstrumented) but only run the
  # instrumented trainrt as a child process, so nothing needs to be preloaded.
}

run_asan() {
  local dir=$clang_dir
  begin "asan build"
  local st=ok
  configure_clang && nice cmake --build "$dir" -j "$JOBS" || st=FAIL
  end "asan build" $st
  [ $st = ok ] || return 0
  # cli_train_onnxruntime imports onnxruntime from <trainrt's folder>/pydeps, which
  # tools/setup.sh installs into the normal build folder only.
  local main_build=${TRAINRT_BUILD_DIR:-build}
  [ -e "$dir/pydeps" ] || [ ! -d "$main_build/pydeps" ] || ln -s "$src/$main_build/pydeps" "$dir/pydeps"
  begin "asan ctest"
  st=ok
  (san_env && ctest --test-dir "$dir" --output-on-failure -LE "gpu|slow|heavy" -j "$JOBS" --timeout 1500) || st=FAIL
  end "asan ctest" $st
}

# ---------------------------------------------------------------- TSan
# The code where trainrt itself shares state between threads: the input pipeline
# (oneTBB task_group, tests/datasets; its handoffs are annotated, graph/tsan.h) and the
# training run that drives it (tests/training), the executor (tests/runtime), the
# data-parallel ranks and their communicators' threads
# (tests/distribution) and the kernels (tests/ops): in a TSan build every parallel loop of the
# cpu kernels forks plain std::threads (ops/core/parallel.h parallel_ranges) instead of
# calling the uninstrumented oneTBB, and oneDNN's OpenMP (uninstrumented libgomp) runs
# one thread, so TSan sees every access the kernels make from several threads.
# fuzz/tsan.supp names the suppressions (docs/reliability.md).
# Cases left out of the TSan runs (doctest -tce patterns): they compare oneDNN's
# convolutions (uninstrumented, on one thread here) with the fp64 reference at the Wide
# ResNet's full layer sizes, minutes under TSan and no thread of trainrt's own that the
# smaller cases of the same kernels do not run. The plain and ASan passes run them.
declare -A tsan_skip=(
  [test_ops]="winograd:*,cpu grad vs reference: ConvGrad at the Wide ResNet*,cpu vs reference: Conv? Wide ResNet*"
  [test_runtime]="a cpu training step with blocked layouts*"
)

tsan_dir=${prefix}ts
run_tsan() {
  local dir=$tsan_dir
  local targets=(test_runtime test_ops test_distribution test_training test_datasets)  # longest first: JOBS of them run at once
  begin "tsan build"
  local st=ok
  configure "$dir" -DTRAINRT_SANITIZE=thread -DCMAKE_C_COMPILER="$CLANG_CC" -DCMAKE_CXX_COMPILER="$CLANG_CXX" &&
    nice cmake --build "$dir" -j "$JOBS" --target "${targets[@]}" || st=FAIL
  end "tsan build" $st
  [ $st = ok ] || return 0
  # With oneDNN on one thread these programs are mostly one core each (their parallel
  # loops fork a few std::threads), each logged to its own file.
  local t0
  t0=$(date +%s)
  in_pool tsan_one tsan_report "${targets[@]}"
  group_line "tsan, all (${#targets[@]} programs, $JOBS at a time)" $(($(date +%s) - t0))
}

tsan_one() {  # tsan_one TARGET: runs it into TARGET.tsan.log; fails on a report or a failed test
  # OpenMP threads only where the test has no oneDNN primitives of its own to run.
  local omp=2
  [ "$1" = test_datasets ] || omp=1
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$src/fuzz/tsan.supp" OMP_NUM_THREADS=$omp \
    "$tsan_dir/tests/$1" ${tsan_skip[$1]:+"-tce=${tsan_skip[$1]}"} >"$tsan_dir/$1.tsan.log" 2>&1
}

tsan_report() {  # tsan_report TARGET STATUS SECONDS
  echo "== reliability: tsan $1"
  tail -n 40 "$tsan_dir/$1.tsan.log"
  end "tsan $1" "$2" "$3" "  "
}

total_start=$(date +%s)
for p in "${phases[@]}"; do "run_$p"; done
echo "== reliability summary (total $(($(date +%s) - total_start)) s)"
printf '   %s\n' "${summary[@]}"
[ ${#findings[@]} -eq 0 ] || printf '%s\n' "== reliability findings" "${findings[@]}"
exit $failed
