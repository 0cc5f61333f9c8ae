#!/usr/bin/env bash
# `trainrt inspect --device cuda`: the ops the cuda backend would run on the host (no
# cuda kernel registered), listed from the registry, so this runs without a GPU. The
# Wide ResNet's training and evaluation graphs run entirely on the device; a model with
# an op lacking a cuda kernel lists it. A build without CUDA says so in one line.
set -uo pipefail
trainrt=$1
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

small_wrn
expect_error 2 "expected cuda" -- "$trainrt" inspect "$model" --device cpu
"$trainrt" inspect "$model" --device cuda >"$tmp/probe" 2>"$tmp/probe.err"
if grep -q "not built" "$tmp/probe.err"; then
  expect_error 2 "the cuda backend is not built" -- "$trainrt" inspect "$model" --device cuda
  echo "skipped: $trainrt is not a CUDA build (inspect --device cuda says so)"
  exit $((fails > 0))
fi

"$trainrt" inspect "$model" --training --device cuda >"$tmp/wrn" || fail "inspect --training --device cuda exited $?"
for g in "model graph" "evaluation graph" "fused training graph"; do
  grep -q "^cuda host fallbacks of the $g: none$" "$tmp/wrn" ||
    fail "WRN $g has host fallbacks: $(grep "host fallbacks of the $g" "$tmp/wrn")"
done
"$trainrt" inspect "$model" --training --fuse off --device cuda >"$tmp/wrn_unfused" || fail "inspect --fuse off exited $?"
grep -q "^cuda host fallbacks of the training graph: none$" "$tmp/wrn_unfused" ||
  fail "WRN unfused training graph has host fallbacks: $(grep "host fallbacks" "$tmp/wrn_unfused")"

# A model with Erf, which has no cuda kernel: listed with its count, in the table and the JSON.
/usr/bin/python3 - "$tmp/erf.onnx" <<'PY'
import onnx, sys
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 10])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])
nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Erf", ["r"], ["y"], name="erf")]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
onnx.save(m, sys.argv[1])
PY
"$trainrt" inspect "$tmp/erf.onnx" --device cuda >"$tmp/sm" || fail "inspect --device cuda of the Erf model exited $?"
grep -q "^cuda host fallbacks of the model graph: Erf (1)$" "$tmp/sm" ||
  fail "Erf not listed: $(grep "host fallbacks" "$tmp/sm")"
"$trainrt" inspect "$tmp/erf.onnx" --device cuda --json >"$tmp/sm.json" || fail "inspect --json --device cuda exited $?"
/usr/bin/python3 -c 'import json, sys; f = json.load(open(sys.argv[1]))["cuda_host_fallbacks"]; assert f["model"] == ["Erf (1)"], f' \
  "$tmp/sm.json" || fail "inspect --json lacks Erf: $(head -c 300 "$tmp/sm.json")"
exit $((fails > 0))
