#!/usr/bin/env bash
# The GPU kit's run.sh (tools/gpu_run.sh) on this machine, which has no GPU: a fake
# nvidia-smi on PATH, a stand-in trainrt (TRAINRT_KIT_BIN) that prints plausible bench and
# selftest output, fails in one phase and hangs in another, and a stand-in python for the
# PyTorch phase. Checks the phases' order per mode (--quick, default, --full), that a hang
# costs only its phase's timeout, that the budget skips later phases with a line, that a
# failed phase's log is kept whole and a long successful one cut, the summary's table
# (columns, ratio) and its capture:/fallback: lines, cuDNN's log kept bounded, and the
# one-line refusals: no driver library, no device; no torch (the PyTorch phase skipped with
# a line); run.sh ended by SIGTERM mid-phase (the phase's processes ended, the summary
# written). Small timeouts: a few seconds in all.
# Also the PyTorch script's arguments, and a tiny CPU run of it where torch is installed.
set -u
trainrt=$1
src=$2
source "$src/tests/cli/common.bash"
run=$src/tools/gpu_run.sh

# Libraries run.sh looks for (found by name only: nothing here loads them).
mkdir -p "$tmp/cuda" "$tmp/driver" "$tmp/nodriver" "$tmp/bin"
for lib in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do : >"$tmp/cuda/$lib"; done
: >"$tmp/driver/libcuda.so.1"

cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
  *memory.used*) echo 2345 ;;
  *) echo "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159" ;;
esac
EOF
# The stand-in trainrt: each call appended to $KIT_CALLS; selftest_bf16 fails after 300
# lines; mobile_cnn.onnx's selftests fail (pass with KIT_MOBILE_OK set); bench at bf16 batch 1024 hangs; selftest_fp32 prints 500 lines and passes.
cat >"$tmp/bin/trainrt" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$KIT_CALLS"
case "$1" in
  --version) printf 'trainrt 0.1.0\n  CUDA       13.0.0 (runtime built in; kernels for 90-real)\n  cuDNN      9.19.0\n  GPU        %s\n' "${KIT_GPU:-available}" ;;
  model) : >"${@: -1}" ;;
  selftest)
    case "$*" in
      *mobile_cnn.onnx*) [ -z "${KIT_MOBILE_OK:-}" ] || { echo "selftest passed"; exit 0; }
                         echo "selftest FAILED: node 'Conv_7' (FusedConv)"; exit 1 ;;
      *"--precision bf16"*) for i in $(seq 300); do echo "bf16 line $i"; done
                            echo "selftest FAILED: node 'c1' (Conv)"; exit 1 ;;
      *"--widths 16,32,64,128 --fp32-math tf32") for i in $(seq 500); do echo "fp32 line $i"; done ;;
    esac
    echo "selftest passed" ;;
  bench)
    case "$*" in *--profile*)
      printf 'images/s: 9000.0 (batch 1024)\n\nprofile over 5 timed steps (kernel time per op type, all steps):\n'
      printf 'op calls total ms %% GFLOP/s\nBatchNormalizationGrad 65 76.5 21.0 -\n'
      exit 0 ;;
    esac
    case "$*" in *"--batch 1024 --precision bf16"*) echo "warming up"; echo $$ >"$KIT_CALLS.hang"; exec sleep 60 ;; esac
    for i in $(seq 100); do echo "E! CuDNN (v91900) function cudnnBackendFinalize() called: error $i" >>"$CUDNN_LOGDEST_DBG"; done
    echo "images/s: 3000.0 (batch $4)"
    echo "ms/step: median 10.7"
    echo "capture: captured at step 2, replayed 20 times"
    echo "fallback: Conv 'input_block/conv' (3x3, C=3): no 16-bit engine for 3 channels; ran fp32 legacy"
    echo "engine: Conv 'block1/layer1/conv' cuDNN eng0 0.10 ms 95.0 TFLOP/s"
    echo "conv TFLOP/s: 88.5" ;;
esac
EOF
cat >"$tmp/bin/python" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$KIT_CALLS"
for point in $(echo "$*" | sed -n 's/.*--points \([^ ]*\).*/\1/p' | tr , ' '); do
  echo "pytorch: batch ${point%%:*} precision ${point##*:} images/s 2000.0 ms/step 16.0 (stand-in)"
done
EOF
chmod +x "$tmp/bin/"*

