#!/usr/bin/env bash
# Checkpoint/resume of `trainrt train` is exact (cpu backend, shuffling and the
# model's Dropout on): a tiny Wide ResNet on 256 Fashion-MNIST images trained
#   A) 2 epochs straight,
#   B) 1 epoch with a checkpoint, then --resume auto for the 2nd epoch,
#   C) stopped by SIGUSR1 in the middle, then resumed,
#   D) SIGKILLed at random moments while writing a checkpoint every step, each
#      time resumed from whatever is newest on disk,
# must export byte-identical models. Also: a corrupted and a truncated checkpoint
# are refused (exit 2, one stderr line naming the file), --resume flags that do
# not match the checkpoint are refused.
set -uo pipefail
trainrt=$(realpath "$1")
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

model=$tmp/wrn.onnx
"$trainrt" model wrn --dataset fashion-mnist --widths 4,8,8,8 --blocks-per-stage 1 -o "$model" >/dev/null ||
  { echo "FAIL: model wrn"; exit 1; }
# Step schedule with a x0.1 drop after epoch 1, SGD with Nesterov momentum and
# weight decay: the resumed run must restore the momentum buffers and the schedule position.
common=(train "$model" --dataset fashion-mnist --limit-train 256 --limit-test 64 --batch-size 32 --threads 2
  --optimizer sgd --base-lr 0.05 --momentum 0.9 --nesterov --weight-decay 5e-4 --lr-schedule step --lr-step-epochs 1
  --seed 7 --shuffle on --log-every 1 --target-accuracy 2)

# A) straight
"$trainrt" "${common[@]}" --epochs 2 --export "$tmp/a.onnx" >"$tmp/a.log" 2>&1 || fail "straight run: $(tail -3 "$tmp/a.log")"

# B) 1 epoch, checkpoint, resume for the 2nd
"$trainrt" "${common[@]}" --epochs 1 --checkpoint-dir "$tmp/b" --export "$tmp/b1.onnx" >"$tmp/b1.log" 2>&1 ||
  fail "first half: $(tail -3 "$tmp/b1.log")"
[ -f "$tmp/b/checkpoint-0000000008.ckpt" ] || fail "no checkpoint after epoch 1: $(ls "$tmp/b")"
"$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/b" --resume auto --export "$tmp/b.onnx" >"$tmp/b2.log" 2>&1 ||
  fail "resumed run: $(tail -3 "$tmp/b2.log")"
grep -q "Resumed from .*checkpoint-0000000008.ckpt at epoch 2, step 0" "$tmp/b2.log" || fail "no resume line: $(head -3 "$tmp/b2.log")"
grep -q "^Epoch =  1:" "$tmp/b2.log" && fail "resumed run repeated epoch 1"
cmp -s "$tmp/a.onnx" "$tmp/b.onnx" || fail "1 epoch + resume + 1 epoch differs from 2 epochs straight"
cmp -s "$tmp/a.onnx" "$tmp/b1.onnx" && fail "the 1-epoch export equals the 2-epoch one (nothing trained?)"
cmp -s "$model" "$tmp/b1.onnx" && fail "training did not change the model"

# C) SIGUSR1 mid-run (as the 3rd step line is read), then resume. A step of this tiny
# model takes ~10 ms, so the log is read through a FIFO line by line and the signal
# sent as the line arrives: polling the log file lets the whole 8-step epoch pass.
mkfifo "$tmp/c1.fifo"
"$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/c" --export "$tmp/c.onnx" >"$tmp/c1.fifo" 2>&1 &
pid=$!
sent=0
while IFS= read -r line; do
  printf '%s\n' "$line" >>"$tmp/c1.log"
  if [ $sent -eq 0 ] && [[ $line == *"step 3/"* ]]; then
    kill -USR1 $pid
    sent=1
  fi
done <"$tmp/c1.fifo"
wait $pid
rc=$?
[ $rc -eq 0 ] || fail "SIGUSR1 run exited $rc: $(tail -3 "$tmp/c1.log")"
grep -q "Received SIGUSR1: checkpoint written to $tmp/c/checkpoint-" "$tmp/c1.log" || fail "no signal message: $(tail -2 "$tmp/c1.log")"
[ -f "$tmp/c.onnx" ] && fail "the stopped run exported a model"
"$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/c" --resume auto --export "$tmp/c.onnx" >"$tmp/c2.log" 2>&1 ||
  fail "resume after SIGUSR1: $(tail -3 "$tmp/c2.log")"
grep -Eq "Resumed from .* at epoch 1, step [3-7] " "$tmp/c2.log" || fail "not resumed mid-epoch 1: $(grep Resumed "$tmp/c2.log")"
cmp -s "$tmp/a.onnx" "$tmp/c.onnx" || fail "SIGUSR1 + resume differs from 2 epochs straight"

# C2) SIGUSR1 after the last step of epoch 1 (during its validation on 10000 test
# images): the checkpoint is the epoch's end; the resumed run validates, then goes on.
long_eval=("${common[@]}")
long_eval[7]=10000  # --limit-test 64 -> 10000 (not a resume-checked flag)
"$trainrt" "${long_eval[@]}" --epochs 2 --checkpoint-dir "$tmp/c2" >"$tmp/c21.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do grep -q "step 8/8" "$tmp/c21.log" 2>/dev/null && break; sleep 0.05; done
kill -USR1 $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || fail "SIGUSR1 during validation: exited $rc: $(tail -3 "$tmp/c21.log")"
grep -q "Received SIGUSR1: checkpoint written to .* (epoch 1, step 8)" "$tmp/c21.log" ||
  fail "not stopped at the end of epoch 1: $(tail -2 "$tmp/c21.log")"
