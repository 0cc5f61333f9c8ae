#!/usr/bin/env python3
"""A small CNN with no BatchNormalization and no Dropout, as ONNX: Conv-Relu-MaxPool x2, Gemm.

Without batch statistics or masks, the mean loss of a global batch has exactly the average
of the per-rank gradients, so data-parallel training on 2 ranks must follow one process on
the whole batch up to fp32 rounding (tests/cli/train_srun.sh). Usage: make_cnn_no_bn.py OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper
rng = np.random.default_rng(0)
def init(name, shape, scale):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)
inits = [init("c1.weight", (8, 1, 3, 3), 0.3), init("c1.bias", (8,), 0.1),
         init("c2.weight", (16, 8, 3, 3), 0.1), init("c2.bias", (16,), 0.1),
         init("fc.weight", (10, 16 * 7 * 7), 0.02), init("fc.bias", (10,), 0.01)]
nodes = [
    helper.make_node("Conv", ["input", "c1.weight", "c1.bias"], ["a"], pads=[1, 1, 1, 1], name="c1"),
    helper.make_node("Relu", ["a"], ["b"], name="r1"),
    helper.make_node("MaxPool", ["b"], ["c"], kernel_shape=[2, 2], strides=[2, 2], name="p1"),
    helper.make_node("Conv", ["c", "c2.weight", "c2.bias"], ["d"], pads=[1, 1, 1, 1], name="c2"),
    helper.make_node("Relu", ["d"], ["e"], name="r2"),
    helper.make_node("MaxPool", ["e"], ["f"], kernel_shape=[2, 2], strides=[2, 2], name="p2"),
    helper.make_node("Flatten", ["f"], ["g"], axis=1, name="flat"),
    helper.make_node("Gemm", ["g", "fc.weight", "fc.bias"], ["logits"], transB=1, name="fc"),
]
g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
                      [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