kit() {  # RESULTS ARGS...: run.sh with the stand-ins; stdout+stderr in RESULTS.out, exit in $rc
  local out=$1
  shift
  env PATH="$tmp/bin:$PATH" LD_LIBRARY_PATH="$tmp/driver" TRAINRT_KIT_DRIVER_DIRS="$tmp/nodriver" \
    TRAINRT_CUDA_LIBS="$tmp/cuda" TRAINRT_KIT_BIN="$tmp/bin/trainrt" TRAINRT_KIT_PYTHON="${KIT_PY:-$tmp/bin/python}" \
    TRAINRT_KIT_RESULTS="$out" TRAINRT_KIT_WORK="$tmp/work" KIT_CALLS="$out.calls" \
    TRAINRT_KIT_T_BENCH="${T_BENCH:-2}" TRAINRT_KIT_MIN_PHASE_S="${MIN_PHASE:-1}" TRAINRT_KIT_POLL_S=0.1 \
    TRAINRT_KIT_BUDGET="${BUDGET:-120}" bash "$run" "$@" >"$out.out" 2>&1
  rc=$?
}
phases() { sed -n 's/^===== \([a-z0-9_]*\): .*(timeout.*/\1/p' "$1/run.log" | paste -sd' ' -; }

# Default mode: every phase in order, a hang cut at its 2 s, a failure kept whole.
start=$SECONDS
kit "$tmp/r1"
took=$((SECONDS - start))
[ "$rc" -eq 1 ] || fail "default run with a failed phase exited $rc, expected 1: $(tail -5 "$tmp/r1.out")"
want="version model selftest_fp32 selftest_bf16 bench_b32_fp32 bench_b1024_bf16 pytorch profile_b1024_bf16 selftest_mobile_cnn_bf16 selftest_mobile_cnn_bf16_wide selftest_mobile_cnn_bf16_nchw bench_b1024_bf16_wide selftest_strict selftest_fp16 selftest_seq_cnn selftest_video_cnn bench_b128_fp32 bench_b128_bf16 pytorch_more"
[ "$(phases "$tmp/r1")" = "$want" ] || fail "default phases: '$(phases "$tmp/r1")', expected '$want'"
[ "$took" -le 12 ] || fail "default run took $took s: the hang cost more than its phase's 2 s timeout"
hung=$(sed -n 's/^===== bench_b1024_bf16: TIMED OUT (limit 2 s), \([0-9]*\) s$/\1/p' "$tmp/r1/run.log")
[ -n "$hung" ] || fail "the hang was not reported as a timeout: $(grep '^===== bench_b1024_bf16' "$tmp/r1/run.log")"
[ "${hung:-99}" -le 3 ] || fail "the hang's phase took ${hung} s, its timeout is 2 s"
grep -q "^warming up" "$tmp/r1/run.log" || fail "the timed-out phase's output is not in run.log"
grep -q "^===== pytorch: ok" "$tmp/r1/run.log" || fail "the phase after the hang did not run"
for i in 1 200 300; do
  grep -qx "bf16 line $i" "$tmp/r1/run.log" || fail "the failed phase's log is not whole: line $i missing"
done
grep -q "^===== selftest_bf16: FAILED (exit 1)" "$tmp/r1/run.log" || fail "selftest_bf16's failure not in run.log"
# The profile phase: per-op table in run.log, its trace written into the results, the
# timing cache of the bench phases reused; not a row of the table.
grep -q "^===== profile_b1024_bf16: ok" "$tmp/r1/run.log" && grep -q "^BatchNormalizationGrad 65 76.5" "$tmp/r1/run.log" ||
  fail "the profile phase or its table is not in run.log: $(grep -A3 '^===== profile' "$tmp/r1/run.log")"
grep -q -- "bench .*--batch 1024 --precision bf16 --steps 5 --timing-cache $tmp/r1/timing-cache.json --profile --trace $tmp/r1/trace_b1024_bf16.json$" "$tmp/r1.calls" ||
  fail "the profile phase's arguments: $(grep -- --profile "$tmp/r1.calls")"
grep -q "^9000.0" "$tmp/r1/summary.txt" && fail "the profile phase's images/s went into the table"
grep -q -- "^selftest [^ ]*/mobile_cnn.onnx --device cuda --precision bf16$" "$tmp/r1.calls" ||
  fail "the default tier does not run mobile_cnn.onnx at bf16: $(grep mobile "$tmp/r1.calls")"
