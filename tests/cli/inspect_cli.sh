#!/usr/bin/env bash
# `trainrt inspect` and the CLI's error contract: bad input -> exit 2 and exactly
# one line on stderr that names the file; no crash, no partial output.
set -uo pipefail
trainrt=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

small_wrn
if [ -f "$model" ]; then
  "$trainrt" inspect "$model" >"$tmp/table" || fail "inspect exited $?"
  grep -q "^parameters: " "$tmp/table" || fail "inspect lacks the parameters line"
  grep -q "forward FLOPs per sample" "$tmp/table" || fail "inspect lacks FLOPs"
  grep -q "unsupported ops: none" "$tmp/table" || fail "inspect reports unsupported ops: $(grep -A3 unsupported "$tmp/table")"
  grep -Eq " Conv +\(float32\[N,1,28,28\]" "$tmp/table" || fail "inspect does not show the symbolic batch on the first Conv"
  # --passes: the WRN's 13 BatchNormalizations fold into their Convs for inference, and
  # fuse with their Relus in the training graph (the six before a Dropout with it too).
  "$trainrt" inspect "$model" --passes --training >"$tmp/passes" || fail "inspect --passes exited $?"
  grep -Eq "^BatchNormalization +13 +0 " "$tmp/passes" || fail "inspect --passes: BN not folded: $(grep -m2 ^BatchNorm "$tmp/passes")"
  grep -Eq "^ai.trainrt::BatchNormalizationRelu +0 +7 " "$tmp/passes" || fail "inspect --passes: BN+Relu not fused in the training graph"
  grep -Eq "^ai.trainrt::BatchNormalizationReluDropout +0 +6 " "$tmp/passes" ||
    fail "inspect --passes: BN+Relu+Dropout not fused in the training graph"
  # --json --passes: the same counts as one JSON object's "passes" member.
  "$trainrt" inspect "$model" --passes --json >"$tmp/passes.json" || fail "inspect --passes --json exited $?"
  /usr/bin/python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["passes"]; assert p["ops"]["BatchNormalization"] == [13, 0], p' \
    "$tmp/passes.json" || fail "inspect --passes --json: BN not folded: $(head -c 300 "$tmp/passes.json")"
  "$trainrt" inspect "$model" --json >"$tmp/json" || fail "inspect --json exited $?"
  /usr/bin/python3 - "$tmp/json" "$tmp/table" <<'PY' || fail "inspect --json disagrees with the table"
import json, sys
j = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read()
params = int([l for l in table.splitlines() if l.startswith("parameters: ")][0].split()[1])
assert j["parameters"] == params, (j["parameters"], params)
assert j["flops_per_sample"] > 0
assert j["unsupported"] == []
assert len(j["nodes"]) == int(table.splitlines()[0].split(": ")[1].split()[0])
PY
  # A model with an op trainrt lacks: listed with its node name, exit 2.
  /usr/bin/python3 - "$model" "$tmp/unsupported.onnx" <<'PY'
import onnx, sys
m = onnx.load(sys.argv[1])
n = onnx.helper.make_node("Einsum", ["logits"], ["e"], name="my_einsum", equation="ij->ij")
m.graph.node.append(n)
m.graph.output[0].name = "e"
onnx.save(m, sys.argv[2])
PY
  "$trainrt" inspect "$tmp/unsupported.onnx" >"$tmp/table2" 2>/dev/null
  [ $? -eq 2 ] || fail "inspect of a model with an unsupported op should exit 2"
  grep -q "'my_einsum' (Einsum)" "$tmp/table2" || fail "inspect does not list the unsupported node"
  # A truncated model.
  head -c 3000 "$model" >"$tmp/truncated.onnx"
  expect_error 2 "truncated.onnx" -- "$trainrt" inspect "$tmp/truncated.onnx"
fi

printf 'not a model\n' >"$tmp/text.onnx"
expect_error 2 "text.onnx" -- "$trainrt" inspect "$tmp/text.onnx"
: >"$tmp/empty.onnx"
expect_error 2 "empty" -- "$trainrt" inspect "$tmp/empty.onnx"
expect_error 2 "nope.onnx" -- "$trainrt" inspect "$tmp/nope.onnx"
expect_error 2 "unknown flag --frobnicate" -- "$trainrt" inspect "$tmp/x.onnx" --frobnicate
expect_error 2 "usage" -- "$trainrt" inspect
expect_error 2 "unknown command" -- "$trainrt" frobnicate
"$trainrt" --version >"$tmp/version" || fail "--version exited $?"
# trainrt starts itself again with OMP_WAIT_POLICY=PASSIVE unless the user set one (its
# OpenMP threads would otherwise spin on the cores oneTBB's loops need).
env -u OMP_WAIT_POLICY "$trainrt" --version | grep -q "^  OpenMP  *wait policy PASSIVE$" ||
  fail "--version: OpenMP wait policy not PASSIVE: $(env -u OMP_WAIT_POLICY "$trainrt" --version)"
OMP_WAIT_POLICY=ACTIVE "$trainrt" --version | grep -q "^  OpenMP  *wait policy ACTIVE$" ||
  fail "--version: the user's OMP_WAIT_POLICY=ACTIVE was not kept"
for lib in onnx oneDNN oneTBB MPI CUDA cuDNN cuBLASLt NCCL; do
  grep -q "^  $lib " "$tmp/version" || fail "--version does not report $lib"
done

[ "$fails" -eq 0 ] && echo "inspect_cli: all checks passed"
exit $((fails > 0))
