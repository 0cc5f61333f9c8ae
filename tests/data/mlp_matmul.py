#!/usr/bin/python3
"""Writes mlp_matmul.onnx: a small model of matrix products for `trainrt selftest MODEL`,
which the GPU bundle runs on a node (tools/gpu_run.sh) and tests/cli/selftest_cli.sh on
the CPU. Input 'features' [N,3,20], logits [N,5]:

  h = MatMul(features, w1[20,16]) + b1   batched, one B for every batch (a strided call)
  r = Relu(h)
  q = MatMul(Reshape(r, [-1,3,1,16]), w3[3,16,8])   B's batch 3 repeated over N (a call per batch)
  logits = Gemm(Reshape(q, [-1,24]), w2[5,24], b2, transB=1)   a Linear layer

    /usr/bin/python3 tests/data/mlp_matmul.py tests/data/mlp_matmul.onnx
"""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

rng = np.random.default_rng(0)


def init(name, shape, scale):
    return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)


x = helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 3, 20])
y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])
inits = [init("w1", (20, 16), 0.3), init("b1", (16,), 0.1), init("w3", (3, 16, 8), 0.3),
         init("w2", (5, 24), 0.2), init("b2", (5,), 0.1),
         numpy_helper.from_array(np.array([-1, 3, 1, 16], np.int64), "rows"),
         numpy_helper.from_array(np.array([-1, 24], np.int64), "shape")]
nodes = [helper.make_node("MatMul", ["features", "w1"], ["h"]),
         helper.make_node("Add", ["h", "b1"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["r"]),
         helper.make_node("Reshape", ["r", "rows"], ["r4"]),
         helper.make_node("MatMul", ["r4", "w3"], ["q"]),
         helper.make_node("Reshape", ["q", "shape"], ["f"]),
         helper.make_node("Gemm", ["f", "w2", "b2"], ["logits"], transB=1)]
graph = helper.make_graph(nodes, "mlp_matmul", [x], [y], inits)
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests/data/mlp_matmul.py"),
     sys.argv[1])