grep -q "^Epoch =  1:" "$tmp/c21.log" && fail "validation finished although the signal came during it"
"$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/c2" --resume auto --export "$tmp/c2.onnx" >"$tmp/c22.log" 2>&1 ||
  fail "resume after a signal during validation: $(tail -3 "$tmp/c22.log")"
grep -q "^Epoch =  1:" "$tmp/c22.log" || fail "the resumed run did not validate epoch 1: $(cat "$tmp/c22.log")"
grep -q "^Epoch 1: step" "$tmp/c22.log" && fail "the resumed run trained epoch 1 again"
cmp -s "$tmp/a.onnx" "$tmp/c2.onnx" || fail "signal during validation + resume differs from 2 epochs straight"

# SIGTERM also stops with a checkpoint (here with no --checkpoint-dir: ./checkpoints).
(cd "$tmp" && exec "$trainrt" "${common[@]}" --epochs 2 >"$tmp/t.log" 2>&1) &
pid=$!
for _ in $(seq 600); do grep -q "step 2/" "$tmp/t.log" 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || fail "SIGTERM run exited $rc"
grep -q "Received SIGTERM: checkpoint written to checkpoints/checkpoint-" "$tmp/t.log" || fail "no SIGTERM message: $(tail -2 "$tmp/t.log")"

# D) SIGKILL at random moments while a checkpoint is written every step.
RANDOM=42
for round in 1 2 3 4; do
  resume=()
  [ -n "$(ls "$tmp/d" 2>/dev/null | grep '^checkpoint-')" ] && resume=(--resume auto)
  "$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/d" --checkpoint-every-steps 1 --keep-checkpoints 2 \
    --metrics "$tmp/d.jsonl" --metrics-every 1 "${resume[@]}" >"$tmp/d$round.log" 2>&1 &
  pid=$!
  # Wait for the first step of this round, then kill after a random 0-0.4 s.
  for _ in $(seq 600); do grep -q "step [0-9]*/" "$tmp/d$round.log" 2>/dev/null && break; sleep 0.02; done
  sleep "0.$((RANDOM % 40))"
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  grep -q "error" "$tmp/d$round.log" && fail "round $round: $(grep error "$tmp/d$round.log")"
done
ls "$tmp/d" | grep -q '^checkpoint-' || fail "no checkpoint survived the kills"
"$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/d" --keep-checkpoints 2 --resume auto --export "$tmp/d.onnx" \
  --metrics "$tmp/d.jsonl" --metrics-every 1 >"$tmp/d.log" 2>&1 ||
  fail "resume after SIGKILLs: $(tail -3 "$tmp/d.log")"
# The metrics file of the interrupted run: lines written after a run's last
# checkpoint were dropped on resume, so every step and epoch appears once, in order.
/usr/bin/python3 - "$tmp/d.jsonl" <<'PY' || fail "metrics after kills and resumes: $(cat "$tmp/d.jsonl")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["step"] for l in lines if l["kind"] == "step"] == list(range(1, 17)), lines
assert [l["epoch"] for l in lines if l["kind"] == "epoch"] == [1, 2], lines
PY
cmp -s "$tmp/a.onnx" "$tmp/d.onnx" || fail "SIGKILLs + resume differ from 2 epochs straight"
[ "$(ls "$tmp/d" | grep -c '^checkpoint-')" -le 2 ] || fail "--keep-checkpoints 2 kept more: $(ls "$tmp/d")"

# Corrupted, truncated, foreign and mismatching checkpoints are refused.
ck=$(ls "$tmp"/b/checkpoint-*.ckpt | tail -1)
cp "$ck" "$tmp/corrupt.ckpt"
size=$(stat -c %s "$ck")
printf '\x00\x01' | dd of="$tmp/corrupt.ckpt" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect_error 2 "corrupt.ckpt: checkpoint is corrupted (CRC-32 mismatch)" -- "$trainrt" "${common[@]}" --epochs 2 --resume "$tmp/corrupt.ckpt"
head -c $((size - 100)) "$ck" >"$tmp/short.ckpt"
expect_error 2 "short.ckpt: checkpoint is truncated" -- "$trainrt" "${common[@]}" --epochs 2 --resume "$tmp/short.ckpt"
expect_error 2 "wrn.onnx: is not a trainrt checkpoint" -- "$trainrt" "${common[@]}" --epochs 2 --resume "$model"
other=("${common[@]}")
other[9]=16  # --batch-size 32 -> 16
expect_error 2 "\-\-batch-size: the checkpoint was written with '32', this run has '16'" -- \
  "$trainrt" "${other[@]}" --epochs 2 --resume "$ck"
expect_error 2 "\-\-resume auto: no checkpoint in" -- "$trainrt" "${common[@]}" --checkpoint-dir "$tmp/empty" --resume auto
expect_error 2 "\-\-resume auto: needs --checkpoint-dir" -- "$trainrt" "${common[@]}" --resume auto
expect_error 2 "missing.ckpt: checkpoint does not exist" -- "$trainrt" "${common[@]}" --resume "$tmp/missing.ckpt"

[ $fails -eq 0 ] && echo "train_resume: all checks passed"
exit $((fails > 0))
