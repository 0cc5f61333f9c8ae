#!/usr/bin/env bash
# `trainrt inspect --training --memory` on a small Wide ResNet (widths 4,8,12,16,
# Fashion-MNIST shape): the memory report's lines are present and consistent (the
# arena is below the naive bytes, the live set fits in the arena, the persistent bytes
# equal parameters + momentum buffers + BN statistics + the step counter computed
# here independently, the batch scales activations, the fused graph's peak is below
# the unfused one's), the buckets cover every
# parameter once, and bad flags are exit 2 with one stderr line.
#
#   bash tests/cli/inspect_memory.sh build/trainrt .      (CTest runs it this way)
set -uo pipefail
trainrt=$1
py=/usr/bin/python3
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
[ -x "$trainrt" ] || { echo "inspect_memory.sh: $trainrt is not an executable (build it first)"; exit 2; }

"$trainrt" model wrn --dataset fashion-mnist --widths 4,8,12,16 -o "$tmp/wrn.onnx" >/dev/null || { echo "FAIL: model"; exit 1; }
for b in 8 16; do
  "$trainrt" inspect "$tmp/wrn.onnx" --training --memory --batch $b --bucket-cap-mb 0.01 >"$tmp/mem$b.txt" 2>"$tmp/err" ||
    fail "inspect --memory --batch $b exited $?: $(cat "$tmp/err")"
done
"$trainrt" inspect "$tmp/wrn.onnx" --training --memory --batch 8 --bucket-cap-mb 0.01 --fuse off >"$tmp/mem8u.txt" 2>"$tmp/err" ||
  fail "inspect --memory --fuse off exited $?: $(cat "$tmp/err")"
"$py" - "$tmp/mem8.txt" "$tmp/mem16.txt" "$tmp/wrn.onnx" "$tmp/mem8u.txt" <<'PY' || fail "memory report"
import re, sys, onnx, numpy as np
from onnx import numpy_helper
t8, t16 = open(sys.argv[1]).read(), open(sys.argv[2]).read()
def num(text, label):
    m = re.search(re.escape(label) + r": (\d+)", text)
    assert m, f"no '{label}' line in:\n{text}"
    return int(m.group(1))
a8, n8, p8 = num(t8, "peak arena bytes"), num(t8, "naive bytes (one buffer per value)"), num(t8, "persistent bytes (parameters, optimizer state, BN statistics)")
a16, n16 = num(t16, "peak arena bytes"), num(t16, "naive bytes (one buffer per value)")
assert 0 < a8 < n8, (a8, n8)
assert a8 < a16 and n8 < n16, (a8, a16, n8, n16)
live = re.search(r"largest live set: (\d+) values, (\d+) bytes", t8)
assert live and 0 < int(live.group(2)) <= a8, live
# Persistent: every float initializer except Dropout ratios (trainable params + BN stats),
# plus one momentum buffer per trainable param and the int64 step counter, each 64-byte aligned.
m = onnx.load(sys.argv[3])
al = lambda n: max(64, (n + 63) // 64 * 64)
stats = set()
for node in m.graph.node:
    if node.op_type == "BatchNormalization": stats.update(node.input[3:5])
want = 0
for init in m.graph.initializer:
    a = numpy_helper.to_array(init)
    if "dropout" in init.name: continue
    want += al(a.nbytes) * (1 if init.name in stats else 2)
want += al(8)
assert p8 == want, (p8, want)
# Buckets: every trainable parameter exactly once.
params = re.findall(r"bucket \d+: (\d+) params", t8)
trainable = sum(1 for i in m.graph.initializer if "dropout" not in i.name and i.name not in stats)
assert sum(map(int, params)) == trainable, (params, trainable)
assert len(params) > 1, params
# The default plans the fused graph train runs; fusions (the Relu outputs that fed a
# Dropout die at the Dropout, BN+Relu and Conv+Add write no intermediate) lower the peak.
u8 = open(sys.argv[4]).read()
assert "batch 8 (fused graph" in t8 and "batch 8 (unfused graph" in u8, (t8.splitlines()[0], u8.splitlines()[0])
au8 = num(u8, "peak arena bytes")
assert a8 < au8, (a8, au8)
assert num(u8, "persistent bytes (parameters, optimizer state, BN statistics)") == p8
print("ok", a8, n8, p8, "unfused", au8)
PY

expect_error 2 "needs --training" -- "$trainrt" inspect "$tmp/wrn.onnx" --memory
expect_error 2 "\-\-batch" -- "$trainrt" inspect "$tmp/wrn.onnx" --training --memory --batch 0
expect_error 2 "\-\-batch" -- "$trainrt" inspect "$tmp/wrn.onnx" --training --memory --batch 2.5
expect_error 2 "\-\-bucket-cap-mb" -- "$trainrt" inspect "$tmp/wrn.onnx" --training --memory --bucket-cap-mb 0
expect_error 2 "\-\-fuse" -- "$trainrt" inspect "$tmp/wrn.onnx" --training --memory --fuse maybe

[ "$fails" -eq 0 ] && echo "inspect_memory: all checks passed"
exit $((fails > 0))
