#!/usr/bin/env bash
# Packs a CUDA build of trainrt into one folder (within 60 MiB) that runs on a GPU node with
# no build tools and no package registry: the stripped binary, the non-CUDA shared
# libraries it needs, the dynamic loader and C/C++ runtime it was built with, run.sh
# (tools/gpu_run.sh), the PyTorch baseline (tools/bench_pytorch_gpu.py with the
# bench_pytorch.py and wrn_reference.py it imports) and the selftest models of tests/data.
#
#   bash tools/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]     # default: build, build/gpu-bundle
#   OUT_DIR/run.sh [--quick|--full]  # on the GPU node: library check, selftests, trainrt
#                                    # against PyTorch, fallbacks; within 6 minutes (run.sh's
#                                    # header has the phases); results in OUT_DIR/results
#   OUT_DIR/run.sh trainrt ARGS      # any trainrt command through the carried loader
#   OUT_DIR/run.sh cudnn-conv ARGS   # every cuDNN engine config for the Wide ResNet's convolutions, timed
#
# CUDA's own libraries (cudart, cuBLASLt, cuDNN, NCCL, nvrtc) and the driver's libcuda are
# not carried: they are hundreds of MB and must match the node's driver. run.sh finds them
# on the node: in TRAINRT_CUDA_LIBS (a colon list of folders) if set, else in the nvidia-*
# wheels of an installed PyTorch (any python3 on PATH or /opt/*/.venv), else
# /usr/local/cuda; libcuda in LD_LIBRARY_PATH, the driver's usual folders or ld.so's cache.
# The bundle carries glibc and libstdc++ and starts trainrt through the carried
# ld-linux, so a node whose C library is older than the build machine's still runs it.
# The seed's Wide ResNet (68 MB of weights) is written on the node by `trainrt model`.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
out=${2:-$build/gpu-bundle}
limit_mib=60
bin="$build/trainrt"
[ -x "$bin" ] || { echo "gpu_bundle: $bin not found: build first (tools/setup.sh)" >&2; exit 2; }
ldd "$bin" | grep 'libcudart' >/dev/null || { echo "gpu_bundle: $bin was built without CUDA (TRAINRT_CUDA=ON needs nvcc)" >&2; exit 2; }

rm -rf "$out.tmp"
mkdir -p "$out.tmp/lib"
strip -o "$out.tmp/trainrt" "$bin"

# Every shared library ldd resolves, except CUDA's (found on the node) and the vdso.
cuda_re='lib(cudart|cublasLt|cublas|cudnn[a-z_]*|nccl|cuda|nvrtc|nvJitLink)\.so'
loader=
while read -r name arrow path _; do
  if [ "$arrow" != "=>" ]; then  # the loader line: /lib64/ld-linux-x86-64.so.2 (0x...)
    case "$name" in */ld-linux*) loader=$name ;; esac
    continue
  fi
  [[ "$name" =~ $cuda_re ]] && continue
  [ -f "$path" ] && cp -L "$path" "$out.tmp/lib/$name"
done < <(ldd "$bin")
[ -n "$loader" ] || { echo "gpu_bundle: ldd named no dynamic loader for $bin" >&2; exit 2; }
cp -L "$loader" "$out.tmp/lib/ld-linux.so"
strip --strip-unneeded "$out.tmp"/lib/*.so* 2>/dev/null || true

# The cuDNN engine probe (bench/cudnn_conv.cpp), where the build has it: run.sh cudnn-conv ARGS.
probe="$build/bench/trainrt_bench_cudnn_conv"
[ -x "$probe" ] && strip -o "$out.tmp/cudnn_conv" "$probe"
cp tools/gpu_run.sh "$out.tmp/run.sh"
chmod +x "$out.tmp/run.sh"
cp tests/data/mlp_matmul.onnx "$out.tmp/"  # run.sh's selftest of the matrix products (MatMul, Gemm)
cp tests/data/mobile_cnn.onnx "$out.tmp/"  # and of the mobile networks' blocks (depthwise, SE, shuffle, SiLU)
cp tests/data/seq_cnn.onnx "$out.tmp/"     # and of 1-D convolutions (run as 2-D over a unit height)
cp tests/data/video_cnn.onnx "$out.tmp/"   # and of 3-D convolutions (cuDNN's N-d descriptors)
cp tools/bench_pytorch_gpu.py tools/bench_pytorch.py tools/wrn_reference.py "$out.tmp/"  # PyTorch on the same GPU
"$bin" --version >"$out.tmp/BUILD"
# `trainrt --version` names the GPU architectures the kernels were compiled for: setup.sh
# test without a GPU compiles sm_90 only (H100/H200), TRAINRT_CUDA=ON setup.sh main three.
sed -n 's/.*(runtime built in; \(kernels for [^)]*\)).*/gpu_bundle: \1/p' "$out.tmp/BUILD"

size_kib=$(du -sk "$out.tmp" | cut -f1)
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu_bundle: $out is $((size_kib / 1024)) MiB, over the ${limit_mib} MiB limit" >&2
  du -sk "$out.tmp"/* "$out.tmp"/lib/* | sort -n | tail -5 >&2
  rm -rf "$out.tmp"
  exit 1
fi
rm -rf "$out"
mv "$out.tmp" "$out"
echo "gpu_bundle: $out ($((size_kib / 1024)) MiB): run $out/run.sh on the GPU node"
