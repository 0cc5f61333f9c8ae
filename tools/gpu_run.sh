#!/usr/bin/env bash
# The GPU bundle's entry point (packed as run.sh by tools/gpu_bundle.sh).
#
#   ./run.sh                     selftest --device cuda (fp32, bf16, fp16; fp32 also with --layout nchw;
#                                and of mlp_matmul.onnx's matrix products and mobile_cnn.onnx's
#                                depthwise, squeeze-and-excitation and shuffle blocks), then the seed's Wide ResNet
#                                (CIFAR-100 shape) benchmarked at batch 32, 128, 1024
#   ./run.sh trainrt ARGS...     any trainrt command through the bundle's loader
#   ./run.sh libs                where each CUDA library was found
#
# Environment: TRAINRT_CUDA_LIBS  folders (colon list) holding libcudart.so.13,
#              libcublasLt.so.13, libcudnn*.so.9, libnccl.so.2; searched first.
#              BENCH_BATCHES       default "32 128 1024"; BENCH_STEPS default 20.
# Results: a summary table on stdout and every log under ./results/.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
needed=(libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2)

# Candidate folders: the user's, then every nvidia wheel of every python3 we can see,
# then the toolkit's.
candidates() {
  local IFS=:
  for d in ${TRAINRT_CUDA_LIBS:-}; do echo "$d"; done
  local py
  for py in python3 /opt/*/.venv/bin/python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    "$py" - 2>/dev/null <<'EOF'
import site, sys, os
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

cuda_path=
missing=()
find_libs() {
  local dirs lib d found
  mapfile -t dirs < <(candidates | awk '!seen[$0]++')
  for lib in "${needed[@]}"; do
    found=
    for d in "${dirs[@]}"; do
      if [ -e "$d/$lib" ]; then found=$d; break; fi
    done
    if [ -n "$found" ]; then
      case ":$cuda_path:" in *":$found:"*) ;; *) cuda_path=${cuda_path:+$cuda_path:}$found ;; esac
      echo "  $lib: $found"
    else
      missing+=("$lib")
      echo "  $lib: not found"
    fi
  done
}

run_trainrt() {
  "$here/lib/ld-linux.so" --library-path "$cuda_path:$here/lib" "$here/trainrt" "$@"
}

echo "== CUDA libraries"
find_libs
if [ ${#missing[@]} -gt 0 ]; then
  echo "run.sh: missing ${missing[*]}: set TRAINRT_CUDA_LIBS to the folders that hold them" >&2
  [ "${1:-}" = libs ] || exit 2
fi
case "${1:-}" in
  libs) exit 0 ;;
  trainrt) shift; run_trainrt "$@"; exit $? ;;
  "") ;;
  *) echo "usage: run.sh [trainrt ARGS... | libs]" >&2; exit 2 ;;
esac

results="$here/results"
mkdir -p "$results"
echo "== trainrt --version"
run_trainrt --version | tee "$results/version.txt"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
  tee "$results/gpu.txt"

echo "== selftest --device cuda"
run_trainrt selftest --device cuda 2>&1 | tee "$results/selftest.log"
selftest=${PIPESTATUS[0]}
echo "selftest exit $selftest"
if grep -q "no usable GPU" "$results/selftest.log"; then
  echo "run.sh: no usable GPU on this node: nothing to benchmark" >&2
  exit 2
fi
for prec in bf16 fp16; do  # node by node against the reference's rounding
  echo "== selftest --device cuda --precision $prec"
  run_trainrt selftest --device cuda --precision "$prec" 2>&1 | tee "$results/selftest_$prec.log"
  rc=${PIPESTATUS[0]}
  echo "selftest --precision $prec exit $rc"
  [ "$rc" -eq 0 ] || selftest=$rc
done
echo "== selftest --device cuda --layout nchw"  # the plain layout, to tell an NHWC kernel's fault apart
run_trainrt selftest --device cuda --layout nchw 2>&1 | tee "$results/selftest_nchw.log"
rc=${PIPESTATUS[0]}
echo "selftest --layout nchw exit $rc"
[ "$rc" -eq 0 ] || selftest=$rc

# Kernels the Wide ResNet leaves out: the matrix products (batched and broadcast MatMul,
# Gemm), and the mobile networks' blocks (biased Conv+ReLU, depthwise Conv, HardSwish,
# squeeze-and-excitation, SiLU, Concat, channel shuffle, Max/AveragePool).
for model in mlp_matmul mobile_cnn; do
  for prec in fp32 bf16 fp16; do
    echo "== selftest $model.onnx --device cuda --precision $prec"
    run_trainrt selftest "$here/$model.onnx" --device cuda --precision "$prec" 2>&1 |
      tee "$results/selftest_${model}_$prec.log"
    rc=${PIPESTATUS[0]}
    echo "selftest $model.onnx --precision $prec exit $rc"
    [ "$rc" -eq 0 ] || selftest=$rc
  done
done

model="$results/wrn_cifar100.onnx"
[ -f "$model" ] || run_trainrt model wrn --dataset cifar100 -o "$model" >/dev/null || exit 1
echo "== bench --device cuda"
printf '%-6s %-5s %10s %10s %s\n' batch prec images/s ms/step "GPU memory used (nvidia-smi, peak)" | tee "$results/summary.txt"
for batch in ${BENCH_BATCHES:-32 128 1024}; do
  for prec in fp32 bf16 fp16; do  # the precisions `trainrt bench --precision` takes
    log="$results/bench_b${batch}_${prec}.log"
    run_trainrt bench "$model" --device cuda --batch "$batch" --precision "$prec" --steps "${BENCH_STEPS:-20}" \
      >"$log" 2>&1 &
    pid=$!
    peak=0
    while kill -0 "$pid" 2>/dev/null; do  # the GPU's memory in use, sampled while the run lasts
      used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
      [ "${used:-0}" -gt "$peak" ] 2>/dev/null && peak=$used
      sleep 0.5
    done
    wait "$pid"
    rc=$?
    if [ $rc -ne 0 ]; then
      if grep -q -- "--precision" "$log"; then  # the cuda backend refuses a precision it lacks
        printf '%-6s %-5s %s\n' "$batch" "$prec" "not in this build: $(tail -1 "$log")" | tee -a "$results/summary.txt"
      else
        printf '%-6s %-5s %s\n' "$batch" "$prec" "FAILED (exit $rc): $(tail -1 "$log")" | tee -a "$results/summary.txt"
      fi
      continue
    fi
    ips=$(sed -n 's/^images\/s: \([0-9.]*\).*/\1/p' "$log")
    ms=$(sed -n 's/^ms\/step: median \([0-9.]*\).*/\1/p' "$log")
    printf '%-6s %-5s %10s %10s %s MiB\n' "$batch" "$prec" "${ips:-?}" "${ms:-?}" "$peak" | tee -a "$results/summary.txt"
  done
done
exit "$selftest"
