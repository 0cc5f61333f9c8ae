#!/usr/bin/env bash
# `trainrt inspect --device cuda`: the ops the cuda backend would run on the host (no
# cuda kernel registered), listed from the registry, so this runs without a GPU. The
# Wide ResNet's training and evaluation graphs run entirely on the device; a model with
# an op lacking a cuda kernel lists it. With --training it also prints the cuDNN fusion
# plan (pattern, fused, unfused with the reason) and which convolution passes run on
# 16-bit graphs under --precision bf16/fp16; --timing-cache is checked here too, as
# far as a machine without a GPU gets. A build without CUDA says so in one line.
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

# The cuDNN fusion plan of the fused training graph (runtime/cudnn_fusion.h): the Wide
# ResNet's fused steps all map to a pattern, but the dropout gradients after a dgrad.
row() { grep -E "^  $1 +$2 +$3  $4\$" "$5" >/dev/null || fail "no row '$1 $2 $3 $4' in: $(sed -n '/cuDNN fusion/,$p' "$5")"; }
grep -q "^cuDNN fusion patterns of the fused training graph (planned):$" "$tmp/wrn" || fail "no cuDNN fusion table"
row bn_relu_fwd 7 0 - "$tmp/wrn"  # the 6 before a Dropout: BatchNormalizationReluDropout, own kernels
row conv_bias_add 3 0 - "$tmp/wrn"
row bn_relu_bwd 7 0 - "$tmp/wrn"
row dgrad_drelu 0 6 "dropout between the convolution and ReLU gradients" "$tmp/wrn"
grep -q "cuDNN fusion" "$tmp/wrn_unfused" && fail "--fuse off prints a cuDNN fusion table"
# Under --precision bf16/fp16 every convolution pass tries a graph on 16-bit copies.
grep -q "^convolution passes on 16-bit tensor-core graphs under --precision bf16/fp16 (planned):$" "$tmp/wrn" ||
  fail "no 16-bit graph table"
row conv_fwd 16 0 - "$tmp/wrn"
row conv_dgrad 15 0 - "$tmp/wrn"
row conv_wgrad 16 0 - "$tmp/wrn"

# A grouped convolution with a residual Add: fused by trainrt (FusedConv), not by cuDNN.
/usr/bin/python3 - "$tmp/grouped.onnx" <<'PY'
import numpy as np, onnx, sys
from onnx import helper, numpy_helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
rng = np.random.default_rng(0)
inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(np.zeros(4, np.float32), "b"),
         numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "fc_w"),
         numpy_helper.from_array(np.zeros(3, np.float32), "fc_b")]
nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="gconv", group=2, pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c", "x"], ["r"], name="add"),
         helper.make_node("Relu", ["r"], ["a"], name="relu"),
         helper.make_node("GlobalAveragePool", ["a"], ["p"], name="gap"),
         helper.make_node("Flatten", ["p"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1)]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
onnx.save(m, sys.argv[1])
PY
"$trainrt" inspect "$tmp/grouped.onnx" --training --device cuda >"$tmp/grouped" 2>&1 ||
  fail "inspect --training --device cuda of the grouped model exited $?: $(tail -3 "$tmp/grouped")"
row conv_bias_add 0 1 "grouped convolution \(group=2\)" "$tmp/grouped"
row conv_fwd 0 1 "grouped convolution \(group=2\)" "$tmp/grouped"
row conv_wgrad 0 1 "grouped convolution \(group=2\)" "$tmp/grouped"

# --timing-cache: only with --device cuda; a corrupt file is refused before anything runs.
expect_error 2 "--timing-cache: applies to --device cuda" -- "$trainrt" bench "$model" --batch 2 --timing-cache "$tmp/tc.json"
printf '{"format": "trainrt-timing-cache", "version": 7, "entries": []}' >"$tmp/tc.json"
expect_error 2 "$tmp/tc.json: timing cache version 7 is not supported" -- \
  "$trainrt" bench "$model" --batch 2 --device cuda --timing-cache "$tmp/tc.json"