# mobile_cnn's failure: the same selftest with 16-bit storage off and with NCHW, to tell
# which side the fault is on.
grep -q -- "^selftest [^ ]*/mobile_cnn.onnx --device cuda --precision bf16 --narrow-storage off$" "$tmp/r1.calls" &&
  grep -q -- "^selftest [^ ]*/mobile_cnn.onnx --device cuda --precision bf16 --layout nchw$" "$tmp/r1.calls" ||
  fail "mobile_cnn's failure is not followed by the wide and nchw selftests: $(grep mobile "$tmp/r1.calls")"
grep -qx "fp32 line 1" "$tmp/r1/run.log" && grep -qx "fp32 line 500" "$tmp/r1/run.log" ||
  fail "a successful long phase lost its first or last line"
grep -qx "fp32 line 250" "$tmp/r1/run.log" && fail "a successful 500-line phase was kept whole (over 200 lines)"
grep -q "lines of a successful phase left out" "$tmp/r1/run.log" || fail "the cut is not marked"
[ ! -e "$tmp/r1/phase_selftest_fp32.log" ] || fail "a phase's running log was left beside run.log"
# Order of the calls themselves (the stand-ins record them).
grep -n "" "$tmp/r1.calls" | grep -q "^3:selftest --device cuda --widths 16,32,64,128 --fp32-math tf32$" ||
  fail "the fp32 selftest is not the 3rd call with the tensor-core widths and TF32: $(head -5 "$tmp/r1.calls")"
grep -q -- "bench .*--batch 32 --precision fp32 --steps 20 --timing-cache $tmp/r1/timing-cache.json" "$tmp/r1.calls" ||
  fail "bench is not given the timing cache in the results: $(grep bench "$tmp/r1.calls" | head -1)"
# cuDNN's own log: kept bounded, the raw file removed.
grep -q "^----- cudnn's own log (warnings and errors): 100 lines, the first 60" "$tmp/r1/run.log" ||
  fail "cuDNN's log not collected into run.log"
grep -q "error 61$" "$tmp/r1/run.log" && fail "cuDNN's log not bounded to 60 lines"
[ ! -e "$tmp/r1/.lib_cudnn.log" ] || fail "cuDNN's raw log left in the results"

# The summary: phases, the table (ratio = trainrt / PyTorch), each bench's lines.
s=$tmp/r1/summary.txt
grep -q "^GPU: NVIDIA H100 80GB HBM3" "$s" || fail "summary lacks the GPU: $(head -3 "$s")"
grep -Eq "^selftest_bf16 +FAILED \(exit 1\)" "$s" || fail "summary lacks selftest_bf16's failure"
grep -Eq "^batch +precision +trainrt img/s +PyTorch img/s +ratio +seed floor$" "$s" || fail "table header: $(cat "$s")"
grep -Eq "^32 +fp32 +3000.0 +2000.0 +1.50 +2598$" "$s" || fail "fp32 batch 32 row: $(grep '^32 ' "$s")"
grep -Eq "^1024 +bf16 +TIMED OUT +2000.0 +- +9232$" "$s" || fail "bf16 batch 1024 row: $(grep '^1024 ' "$s")"
grep -Eq "^128 +bf16 +3000.0 +2000.0 +1.50 +-$" "$s" || fail "bf16 batch 128 row: $(grep '^128 ' "$s")"
# 16-bit storage off: its own row against the same PyTorch bf16 figure, no floor.
grep -q -- "bench .*--batch 1024 --precision bf16 .*--narrow-storage off$" "$tmp/r1.calls" ||
  fail "bench_b1024_bf16_wide does not turn 16-bit storage off: $(grep -- '--batch 1024' "$tmp/r1.calls")"
grep -Eq "^1024 +bf16-wide +TIMED OUT +2000.0 +- +-$" "$s" || fail "bf16-wide batch 1024 row: $(grep '^1024 ' "$s")"
[ "$(grep -c "^  capture: captured at step 2" "$s")" -eq 3 ] || fail "summary lacks the 3 finished benches' capture: lines"
[ "$(grep -c "^  fallback: Conv 'input_block/conv'" "$s")" -eq 3 ] || fail "summary lacks the fallback: lines"
grep -q "^  conv TFLOP/s: 88.5" "$s" && grep -q "^  engine: Conv" "$s" || fail "summary lacks engine:/conv TFLOP/s: lines"
grep -q "peak GPU memory 2345 MiB" "$s" || fail "summary lacks the sampled GPU memory"
grep -q "^results: $tmp/r1 (" "$tmp/r1.out" || fail "run.sh did not print the results folder and size"
[ "$(du -sk "$tmp/r1" | cut -f1)" -le 1024 ] || fail "results over 1 MiB"

