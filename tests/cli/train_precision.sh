#!/usr/bin/env bash
# --precision bf16 (mixed precision: the convolutions read bf16 copies and accumulate in
# fp32, everything stored stays fp32), --precision fp16 (half-precision copies, emulated
# on the cpu backend, with dynamic loss scaling) and --conv-algorithm winograd (fp32 3x3
# convolutions by Winograd F(4x4,3x3)) leave the loss curve where fp32 direct has it: a
# small Wide ResNet trained for 2 epochs on the first 2000 Fashion-MNIST images (same
# seed, --shuffle off, so all runs see the same batches and Dropout masks) at fp32, bf16,
# fp16 and with Winograd; each is compared with the fp32 run. An fp16 run resumes
# exactly (the loss scaler's state is in the checkpoint) and its checkpoint is refused
# by an fp32 run. Compared from --metrics: the training loss curve, as step losses averaged over
# blocks of 16 steps and each epoch's mean (relative difference <= TOL_LOSS), and the
# validation accuracy of the two epochs, averaged (absolute difference <= TOL_ACC). The
# validation loss is printed, not compared: this early in training it moves by 5-20%
# between two fp32 runs that differ only in summation order (--threads 1 against 2), as
# much as fp32 against bf16; one epoch's validation accuracy moves by up to 0.084 (epoch 2
# of fp16 on the AVX2 paths, where fp32 itself dropped), their mean far less.
# Measured (training loss, mean validation accuracy), AVX-512 BF16 CPU: bf16 1.6% and
# 0.009, Winograd 1.2% and 0.009, fp16 1.9% and 0.003; AVX2 paths: fp16 2.0% and 0.039.
# (The Gemm inputs are rounded too since bf16/fp16 cover the matrix products.) Each run must also differ from the fp32 run at all (else it did not
# run as asked), and the bf16 export is fp32 and evaluates to the accuracy it printed.
set -uo pipefail
trainrt=$(realpath "$1")
src=$2
py=/usr/bin/python3
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
TOL_LOSS=0.03
TOL_ACC=0.08

"$trainrt" model wrn --dataset fashion-mnist --widths 8,16,16,32 --blocks-per-stage 1 -o "$tmp/wrn.onnx" >/dev/null ||
  { echo "FAIL: model wrn"; exit 1; }
expect_error 2 "--precision: expected one of fp32, bf16, fp16" -- "$trainrt" train "$tmp/wrn.onnx" --precision tf32

# bf16 needs AVX-512 BF16 and is refused elsewhere; Winograd runs here on AVX-512 only
# (oneDNN's, every 3x3 layer): on AVX2 the cpu backend's own Winograd takes layers of
# >= 64 channels, which this model has none of, so the run would be direct, bit for bit,
# and fail the "differs from fp32" check below. (Measured by hand with widths 8,16,16,64
# on AVX2: loss 0.0054, mean accuracy 0.016 from fp32 direct; that model moves fp16 by
# 4.3%, over TOL_LOSS, so it is not this test's.) fp16 is emulated on any CPU. trainrt
# --version says which of them runs here (ONEDNN_MAX_CPU_ISA=AVX2 turns bf16 and the
# blocked layouts off on an AVX-512 BF16 CPU).
runs="fp32:direct fp16:direct"
if cpu_path bf16; then
  runs="$runs bf16:direct"
else
  expect_error 2 "--precision bf16: this CPU has no AVX-512 BF16" -- \
    "$trainrt" train "$tmp/wrn.onnx" --dataset fashion-mnist --precision bf16
  echo "train_precision: this CPU has no AVX-512 BF16; the refusal is checked, no bf16 run"
fi
if cpu_path "blocked layouts"; then
  runs="$runs fp32:winograd"
else
  echo "train_precision: no AVX-512, so no Winograd run (the AVX2 Winograd takes none of this model's layers)"
fi

