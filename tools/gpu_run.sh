#!/usr/bin/env bash
# The GPU bundle's entry point (packed as run.sh by tools/gpu_bundle.sh). One command on a
# short GPU allocation (no package registry, at most 10 minutes a command) says
# (a) whether every kernel path is right: `trainrt selftest --device cuda` against the
#     reference backend, on Wide ResNets whose widths take the tensor-core paths;
# (b) the images/s of the seed's Wide ResNet (CIFAR-100 shape) against PyTorch on the same
#     GPU, at the seeds' two points (fp32 batch 32, bf16 batch 1024);
# (c) the reason for every fallback: each bench run's `capture:`, `fallback:`, `engine:`
#     and `conv TFLOP/s:` lines, and cuDNN's and cuBLASLt's own warnings and errors.
#
#   ./run.sh               the default phases (below) within a budget of 360 s
#   ./run.sh --quick       library check, selftests, the two benchmark points, PyTorch (~3 min)
#   ./run.sh --full        everything the kit knows (budget 570 s: within one 10-minute command)
#   ./run.sh libs          the library check alone
#   ./run.sh trainrt ARGS  any trainrt command through the bundle's loader and libraries
#   ./run.sh cudnn-conv ARGS  every engine config cuDNN's heuristics list for the Wide
#                         ResNet's convolutions, timed, against the backend's engine filter
#                         (bench/cudnn_conv.cpp; --help says its flags)
#
# Phases, in order of value; q: --quick, d: default, f: --full (each mode runs its own and
# the earlier tiers'). Each runs under its own `timeout`, so a hang costs that phase only:
#   q  libs             where libcudart, cuBLASLt, cuDNN, NCCL, libcuda (the driver) and
#                       libnvrtc (cuDNN's runtime-compiled engines) were found; stops (exit
#                       2, one line) without them or without a usable GPU, saying which
#   q  version          trainrt --version, nvidia-smi: the GPU and whether trainrt can use it
#   q  model            the seed's Wide ResNet, CIFAR-100 shape (work/, not results/)
#   q  selftest_fp32    widths 16,32,64,128 (channels multiples of 16), TF32 allowed, NHWC
#   q  selftest_bf16    the same at --precision bf16 (cuDNN's 16-bit tensor-core graphs)
#   q  bench_b32_fp32   the seed's single-GPU point (floor: its 2,598 images/s)
#   q  bench_b1024_bf16 the seed's multi-GPU point (floor: 36,927 images/s / 4 GPUs = 9,232)
#   q  pytorch          bench_pytorch_gpu.py at those two points (channels_last, TF32 as
#                       PyTorch defaults, bf16 autocast, cudnn.benchmark)
#   d  profile_b1024_bf16  the bf16 batch-1024 step's kernel time per op type (bench
#                       --profile, 5 steps) and its trace per node (trace_b1024_bf16.json,
#                       Chrome/Perfetto): where the step's time goes
#   d  selftest_mobile_cnn_bf16  tests/data/mobile_cnn.onnx (grouped, depthwise and
#                       squeeze-excitation convolutions) at bf16: its 1x1 convolution of
#                       8 to 4 channels failed on the first GPU; a failure prints which
#                       library path each problem took (fusion tally, fallbacks, engines);
#                       after a failure, _wide (--narrow-storage off) and _nchw (--layout
#                       nchw) tell a 16-bit output's fault from a layout descriptor's
#   d  bench_b1024_bf16_wide  that point with 16-bit storage off (--narrow-storage off):
#                       every activation float32, so the pair shows what 16-bit storage brings
#   d  selftest_strict  the default small selftest in strict fp32
#   d  selftest_fp16    as selftest_bf16, in fp16
#   d  selftest_seq_cnn 1-D convolutions, pooling and batch norm (tests/data/seq_cnn.onnx), fp32
#   d  selftest_video_cnn 3-D convolutions (cuDNN's N-d descriptors), pooling and batch norm
#                       (tests/data/video_cnn.onnx), fp32
#   d  bench_b128_fp32, bench_b128_bf16, then pytorch_more (PyTorch at batch 128)
#   f  selftest_nchw, selftest_{mlp_matmul,mobile_cnn}_{fp32,bf16,fp16} (tests/data models;
#      mobile_cnn's bf16 in the default tier),
#      selftest_seq_cnn_{bf16,fp16}, selftest_video_cnn_{bf16,fp16},
#      bench_b32_bf16, bench_b1024_fp32, bench_b{32,128,1024}_fp16, pytorch_more's points
# The budget counts from run.sh's start. A phase starts only with at least
# TRAINRT_KIT_MIN_PHASE_S (20) of it left, and runs at most what is left less the kill
# grace (so run.sh ends within the budget); later phases are skipped with a line saying so.
#
# Results (TRAINRT_KIT_RESULTS, default ./results; small enough to copy back in seconds):
#   summary.txt  phases (ok, FAILED, TIMED OUT, skipped; seconds), the table batch,
#                precision, trainrt images/s, PyTorch images/s, ratio, the seeds' floor,
#                then every bench run's capture:/fallback:/engine:/conv TFLOP/s: lines
#   run.log      every phase's output in order, a header and a footer (time, exit) each,
#                written as phases end (the running one is phase_NAME.log meanwhile); a
#                successful phase's output over 200 lines is cut in the middle, a failed
#                or timed-out one's is kept whole; cuDNN's and cuBLASLt's warnings and
#                errors follow their phase's output (first 60 lines of each)
#   timing-cache.json  the engine timings (`bench --timing-cache`): a rerun reuses them
#   trace_b1024_bf16.json  profile_b1024_bf16's timed steps, one event per node
#
# Environment:
#   TRAINRT_CUDA_LIBS     folders (colon list) holding libcudart.so.13, libcublasLt.so.13,
#                         libcudnn*.so.9, libnccl.so.2; searched before PyTorch's nvidia-*
#                         wheels (any python3 on PATH or /opt/*/.venv) and /usr/local/cuda
#   LD_LIBRARY_PATH       kept, after the bundle's and CUDA's folders; libcuda.so.1 is also
#                         looked for in /usr/local/nvidia/lib64, /usr/local/nvidia/lib,
#                         /usr/lib/x86_64-linux-gnu, /usr/lib64 and ld.so's cache
#                         (TRAINRT_KIT_DRIVER_DIRS replaces those folders and the cache)
#   TRAINRT_KIT_BUDGET    total seconds for the phases (default 360; --full 570)
#   TRAINRT_KIT_T_SELFTEST, TRAINRT_KIT_T_BENCH, TRAINRT_KIT_T_PYTORCH, TRAINRT_KIT_T_SHORT
#                         each phase kind's timeout in seconds (120, 120, 150, 60);
#                         a phase that ignores SIGTERM is killed TRAINRT_KIT_GRACE_S (5) later
#   BENCH_STEPS           timed steps per bench point, trainrt's and PyTorch's (default 20)
#   TRAINRT_KIT_PYTHON    the python3 with torch (default: the first of python3 on PATH,
#                         /opt/*/.venv/bin/python3, /usr/bin/python3 that has torch)
#   TRAINRT_KIT_BIN       a trainrt to run as it is instead of the bundle's (tests)
# Exit: 0 every phase ok (skipped ones included), 1 a phase failed or timed out, 2 no GPU
# or libraries missing.
set -uo pipefail
# The bundle starts trainrt through its loader, where trainrt cannot set this itself
# (launch/main/trainrt.cpp): oneDNN's OpenMP threads sleep between parallel regions.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
t0=$(now_ms)  # the budget counts from here, the library check included
here=$(cd "$(dirname "$0")" && pwd)
needed=(libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2)

