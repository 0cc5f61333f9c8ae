#!/usr/bin/env bash
# `trainrt bench` end to end on a tiny Wide ResNet (widths 2,4,6,8, Fashion-MNIST
# shape): the report lines are there and consistent with each other (one step time
# per timed step, images/s = batch / median step, the parameter count of the model,
# a first loss near ln(10) for 10 random-init classes), --profile lists the ops of
# the fused training graph (--fuse off: the unfused one) with their GB/s against the
# copy speed of its memory line, and every bad flag or
# model is exit 2 with one stderr line.
# No timing is asserted.
#
#   bash tests/cli/bench_cli.sh build/trainrt .      (CTest runs it this way)
set -uo pipefail
trainrt=$1
src=$2
py=/usr/bin/python3
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
[ -x "$trainrt" ] || { echo "bench_cli.sh: $trainrt is not an executable (build it first)"; exit 2; }

model=$tmp/wrn.onnx
"$trainrt" model wrn --dataset fashion-mnist --widths 2,4,6,8 -o "$model" >/dev/null || fail "trainrt model wrn failed"
# Trainable values counted independently: float initializers minus BatchNorm running statistics
# and the Dropout ratios.
params=$($py -c 'import onnx, numpy as np, sys; from onnx import numpy_helper as h
print(sum(h.to_array(t).size for t in onnx.load(sys.argv[1]).graph.initializer
          if t.data_type == 1 and not t.name.endswith(("running_mean", "running_var", "dropout.ratio"))))' "$model")

# check_report FILE BATCH STEPS: the lines and their consistency.
check_report() {
  $py - "$1" "$2" "$3" "$params" <<'PY'
import math, re, sys
text, batch, steps, params = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def line(pattern):
    m = re.search(pattern, text, re.M)
    assert m, "no line matching %r in:\n%s" % (pattern, text)
    return m.groups()
n_tensors, n_values = map(int, line(r"^model: .*input 'input' \[(?:\d+),1,28,28\], 10 classes, (\d+) parameter tensors \((\d+) values\)"))
assert n_values == params, (n_values, params)
assert n_tensors == 47, n_tensors  # the Wide ResNet's 47 trainable tensors
(b,) = line(r"^setup: backend \w+, threads \d+, precision fp32, optimizer sgd \(momentum 0.9, lr [0-9.e-]+\), batch (\d+),")
assert int(b) == batch
times = [float(v) for v in line(r"^step times \(ms\): (.*)$")[0].split()]
assert len(times) == steps and all(t > 0 for t in times), times
median, mean = map(float, line(r"^ms/step: median ([0-9.]+), mean ([0-9.]+)$"))
srt = sorted(times)
want_median = srt[len(srt) // 2] if len(srt) % 2 else (srt[len(srt) // 2 - 1] + srt[len(srt) // 2]) / 2
assert abs(median - want_median) <= 0.06 and abs(mean - sum(times) / len(times)) <= 0.06, (median, mean, times)
(ips,) = map(float, line(r"^images/s: ([0-9.]+) "))
# The median is printed to 0.1 ms: on a fast step that rounding alone is a few % of it.
assert abs(ips - batch * 1e3 / median) <= ips * (0.01 + 0.05 / median) + 0.01, (ips, batch, median)
gflop, _ = map(float, line(r"^GFLOP/step: ([0-9.]+) .*, ([0-9.]+) GFLOP/s"))
assert gflop > 0
rss, arena, naive, state = map(float, line(r"^peak memory: RSS ([0-9.]+) MiB .*; planned arena ([0-9.]+) MiB "
                                          r"\(naive one buffer per value ([0-9.]+) MiB\), persistent state ([0-9.]+) MiB$"))
assert rss > 1 and 0 < arena <= naive, (rss, arena, naive)
# Persistent state: parameters and momentum buffers (float32) at least.
assert state * 2**20 >= 2 * 4 * params * 0.95, (state, params)  # printed to 0.001 MiB
first, last = map(float, line(r"^loss: ([0-9.]+) \(first step\) -> ([0-9.]+) \(last step\)$"))
assert abs(first - math.log(10)) < 1.5 and math.isfinite(last), (first, last)
PY
}

# What the cpu backend runs for "--layouts blocked --conv-algorithm winograd" (the
# defaults): oneDNN has nChw16c kernels on AVX-512 (avx512_core: F, BW, VL, DQ) only,
# and bench says when it runs plain or direct instead (also on an AVX-512 CPU
# under ONEDNN_MAX_CPU_ISA=AVX2, so the test asks trainrt, not /proc/cpuinfo).
if cpu_path "blocked layouts"; then
  avx512=1 blocked_re="blocked"
else
  avx512=0 blocked_re="plain \(blocked needs AVX-512\)"
fi
# Winograd: oneDNN's on AVX-512, the cpu backend's own on AVX2+FMA (ops/onednn/winograd.h).
own_re="winograd \(the backend's own F\(4x4,3x3\) from 64 channels in and out\)"
own=0
if [ $avx512 = 1 ]; then
  winograd_re="winograd \(oneDNN's\)" own=1
elif cpu_path Winograd; then
  winograd_re=$own_re own=1
else
  winograd_re="direct \(winograd needs AVX2 and FMA\)"
fi
export blocked_re winograd_re

if [ -f "$model" ]; then
  "$trainrt" bench "$model" --batch 4 --steps 2 --warmup 1 --threads 1 >"$tmp/cpu" 2>"$tmp/err" || fail "bench on cpu exited $?: $(cat "$tmp/err")"
  [ -s "$tmp/err" ] && fail "bench wrote to stderr: $(cat "$tmp/err")"
  check_report "$tmp/cpu" 4 2 || fail "cpu report (above)"
  # How the run ran (capture, fallbacks, engines): one capture line per run, which on a
  # host backend says why it is not captured; no fallback; no engine choice on cpu.
  [ "$(grep -c '^capture: ' "$tmp/cpu")" = 1 ] || fail "cpu report: not exactly one 'capture:' line"
  grep -qx "capture: not captured (the cpu backend cannot capture)" "$tmp/cpu" || fail "cpu report: capture line"
  grep -qx "fallbacks: none" "$tmp/cpu" || fail "cpu report: no 'fallbacks: none' line"
  grep -q "^fallback: " "$tmp/cpu" && fail "cpu report: a fallback line on cpu"
  grep -q "^engine: " "$tmp/cpu" && fail "cpu report: an engine line on cpu"
  grep -qx "engines: none chosen (the cpu backend's kernels are oneDNN primitives and oneTBB loops)" "$tmp/cpu" ||
    fail "cpu report: engines line"
  "$trainrt" bench "$model" --batch 4 --steps 1 --warmup 0 --backend reference >"$tmp/ref" 2>"$tmp/err" || fail "bench on reference exited $?: $(cat "$tmp/err")"
  check_report "$tmp/ref" 4 1 || fail "reference report (above)"
  grep -qx "capture: not captured (the reference backend cannot capture)" "$tmp/ref" ||
    fail "reference report: capture line"
  grep -qx "fallbacks: none" "$tmp/ref" || fail "reference report: no 'fallbacks: none' line"
  # Same seed, so the same random batch and the same first step: the backends' first losses agree.
  $py - "$tmp/cpu" "$tmp/ref" <<'PY' || fail "first-step loss differs between cpu and reference (above)"
import re, sys
first = [float(re.search(r"^loss: ([0-9.]+) \(first step\)", open(f).read(), re.M).group(1)) for f in sys.argv[1:]]
assert abs(first[0] - first[1]) <= 2e-4, first
PY
  "$trainrt" bench "$model" --batch 4 --steps 1 --warmup 1 --threads 1 --profile --trace "$tmp/trace.json" >"$tmp/prof" 2>"$tmp/err" || fail "bench --profile exited $?: $(cat "$tmp/err")"
  check_report "$tmp/prof" 4 1 || fail "--profile report (above)"
  grep -q "^profile over 1 timed steps" "$tmp/prof" || fail "--profile has no table header: $(cat "$tmp/prof")"
  # The session runs the fused training graph: every BN+Relu and the skip Conv+Add fused,
  # every parameter updated by one MultiSGD node.
  for op in Conv FusedConv BatchNormalizationRelu ConvGrad MultiSGD; do
    grep -Eq "^$op +[0-9]+ " "$tmp/prof" || fail "--profile table lacks $op"
  done
  grep -Eq "^BatchNormalization " "$tmp/prof" && fail "--profile: an unfused BatchNormalization ran"
  # The copy speed measured in the run, and each memory-bound op's rate against it: the
  # share column is the GB/s column over the memory line's figure.
  $py - "$tmp/prof" <<'PY' || fail "--profile: memory line or GB/s columns wrong (above)"
import re, sys
text = open(sys.argv[1]).read()
copy = float(re.search(r"^memory: ([0-9.]+) GB/s, the cpu backend's copy of 256 MiB", text, re.M).group(1))
assert copy > 0, copy
assert re.search(r"^op +calls +total ms +% +GFLOP/s +GB/s +% copy$", text, re.M), "header"
row = re.search(r"^MultiSGD +\d+ +[0-9.]+ +[0-9.]+% +- +([0-9.]+) +(\d+)%$", text, re.M)
gbps, share = float(row.group(1)), int(row.group(2))
assert gbps > 0 and abs(share - round(100 * gbps / copy)) <= 1, (gbps, share, copy)
PY
  $py - "$tmp/prof" <<'PY' || fail "--fuse on: the graph run is not smaller (above)"
import os, re, sys
m = re.search(r"^training graph: (\d+) nodes, fusions on \((\d+) nodes run, plus \d+ state writes\), layouts %s, convolutions %s$"
              % (os.environ["blocked_re"], os.environ["winograd_re"]), open(sys.argv[1]).read(), re.M)
assert m and int(m.group(2)) < int(m.group(1)), m and m.groups()
PY
  $py -c 'import json, sys; e = json.load(open(sys.argv[1]))["traceEvents"]; assert any(x.get("name") for x in e), e[:3]' \
    "$tmp/trace.json" || fail "--trace did not write a Chrome trace with events"
  # Conv calls in one step = the model's Conv count (inspect's node table).
  convs=$("$trainrt" inspect "$model" --json | $py -c 'import json,sys; print(sum(n["op"] == "Conv" for n in json.load(sys.stdin)["nodes"]))')
  $py - "$tmp/prof" "$convs" <<'PY' || fail "--profile: Conv + FusedConv calls/step is not $convs (above)"
import re, sys
text = open(sys.argv[1]).read()
calls = sum(int(re.search(r"^%s +(\d+) " % op, text, re.M).group(1)) for op in ("Conv", "FusedConv"))
assert calls == int(sys.argv[2]), (calls, sys.argv[2])
PY
  # --fuse off runs the training graph as autodiff built it.
  "$trainrt" bench "$model" --batch 4 --steps 1 --warmup 0 --threads 1 --profile --fuse off >"$tmp/nofuse" 2>"$tmp/err" || fail "bench --fuse off exited $?: $(cat "$tmp/err")"
  check_report "$tmp/nofuse" 4 1 || fail "--fuse off report (above)"
  grep -Eq "^training graph: ([0-9]+) nodes, fusions off \(\1 nodes run, plus [0-9]+ state writes\), layouts $blocked_re, convolutions $winograd_re$" "$tmp/nofuse" || fail "--fuse off: $(grep '^training graph' "$tmp/nofuse")"
  grep -Eq "^Conv +$convs " "$tmp/nofuse" || fail "--fuse off: Conv calls/step is not $convs: $(grep '^Conv ' "$tmp/nofuse")"
  grep -Eq "^(FusedConv|BatchNormalizationRelu) " "$tmp/nofuse" && fail "--fuse off ran a fused op"
fi

# Layouts: at 16 channels the activations stay nChw16c between oneDNN kernels; --layouts
# plain reorders around every kernel, so the same step moves far more bytes.
wide=$tmp/wrn16.onnx
"$trainrt" model wrn --dataset fashion-mnist --widths 16,16,16,16 -o "$wide" >/dev/null || fail "trainrt model wrn (16) failed"
for l in blocked plain; do
  "$trainrt" bench "$wide" --batch 4 --steps 1 --warmup 1 --threads 1 --layouts $l >"$tmp/l_$l" 2>"$tmp/err" || fail "bench --layouts $l exited $?: $(cat "$tmp/err")"
  want=plain
  [ $l = blocked ] && want=$blocked_re
  grep -Eq "^training graph: .*, layouts $want, convolutions $winograd_re$" "$tmp/l_$l" || fail "--layouts $l: $(grep '^training graph' "$tmp/l_$l")"
done
# Without AVX-512 both runs are the same plain step, so they reorder the same bytes.
$py - "$tmp/l_blocked" "$tmp/l_plain" $avx512 <<'PY' || fail "--layouts: blocked does not reorder less than plain (above)"
import re, sys
mib = [float(re.search(r"^layout reorders: ([0-9.]+) MiB per step", open(f).read(), re.M).group(1)) for f in sys.argv[1:3]]
print("layout reorders MiB/step: blocked %.2f, plain %.2f" % tuple(mib))
sys.exit(0 if (mib[0] * 5 < mib[1] if sys.argv[3] == "1" else mib[0] == mib[1]) else 1)
PY

# A short bench in precision $1 runs, says so in its setup line, and starts near ln(10)
# with a finite loss at the end.
bench_precision() {
  local p=$1
  "$trainrt" bench "$model" --batch 4 --steps 2 --warmup 1 --precision "$p" >"$tmp/$p" 2>&1 ||
    fail "bench --precision $p: $(tail -3 "$tmp/$p")"
  grep -q "^setup: backend cpu, threads [0-9]*, precision $p," "$tmp/$p" || fail "bench $p setup line: $(cat "$tmp/$p")"
  $py -c 'import math, re, sys
first, last = map(float, re.search(r"^loss: ([0-9.]+) \(first step\) -> ([0-9.]+)", open(sys.argv[1]).read(), re.M).groups())
sys.exit(0 if abs(first - math.log(10)) < 1.5 and math.isfinite(last) else 1)' "$tmp/$p" || fail "bench $p loss: $(cat "$tmp/$p")"
}
# --precision bf16 runs on CPUs with AVX-512 BF16 and is refused elsewhere, naming why.
if cpu_path bf16; then
  bench_precision bf16
else
  expect_error 2 "--precision bf16: this CPU has no AVX-512 BF16" -- "$trainrt" bench "$model" --batch 2 --precision bf16
fi
# --precision fp16 (emulated on every CPU) runs loss-scaled steps, as train does.
bench_precision fp16

# Winograd is the default; --conv-algorithm direct runs the direct convolutions and says so.
"$trainrt" bench "$model" --batch 4 --steps 1 --warmup 1 --conv-algorithm direct >"$tmp/direct" 2>&1 ||
  fail "bench --conv-algorithm direct: $(tail -3 "$tmp/direct")"
grep -q "^training graph: .*, convolutions direct$" "$tmp/direct" || fail "direct: $(grep '^training graph' "$tmp/direct")"
# TRAINRT_WINOGRAD=own with row-major layouts: the own Winograd, also where oneDNN has one.
if [ $own = 1 ]; then
  TRAINRT_WINOGRAD=own "$trainrt" bench "$model" --batch 4 --steps 1 --warmup 1 --layouts plain >"$tmp/own" 2>&1 ||
    fail "TRAINRT_WINOGRAD=own bench: $(tail -3 "$tmp/own")"
  grep -Eq "^training graph: .*, layouts plain, convolutions $own_re$" "$tmp/own" ||
    fail "TRAINRT_WINOGRAD=own: $(grep '^training graph' "$tmp/own")"
fi

# Bad flags and models: exit 2, one line naming the flag or file.
expect_error 2 "--batch is required" -- "$trainrt" bench "$model"
expect_error 2 "--batch: must be >= 1" -- "$trainrt" bench "$model" --batch 0
expect_error 2 "batch" -- "$trainrt" bench "$model" --batch many
expect_error 2 "--steps: must be >= 1" -- "$trainrt" bench "$model" --batch 2 --steps 0
expect_error 2 "--warmup: must be >= 0" -- "$trainrt" bench "$model" --batch 2 --warmup -1
expect_error 2 "--threads: must be >= 0" -- "$trainrt" bench "$model" --batch 2 --threads -3
expect_error 2 "--precision: expected one of fp32, bf16, fp16, got 'fp8'" -- "$trainrt" bench "$model" --batch 2 --precision fp8
expect_error 2 "--conv-algorithm: expected one of direct, winograd, got 'fft'" -- "$trainrt" bench "$model" --batch 2 --conv-algorithm fft
expect_error 2 "--backend gpu: expected cpu or reference" -- "$trainrt" bench "$model" --batch 2 --backend gpu
expect_error 2 "--optimizer: expected one of sgd" -- "$trainrt" bench "$model" --batch 2 --optimizer adam
expect_error 2 "--lr: must be > 0" -- "$trainrt" bench "$model" --batch 2 --lr 0
expect_error 2 "--fuse: expected one of on, off, got 'no'" -- "$trainrt" bench "$model" --batch 2 --fuse no
expect_error 2 "--layouts: expected one of blocked, plain, got 'nhwc'" -- "$trainrt" bench "$model" --batch 2 --layouts nhwc
expect_error 2 "unknown" -- "$trainrt" bench "$model" --batch 2 --stepz 3
expect_error 2 "--trace /no/such/dir/t.json: its folder does not exist" -- "$trainrt" bench "$model" --batch 2 --trace /no/such/dir/t.json
expect_error 2 "no-such.onnx" -- "$trainrt" bench "$tmp/no-such.onnx" --batch 2
# Two graph inputs (ONNX's Add test): not an image classifier.
add=/usr/share/libonnx-testdata/data/node/test_add/model.onnx
[ -f "$add" ] && expect_error 2 "one graph input" -- "$trainrt" bench "$add" --batch 2
# One input but no [N,classes] logits (ONNX's Relu test, [3,4,5] -> [3,4,5]).
relu=/usr/share/libonnx-testdata/data/node/test_relu/model.onnx
[ -f "$relu" ] && expect_error 2 "fixed batch of 3, so --batch must be 3" -- "$trainrt" bench "$relu" --batch 2
[ -f "$relu" ] && expect_error 2 "logits \[N,classes\]" -- "$trainrt" bench "$relu" --batch 3

if [ "$fails" -ne 0 ]; then
  echo "bench_cli.sh: $fails FAIL"
  exit 1
fi
echo "bench_cli.sh: ok"
