#!/usr/bin/env bash
# Data-parallel `trainrt train` on 2 ranks launched by srun on a real one-host Slurm
# (tools/slurm_local.sh starts it), as a user's job script does:
#   A) 2 epochs: rank 0 alone prints the seed's lines, the DDP summary says 2 ranks and
#      that every rank holds the same parameters, the export reaches the accuracy bar;
#      mpirun gives the same bytes as srun; a model without BatchNormalization and
#      Dropout trains on 2 ranks as 1 process does on the whole batch;
#   B) 1 epoch + --resume auto + 1 epoch equals 2 epochs straight, byte for byte;
#   C) SIGUSR1 to rank 1 only: both ranks stop after the same step with a checkpoint
#      (rank 0 writes it), exit 0, and the resumed run equals the straight one;
#   D) a rank killed with SIGKILL: Slurm cancels the step at once; E) a rank stopped
#      with SIGSTOP: the other rank ends by itself within --comm-timeout with one line
#      naming the operation and exit code 3;
#   F) bad input on every rank (batch smaller than the rank count), resuming a 2-rank
#      checkpoint on 1 rank: one line, exit 2.
set -uo pipefail
trainrt=$(realpath "$1")
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

command -v srun >/dev/null || { echo "FAIL: srun not found (Debian slurm-wlm; tools/setup.sh test installs it)"; exit 1; }
eval "$(bash "$src/tools/slurm_local.sh" start)" || { echo "FAIL: could not start the local Slurm"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # mpirun as root (CI runs as root)
# Under the ASan phase (tools/ci_reliability.sh): Open MPI keeps allocations to exit, and
# fuzz/lsan.supp names its libraries. LeakSanitizer can only match them with whole
# stacks (Open MPI has no frame pointers: the fast unwinder stops at its first frame) and
# with its plugins still loaded (Open MPI dlcloses them at MPI_Finalize).
# That slow unwinder makes every run here about twice as long, so the ASan phase leaves
# out the runs whose code the others run too: the one-process comparison of A (the
# single-process trainer, tests/cli/train_accuracy.sh), the mpirun repeat of A (the same
# data-parallel code; only the launcher's name differs) and B (the resume of C, at an
# epoch boundary). The plain and AVX2 passes run them all.
sanitized=0
if [ -n "${ASAN_OPTIONS:-}" ]; then
  export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" OMPI_MCA_mca_base_component_disable_dlclose=1
  sanitized=1
fi
launch=(srun -n2 --mpi=pmix --overcommit --job-name trainrt-test)

model=$tmp/wrn.onnx
"$trainrt" model wrn --dataset fashion-mnist --widths 4,8,8,8 --blocks-per-stage 1 -o "$model" >/dev/null ||
  { echo "FAIL: model wrn"; exit 1; }
flags=(train "$model" --dataset fashion-mnist --limit-train 2048 --limit-test 512 --threads 1
  --optimizer adam --base-lr 0.002 --weight-decay 5e-4 --seed 3 --shuffle on --log-every 1 --target-accuracy 2)
common=("${flags[@]}" --batch-size 64 --comm-timeout 20)

# A) 2 epochs on 2 ranks
"${launch[@]}" "$trainrt" "${common[@]}" --epochs 2 --export "$tmp/a.onnx" --trace "$tmp/a.json" --trace-steps 3 \
  >"$tmp/a.log" 2>"$tmp/a.err" ||
  fail "2-rank run: $(tail -3 "$tmp/a.log") $(tail -3 "$tmp/a.err")"
grep -q "^Training started with 2 processes across 1 nodes (srun, MPI); 1 threads per rank, global batch 64 = 2 ranks x 32" \
  "$tmp/a.log" || fail "no start line: $(head -2 "$tmp/a.log")"
[ "$(grep -c '^Epoch =  2:' "$tmp/a.log")" -eq 1 ] || fail "epoch lines not printed exactly once (rank 1 must be quiet)"
grep -q "^Epoch 1: step 32/32," "$tmp/a.log" || fail "each rank should take 32 steps of 32 (2048 images / 2 ranks / 32)"
grep -q "^Total ranks used: 2" "$tmp/a.log" || fail "no rank summary: $(tail -5 "$tmp/a.log")"
grep -q "^Parameters and optimizer state identical on all 2 ranks" "$tmp/a.log" || fail "no identical-state line"
grep -q "^All-reduce: .* ms per step" "$tmp/a.log" || fail "no all-reduce timing line"
grep -q '"all-reduce (gradient buckets)"' "$tmp/a.json" && grep -q '"bucket 0 (' "$tmp/a.json" ||
  fail "the trace has no all-reduce lane with buckets"
[ -s "$tmp/a.err" ] && fail "stderr not empty: $(head -3 "$tmp/a.err")"
acc=$("$trainrt" evaluate "$tmp/a.onnx" --dataset fashion-mnist --limit 512 --batch-size 64 --threads 2 |
  sed -n 's/.*Test Accuracy = \([0-9.]*\).*/\1/p')
# One process on the same global batch: the accuracy must be comparable (the runs differ
# only by per-rank BatchNormalization statistics and the ranks' sample order).
if [ $sanitized = 0 ]; then
  "$trainrt" "${common[@]}" --epochs 2 --export "$tmp/one.onnx" >"$tmp/one.log" 2>&1 || fail "1-rank run"
  one=$(sed -n 's/^Epoch =  2:.*Validation Accuracy = \([0-9.]*\),.*/\1/p' "$tmp/one.log")
  awk -v a="$acc" -v o="$one" 'BEGIN { exit !(a >= 0.40 && a - o < 0.1 && o - a < 0.1) }' ||
    fail "2-rank model's test accuracy $acc: below 0.40 or more than 0.1 from one process's $one"
fi
grep -q "Validation Accuracy = $(printf '%.3f' "$acc")" "$tmp/a.log" ||
  fail "the split validation ($(grep '^Epoch =  2' "$tmp/a.log")) disagrees with evaluate of the export ($acc)"
# The same job under mpirun: the launcher must not matter.
if [ $sanitized = 0 ]; then
  mpirun -n 2 --oversubscribe "$trainrt" "${common[@]}" --epochs 2 --export "$tmp/m.onnx" >"$tmp/m.log" 2>&1 ||
    fail "mpirun run: $(tail -3 "$tmp/m.log")"
  grep -q "(mpirun, MPI)" "$tmp/m.log" || fail "mpirun not detected: $(head -1 "$tmp/m.log")"
  cmp -s "$tmp/a.onnx" "$tmp/m.onnx" || fail "mpirun and srun exports differ"
fi

# A2) A model with no BatchNormalization and no Dropout: 2 ranks on 32 images each must
# follow 1 process on 64 (the same samples per step) up to fp32 rounding. The bound below
# is the direct convolution's rounding (one step's gradient ~2.5e-7 from the exact one,
# ~3e-6 of the weight change after 16 momentum steps), so both runs ask for the direct
# kernel: Winograd (the default on AVX-512 CPUs) is ~1e-5 off per step, which 16 steps
# grow to ~4e-3 of the change, however right the data-parallel averaging is.
/usr/bin/python3 "$src/tools/make_cnn_no_bn.py" "$tmp/cnn.onnx" || fail "make_cnn_no_bn.py"
cnn=(train "$tmp/cnn.onnx" --dataset fashion-mnist --limit-train 1024 --limit-test 500 --threads 1 --epochs 1
  --batch-size 64 --optimizer sgd --momentum 0.9 --base-lr 0.05 --log-every 0 --seed 5
  --conv-algorithm direct)
"$trainrt" "${cnn[@]}" --export "$tmp/cnn1.onnx" >"$tmp/cnn1.log" 2>&1 || fail "cnn, 1 process: $(tail -2 "$tmp/cnn1.log")"
"${launch[@]}" "$trainrt" "${cnn[@]}" --export "$tmp/cnn2.onnx" >"$tmp/cnn2.log" 2>&1 ||
  fail "cnn, 2 ranks: $(tail -2 "$tmp/cnn2.log")"
[ "$(grep -o 'Validation Accuracy = [0-9.]*' "$tmp/cnn1.log")" = "$(grep -o 'Validation Accuracy = [0-9.]*' "$tmp/cnn2.log")" ] ||
  fail "cnn: 2 ranks' validation differs from 1 process': $(grep '^Epoch' "$tmp/cnn1.log" "$tmp/cnn2.log")"
/usr/bin/python3 - "$tmp/cnn1.onnx" "$tmp/cnn2.onnx" "$tmp/cnn.onnx" <<'PY' || fail "cnn: 2 ranks' weights differ from 1 process'"
import sys
import numpy as np, onnx
from onnx import numpy_helper
load = lambda f: {t.name: numpy_helper.to_array(t) for t in onnx.load(f).graph.initializer}
one, two, start = (load(f) for f in sys.argv[1:])
for k in one:
    moved = np.abs(one[k] - start[k]).max()        # how far 16 SGD steps took the weights
    diff = np.abs(one[k] - two[k]).max()           # fp32 rounding drift between the two runs
    print(f"{k}: moved {moved:.3g}, 1 vs 2 ranks {diff:.3g}")
    assert diff < 1e-4 * moved, k
PY

# B) 1 epoch + resume + 1 epoch
if [ $sanitized = 0 ]; then
  "${launch[@]}" "$trainrt" "${common[@]}" --epochs 1 --checkpoint-dir "$tmp/b" >"$tmp/b1.log" 2>&1 ||
    fail "first half: $(tail -3 "$tmp/b1.log")"
  [ "$(ls "$tmp/b")" = "checkpoint-0000000032.ckpt" ] || fail "expected one checkpoint from rank 0: $(ls "$tmp/b")"
  "${launch[@]}" "$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/b" --resume auto --export "$tmp/b.onnx" \
    >"$tmp/b2.log" 2>&1 || fail "resumed run: $(tail -3 "$tmp/b2.log")"
  grep -q "Resumed from .*checkpoint-0000000032.ckpt at epoch 2, step 0" "$tmp/b2.log" || fail "no resume line"
  cmp -s "$tmp/a.onnx" "$tmp/b.onnx" || fail "2 ranks: 1 epoch + resume + 1 epoch differs from 2 epochs straight"
fi

# C) SIGUSR1 to rank 1 only, mid-epoch
"${launch[@]}" --output="$tmp/c.%t.log" bash -c 'echo $$ >"$0/c.pid.$SLURM_PROCID"; exec "$@"' "$tmp" \
  "$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/c" --export "$tmp/c.onnx" 2>"$tmp/c.err" &
job=$!
for _ in $(seq 600); do grep -q "step 3/" "$tmp/c.0.log" 2>/dev/null && [ -s "$tmp/c.pid.1" ] && break; sleep 0.05; done
kill -USR1 "$(cat "$tmp/c.pid.1")"
wait $job
rc=$?
[ $rc -eq 0 ] || fail "SIGUSR1 run exited $rc: $(tail -3 "$tmp/c.0.log") $(cat "$tmp/c.err")"
grep -q "Received a stop signal on another rank: checkpoint written to $tmp/c/checkpoint-" "$tmp/c.0.log" ||
  fail "rank 0 did not stop with a checkpoint: $(tail -2 "$tmp/c.0.log")"
[ -s "$tmp/c.1.log" ] && fail "rank 1 printed: $(head -2 "$tmp/c.1.log")"
[ -f "$tmp/c.onnx" ] && fail "the stopped run exported a model"
"${launch[@]}" "$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/c" --resume auto --export "$tmp/c.onnx" \
  >"$tmp/c2.log" 2>&1 || fail "resume after SIGUSR1: $(tail -3 "$tmp/c2.log")"
grep -Eq "Resumed from .* at epoch 1, step ([3-9]|[1-2][0-9]) " "$tmp/c2.log" || fail "not resumed mid-epoch: $(grep Resumed "$tmp/c2.log")"
cmp -s "$tmp/a.onnx" "$tmp/c.onnx" || fail "SIGUSR1 on rank 1 + resume differs from 2 epochs straight"

# D, E) a dead and a hung peer. The wrapper records each rank's pid and exit code.
alive() {  # a process that ended but was not reaped yet (a zombie) counts as ended
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]
}
start_faulty_job() {  # $1: folder
  "${launch[@]}" --output="$1/%t.log" --error="$1/%t.err" \
    bash -c '"$@" & echo $! >"$0/pid.$SLURM_PROCID"; wait $!; echo $? >"$0/rc.$SLURM_PROCID"' "$1" \
    "$trainrt" "${flags[@]}" --batch-size 64 --epochs 50 --comm-timeout 5 2>"$1/srun.err" &
  job=$!
  for _ in $(seq 600); do grep -q "step 2/" "$1/0.log" 2>/dev/null && [ -s "$1/pid.1" ] && break; sleep 0.05; done
}
# D) SIGKILL of rank 1: Slurm's PMIx plugin sees the task die and cancels the step, so
# rank 0 ends at once (killed by Slurm, before trainrt's own timeout).
d=$tmp/kill && mkdir -p "$d" && start_faulty_job "$d"
t0=$SECONDS
kill -KILL "$(cat "$d/pid.1")"
wait $job
took=$((SECONDS - t0))
[ $took -le 20 ] || fail "SIGKILL of rank 1: the job ran on for $took s"
grep -q "CANCELLED" "$d/0.err" "$d/srun.err" || fail "SIGKILL of rank 1: no step cancellation: $(cat "$d/srun.err")"
# srun may return while Slurm's kill of rank 0 is still landing: the same 20 s from the kill.
while alive "$(cat "$d/pid.0")" && [ $((SECONDS - t0)) -lt 20 ]; do sleep 0.2; done
alive "$(cat "$d/pid.0")" && fail "SIGKILL of rank 1: rank 0 still runs $((SECONDS - t0)) s after the kill"
# E) SIGSTOP of rank 1: nothing tells Slurm; rank 0 must end by itself after --comm-timeout
# with one line naming the operation and exit code 3 (Slurm then cancels the stopped rank).
d=$tmp/stop && mkdir -p "$d" && start_faulty_job "$d"
t0=$SECONDS
pid0=$(cat "$d/pid.0")
pid1=$(cat "$d/pid.1")
kill -STOP "$pid1"
while alive "$pid0" && [ $((SECONDS - t0)) -lt 60 ]; do sleep 0.2; done
took=$((SECONDS - t0))
kill -CONT "$pid1" 2>/dev/null
kill -KILL "$pid1" "$pid0" 2>/dev/null
wait $job
[ $took -le 20 ] || fail "SIGSTOP of rank 1: rank 0 still ran after $took s (--comm-timeout 5)"
[ "$(cat "$d/rc.0" 2>/dev/null)" = 3 ] || fail "SIGSTOP of rank 1: rank 0 exited $(cat "$d/rc.0" 2>/dev/null), expected 3"
grep -c "^trainrt: error:" "$d/0.err" | grep -qx 1 || fail "SIGSTOP of rank 1: rank 0's errors: $(cat "$d/0.err")"
grep -q "^trainrt: error: .*rank 0 of 2: no answer from the other ranks within 5 s: a peer rank died or hangs" "$d/0.err" ||
  fail "SIGSTOP of rank 1: rank 0's error: $(cat "$d/0.err")"

# F) bad input on every rank; resume of a 2-rank checkpoint on 1 rank
"${launch[@]}" --error="$tmp/f.%t.err" "$trainrt" "${flags[@]}" --batch-size 1 --epochs 1 >/dev/null 2>&1
for r in 0 1; do
  [ "$(wc -l <"$tmp/f.$r.err")" -eq 1 ] && grep -q "^trainrt: error: --batch-size: 1 is smaller than the 2 ranks" "$tmp/f.$r.err" ||
    fail "rank $r on --batch-size 1: $(cat "$tmp/f.$r.err")"
done
# (C's folder: the ASan phase runs no B.)
expect_error 2 "--ranks: the checkpoint was written with '2', this run has '1'" -- \
  "$trainrt" "${common[@]}" --epochs 2 --checkpoint-dir "$tmp/c" --resume auto

exit $((fails > 0))
