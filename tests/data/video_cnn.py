#!/usr/bin/python3
"""Writes video_cnn.onnx: a small 3-D convolution network (video- or volume-style,
N,C,D,H,W), for `trainrt selftest MODEL`, which the GPU bundle runs on a node
(tools/gpu_run.sh) and tests/cli/selftest_cli.sh on the CPU: the cuda backend runs 3-D
convolutions through cuDNN's N-d descriptors (ops/conv_cuda.cu, ops/core/conv_descriptor.h).
Input 'clip' [N,3,4,8,8], logits [N,5]:

  c1 = Relu(Conv(clip, w1, b1))               k3x3x3, pads 1, a bias (FusedConv conv+bias+relu)
  c2 = Relu(BatchNormalization(Conv(c1, w2))) k3x3x3, group 2, dilations 1,2,2, pads 1,2,2
  p  = MaxPool(c2, 2x2x2, stride 2)           [N,8,2,4,4]
  c3 = Conv(p, w3)                            k2x3x3, strides 1,2,2, auto_pad SAME_UPPER
                                              (uneven pads: the padded copy): [N,16,2,2,2]
  logits = Gemm(Flatten(GlobalAveragePool(c3)), wf, bf, transB=1)

    /usr/bin/python3 tests/data/video_cnn.py tests/data/video_cnn.onnx
"""
import sys

from onnx import TensorProto, helper, save

from onnx_inits import bn, init, inits

N = helper.make_node
nodes = [
    N("Conv", ["clip", init("w1", (8, 3, 3, 3, 3)), init("b1", (8,), 0.1)], ["c1"], pads=[1, 1, 1, 1, 1, 1]),
    N("Relu", ["c1"], ["r1"]),
    N("Conv", ["r1", init("w2", (8, 4, 3, 3, 3))], ["c2"], pads=[1, 2, 2, 1, 2, 2], dilations=[1, 2, 2], group=2),
    N("BatchNormalization", ["c2"] + bn("bn2", 8), ["c2n"]),
    N("Relu", ["c2n"], ["c2r"]),
    N("MaxPool", ["c2r"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
    N("Conv", ["p", init("w3", (16, 8, 2, 3, 3))], ["c3"], strides=[1, 2, 2], auto_pad="SAME_UPPER"),
    N("GlobalAveragePool", ["c3"], ["g"]),
    N("Flatten", ["g"], ["f"]),
    N("Gemm", ["f", init("wf", (5, 16), 0.3), init("bf", (5,), 0.1)], ["logits"], transB=1),
]
x = helper.make_tensor_value_info("clip", TensorProto.FLOAT, ["N", 3, 4, 8, 8])
y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5])
graph = helper.make_graph(nodes, "video_cnn", [x], [y], inits)
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests/data/video_cnn.py"),
     sys.argv[1])
