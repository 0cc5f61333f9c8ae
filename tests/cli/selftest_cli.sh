#!/usr/bin/env bash
# trainrt selftest: the cpu backend passes against the reference backend (the built-in
# Wide ResNet, and a model file); a tolerance no
# fp32 kernel meets fails naming the first node (exit 1) -- the comparison can fail;
# bad flags are one-line errors. --device cuda: on a machine without a GPU (CI) it is a
# one-line Unsupported error (exit 2) from selftest and from train, never a crash; where
# a GPU exists the gpu-labelled tests (tests/gpu/) run it for real.
set -u
trainrt=$1
src=$2
source "$src/tests/cli/common.bash"

"$trainrt" selftest --device cpu >"$tmp/out" 2>"$tmp/err" || fail "selftest --device cpu exited $?: $(cat "$tmp/err")"
grep -q "^selftest passed" "$tmp/out" || fail "selftest --device cpu: no 'selftest passed': $(cat "$tmp/out")"
# Every node of the forward pass, of training step 1 and of step 3 (from the state two
# steps left) reruns alone on the reference on the device's own inputs (whole runs of a
# deep network drift apart: tests/launch/test_selftest_compare.cpp has the comparison).
for what in "forward (inference, node by node)" "training step 1 (node by node)" "training step 3 (node by node)"; do
  grep -F "$what" "$tmp/out" | grep -q " ok$" || fail "selftest --device cpu: '$what' not ok: $(cat "$tmp/out")"
done
# Every value of the training step is compared (forward, backward and optimizer nodes).
n=$(grep -F "training step 1 (node by node)" "$tmp/out" | awk '{print $7}')
[ "${n:-0}" -gt 200 ] || fail "selftest compared only ${n:-0} values of the training step"
# The default tolerance follows the arithmetic (launch/selftest_compare.h; the values per
# precision and TF32 are checked in tests/launch/test_selftest_compare.cpp) and is said.
grep -q "^  tolerance 0.0001 (derived from the arithmetic)$" "$tmp/out" ||
  fail "selftest does not say its derived fp32 tolerance: $(grep tolerance "$tmp/out")"
"$trainrt" selftest --help | grep -q "bf16 u(bf16)/8 = 0.00049" || fail "selftest --help does not say how the tolerance is derived"

# bf16/fp16 the same way, in that precision.
# fp16 is emulated on every CPU; bf16 runs where the CPU has AVX-512 BF16, else refused.
precisions=fp16
if grep -q avx512_bf16 /proc/cpuinfo && [ -z "${ONEDNN_MAX_CPU_ISA:-}" ]; then precisions="fp16 bf16"; else
  expect_error 2 "AVX-512 BF16" -- "$trainrt" selftest --device cpu --precision bf16
fi
for p in $precisions; do
  "$trainrt" selftest --device cpu --precision "$p" >"$tmp/out" 2>"$tmp/err" || fail "selftest --precision $p exited $?: $(cat "$tmp/err")"
  grep -q "^selftest passed" "$tmp/out" || fail "selftest --precision $p: no 'selftest passed': $(cat "$tmp/out")"
  n=$(grep -F "training step 1 (node by node)" "$tmp/out" | grep " ok$" | awk '{print $7}')
  [ "${n:-0}" -gt 200 ] || fail "selftest --precision $p compared ${n:-0} values of the training step: $(cat "$tmp/out")"
  grep -q "^  precision $p " "$tmp/out" || fail "selftest --precision $p does not say its precision: $(cat "$tmp/out")"
  want=0.0001
  [ "$p" = bf16 ] && want=0.00049
  grep -q "^  tolerance $want (derived from the arithmetic)$" "$tmp/out" ||
    fail "selftest --precision $p: tolerance not $want: $(grep tolerance "$tmp/out")"
done
"$trainrt" selftest --batch 2 --tolerance 0.01 | grep -q "^  tolerance 0.01 (--tolerance)$" ||
  fail "selftest --tolerance 0.01 does not say it"
expect_error 2 "--precision" -- "$trainrt" selftest --precision fp8

# Under fp16 a Conv's inputs are rounded, so its fp32 sums are compared at the
# tolerance alone (not at what moving those inputs would change): an impossible
# tolerance fails at the first Conv.
expect_error 1 "selftest --device cpu: node '.*' (Conv) output .*relative error .*(tolerance 1e-12; .*moved by 0 " -- \
  "$trainrt" selftest --device cpu --precision fp16 --tolerance 1e-12
grep -q "^selftest FAILED: node " "$tmp/out" || fail "a failing selftest does not say FAILED on stdout: $(cat "$tmp/out")"
# ... and then how the library kernels ran (on the cpu: no library graph, no fallback).
grep -A3 "^selftest FAILED: node " "$tmp/out" | grep -q "^how the library kernels ran up to the failure" ||
  fail "a failing selftest does not report its library kernels: $(cat "$tmp/out")"
grep -q "^fallbacks: none$" "$tmp/out" && grep -q "^conv TFLOP/s: not timed (no convolution ran on a library engine)$" "$tmp/out" ||
  fail "a failing selftest's report lacks its fallback and engine lines: $(cat "$tmp/out")"
expect_error 2 "--device gpu: expected cpu or cuda" -- "$trainrt" selftest --device gpu
expect_error 2 "--batch" -- "$trainrt" selftest --batch 1
expect_error 2 "--widths" -- "$trainrt" selftest --widths 4,8
expect_error 2 "--tolerance" -- "$trainrt" selftest --tolerance nan

