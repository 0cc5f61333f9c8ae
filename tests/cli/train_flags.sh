#!/usr/bin/env bash
# `trainrt train` flags: the NaN guard (a huge learning rate stops the run at the
# first non-finite loss, naming the step and the last good checkpoint), --freeze
# (frozen initializers bit-identical after training, the others changed),
# --metrics/--metrics-every lines, plain progress lines when stdout is not a
# terminal, --help listing every flag with its default, and contradictory or
# unknown flags as one-line errors (exit 2).
set -uo pipefail
trainrt=$(realpath "$1")
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

model=$tmp/wrn.onnx
"$trainrt" model wrn --dataset fashion-mnist --widths 4,8,8,8 --blocks-per-stage 1 -o "$model" >/dev/null ||
  { echo "FAIL: model wrn"; exit 1; }
base=(train "$model" --dataset fashion-mnist --limit-train 128 --limit-test 64 --batch-size 32 --threads 2 --seed 1)

# NaN guard: lr 1e30 blows the loss up within a few steps; with a checkpoint
# every step the message names the newest one that exists on disk.
expect_error 2 "training: at epoch 1 step [0-9]* (global step [0-9]*): .*NaN.*; last good checkpoint: .*; lower --base-lr$" -- \
  "$trainrt" "${base[@]}" --epochs 2 --base-lr 1e30 --momentum 0.9 --checkpoint-dir "$tmp/nan" --checkpoint-every-steps 1
ck=$(sed -n 's/.*last good checkpoint: \([^;]*\);.*/\1/p' "$tmp/err")
step=$(sed -n 's/.*(global step \([0-9]*\)).*/\1/p' "$tmp/err")
if [ "$ck" = "none written" ]; then
  [ "$step" = 1 ] || fail "no checkpoint named although step $step failed"
else
  [ -f "$ck" ] || fail "the named checkpoint '$ck' does not exist"
  [ "$ck" = "$tmp/nan/checkpoint-$(printf %010d $((step - 1))).ckpt" ] || fail "named '$ck' for a failure at step $step"
fi
[ -f "$tmp/out" ] && grep -q "Epoch =" "$tmp/out" && fail "the NaN run finished an epoch"
expect_error 2 "last good checkpoint: none written" -- "$trainrt" "${base[@]}" --epochs 1 --base-lr 1e30 --momentum 0.9

# --freeze: the frozen tensors are bit-identical, the others trained.
"$trainrt" "${base[@]}" --epochs 1 --freeze input_block.cbr.0.weight,fc.bias --metrics "$tmp/m.jsonl" --metrics-every 2 --log-every 1 \
  --export "$tmp/frozen.onnx" >"$tmp/freeze.log" 2>&1 || fail "--freeze run: $(tail -3 "$tmp/freeze.log")"
/usr/bin/python3 - "$model" "$tmp/frozen.onnx" <<'PY' || fail "--freeze check"
import sys, onnx
from onnx import numpy_helper
a = {t.name: numpy_helper.to_array(t) for t in onnx.load(sys.argv[1]).graph.initializer}
b = {t.name: numpy_helper.to_array(t) for t in onnx.load(sys.argv[2]).graph.initializer}
assert a.keys() == b.keys()
for n in ["input_block.cbr.0.weight", "fc.bias"]:
    assert n in a, (n, sorted(a))
    assert a[n].tobytes() == b[n].tobytes(), n + " changed although frozen"
changed = [n for n in a if a[n].tobytes() != b[n].tobytes()]
assert "fc.weight" in changed, changed
assert len(changed) >= len(a) // 2, (len(changed), len(a))
PY
# 4 steps, --metrics-every 2: step lines at 2 and 4, then one epoch line.
/usr/bin/python3 - "$tmp/m.jsonl" <<'PY' || fail "metrics lines: $(cat "$tmp/m.jsonl")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["kind"] for l in lines] == ["step", "step", "epoch"], lines
assert [l["step"] for l in lines[:2]] == [2, 4], lines
assert all(l["loss"] > 0 for l in lines[:2]) and 0 <= lines[2]["val_accuracy"] <= 1
PY
# Not a terminal: plain progress lines, no carriage returns.
[ "$(grep -c '^Epoch 1: step [1-4]/4, loss [0-9.]*, [0-9.]* images/sec$' "$tmp/freeze.log")" -eq 4 ] ||
  fail "expected 4 plain progress lines: $(cat "$tmp/freeze.log")"
grep -q $'\r' "$tmp/freeze.log" && fail "carriage return in a non-terminal log"
# On a terminal (util-linux `script` gives one) the progress line is redrawn with \r.
if command -v script >/dev/null; then
  script -qec "$(printf '%q ' "$trainrt" "${base[@]}" --epochs 1 --log-every 1)" /dev/null >"$tmp/tty.log" 2>&1 ||
    fail "run under script: $(tail -2 "$tmp/tty.log")"
  grep -q $'\rEpoch 1: step 4/4, loss' "$tmp/tty.log" || fail "no \\r progress redraw on a terminal: $(od -c "$tmp/tty.log" | head)"
fi
expect_error 2 "\-\-freeze nope: is not a float initializer" -- "$trainrt" "${base[@]}" --epochs 1 --freeze nope

# --help lists every flag with its default.
"$trainrt" train --help >"$tmp/help" || fail "train --help exited $?"
for f in dataset data-dir batch-size epochs base-lr optimizer momentum weight-decay nesterov lr-schedule lr-step-epochs \
  warmup-epochs target-accuracy patience freeze precision device backend threads seed shuffle augment limit-train \
  limit-test log-every metrics metrics-every checkpoint-dir checkpoint-every checkpoint-every-steps keep-checkpoints \
  resume export export-inference trace trace-steps detect-anomaly fuse; do
  grep -Eq "^  --$f .*\(default: .*\)$" "$tmp/help" || fail "--help lacks --$f with a default"
done

# Contradictory and unknown flags.
expect_error 2 "\-\-nesterov: needs --optimizer sgd and --momentum > 0" -- "$trainrt" "${base[@]}" --nesterov
expect_error 2 "\-\-warmup-epochs: 3 is more than --epochs 2" -- "$trainrt" "${base[@]}" --epochs 2 --warmup-epochs 3
expect_error 2 "\-\-lr-step-epochs: applies to --lr-schedule step only" -- "$trainrt" "${base[@]}" --lr-step-epochs 5
expect_error 2 "\-\-checkpoint-every: needs --checkpoint-dir" -- "$trainrt" "${base[@]}" --checkpoint-every 2
expect_error 2 "\-\-momentum: applies to --optimizer sgd only" -- "$trainrt" "${base[@]}" --optimizer adam --momentum 0.9
expect_error 2 "\-\-resume: expected a checkpoint path or 'auto'" -- "$trainrt" "${base[@]}" --resume ""
expect_error 2 "\-\-trace-steps: needs --trace" -- "$trainrt" "${base[@]}" --trace-steps 3
expect_error 2 "unknown flag --bogus" -- "$trainrt" "${base[@]}" --bogus 1
expect_error 2 "\-\-fuse: expected one of on, off, got 'maybe'" -- "$trainrt" "${base[@]}" --fuse maybe
expect_error 2 "\-\-keep-checkpoints: must be > 0" -- "$trainrt" "${base[@]}" --checkpoint-dir "$tmp/k" --keep-checkpoints 0

[ $fails -eq 0 ] && echo "train_flags: all checks passed"
exit $((fails > 0))
