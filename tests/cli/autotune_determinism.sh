#!/usr/bin/env bash
# --deterministic on|off (the cuda kernels keep to deterministic library engines, or also
# take the non-deterministic ones: split-K weight gradients), --autotune N (engine
# candidates timed per problem) and --timing-cache off, of train, bench, evaluate (and
# --deterministic of selftest): defaults, the refusals of bad values before the model,
# the data or the GPU are touched, and their acceptance on --device cpu, where they
# change nothing (the host kernels are deterministic and choose no engine). That the
# determinism reaches the kernels is tests/runtime/test_fp32_math.cpp; the bound on the
# timed candidates tests/ops/test_engine_choice.cpp; the cuda kernels that read them have
# not run (no GPU here).
set -uo pipefail
trainrt=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

model=$src/tests/data/wrn_small_train.onnx
for cmd in train bench evaluate selftest; do
  "$trainrt" "$cmd" --help >"$tmp/help" 2>&1 || fail "$cmd --help exited $?"
  grep -q -- "--deterministic" "$tmp/help" || fail "$cmd --help does not list --deterministic"
done
for cmd in train bench evaluate; do
  "$trainrt" "$cmd" --help >"$tmp/help" 2>&1 || fail "$cmd --help exited $?"
  grep -A1 -- "--deterministic" "$tmp/help" | grep -q "off" || fail "$cmd --help: --deterministic does not default to off"
  grep -q -- "--autotune" "$tmp/help" || fail "$cmd --help does not list --autotune"
  grep -A2 -- "--timing-cache" "$tmp/help" | grep -q "off" || fail "$cmd --help: --timing-cache does not mention off"
done
grep -A1 -- "--deterministic" <("$trainrt" selftest --help) | grep -q "on" ||
  fail "selftest --help: --deterministic does not default to on"

# Bad values, on any device, before anything is read.
bad="--deterministic: expected one of on, off, got 'maybe'"
expect_error 2 "$bad" -- "$trainrt" train "$model" --deterministic maybe --max-steps 1
expect_error 2 "$bad" -- "$trainrt" bench "$model" --batch 2 --deterministic maybe
expect_error 2 "$bad" -- "$trainrt" evaluate "$model" --dataset fashion-mnist --deterministic maybe
expect_error 2 "$bad" -- "$trainrt" selftest --device cpu --deterministic maybe
expect_error 2 "$bad" -- "$trainrt" bench "$model" --batch 2 --device cuda --deterministic maybe
expect_error 2 "--autotune: must be >= 0" -- "$trainrt" bench "$model" --batch 2 --autotune -1
expect_error 2 "--autotune: must be >= 0" -- "$trainrt" train "$model" --autotune -1 --max-steps 1
expect_error 2 "--autotune: must be >= 0" -- "$trainrt" evaluate "$model" --dataset fashion-mnist --autotune -1
expect_error 2 "--autotune: must be >= 0" -- "$trainrt" bench "$model" --batch 2 --device cuda --autotune -1
# --timing-cache FILE stays a --device cuda flag; "off" is taken everywhere.
expect_error 2 "--timing-cache: applies to --device cuda" -- "$trainrt" bench "$model" --batch 2 --timing-cache "$tmp/t.json"

# --device cpu takes all three and runs as without them.
"$trainrt" bench "$model" --batch 2 --steps 1 --warmup 0 --threads 1 --deterministic on --autotune 0 \
  --timing-cache off >"$tmp/out" 2>"$tmp/err" || fail "bench --deterministic on --autotune 0 --timing-cache off exited $?: $(cat "$tmp/err")"
grep -q "^images/s: " "$tmp/out" || fail "bench with the flags: no images/s line"
grep -qx "capture: not captured (the cpu backend cannot capture)" "$tmp/out" || fail "bench with the flags: capture line"
[ -e "${model%.onnx}.timing-cache.json" ] && fail "bench on cpu wrote a timing cache"

# A good value gets as far as the GPU (none here: the usual one-line refusal).
if "$trainrt" --version | grep -q "GPU  *available"; then
  echo "a GPU is available: --device cuda runs in the gpu-labelled tests"
elif ! "$trainrt" --version | grep -q "^  CUDA  *not built"; then
  for d in on off; do
    expect_error 2 "--device cuda: no usable GPU here" -- "$trainrt" bench "$model" --batch 2 --device cuda \
      --deterministic $d --autotune 2 --timing-cache off
  done
  expect_error 2 "--device cuda: no usable GPU here" -- "$trainrt" selftest --device cuda --deterministic off
fi
exit $((fails > 0))