# selftest MODEL.onnx: any model with one float input [N,...] and logits [N,classes] --
# here tests/data/mlp_matmul.onnx (tests/data/mlp_matmul.py: batched MatMuls, one of
# them broadcast along a batch dim, Add, Relu, Reshape, Gemm; no Wide ResNet op but the
# Gemm), which the GPU bundle also runs -- in fp32 and fp16 (a cpu MatMul that skipped
# the rounding fails at 1.8e-4, checked by hand).
for p in fp32 fp16; do
  "$trainrt" selftest "$src/tests/data/mlp_matmul.onnx" --device cpu --precision $p >"$tmp/out" 2>"$tmp/err" ||
    fail "selftest mlp_matmul.onnx --precision $p exited $?: $(cat "$tmp/err")"
  grep -q "^selftest passed" "$tmp/out" ||
    fail "selftest mlp_matmul.onnx --precision $p: no 'selftest passed': $(cat "$tmp/out")"
  grep -q "mlp_matmul.onnx, input 'features' on \[8,3,20\], 5 classes" "$tmp/out" ||
    fail "selftest mlp_matmul.onnx does not name the model, its input and classes: $(cat "$tmp/out")"
  # Every node's output of the forward pass (7: both MatMuls' among them).
  grep "forward (inference" "$tmp/out" | grep -q " 7 values" ||
    fail "selftest mlp_matmul.onnx --precision $p: not every forward value compared: $(cat "$tmp/out")"
done
/usr/bin/python3 - "$tmp" <<'PY' || fail "generating a model of two inputs (needs python3-onnx)"
import sys
from onnx import helper, TensorProto, save
x = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in ("a", "b")]
y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])
g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["logits"])], "two", x, [y])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1] + "/two_inputs.onnx")
PY
# tests/data/mobile_cnn.onnx (tests/data/mobile_cnn.py): the blocks of torchvision's
# mobile networks (biased Conv+ReLU, depthwise Conv, BN+HardSwish, squeeze-and-excitation
# with HardSigmoid, SiLU, Concat, channel shuffle, Max/AveragePool), which the GPU bundle
# also runs: every one of its 27 forward values, in fp32 and fp16.
for p in fp32 fp16; do
  "$trainrt" selftest "$src/tests/data/mobile_cnn.onnx" --device cpu --precision $p >"$tmp/out" 2>"$tmp/err" ||
    fail "selftest mobile_cnn.onnx --precision $p exited $?: $(cat "$tmp/err")"
  grep -q "^selftest passed" "$tmp/out" || fail "selftest mobile_cnn.onnx --precision $p: $(cat "$tmp/out")"
  grep "forward (inference" "$tmp/out" | grep -q " 27 values" ||
    fail "selftest mobile_cnn.onnx --precision $p: not every forward value compared: $(cat "$tmp/out")"
done
# tests/data/seq_cnn.onnx (tests/data/seq_cnn.py): 1-D convolutions (biased, grouped and
# dilated, strided with SAME_UPPER), MaxPool, batch norm and a residual over N,C,L.
"$trainrt" selftest "$src/tests/data/seq_cnn.onnx" --device cpu >"$tmp/out" 2>"$tmp/err" ||
  fail "selftest seq_cnn.onnx exited $?: $(cat "$tmp/err")"
grep "forward (inference" "$tmp/out" | grep -q " 11 values" ||
  fail "selftest seq_cnn.onnx: not every forward value compared: $(cat "$tmp/out")"
# tests/data/video_cnn.onnx (tests/data/video_cnn.py): 3-D convolutions (biased, grouped
# and dilated, strided with SAME_UPPER's uneven pads), batch norm, MaxPool over N,C,D,H,W.
"$trainrt" selftest "$src/tests/data/video_cnn.onnx" --device cpu >"$tmp/out" 2>"$tmp/err" ||
  fail "selftest video_cnn.onnx exited $?: $(cat "$tmp/err")"
grep "forward (inference" "$tmp/out" | grep -q " 10 values" ||
  fail "selftest video_cnn.onnx: not every forward value compared: $(cat "$tmp/out")"
expect_error 2 "--widths: sizes the built-in Wide ResNet" -- \
  "$trainrt" selftest "$src/tests/data/mlp_matmul.onnx" --widths 4,8,12,16
expect_error 2 "two_inputs.onnx: selftest needs one graph input (the images), the model has 2" -- \
  "$trainrt" selftest "$tmp/two_inputs.onnx"
expect_error 2 "missing.onnx" -- "$trainrt" selftest "$tmp/missing.onnx"

if "$trainrt" --version | grep -q "GPU  *available"; then
  echo "a GPU is available: --device cuda runs in the gpu-labelled tests"
elif ! "$trainrt" --version | grep -q "^  CUDA  *not built"; then
  expect_error 2 "--device cuda: no usable GPU here" -- "$trainrt" selftest --device cuda
  # ... and says which cause (ops/cuda/gpu_reason.h; tests/ops/test_gpu_reason.cpp has each).
  grep -Eq "no usable GPU here \((no NVIDIA driver|NVIDIA driver too old|no CUDA device|libcuda.so found is the CUDA toolkit's stub)" "$tmp/err" ||
    fail "--device cuda without a GPU does not name its cause: $(cat "$tmp/err")"
  expect_error 2 "--device cuda: no usable GPU here" -- \
    "$trainrt" train "$src/tests/data/wrn_small_train.onnx" --device cuda --limit-train 64 --epochs 1
  expect_error 2 "--backend reference: contradicts --device cuda" -- \
    "$trainrt" train "$src/tests/data/wrn_small_train.onnx" --device cuda --backend reference
else
  expect_error 2 "built without CUDA" -- "$trainrt" selftest --device cuda
fi
exit $((fails > 0))
