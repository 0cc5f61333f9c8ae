#!/usr/bin/python3
"""Writes mobile_cnn.onnx: a small CNN of the blocks torchvision's mobile networks export
(MobileNetV3, ShuffleNetV2, EfficientNet), for `trainrt selftest MODEL`, which the GPU
bundle runs on a node (tools/gpu_run.sh) and tests/cli/selftest_cli.sh on the CPU: the
kernels the Wide ResNet leaves out. Input 'images' [N,3,16,16], logits [N,6]:

  r1 = Relu(Conv(images, w1, b1))                  3x3 with a bias (FusedConv conv+bias+relu)
  p1 = MaxPool(r1, 2x2)                            [N,8,8,8]
  hs = HardSwish(BatchNormalization(Conv(p1, wd))) depthwise 3x3 (group 8)
  se = hs * HardSigmoid(Conv(Relu(Conv(GlobalAveragePool(hs)))))   squeeze-and-excitation
  r2 = Relu(BatchNormalization(Conv(se, wp)) + p1) pointwise, residual
  a  = Conv(r2, wa, ba); a2 = a * Sigmoid(a)       SiLU
  sh = Reshape(Transpose(Reshape(Concat(r2, a2), [-1,2,6,8,8]), [0,2,1,3,4]), [-1,12,8,8])
                                                   ShuffleNet's channel shuffle
  logits = Gemm(Flatten(GlobalAveragePool(AveragePool(sh, 2x2))), wf, bf, transB=1)

    /usr/bin/python3 tests/data/mobile_cnn.py tests/data/mobile_cnn.onnx
"""
import sys

from onnx import TensorProto, helper, save

from onnx_inits import bn, init, inits

N = helper.make_node
nodes = [
    N("Conv", ["images", init("w1", (8, 3, 3, 3)), init("b1", (8,), 0.1)], ["c1"], pads=[1, 1, 1, 1]),
    N("Relu", ["c1"], ["r1"]),
    N("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
    N("Conv", ["p1", init("wd", (8, 1, 3, 3))], ["dw"], pads=[1, 1, 1, 1], group=8),
    N("BatchNormalization", ["dw"] + bn("bn1", 8), ["dwn"]),
    N("HardSwish", ["dwn"], ["hs"]),
    N("GlobalAveragePool", ["hs"], ["g"]),
    N("Conv", ["g", init("wse1", (4, 8, 1, 1)), init("bse1", (4,), 0.1)], ["s1"]),
    N("Relu", ["s1"], ["sr"]),
    N("Conv", ["sr", init("wse2", (8, 4, 1, 1)), init("bse2", (8,), 0.1)], ["s2"]),
    N("HardSigmoid", ["s2"], ["gate"], alpha=1.0 / 6, beta=0.5),
    N("Mul", ["hs", "gate"], ["se"]),
    N("Conv", ["se", init("wp", (8, 8, 1, 1))], ["pw"]),
    N("BatchNormalization", ["pw"] + bn("bn2", 8), ["pwn"]),
    N("Add", ["pwn", "p1"], ["res"]),
    N("Relu", ["res"], ["r2"]),
    N("Conv", ["r2", init("wa", (4, 8, 1, 1)), init("ba", (4,), 0.1)], ["a"]),
    N("Sigmoid", ["a"], ["sa"]),
    N("Mul", ["a", "sa"], ["a2"]),
    N("Concat", ["r2", "a2"], ["cat"], axis=1),
    N("Reshape", ["cat", init("groups", None, value=[-1, 2, 6, 8, 8])], ["cat5"]),
    N("Transpose", ["cat5"], ["t5"], perm=[0, 2, 1, 3, 4]),
    N("Reshape", ["t5", init("channels", None, value=[-1, 12, 8, 8])], ["sh"]),
    N("AveragePool", ["sh"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
    N("GlobalAveragePool", ["ap"], ["gp"]),
    N("Flatten", ["gp"], ["f"]),
    N("Gemm", ["f", init("wf", (6, 12), 0.3), init("bf", (6,), 0.1)], ["logits"], transB=1),
]
x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 16, 16])
y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 6])
graph = helper.make_graph(nodes, "mobile_cnn", [x], [y], inits)
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests/data/mobile_cnn.py"),
     sys.argv[1])
