#!/usr/bin/python3
"""Writes seq_cnn.onnx: a small 1-D convolution network (audio- or text-style, N,C,L),
for `trainrt selftest MODEL`, which the GPU bundle runs on a node (tools/gpu_run.sh) and
tests/cli/selftest_cli.sh on the CPU: the cuda backend runs 1-D convolutions as 2-D ones
over a unit height (ops/core/window.h one_d_as_two_d). Input 'signal' [N,4,32], logits [N,5]:

  c1 = Relu(Conv(signal, w1, b1))             k3, pads 1, a bias (FusedConv conv+bias+relu)
  p1 = MaxPool(c1, 2, stride 2)               [N,8,16]
  c2 = Relu(BatchNormalization(Conv(p1, w2))) k3, group 2, dilation 2, pads 2
  r  = c2 + p1                                residual
  c3 = Conv(r, w3)                            k3, stride 2, auto_pad SAME_UPPER: [N,16,8]
  logits = Gemm(Flatten(GlobalAveragePool(c3)), wf, bf, transB=1)

    /usr/bin/python3 tests/data/seq_cnn.py tests/data/seq_cnn.onnx
"""
import sys

from onnx import TensorProto, helper, save

from onnx_inits import bn, init, inits

N = helper.make_node
nodes = [
    N("Conv", ["signal", init("w1", (8, 4, 3)), init("b1", (8,), 0.1)], ["c1"], pads=[1, 1]),
    N("Relu", ["c1"], ["r1"]),
    N("MaxPool", ["r1"], ["p1"], kernel_shape=[2], strides=[2]),
    N("Conv", ["p1", init("w2", (8, 4, 3))], ["c2"], pads=[2, 2], dilations=[2], group=2),
    N("BatchNormalization", ["c2"] + bn("bn2", 8), ["c2n"]),
    N("Relu", ["c2n"], ["c2r"]),
    N("Add", ["c2r", "p1"], ["res"]),
    N("Conv", ["res", init("w3", (16, 8, 3))], ["c3"], strides=[2], auto_pad="SAME_UPPER"),
    N("GlobalAveragePool", ["c3"], ["g"]),
    N("Flatten", ["g"], ["f"]),
    N("Gemm", ["f", init("wf", (5, 16), 0.3), init("bf", (5,), 0.1)], ["logits"], transB=1),
]
x = helper.make_tensor_value_info("signal", TensorProto.FLOAT, ["N", 4, 32])
y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])
graph = helper.make_graph(nodes, "seq_cnn", [x], [y], inits)
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests/data/seq_cnn.py"),
     sys.argv[1])
