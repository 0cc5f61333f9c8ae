#!/usr/bin/env bash
# --fp32-math tf32|strict (the cuda kernels' fp32 convolutions and Gemm: TF32 tensor
# cores, or full fp32): a flag of train, bench, evaluate and selftest that applies to
# --device cuda only (a one-line refusal with --device cpu, since the host kernels have
# one fp32 arithmetic), checked before the model, the data or the GPU are touched; and
# --layout nhwc|nchw of train and selftest, by the same rules. That
# the value reaches the kernels is tests/runtime/test_fp32_math.cpp; the cuda kernels
# that read it have not run (no GPU here).
set -uo pipefail
trainrt=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

model=$src/tests/data/wrn_small_train.onnx
for cmd in train bench evaluate selftest; do
  "$trainrt" "$cmd" --help >"$tmp/help" 2>&1 || fail "$cmd --help exited $?"
  grep -q -- "--fp32-math" "$tmp/help" || fail "$cmd --help does not list --fp32-math"
done
grep -A1 -- "--fp32-math" <("$trainrt" selftest --help) | grep -q "strict" ||
  fail "selftest --help: --fp32-math does not default to strict"

# --device cpu (the default): refused, whatever the value.
expect_error 2 "--fp32-math: applies to --device cuda" -- "$trainrt" train "$model" --fp32-math strict --max-steps 1
expect_error 2 "--fp32-math: applies to --device cuda" -- "$trainrt" bench "$model" --batch 2 --fp32-math tf32
expect_error 2 "--fp32-math: applies to --device cuda" -- \
  "$trainrt" evaluate "$model" --dataset fashion-mnist --fp32-math strict
expect_error 2 "--fp32-math: applies to --device cuda" -- "$trainrt" selftest --device cpu --fp32-math tf32

# --device cuda: a bad value is refused before the GPU is looked for.
bad="--fp32-math: expected one of tf32, strict, got 'tf16'"
expect_error 2 "$bad" -- "$trainrt" train "$model" --device cuda --fp32-math tf16 --max-steps 1
expect_error 2 "$bad" -- "$trainrt" bench "$model" --batch 2 --device cuda --fp32-math tf16
expect_error 2 "$bad" -- "$trainrt" evaluate "$model" --dataset fashion-mnist --device cuda --fp32-math tf16
expect_error 2 "$bad" -- "$trainrt" selftest --device cuda --fp32-math tf16

# --layout nhwc|nchw (the cuda backend's activations between its kernels), of train,
# evaluate and selftest: the same rules (cpu: refused; a bad value refused before the GPU is looked for).
for cmd in train evaluate selftest; do
  "$trainrt" "$cmd" --help >"$tmp/help" 2>&1 || fail "$cmd --help exited $?"
  grep -q -- "--layout" "$tmp/help" || fail "$cmd --help does not list --layout"
done
expect_error 2 "--layout: applies to --device cuda" -- "$trainrt" train "$model" --layout nchw --max-steps 1
expect_error 2 "--layout: applies to --device cuda" -- "$trainrt" selftest --device cpu --layout nhwc
expect_error 2 "--layout: applies to --device cuda" -- "$trainrt" evaluate "$model" --dataset fashion-mnist --layout nchw
bad="--layout: expected one of nhwc, nchw, got 'nchw16c'"
expect_error 2 "$bad" -- "$trainrt" train "$model" --device cuda --layout nchw16c --max-steps 1
expect_error 2 "$bad" -- "$trainrt" selftest --device cuda --layout nchw16c
expect_error 2 "$bad" -- "$trainrt" evaluate "$model" --dataset fashion-mnist --device cuda --layout nchw16c

# A good value gets as far as the GPU (none here: the usual one-line refusal).
if "$trainrt" --version | grep -q "GPU  *available"; then
  echo "a GPU is available: --device cuda runs in the gpu-labelled tests"
elif ! "$trainrt" --version | grep -q "^  CUDA  *not built"; then
  for m in tf32 strict; do
    expect_error 2 "--device cuda: no usable GPU here" -- "$trainrt" selftest --device cuda --fp32-math $m
    expect_error 2 "--device cuda: no usable GPU here" -- "$trainrt" bench "$model" --batch 2 --device cuda --fp32-math $m
  done
else
  expect_error 2 "built without CUDA" -- "$trainrt" selftest --device cuda --fp32-math strict
fi
exit $((fails > 0))
