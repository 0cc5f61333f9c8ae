#!/usr/bin/env bash
# Set-up entry point used by the README's two commands and by CI.
#
#   bash tools/setup.sh main   # install, build trainrt, run the main job
#   bash tools/setup.sh test   # install, build everything, run every test (what .ci/run does)
#
# Runs as root on a fresh Debian 12 machine: packages come from Debian only
# (CUDA, when present, from /usr/local/cuda). Re-running is cheap: apt skips
# installed packages, the build is incremental and every compile goes through ccache,
# so a second build folder or a fresh clone reuses what is unchanged.
#
# What each mode builds (docs/reliability.md, "Build time", has the measured times):
#   main  the trainrt target only. The cuda backend only where it can run (a GPU is
#         visible: nvidia-smi lists one or /dev/nvidia0 exists; compiled for that GPU)
#         or when asked (TRAINRT_CUDA=ON: sm_75, sm_80, sm_90 as for a GPU bundle);
#         TRAINRT_CUDA=OFF never builds it.
#   test  every target, the cuda backend included whenever the toolkit is installed:
#         it is the compile check (warnings are errors) of code no CI machine can run,
#         so without a GPU it is compiled for one architecture (sm_90, machine code, so
#         ptxas runs too) instead of three.
# The last line gives the time each phase took.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
  main|test) ;;
  *) echo "usage: bash tools/setup.sh main|test" >&2; exit 2 ;;
esac

BUILD_DIR=${TRAINRT_BUILD_DIR:-build}
JOBS=${TRAINRT_JOBS:-$(nproc)}
case "${TRAINRT_CUDA:-AUTO}" in
  AUTO|ON|OFF) ;;
  *) echo "setup.sh: TRAINRT_CUDA=${TRAINRT_CUDA} (expected AUTO, ON or OFF)" >&2; exit 2 ;;
esac

# Phase times: each phase appends "name seconds" to $TRAINRT_PHASE_LOG, which
# tools/ci_reliability.sh writes to as well; the table is printed at the end.
setup_start=$(date +%s)
export TRAINRT_PHASE_LOG=${TRAINRT_PHASE_LOG:-$(mktemp)}
: >"$TRAINRT_PHASE_LOG"
phase_start=0
phase_begin() { phase_start=$(date +%s); }
phase_end() { printf '%-32s %5d s\n' "$1" $(($(date +%s) - phase_start)) >>"$TRAINRT_PHASE_LOG"; }
print_phases() {
  local rc=$?
  echo "== setup.sh $mode: phases"
  sed 's/^/   /' "$TRAINRT_PHASE_LOG"
  echo "== setup.sh $mode: $([ $rc -eq 0 ] && echo done || echo "FAILED (exit $rc)") in $(($(date +%s) - setup_start)) s on $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
}
trap print_phases EXIT

gpu_visible() {
  { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; } || [ -e /dev/nvidia0 ]
}

