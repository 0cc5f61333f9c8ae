#!/usr/bin/env bash
# Needs a GPU (ctest label gpu; CI, which has none, excludes it). The cuda backend trains
# the small Wide ResNet for one epoch as the cpu backend does: same data order, same
# Dropout masks, so the validation accuracy agrees within a few images' worth, the
# export loads, and a checkpoint resumed on the GPU continues the run. The kernel-level
# comparison is `trainrt selftest --device cuda` (test gpu_selftest).
set -u
trainrt=$1
src=$2
source "$src/tests/cli/common.bash"
model="$src/tests/data/wrn_small_train.onnx"
common=(--limit-train 512 --limit-test 512 --batch-size 32 --epochs 1 --shuffle off --augment none --seed 1
  --conv-algorithm direct --target-accuracy 2)

accuracy() { sed -n 's/.*Validation Accuracy = \([0-9.]*\).*/\1/p' "$1" | tail -1; }
"$trainrt" train "$model" "${common[@]}" --device cpu >"$tmp/cpu.log" 2>&1 || fail "cpu run: $(tail -3 "$tmp/cpu.log")"
"$trainrt" train "$model" "${common[@]}" --device cuda --export "$tmp/cuda.onnx" >"$tmp/cuda.log" 2>&1 ||
  fail "cuda run: $(tail -3 "$tmp/cuda.log")"
a=$(accuracy "$tmp/cpu.log")
b=$(accuracy "$tmp/cuda.log")
awk -v a="${a:-0}" -v b="${b:--1}" 'BEGIN { exit !(a - b < 0.03 && b - a < 0.03) }' ||
  fail "validation accuracy cpu $a vs cuda $b (more than 0.03 apart)"
"$trainrt" evaluate "$tmp/cuda.onnx" --limit 512 --device cuda >"$tmp/eval.log" 2>&1 ||
  fail "evaluate of the cuda export: $(cat "$tmp/eval.log")"
exit $((fails > 0))