# --quick: the first tier only; --full: everything.
T_BENCH=1 kit "$tmp/r2" --quick
want="version model selftest_fp32 selftest_bf16 bench_b32_fp32 bench_b1024_bf16 pytorch"
[ "$(phases "$tmp/r2")" = "$want" ] || fail "--quick phases: '$(phases "$tmp/r2")', expected '$want'"
grep -q -- "--points 32:fp32,1024:bf16 " "$tmp/r2.calls" || fail "--quick: PyTorch not at the two points"
KIT_MOBILE_OK=1 T_BENCH=1 kit "$tmp/r3" --full
[ "$(phases "$tmp/r3" | tr ' ' '\n' | grep -c '^selftest_mobile_cnn_bf16$')" -eq 1 ] ||
  fail "--full runs mobile_cnn's bf16 selftest other than once: $(phases "$tmp/r3")"
phases "$tmp/r3" | grep -q "selftest_mobile_cnn_bf16_" && fail "diagnostic mobile_cnn selftests ran after a pass"
for p in selftest_nchw selftest_mlp_matmul_fp16 selftest_mobile_cnn_fp16 selftest_video_cnn_fp16 bench_b32_bf16 bench_b1024_fp32 bench_b1024_fp16 pytorch_more; do
  phases "$tmp/r3" | grep -qw "$p" || fail "--full lacks $p: $(phases "$tmp/r3")"
done
phases "$tmp/r3" | grep -q "^version model selftest_fp32 selftest_bf16 bench_b32_fp32 bench_b1024_bf16 pytorch profile_b1024_bf16 selftest_mobile_cnn_bf16 bench_b1024_bf16_wide selftest_strict" ||
  fail "--full does not start with the default order: $(phases "$tmp/r3")"

# The budget: 3 s, a bench timeout of 60: the hang is cut at what is left less the kill
# grace (1 s here), and the PyTorch phase after it is skipped with a line.
start=$SECONDS
BUDGET=3 T_BENCH=60 MIN_PHASE=1 TRAINRT_KIT_GRACE_S=1 kit "$tmp/r4" --quick
took=$((SECONDS - start))
[ "$took" -le 8 ] || fail "a 3 s budget took $took s"
grep -q "^===== bench_b1024_bf16: .*cut by the budget" "$tmp/r4/run.log" || fail "the hang's timeout was not cut by the budget"
grep -q "^skipped: pytorch (budget: " "$tmp/r4/run.log" || fail "no line for the phase skipped by the budget: $(tail -3 "$tmp/r4/run.log")"
grep -Eq "^pytorch +skipped \(budget\)" "$tmp/r4/summary.txt" || fail "summary does not list the skipped phase"

# No python3 with torch: the PyTorch phase is skipped with a line, its column empty.
KIT_PY=/nonexistent/python3 T_BENCH=1 kit "$tmp/r7" --quick
grep -q "^skipped: pytorch (no python3 with torch found" "$tmp/r7/run.log" || fail "no torch: no skip line: $(tail -3 "$tmp/r7/run.log")"
grep -Eq "^32 +fp32 +3000.0 +- +- +2598$" "$tmp/r7/summary.txt" || fail "no torch: table row: $(grep '^32 ' "$tmp/r7/summary.txt")"

# Ended from outside during a phase (an allocation's end, Slurm's SIGTERM): the phase's
# processes are ended, the summary written with the phase marked, exit 1.
env PATH="$tmp/bin:$PATH" LD_LIBRARY_PATH="$tmp/driver" TRAINRT_KIT_DRIVER_DIRS="$tmp/nodriver" \
  TRAINRT_CUDA_LIBS="$tmp/cuda" TRAINRT_KIT_BIN="$tmp/bin/trainrt" TRAINRT_KIT_PYTHON="${KIT_PY:-$tmp/bin/python}" \
  TRAINRT_KIT_RESULTS="$tmp/r8" TRAINRT_KIT_WORK="$tmp/work" KIT_CALLS="$tmp/r8.calls" TRAINRT_KIT_T_BENCH=60 \
  TRAINRT_KIT_POLL_S=0.1 bash "$run" --quick >"$tmp/r8.out" 2>&1 &