mode=default
case "${1:-}" in
  --quick) mode=quick ;;
  --full) mode=full ;;
  "" | libs | trainrt | cudnn-conv) ;;
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: run.sh [--quick | --full | libs | trainrt ARGS... | cudnn-conv ARGS...]" >&2; exit 2 ;;
esac

# ---------------------------------------------------------------- library check
# Candidate folders for CUDA's libraries: the user's, then (unless the user's hold them
# all) every nvidia wheel of every python3 we can see, then the toolkit's.
candidates() {
  local IFS=: lib all=yes
  for d in ${TRAINRT_CUDA_LIBS:-}; do echo "$d"; done
  for lib in "${needed[@]}" libnvrtc.so.13; do
    first_dir_with "$lib" < <(for d in ${TRAINRT_CUDA_LIBS:-}; do echo "$d"; done) >/dev/null || all=
  done
  [ -z "$all" ] || return 0
  local py
  for py in python3 /opt/*/.venv/bin/python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" - 2>/dev/null <<'EOF'
import site, os
roots = list(site.getsitepackages()) + [site.getusersitepackages()]
for r in roots:
    base = os.path.join(r, "nvidia")
    if not os.path.isdir(base):
        continue
    for dirpath, dirnames, filenames in os.walk(base):
        if any(f.startswith("lib") and ".so" in f for f in filenames):
            print(dirpath)
EOF
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do echo "$d"; done
}

# Where the driver's libcuda.so.1 may be: the caller's LD_LIBRARY_PATH, the usual driver
# folders (a container's /usr/local/nvidia, Debian's and Red Hat's), ld.so's cache. Never
# the toolkit's stubs/libcuda.so, which only links.
driver_dirs() {
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do echo "$d"; done
  if [ -n "${TRAINRT_KIT_DRIVER_DIRS+set}" ]; then
    for d in $TRAINRT_KIT_DRIVER_DIRS; do echo "$d"; done
    return
  fi
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do echo "$d"; done
  ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64/ { sub(/\/[^\/]*$/, "", $NF); print $NF }'
}

first_dir_with() {  # LIB: the first folder on stdin that holds LIB
  local d
  while read -r d; do
    [ -n "$d" ] && [ -e "$d/$1" ] && { echo "$d"; return 0; }
  done
  return 1
}

lib_path=$here/lib
add_path() { case ":$lib_path:" in *":$1:"*) ;; *) lib_path=$lib_path:$1 ;; esac; }
missing=()
driver_dir=
find_libs() {
  local lib d dirs
  dirs=$(candidates | awk '!seen[$0]++')
  for lib in "${needed[@]}"; do
    if d=$(first_dir_with "$lib" <<<"$dirs"); then
      add_path "$d"
      echo "  $lib: $d"
    else
      missing+=("$lib")
      echo "  $lib: not found"
    fi
  done
  if d=$(first_dir_with libnvrtc.so.13 <<<"$dirs"); then
    add_path "$d"
    echo "  libnvrtc.so.13: $d"
  else
    echo "  libnvrtc.so.13: not found (cuDNN's runtime-compiled engines, the fused graphs among them, will fail)"
  fi
  if driver_dir=$(driver_dirs | awk '!seen[$0]++' | first_dir_with libcuda.so.1); then
    add_path "$driver_dir"
    echo "  libcuda.so.1 (driver): $driver_dir"
  else
    echo "  libcuda.so.1 (driver): not found"
  fi
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-}; do [ -n "$d" ] && add_path "$d"; done
  echo "  loader path: $lib_path"
}

echo "== CUDA libraries"
find_libs
if [ -n "${TRAINRT_KIT_BIN:-}" ]; then
  trainrt=("$TRAINRT_KIT_BIN")
else
  trainrt=("$here/lib/ld-linux.so" --library-path "$lib_path" "$here/trainrt")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "run.sh: missing ${missing[*]}: set TRAINRT_CUDA_LIBS to the folders that hold them" >&2
  [ "${1:-}" = libs ] || exit 2
fi
case "${1:-}" in
  libs) exit 0 ;;
  trainrt) shift; "${trainrt[@]}" "$@"; exit $? ;;
  cudnn-conv) shift; "$here/lib/ld-linux.so" --library-path "$lib_path" "$here/cudnn_conv" "$@"; exit $? ;;
esac
if [ -z "$driver_dir" ]; then
  echo "run.sh: no usable GPU: no NVIDIA driver: libcuda.so.1 not found in LD_LIBRARY_PATH, the driver's usual folders or ld.so's cache" >&2
  exit 2
fi

# ---------------------------------------------------------------- phases
results=${TRAINRT_KIT_RESULTS:-$here/results}
work=${TRAINRT_KIT_WORK:-$here/work}
mkdir -p "$results" "$work"
rm -f "$results"/run.log "$results"/summary.txt "$results"/phase_*.log "$results"/.lib_*.log
log=$results/run.log
full_budget=360
[ "$mode" = full ] && full_budget=570
budget=${TRAINRT_KIT_BUDGET:-$full_budget}
min_phase=${TRAINRT_KIT_MIN_PHASE_S:-20}
t_selftest=${TRAINRT_KIT_T_SELFTEST:-120}
t_bench=${TRAINRT_KIT_T_BENCH:-120}
t_pytorch=${TRAINRT_KIT_T_PYTORCH:-150}
t_short=${TRAINRT_KIT_T_SHORT:-60}
steps=${BENCH_STEPS:-20}
keep_lines=200   # a successful phase's output beyond this is cut in the middle
lib_lines=60     # cuDNN's / cuBLASLt's warnings and errors kept per phase

say() { echo "$*"; echo "$*" >>"$log"; }

rows=()         # "name|result|seconds" per selected phase, in order
bench_points=() # "batch precision" per selected bench phase, in order
declare -A trainrt_ips=() bench_lines=() bench_mem=() pytorch_ips=() pytorch_status=()
any_failed=0
running=     # the phase running now, and its process (group)
phase_pid=
status=      # the last phase's result

# run_phase TIER NAME TIMEOUT_S COMMAND...: runs COMMAND if the mode takes TIER and the
# budget has time left; its output goes to phase_NAME.log while it runs, then into run.log.
run_phase() {
  local tier=$1 name=$2 limit=$3
  shift 3
  case "$mode:$tier" in quick:q | default:[qd] | full:[qdf]) ;; *) return 0 ;; esac
  local left_ms=$((budget * 1000 - ($(now_ms) - t0)))
  if [ "$left_ms" -lt $((min_phase * 1000)) ]; then
    say "skipped: $name (budget: $((left_ms / 1000)) s of ${budget} s left, a phase needs ${min_phase} s)"
    rows+=("$name|skipped (budget)|0")
    status=skipped
    return 0
  fi
  local note='' grace=${TRAINRT_KIT_GRACE_S:-5}  # timeout -k: SIGKILL that long after SIGTERM
  local limit_ms=$((limit * 1000)) cap_ms=$((left_ms - grace * 1000))
  if [ "$limit_ms" -gt "$cap_ms" ]; then
    limit_ms=$((cap_ms > 1000 ? cap_ms : 1000))
    note=", cut by the budget"
  fi
  limit=$((limit_ms / 1000))
  [ $((limit_ms % 1000)) -eq 0 ] || limit=$limit.$(printf '%03d' $((limit_ms % 1000)))
  local out=$results/phase_$name.log start rc shown="$*"
  shown=${shown/"${trainrt[*]}"/trainrt}
  start=$(now_ms)
  running=$name
  echo "== $name (timeout ${limit} s$note): $shown"
  {
    echo
    echo "===== $name: $shown (timeout ${limit} s$note; at $(date -u +%H:%M:%S) UTC, $(((start - t0) / 1000)) s into the run)"
  } >>"$log"
  # cuDNN's (levels: 1 errors, 2 warnings and errors) and cuBLASLt's (mask: 1 errors,
  # 4 performance hints) own logs, for the trainrt phases that run kernels.
  local envs=()
  case "$name" in selftest* | bench*)
    envs=(CUDNN_LOGLEVEL_DBG=2 "CUDNN_LOGDEST_DBG=$results/.lib_cudnn.log"
          CUBLASLT_LOG_MASK=5 "CUBLASLT_LOG_FILE=$results/.lib_cublaslt.log") ;;
  esac
  # timeout runs the command in its own process group and signals all of it.
  env "${envs[@]}" timeout -k "$grace" "$limit" "$@" </dev/null >"$out" 2>&1 &
  local pid=$! peak=0 used
  phase_pid=$pid
  case "$name" in bench*)
    if command -v nvidia-smi >/dev/null; then  # the GPU's memory in use, sampled while it lasts
      while kill -0 "$pid" 2>/dev/null; do
        used=$(timeout 5 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
        [ "${used:-0}" -gt "$peak" ] 2>/dev/null && peak=$used
        sleep "${TRAINRT_KIT_POLL_S:-0.5}"
      done
    fi ;;
  esac
  wait "$pid"
  rc=$?
  running=
  phase_pid=
  local secs=$((($(now_ms) - start + 500) / 1000))
  case $rc in
    0) status=ok ;;
    124 | 137) status="TIMED OUT (limit ${limit} s)" ;;
    *) status="FAILED (exit $rc)" ;;
  esac
  [ "$rc" -eq 0 ] || any_failed=1
  local n
  n=$(wc -l <"$out")
  if [ "$rc" -eq 0 ] && [ "$n" -gt "$keep_lines" ]; then
    { head -n $((keep_lines * 3 / 4)) "$out"
      echo "[... run.sh: $((n - keep_lines)) lines of a successful phase left out ...]"
      tail -n $((keep_lines / 4)) "$out"; } >>"$log"
  else
    cat "$out" >>"$log"
  fi
  local lib f
  for lib in cudnn cublaslt; do
    f=$results/.lib_$lib.log
    [ -s "$f" ] || continue
    n=$(wc -l <"$f")
    echo "----- $lib's own log (warnings and errors): $n lines$([ "$n" -gt "$lib_lines" ] && echo ", the first $lib_lines")" >>"$log"
    head -n "$lib_lines" "$f" | cut -c1-400 >>"$log"
    rm -f "$f"
  done
  echo "===== $name: $status, $secs s" >>"$log"
  echo "   $name: $status, $secs s"
  [ "$rc" -eq 0 ] || tail -n 5 "$out" | sed 's/^/   | /'
  case "$name" in bench*)
    local ips
    ips=$(sed -n 's/^images\/s: \([0-9.]*\).*/\1/p' "$out" | tail -1)
    if [ "$rc" -eq 0 ]; then trainrt_ips[$name]=${ips:-?}; else trainrt_ips[$name]=${status%% (*}; fi
    bench_lines[$name]=$(grep -E '^(capture|fallback|engine|conv TFLOP/s):' "$out")
    [ "$peak" -gt 0 ] && bench_mem[$name]=$peak ;;
  esac
  rm -f "$out"
  rows+=("$name|$status|$secs")
  return 0
}

bench() {  # TIER BATCH PRECISION [wide]; wide: with 16-bit storage off (--narrow-storage off)
  local label=$3${4:+-$4} extra=()
  local name=bench_b$2_${label//-/_}
  [ "${4:-}" = wide ] && extra=(--narrow-storage off)
  case "$mode:$1" in quick:q | default:[qd] | full:[qdf]) bench_points+=("$2 $label") ;; esac
  run_phase "$1" "$name" "$t_bench" "${trainrt[@]}" bench "$model" --device cuda --batch "$2" --precision "$3" \
    --steps "$steps" --timing-cache "$results/timing-cache.json" "${extra[@]}"
}

pytorch() {  # TIER NAME POINTS (BATCH:PRECISION,...)
  [ -n "$3" ] || return 0
  if [ -z "$py" ]; then
    case "$mode:$1" in quick:q | default:[qd] | full:[qdf])
      say "skipped: $2 (no python3 with torch found: set TRAINRT_KIT_PYTHON)"
      rows+=("$2|skipped (no torch)|0") ;;
    esac
    return 0
  fi
  status=
  run_phase "$1" "$2" "$t_pytorch" "$py" "$here/bench_pytorch_gpu.py" --points "$3" --steps "$steps"
  local point
  if [ -n "$status" ] && [ "$status" != ok ]; then
    for point in ${3//,/ }; do pytorch_status[${point%%:*} ${point##*:}]=${status%% (*}; done
  fi
}

find_python() {
  local p
  for p in ${TRAINRT_KIT_PYTHON:-python3 /opt/*/.venv/bin/python3 /usr/bin/python3}; do
    command -v "$p" >/dev/null 2>&1 || continue
    if [ -n "${TRAINRT_KIT_PYTHON:-}" ] ||
      "$p" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null; then
      command -v "$p"
      return 0
    fi
  done
  return 1
}

write_summary() {
  local s=$results/summary.txt row name result secs key tr pt ratio fl
  {
    echo "trainrt GPU kit: $(date -u '+%Y-%m-%d %H:%M') UTC, mode $mode, budget $budget s, $((($(now_ms) - t0) / 1000)) s used"
    echo "GPU: ${gpu:-unknown}"
    echo "trainrt: ${version_line:-unknown}"
    echo "libcuda.so.1: $driver_dir"
    echo
    printf '%-28s %-28s %s\n' phase result seconds
    for row in "${rows[@]}"; do
      IFS='|' read -r name result secs <<<"$row"
      printf '%-28s %-28s %s\n' "$name" "$result" "$secs"
    done
    [ -z "$running" ] || printf '%-28s %-28s\n' "$running" "INTERRUPTED (run.sh ended)"
    echo
    printf '%-6s %-9s %15s %15s %7s %11s\n' batch precision "trainrt img/s" "PyTorch img/s" ratio "seed floor"
    for key in "${bench_points[@]}"; do
      read -r b p <<<"$key"
      tr=${trainrt_ips[bench_b${b}_${p//-/_}]:-skipped}
      pt=${pytorch_ips[$b ${p%%-*}]:-${pytorch_status[$b ${p%%-*}]:--}}
      ratio=-
      [[ "$tr" =~ ^[0-9.]+$ && "$pt" =~ ^[0-9.]+$ ]] && ratio=$(awk -v a="$tr" -v b="$pt" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
      case "$b $p" in "32 fp32") fl=2598 ;; "1024 bf16") fl=9232 ;; *) fl=- ;; esac
      printf '%-6s %-9s %15s %15s %7s %11s\n' "$b" "$p" "$tr" "$pt" "$ratio" "$fl"
    done
    echo "(ratio: trainrt / PyTorch; seed floors: 2,598 images/s single-GPU fp32 batch 32; 9,232 = 36,927 / 4 GPUs, bf16 batch 1024;"
    echo " bf16-wide: every activation float32, no 16-bit storage, against the same PyTorch bf16 run)"
    for key in "${bench_points[@]}"; do
      read -r b p <<<"$key"
      name=bench_b${b}_${p//-/_}
      [ -n "${trainrt_ips[$name]+set}" ] || continue
      echo
      echo "$name:${bench_mem[$name]:+ peak GPU memory ${bench_mem[$name]} MiB (nvidia-smi)}"
      if [ -n "${bench_lines[$name]}" ]; then
        # shellcheck disable=SC2001  # every line of several
        sed 's/^/  /' <<<"${bench_lines[$name]}"
      else
        echo "  (no capture:/fallback:/engine: lines)"
      fi
    done
  } >"$s"
}

# shellcheck disable=SC2317  # called by the trap
interrupted() {
  [ -z "$phase_pid" ] || kill -TERM -- "-$phase_pid" 2>/dev/null
  say "run.sh: interrupted during ${running:-no phase}"
  write_summary
  exit 1
}
trap interrupted INT TERM

say "== run.sh $mode: budget $budget s, results in $results"
gpu=
if command -v nvidia-smi >/dev/null; then
  gpu=$(timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
  say "nvidia-smi: ${gpu:-no answer}"
fi
run_phase q version "$t_short" "${trainrt[@]}" --version
if [ "$status" != ok ]; then
  write_summary
  echo "run.sh: trainrt does not start here (version: $status): $(grep -B1 '^===== version: ' "$log" | head -1)" >&2
  exit 2
fi
version_line=$(grep -A30 "^===== version" "$log" | sed -n 's/^trainrt //p; s/^  CUDA  */CUDA /p; s/^  cuDNN  */cuDNN /p' |
  head -3 | paste -sd, - | sed 's/,/, /g')
why=$(grep -A30 "^===== version" "$log" | sed -n 's/^  GPU  *none (\(.*\))$/\1/p' | head -1)
if [ -n "$why" ]; then
  write_summary
  echo "run.sh: no usable GPU: $why" >&2
  exit 2
fi

model=$work/wrn_cifar100.onnx
if [ -s "$model" ]; then
  say "model: $model (kept from an earlier run)"
else
  # Written aside and renamed once whole: a run ended mid-write leaves no model to keep.
  run_phase q model "$t_short" "${trainrt[@]}" model wrn --dataset cifar100 -o "$model.part.onnx"
  [ "$status" = ok ] && mv "$model.part.onnx" "$model"
fi
wide=(--widths "16,32,64,128" --fp32-math tf32)  # channels multiples of 16: the tensor-core paths
py=$(find_python) || py=

run_phase q selftest_fp32 "$t_selftest" "${trainrt[@]}" selftest --device cuda "${wide[@]}"
run_phase q selftest_bf16 "$t_selftest" "${trainrt[@]}" selftest --device cuda "${wide[@]}" --precision bf16
bench q 32 fp32
bench q 1024 bf16
pytorch q pytorch 32:fp32,1024:bf16

# Where the bf16 step's time goes, per op type and (the trace) per node; the engines
# are the timing cache's from the bench phases, so nothing is timed again.
run_phase d profile_b1024_bf16 "$t_bench" "${trainrt[@]}" bench "$model" --device cuda --batch 1024 --precision bf16 \
  --steps 5 --timing-cache "$results/timing-cache.json" --profile --trace "$results/trace_b1024_bf16.json"
run_phase d selftest_mobile_cnn_bf16 "$t_selftest" "${trainrt[@]}" selftest "$here/mobile_cnn.onnx" --device cuda \
  --precision bf16
case $status in FAILED* | TIMED*)
  # Which side the fault is on, in the same run: every activation float32 (the 8-to-4
  # convolution then writes a float32 y), and NCHW descriptors instead of NHWC.
  run_phase d selftest_mobile_cnn_bf16_wide "$t_selftest" "${trainrt[@]}" selftest "$here/mobile_cnn.onnx" \
    --device cuda --precision bf16 --narrow-storage off
  run_phase d selftest_mobile_cnn_bf16_nchw "$t_selftest" "${trainrt[@]}" selftest "$here/mobile_cnn.onnx" \
    --device cuda --precision bf16 --layout nchw ;;
esac
bench d 1024 bf16 wide  # what 16-bit storage brings: the point above without it
run_phase d selftest_strict "$t_selftest" "${trainrt[@]}" selftest --device cuda
run_phase d selftest_fp16 "$t_selftest" "${trainrt[@]}" selftest --device cuda "${wide[@]}" --precision fp16
run_phase d selftest_seq_cnn "$t_selftest" "${trainrt[@]}" selftest "$here/seq_cnn.onnx" --device cuda
run_phase d selftest_video_cnn "$t_selftest" "${trainrt[@]}" selftest "$here/video_cnn.onnx" --device cuda
bench d 128 fp32
bench d 128 bf16

run_phase f selftest_nchw "$t_selftest" "${trainrt[@]}" selftest --device cuda "${wide[@]}" --layout nchw
for m in mlp_matmul mobile_cnn; do
  for p in fp32 bf16 fp16; do
    [ "$m:$p" = mobile_cnn:bf16 ] && continue  # the default tier's
    run_phase f "selftest_${m}_$p" "$t_selftest" "${trainrt[@]}" selftest "$here/$m.onnx" --device cuda --precision "$p"
  done
done
for p in bf16 fp16; do
  run_phase f "selftest_seq_cnn_$p" "$t_selftest" "${trainrt[@]}" selftest "$here/seq_cnn.onnx" --device cuda --precision "$p"
  run_phase f "selftest_video_cnn_$p" "$t_selftest" "${trainrt[@]}" selftest "$here/video_cnn.onnx" --device cuda --precision "$p"
done
bench f 32 bf16
bench f 1024 fp32
for b in 32 128 1024; do bench f "$b" fp16; done
case $mode in
  default) pytorch d pytorch_more 128:fp32,128:bf16 ;;
  full) pytorch f pytorch_more 128:fp32,128:bf16,32:bf16,1024:fp32 ;;
esac

# PyTorch's figures, from both PyTorch phases' output in run.log.
while read -r b p v; do pytorch_ips[$b $p]=$v; done < <(
  sed -n 's/^pytorch: batch \([0-9]*\) precision \([a-z0-9]*\) images\/s \([0-9.]*\).*/\1 \2 \3/p' "$log")
while read -r b p; do pytorch_ips[$b $p]=FAILED; done < <(
  sed -n 's/^pytorch: batch \([0-9]*\) precision \([a-z0-9]*\) FAILED.*/\1 \2/p' "$log")
write_summary
trap - INT TERM
echo
cat "$results/summary.txt"
echo
echo "results: $results ($(du -sk "$results" | cut -f1) KiB: $(cd "$results" && echo *))"
exit "$any_failed"