expect_error 2 "$tmp/tc.json: timing cache version 7 is not supported" -- \
  "$trainrt" train "$model" --device cuda --timing-cache "$tmp/tc.json" --max-steps 1
expect_error 2 "--timing-cache: applies to --device cuda" -- \
  "$trainrt" evaluate "$model" --dataset fashion-mnist --timing-cache "$tmp/tc.json"
expect_error 2 "$tmp/tc.json: timing cache version 7 is not supported" -- \
  "$trainrt" evaluate "$model" --dataset fashion-mnist --device cuda --timing-cache "$tmp/tc.json"
# The default cache file sits next to the model.
cp "$tmp/tc.json" "$tmp/wrn.timing-cache.json"
expect_error 2 "$tmp/wrn.timing-cache.json: timing cache version 7" -- "$trainrt" bench "$model" --batch 2 --device cuda
rm "$tmp/wrn.timing-cache.json"

# A model with Cast, which has no cuda kernel: listed with its count, in the table and the JSON.
/usr/bin/python3 - "$tmp/cast.onnx" <<'PY'
import onnx, sys
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 10])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])
nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Cast", ["r"], ["y"], name="cast", to=TensorProto.FLOAT)]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
onnx.save(m, sys.argv[1])
PY
"$trainrt" inspect "$tmp/cast.onnx" --device cuda >"$tmp/sm" || fail "inspect --device cuda of the Cast model exited $?"
grep -q "^cuda host fallbacks of the model graph: Cast (1)$" "$tmp/sm" ||
  fail "Cast not listed: $(grep "host fallbacks" "$tmp/sm")"
"$trainrt" inspect "$tmp/cast.onnx" --device cuda --json >"$tmp/sm.json" || fail "inspect --json --device cuda exited $?"
/usr/bin/python3 -c 'import json, sys; f = json.load(open(sys.argv[1]))["cuda_host_fallbacks"]; assert f["model"] == ["Cast (1)"], f' \
  "$tmp/sm.json" || fail "inspect --json lacks Cast: $(head -c 300 "$tmp/sm.json")"

# tests/data/video_cnn.onnx (3-D convolutions, BatchNorm, MaxPool, GlobalAveragePool):
# every op of its graphs has a cuda kernel. (The list names ops without one; the rank-5
# convolutions, which ran on the host by rank before they had an N-d path, were never on
# it: the kernel's own rank test decided that at run time.)
"$trainrt" inspect "$src/tests/data/video_cnn.onnx" --training --device cuda >"$tmp/video" ||
  fail "inspect --training --device cuda of video_cnn.onnx exited $?"
for g in "model graph" "evaluation graph" "fused training graph"; do
  grep -q "^cuda host fallbacks of the $g: none$" "$tmp/video" ||
    fail "video_cnn $g has host fallbacks: $(grep "host fallbacks of the $g" "$tmp/video")"
done

# An unrolled LSTM: its Splits (X.W^T over the time steps, each step's gates) have a cuda
# kernel, so Split is not on the list.
/usr/bin/python3 - "$tmp/lstm.onnx" <<'PY'
import numpy as np, onnx, sys
from onnx import helper, numpy_helper, TensorProto
H, I, T = 4, 3, 3
rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.normal(0, 0.3, (1, 4 * H, I)).astype(np.float32), "W")
r = numpy_helper.from_array(rng.normal(0, 0.3, (1, 4 * H, H)).astype(np.float32), "R")
nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y", "y_h"], name="lstm", hidden_size=H)]
g = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, 2, I])],
                      [helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [1, 2, H])], [w, r])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
PY
"$trainrt" inspect "$tmp/lstm.onnx" --training --device cuda >"$tmp/lstm" || fail "inspect of the LSTM exited $?"
grep -q "^cuda host fallbacks of the model graph: none$" "$tmp/lstm" ||
  fail "the LSTM's model graph has host fallbacks: $(grep "host fallbacks of the model graph" "$tmp/lstm")"
grep "^cuda host fallbacks" "$tmp/lstm" | grep -q "Split" && fail "Split listed on the host: $(grep "host fallbacks" "$tmp/lstm")"
exit $((fails > 0))