kit_pid=$!
for _ in $(seq 100); do [ -s "$tmp/r8.calls.hang" ] && break; sleep 0.1; done
kill -TERM "$kit_pid"
wait "$kit_pid"
rc=$?
[ "$rc" -eq 1 ] || fail "run.sh ended by SIGTERM exited $rc, expected 1"
grep -Eq "^bench_b1024_bf16 +INTERRUPTED" "$tmp/r8/summary.txt" || fail "the interrupted phase is not in the summary: $(cat "$tmp/r8/summary.txt")"
grep -q "^run.sh: interrupted during bench_b1024_bf16" "$tmp/r8/run.log" || fail "run.log does not say where run.sh was ended"
sleep 0.5
hang=$(cat "$tmp/r8.calls.hang" 2>/dev/null)
[ -n "$hang" ] && ! kill -0 "$hang" 2>/dev/null || fail "the interrupted phase's process ${hang:-?} was left running"

# No usable GPU: one line each, exit 2.
KIT_GPU="none (no CUDA device: the driver sees no GPU (cudaErrorNoDevice))" kit "$tmp/r5"
[ "$rc" -eq 2 ] || fail "no device: exit $rc, expected 2"
[ "$(grep -c "^run.sh: " "$tmp/r5.out")" -eq 1 ] &&
  grep -q "^run.sh: no usable GPU: no CUDA device: the driver sees no GPU (cudaErrorNoDevice)$" "$tmp/r5.out" ||
  fail "no device: $(cat "$tmp/r5.out")"
grep -q "libcuda.so.1 (driver): $tmp/driver" "$tmp/r5.out" || fail "the library check does not say where libcuda was found"
grep -q "libnvrtc.so.13: $tmp/cuda" "$tmp/r5.out" || fail "the library check does not say where libnvrtc was found"
grep -q "loader path: .*$tmp/cuda.*:$tmp/driver" "$tmp/r5.out" || fail "the loader path lacks CUDA's or the driver's folder"
env PATH="$tmp/bin:$PATH" TRAINRT_KIT_DRIVER_DIRS="$tmp/nodriver" TRAINRT_CUDA_LIBS="$tmp/cuda" \
  TRAINRT_KIT_BIN="$tmp/bin/trainrt" TRAINRT_KIT_RESULTS="$tmp/r6" KIT_CALLS="$tmp/r6.calls" LD_LIBRARY_PATH= \
  bash "$run" >"$tmp/r6.out" 2>"$tmp/r6.err"
rc=$?
[ "$rc" -eq 2 ] || fail "no driver: exit $rc, expected 2"
[ "$(wc -l <"$tmp/r6.err")" -eq 1 ] && grep -q "^run.sh: no usable GPU: no NVIDIA driver: libcuda.so.1 not found" "$tmp/r6.err" ||
  fail "no driver: $(cat "$tmp/r6.err")"
grep -q "libcuda.so.1 (driver): not found" "$tmp/r6.out" || fail "no driver: the library check does not say so"
[ ! -e "$tmp/r6.calls" ] || fail "no driver: trainrt was started anyway"

# The PyTorch script itself (tools/bench_pytorch_gpu.py): its arguments everywhere; a
# tiny CPU run where a python3 with torch is installed.
python3 "$src/tools/bench_pytorch_gpu.py" --help >/dev/null || fail "bench_pytorch_gpu.py --help failed"
python3 "$src/tools/bench_pytorch_gpu.py" --points 32:fp8 >/dev/null 2>&1
[ $? -eq 2 ] || fail "bench_pytorch_gpu.py --points 32:fp8 was not refused"
torch_py=
for p in python3 /usr/bin/python3 /opt/*/.venv/bin/python3; do
  command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' 2>/dev/null && { torch_py=$p; break; }
done
if [ -z "$torch_py" ]; then
  echo "skipped: bench_pytorch_gpu.py's tiny CPU run: no python3 with torch here"
else
  # Without the suite's ONEDNN_MAX_CPU_ISA (setup.sh's second pass on an AVX-512 CPU caps
  # trainrt's oneDNN at AVX2): PyTorch reads it too, and its bf16 autocast, chosen from the
  # CPU's own flags, then finds no bf16 convolution in AVX2 oneDNN.
  env -u ONEDNN_MAX_CPU_ISA "$torch_py" "$src/tools/bench_pytorch_gpu.py" --device cpu --points 2:fp32,2:bf16 --steps 1 --warmup 0 \
    --widths small --threads 1 >"$tmp/torch.out" 2>&1 || fail "bench_pytorch_gpu.py tiny run: $(tail -3 "$tmp/torch.out")"
  for p in fp32 bf16; do
    grep -Eq "^pytorch: batch 2 precision $p images/s [0-9.]+ ms/step" "$tmp/torch.out" ||
      fail "bench_pytorch_gpu.py: no $p line run.sh can read: $(cat "$tmp/torch.out")"
  done
fi
exit $((fails > 0))
