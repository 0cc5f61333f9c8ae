#!/usr/bin/env bash
# Set-up entry point used by the README's two commands and by CI.
#
#   bash tools/setup.sh main   # install, build, run the main job
#   bash tools/setup.sh test   # install, build, run every test (what .ci/run does)
#
# Runs as root on a fresh Debian 12 machine: packages come from Debian only
# (CUDA, when present, from /usr/local/cuda). Re-running is cheap: apt skips
# installed packages and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
  main|test) ;;
  *) echo "usage: bash tools/setup.sh main|test" >&2; exit 2 ;;
esac

BUILD_DIR=${TRAINRT_BUILD_DIR:-build}
JOBS=${TRAINRT_JOBS:-$(nproc)}

install_packages() {
  local pkgs=(
    cmake ninja-build g++ pkg-config
    libonnx-dev libprotobuf-dev protobuf-compiler
    libtbb-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers
    doctest-dev libopenmpi-dev openmpi-bin zlib1g-dev nlohmann-json3-dev
    libjpeg62-turbo-dev libpng-dev  # image-folder datasets: JPEG and PNG decoding (launch/image.cpp)
    dataset-fashion-mnist gnuplot-nox
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
  local cuda=OFF
  [ -x /usr/local/cuda/bin/nvcc ] && cuda=ON
  echo "== configuring ($BUILD_DIR, CUDA $cuda)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINRT_CUDA=$cuda >/dev/null
  echo "== building"
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

# ONNX Runtime (PyPI) checks exported models; Debian has no package of it. Installed
# without dependencies into the build folder so Debian's numpy/onnx stay in use.
install_python_deps() {
  local target="$BUILD_DIR/pydeps"
  [ -d "$target/onnxruntime" ] && return 0
  echo "== installing onnxruntime into $target"
  /usr/bin/python3 -m pip install -q --no-deps --target "$target" "onnxruntime==1.31.1"
}

install_packages
build
[ "$mode" = test ] && install_python_deps

if [ "$mode" = test ]; then
  # The cpu backend's paths depend on the CPU (oneDNN's ISA): AVX-512 brings blocked
  # layouts, Winograd and bf16, AVX2 has none of them. The log names what each pass
  # exercised; on an AVX-512 CPU the suite runs again on oneDNN's AVX2 kernels
  # (ONEDNN_MAX_CPU_ISA=AVX2), so one green run covers both kinds of CI machine.
  echo "== lint (clang-format over every C++ file, clang-tidy over the core: tools/ci_lint.sh)"
  BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" bash tools/ci_lint.sh
  paths=$("$BUILD_DIR/trainrt" --version | sed -n 's/^  cpu *//p')
  echo "== testing on this CPU's paths: $paths (labels: cpu; gpu tests need a GPU: trainrt selftest --device cuda)"
  ctest --test-dir "$BUILD_DIR" --output-on-failure -LE gpu -j "$JOBS"
  case "$paths" in
    *"blocked layouts on"*)
      paths=$(ONEDNN_MAX_CPU_ISA=AVX2 "$BUILD_DIR/trainrt" --version | sed -n 's/^  cpu *//p')
      echo "== testing again on oneDNN's AVX2 paths: $paths"
      ONEDNN_MAX_CPU_ISA=AVX2 ctest --test-dir "$BUILD_DIR" --output-on-failure -LE gpu -j "$JOBS" ;;
    *) echo "== this CPU has no AVX-512: blocked layouts, Winograd and bf16 were not exercised" ;;
  esac
  # Fuzzing of the readers, the whole suite under ASan+UBSan, TSan over the pipeline,
  # executor and kernels (docs/reliability.md: phases and time budget);
  # TRAINRT_RELIABILITY=0 skips them for a quick local check.
  [ "${TRAINRT_RELIABILITY:-1}" = 0 ] || bash tools/ci_reliability.sh
else
  bash tools/main_job.sh "$BUILD_DIR"
fi