install_packages() {
  local pkgs=(
    cmake ninja-build g++ pkg-config
    libonnx-dev libprotobuf-dev protobuf-compiler
    libtbb-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers
    doctest-dev libopenmpi-dev openmpi-bin zlib1g-dev nlohmann-json3-dev
    libjpeg62-turbo-dev libpng-dev  # image-folder datasets: JPEG and PNG decoding (datasets/image.cpp)
    dataset-fashion-mnist gnuplot-nox
    ccache  # the compiler launcher of every build folder (cmake/ccache.cmake)
  )
  if [ "$mode" = test ]; then
    # Conformance data, onnx.checker and PyTorch reference scripts.
    # The fuzz and ASan+UBSan build is clang 16's (libFuzzer; clang 14 cannot compile the tests).
    pkgs+=(libonnx-testdata python3-onnx python3-numpy python3-torch python3-torchvision python3-pip
      clang-16 libclang-rt-16-dev libomp-16-dev llvm-16  # clang 16: sanitizer runtimes, OpenMP, llvm-symbolizer (tools/ci_reliability.sh)
      python3-pil  # tests/cli/train_imagefolder.sh and fuzz/make_corpus.py write JPEG/PNG files
      slurm-wlm munge  # multi-rank tests launch with srun on a one-host Slurm (tools/slurm_local.sh)
      clang-format clang-tidy)  # tools/ci_lint.sh: the committed .clang-format and .clang-tidy
  fi
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

build() {
  local cuda=OFF archs=() targets=()
  if [ -x /usr/local/cuda/bin/nvcc ] && [ "${TRAINRT_CUDA:-AUTO}" != OFF ]; then
    if gpu_visible; then
      cuda=ON archs=(-DCMAKE_CUDA_ARCHITECTURES=native)
    elif [ "$mode" = test ]; then
      cuda=ON archs=(-DCMAKE_CUDA_ARCHITECTURES=90-real)
    elif [ "${TRAINRT_CUDA:-AUTO}" = ON ]; then
      cuda=ON archs=(-UCMAKE_CUDA_ARCHITECTURES)  # cmake/cuda.cmake's list
    fi
  elif [ "${TRAINRT_CUDA:-AUTO}" = ON ]; then
    echo "setup.sh: TRAINRT_CUDA=ON but /usr/local/cuda/bin/nvcc is missing" >&2
    exit 2
  fi
  [ "$mode" = main ] && targets=(--target trainrt)
  echo "== configuring ($BUILD_DIR, CUDA $cuda${archs:+ ${archs[*]}})"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINRT_CUDA=$cuda "${archs[@]}" >/dev/null
  echo "== building ${targets[*]:-everything}"
  cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
}

# ONNX Runtime (PyPI) checks exported models, lizard measures the functions' length
# (tools/ci_lint.sh); Debian has no package of either. Installed without dependencies
# into the build folder so Debian's numpy/onnx stay in use.
install_python_deps() {
  local target="$BUILD_DIR/pydeps"
  if [ ! -d "$target/onnxruntime" ]; then
    echo "== installing onnxruntime into $target"
    /usr/bin/python3 -m pip install -q --no-deps --target "$target" "onnxruntime==1.31.1"
  fi
  if [ ! -d "$target/lizard_languages" ]; then
    echo "== installing lizard into $target"
    /usr/bin/python3 -m pip install -q --no-deps --target "$target" "lizard==1.21.2"
  fi
}

phase_begin
install_packages
phase_end "packages (apt)"
phase_begin
build
phase_end "build ($mode)"
if [ "$mode" = test ]; then
  phase_begin
  install_python_deps
  phase_end "onnxruntime, lizard (pip)"
fi

if [ "$mode" = test ]; then
  # The cpu backend's paths depend on the CPU (oneDNN's ISA): AVX-512 brings blocked
  # layouts, Winograd and bf16, AVX2 has none of them. The log names what each pass
  # exercised; on an AVX-512 CPU the suite runs again on oneDNN's AVX2 kernels
  # (ONEDNN_MAX_CPU_ISA=AVX2: the kernel-dependent tests), so one green run covers both
  # kinds of CI machine.
  echo "== lint (clang-format over every C++ file, clang-tidy over the core: tools/ci_lint.sh)"
  phase_begin
  BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" bash tools/ci_lint.sh
  phase_end "lint"
  paths=$("$BUILD_DIR/trainrt" --version | sed -n 's/^  cpu *//p')
  echo "== testing on this CPU's paths: $paths (labels: cpu; gpu tests need a GPU: trainrt selftest --device cuda)"
  phase_begin
  ctest --test-dir "$BUILD_DIR" --output-on-failure -LE gpu -j "$JOBS"
  phase_end "ctest (${paths%%:*})"
  case "$paths" in
    *"blocked layouts on"*)
      paths=$(ONEDNN_MAX_CPU_ISA=AVX2 "$BUILD_DIR/trainrt" --version | sed -n 's/^  cpu *//p')
      # Only the tests whose results depend on the kernels (label kernels,
      # tests/CMakeLists.txt), and not the slow torchvision models, which an AVX2 CI
      # machine runs in full.
      echo "== testing again on oneDNN's AVX2 paths: $paths (label kernels, not slow)"
      phase_begin
      ONEDNN_MAX_CPU_ISA=AVX2 ctest --test-dir "$BUILD_DIR" --output-on-failure -L kernels -LE "gpu|slow" -j "$JOBS"
      phase_end "ctest (ONEDNN_MAX_CPU_ISA=AVX2)" ;;
    *) echo "== this CPU has no AVX-512: oneDNN's blocked layouts, Winograd and bf16 were not exercised (trainrt's own AVX2 Winograd was)" ;;
  esac
  # Fuzzing of the readers, the whole suite under ASan+UBSan, TSan over the pipeline,
  # executor and kernels (docs/reliability.md: phases and time budget);
  # TRAINRT_RELIABILITY=0 skips them for a quick local check.
  [ "${TRAINRT_RELIABILITY:-1}" = 0 ] || bash tools/ci_reliability.sh
else
  phase_begin
  bash tools/main_job.sh "$BUILD_DIR"
  phase_end "main job"
fi