for run in $runs; do
  p=${run%:*} algo=${run#*:}
  "$trainrt" train "$tmp/wrn.onnx" --dataset fashion-mnist --limit-train 2000 --limit-test 500 --epochs 2 \
    --batch-size 32 --optimizer adam --base-lr 0.003 --shuffle off --seed 3 --threads 2 --log-every 0 \
    --precision $p --conv-algorithm $algo --metrics "$tmp/$p-$algo.jsonl" --metrics-every 1 \
    --export "$tmp/$p-$algo.onnx" --checkpoint-dir "$tmp/ck-$p-$algo" >"$tmp/$p-$algo.log" 2>&1 ||
    { echo "FAIL: train --precision $p --conv-algorithm $algo: $(tail -3 "$tmp/$p-$algo.log")"; exit 1; }
done
[ -f "$tmp/bf16-direct.log" ] && { grep -q "parameter tensors, bf16)" "$tmp/bf16-direct.log" ||
  fail "the bf16 run does not say bf16: $(head -2 "$tmp/bf16-direct.log")"; }

grep -q "^fp16: convolution and matrix-product inputs rounded to half precision" "$tmp/fp16-direct.log" || fail "fp16 run: $(head -3 "$tmp/fp16-direct.log")"
grep -q "^Loss scale = [0-9]" "$tmp/fp16-direct.log" || fail "fp16 run prints no loss scale: $(cat "$tmp/fp16-direct.log")"

for run in $runs; do
other=${run%:*}-${run#*:}
[ "$other" = fp32-direct ] && continue
$py - "$tmp/fp32-direct.jsonl" "$tmp/$other.jsonl" "$TOL_LOSS" "$TOL_ACC" "$other" <<'PY' || fail "$other loss curve departs from fp32 (above)"
import json, sys
def read(path):
    rows = [json.loads(l) for l in open(path)]
    return [r for r in rows if r["kind"] == "step"], [r for r in rows if r["kind"] == "epoch"]
(s32, e32), (s16, e16) = read(sys.argv[1]), read(sys.argv[2])
tol_loss, tol_acc, other = float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
assert len(s32) == len(s16) > 16 and len(e32) == len(e16) == 2, (len(s32), len(s16), len(e32), len(e16))
rel = lambda a, b: abs(a - b) / abs(b)
worst, any_diff = 0.0, False
for i in range(0, len(s32) - 15, 16):
    a = sum(r["loss"] for r in s16[i:i + 16]) / 16
    b = sum(r["loss"] for r in s32[i:i + 16]) / 16
    worst = max(worst, rel(a, b))
    any_diff = any_diff or a != b
for a, b in zip(e16, e32):
    worst = max(worst, rel(a["train_loss"], b["train_loss"]))
# The validation accuracy of both epochs, averaged: one epoch's alone jumps by up to 0.1
# between runs whose training losses agree within 2% (fp32 itself: 0.578 then 0.586 while
# its validation loss rose 1.18 -> 1.28).
mean_acc = lambda e: sum(r["val_accuracy"] for r in e) / len(e)
acc = abs(mean_acc(e16) - mean_acc(e32))
print("%s vs fp32-direct: largest relative training loss difference %.4f (tolerance %g), mean accuracy difference %.4f (tolerance %g)"
      % (other, worst, tol_loss, acc, tol_acc))
for name, e in (("fp32-direct", e32), (other, e16)):
    print("  %s epochs (train loss, val loss, val accuracy): %s"
          % (name, [(round(r["train_loss"], 4), round(r["val_loss"], 4), r["val_accuracy"]) for r in e]))
assert any_diff, "%s and fp32 step losses are identical: the run did not do what it was asked" % other
assert worst <= tol_loss and acc <= tol_acc
PY
done

# The reduced-precision exports are plain fp32 models that evaluate to the run's accuracy.
for p in bf16 fp16; do
  [ -f "$tmp/$p-direct.onnx" ] || continue
  acc=$(sed -n 's/^Training complete. Final Validation Accuracy = \([0-9.]*\)$/\1/p' "$tmp/$p-direct.log")
  "$trainrt" evaluate "$tmp/$p-direct.onnx" --dataset fashion-mnist --limit 500 --threads 2 >"$tmp/eval" 2>&1 ||
    fail "evaluate: $(cat "$tmp/eval")"
  grep -q "Test Accuracy = $acc (500 images)" "$tmp/eval" || fail "evaluate of the $p export: $(cat "$tmp/eval") vs $acc"
  $py -c 'import onnx, sys
m = onnx.load(sys.argv[1])
bad = [t.name for t in m.graph.initializer if t.data_type not in (1, 7)]  # float, int64
sys.exit("initializers not fp32: %s" % bad if bad else 0)' "$tmp/$p-direct.onnx" || fail "$p export is not fp32"
done

# fp16 resumes exactly: epoch 1's checkpoint of the run above, resumed for epoch 2.
mkdir -p "$tmp/ck-resume"
cp "$(ls "$tmp"/ck-fp16-direct/checkpoint-*.ckpt | head -1)" "$tmp/ck-resume/"
"$trainrt" train "$tmp/wrn.onnx" --dataset fashion-mnist --limit-train 2000 --limit-test 500 --epochs 2 \
  --batch-size 32 --optimizer adam --base-lr 0.003 --shuffle off --seed 3 --threads 2 --log-every 0 \
  --precision fp16 --checkpoint-dir "$tmp/ck-resume" --resume auto --export "$tmp/fp16-resumed.onnx" >"$tmp/resume.log" 2>&1 ||
  fail "fp16 resume: $(tail -3 "$tmp/resume.log")"
grep -q "^Resumed from .* at epoch 2, step 0" "$tmp/resume.log" || fail "fp16 resume line: $(head -4 "$tmp/resume.log")"
cmp -s "$tmp/fp16-direct.onnx" "$tmp/fp16-resumed.onnx" || fail "fp16: 1 epoch + resume + 1 epoch differs from 2 epochs straight"
ckpt=$(ls "$tmp"/ck-fp16-direct/checkpoint-*.ckpt | head -1)
expect_error 2 "checkpoint tensor 'loss_scaler\..*' is not a state of this model (the checkpoint is of an fp16 run)" -- \
  "$trainrt" train "$tmp/wrn.onnx" --dataset fashion-mnist --limit-train 2000 --limit-test 500 --epochs 2 \
  --batch-size 32 --optimizer adam --base-lr 0.003 --shuffle off --seed 3 --threads 2 --resume "$ckpt"

[ $fails -eq 0 ] && echo "train_precision: passed"
exit $((fails > 0))
