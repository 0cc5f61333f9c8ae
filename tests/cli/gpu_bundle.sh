#!/usr/bin/env bash
# The GPU bring-up bundle (tools/gpu_bundle.sh) on this machine, which has no GPU: it
# packs within its 60 MiB with the PyTorch baseline, and the carried loader and libraries
# start the carried trainrt: its version, a cpu selftest through run.sh, and run.sh's
# library check and one-line refusal of a node without a GPU (exit 2). Only a CUDA build
# makes a bundle; otherwise this says so.
set -u
trainrt=$1
src=$2
source "$src/tests/cli/common.bash"
if ! ldd "$trainrt" | grep libcudart >/dev/null; then
  echo "skipped: $trainrt is not a CUDA build (tools/gpu_bundle.sh needs one)"
  exit 0
fi
bundle="$tmp/bundle"
bash "$src/tools/gpu_bundle.sh" "$(dirname "$trainrt")" "$bundle" >"$tmp/pack.log" 2>&1 || fail "gpu_bundle.sh: $(cat "$tmp/pack.log")"
size=$(du -sk "$bundle" | cut -f1)
[ "$size" -le $((60 * 1024)) ] || fail "bundle is $size KiB, over 60 MiB"
[ -x "$bundle/lib/ld-linux.so" ] || fail "bundle carries no dynamic loader"
ls "$bundle"/lib | grep -q 'libcud\|libnccl\|libcublas' && fail "bundle carries CUDA libraries: $(ls "$bundle/lib")"

export TRAINRT_CUDA_LIBS=/usr/local/cuda/lib64:/usr/local/cuda/lib
"$bundle/run.sh" libs >"$tmp/libs.log" 2>&1 || fail "run.sh libs: $(cat "$tmp/libs.log")"
grep -q "libcudnn.so.9: /usr/local/cuda" "$tmp/libs.log" || fail "run.sh did not find cuDNN in TRAINRT_CUDA_LIBS: $(cat "$tmp/libs.log")"
"$bundle/run.sh" trainrt --version >"$tmp/version.log" 2>&1 || fail "bundled trainrt --version: $(cat "$tmp/version.log")"
grep -q "^trainrt " "$tmp/version.log" || fail "bundled --version printed no version: $(cat "$tmp/version.log")"
# The cuDNN engine probe (bench/cudnn_conv.cpp), carried and started through the bundle's
# loader: its usage, a bad flag, and without a GPU one line saying so.
[ -x "$bundle/cudnn_conv" ] || fail "bundle carries no cudnn_conv (bench/cudnn_conv.cpp)"
"$bundle/run.sh" cudnn-conv --help 2>&1 | grep -q '^usage: cudnn_conv' || fail "run.sh cudnn-conv --help printed no usage"
"$bundle/run.sh" cudnn-conv --dtype int8 >/dev/null 2>"$tmp/probe_flag.err"
rc=$?
[ "$rc" -eq 2 ] && grep -q '^cudnn_conv: --dtype: expected bf16, fp16 or fp32' "$tmp/probe_flag.err" ||
  fail "run.sh cudnn-conv --dtype int8 exited $rc: $(cat "$tmp/probe_flag.err")"
"$bundle/run.sh" cudnn-conv --batch 8 >/dev/null 2>"$tmp/probe.err"
rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/probe.err")" -eq 1 ] && grep -q '^cudnn_conv: cudnnCreate failed' "$tmp/probe.err" ||
  fail "run.sh cudnn-conv without a GPU exited $rc: $(cat "$tmp/probe.err")"
# The carried libraries run real work: the cpu kernels against the reference backend.
"$bundle/run.sh" trainrt selftest --widths 4,4,4,4 --batch 2 >"$tmp/selftest.log" 2>&1 ||
  fail "bundled selftest --device cpu: $(tail -3 "$tmp/selftest.log")"
for model in mlp_matmul mobile_cnn seq_cnn video_cnn; do
  "$bundle/run.sh" trainrt selftest "$bundle/$model.onnx" >"$tmp/selftest_$model.log" 2>&1 ||
    fail "bundled selftest of $model.onnx: $(tail -3 "$tmp/selftest_$model.log")"
done
# This machine has no GPU: run.sh prints the library check (libcuda and libnvrtc among
# it) and stops with one line saying why, exit 2.
"$bundle/run.sh" >"$tmp/run.log" 2>"$tmp/run.err"
rc=$?
[ "$rc" -eq 2 ] || fail "run.sh without a GPU exited $rc, expected 2"
[ "$(wc -l <"$tmp/run.err")" -eq 1 ] || fail "run.sh without a GPU printed $(wc -l <"$tmp/run.err") lines on stderr: $(cat "$tmp/run.err")"
grep -q "^run.sh: no usable GPU: " "$tmp/run.err" || fail "run.sh without a GPU: $(cat "$tmp/run.err")"
for lib in libcudart.so.13 libcudnn.so.9 libnvrtc.so.13 "libcuda.so.1 (driver)"; do
  grep -q "^  $lib: " "$tmp/run.log" || fail "run.sh's library check does not name $lib: $(cat "$tmp/run.log")"
done
# A libcuda.so.1 that run.sh finds but that does not load (here an empty file): the
# carried trainrt starts under its phase's timeout, and its reason is run.sh's one line.
mkdir -p "$tmp/fakedriver"
: >"$tmp/fakedriver/libcuda.so.1"
TRAINRT_KIT_DRIVER_DIRS="$tmp/fakedriver" TRAINRT_KIT_RESULTS="$tmp/results" "$bundle/run.sh" >"$tmp/run2.log" 2>"$tmp/run2.err"
rc=$?
[ "$rc" -eq 2 ] || fail "run.sh with a driver that does not load exited $rc, expected 2: $(cat "$tmp/run2.err")"
[ "$(wc -l <"$tmp/run2.err")" -eq 1 ] && grep -q "^run.sh: no usable GPU: no NVIDIA driver: libcuda.so.1 not found by the loader, or it did not load" "$tmp/run2.err" ||
  fail "run.sh with a driver that does not load: $(cat "$tmp/run2.err")"
grep -q "^===== version: ok" "$tmp/results/run.log" || fail "the version phase did not run the carried trainrt: $(cat "$tmp/results/run.log")"
for f in bench_pytorch_gpu.py bench_pytorch.py wrn_reference.py; do
  [ -f "$bundle/$f" ] || fail "bundle lacks $f (the PyTorch baseline)"
done
exit $((fails > 0))
