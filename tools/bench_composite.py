#!/usr/bin/python3
"""Is a composite op's own kernel faster than its decomposition into primitives?

For Gelu, HardSwish and LogSoftmax, writes two models that differ only in that op: the
op itself, or the primitives it is a sum of (as PyTorch exports them before opset 20,
or as a decomposition at import would leave them), and times each model's whole
training step with `trainrt bench` (forward, loss, backward, SGD), alternating the two
so that both see the same load. A ratio above 1 means the op's own kernel (and its
gradient's) is faster than the decomposition.

  /usr/bin/python3 tools/bench_composite.py [--trainrt build/trainrt] [--batch 256]
      [--width 2048] [--rounds 2] [--device cpu]

The model: x [N,1,32,32] -> Flatten -> MatMul [1024,W] -> op -> MatMul [W,10] -> logits,
so the op runs on N x W values (batch 256, width 2048: half a million) next to two
matrix products of the size a transformer's MLP block has. Not a test: nothing is
asserted; the figures go to docs/DESIGN.md's decision on composite ops.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def decomposed(op, x, y):
    """The nodes computing y = op(x) from primitives, and their constants."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)
    if op == "Gelu":  # 0.5 x (1 + erf(x / sqrt 2)), PyTorch's export of nn.GELU()
        return ([helper.make_node("Div", [x, "sqrt2"], ["g_d"]), helper.make_node("Erf", ["g_d"], ["g_e"]),
                 helper.make_node("Add", ["g_e", "one"], ["g_a"]), helper.make_node("Mul", [x, "g_a"], ["g_m"]),
                 helper.make_node("Mul", ["g_m", "half"], [y])],
                [c("sqrt2", np.sqrt(2.0)), c("one", 1.0), c("half", 0.5)])
    if op == "HardSwish":  # x * HardSigmoid(x; 1/6, 1/2)
        return ([helper.make_node("HardSigmoid", [x], ["h_s"], alpha=1.0 / 6, beta=0.5),
                 helper.make_node("Mul", [x, "h_s"], [y])], [])
    if op == "LogSoftmax":  # x - max - log(sum(exp(x - max))) over the last axis
        return ([helper.make_node("ReduceMax", [x], ["l_m"], axes=[-1], keepdims=1),
                 helper.make_node("Sub", [x, "l_m"], ["l_s"]), helper.make_node("Exp", ["l_s"], ["l_e"]),
                 helper.make_node("ReduceSum", ["l_e", "axis"], ["l_r"], keepdims=1),
                 helper.make_node("Log", ["l_r"], ["l_l"]), helper.make_node("Sub", ["l_s", "l_l"], [y])],
                [numpy_helper.from_array(np.array([-1], np.int64), "axis")])
    raise ValueError(op)


def model(op, width, fused, path):
    rng = np.random.default_rng(0)
    w = lambda name, shape: numpy_helper.from_array(rng.normal(0, shape[0] ** -0.5, shape).astype(np.float32), name)
    nodes = [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("MatMul", ["f", "w1"], ["h"])]
    inits = [w("w1", (1024, width)), w("w2", (width, 10))]
    if fused:
        attrs = {"axis": -1} if op == "LogSoftmax" else {}
        nodes.append(helper.make_node(op, ["h"], ["a"], **attrs))
    else:
        more, consts = decomposed(op, "h", "a")
        nodes += more
        inits += consts
    nodes.append(helper.make_node("MatMul", ["a", "w2"], ["logits"]))
    graph = helper.make_graph(nodes, f"{op}_{'op' if fused else 'decomposed'}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 32, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    opset = 20 if op == "Gelu" and fused else 17
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def images_per_s(trainrt, path, a):
    out = subprocess.run([trainrt, "bench", path, "--batch", str(a.batch), "--steps", str(a.steps), "--device",
                          a.device], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_composite: trainrt bench {path} failed: {out.stderr.strip().splitlines()[-1:]}")
    m = re.search(r"images/s: ([0-9.]+)", out.stdout)
    arena = re.search(r"planned arena ([0-9.]+) MiB", out.stdout)
    if not m or not arena:
        sys.exit(f"bench_composite: no images/s or planned arena in trainrt bench's output for {path}")
    return float(m.group(1)), float(arena.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainrt", default="build/trainrt")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    print(f"images/s, best of the rounds; batch {a.batch}, width {a.width}, {a.steps} steps, {a.rounds} alternated rounds, device {a.device}")
    print(f"{'op':<12}{'own kernel':>12}{'decomposed':>12}{'ratio':>7}   {'arena MiB, own / decomposed':>28}")
    with tempfile.TemporaryDirectory() as tmp:
        for op in ("Gelu", "HardSwish", "LogSoftmax"):
            paths = [os.path.join(tmp, f"{op}_{k}.onnx") for k in ("op", "decomposed")]
            model(op, a.width, True, paths[0])
            model(op, a.width, False, paths[1])
            best, arena = [0.0, 0.0], [0.0, 0.0]
            for _ in range(a.rounds):
                for i in (0, 1):
                    speed, arena[i] = images_per_s(a.trainrt, paths[i], a)
                    best[i] = max(best[i], speed)
            print(f"{op:<12}{best[0]:>12.1f}{best[1]:>12.1f}{best[0] / best[1]:>7.2f}   {arena[0]:>17.1f} / {arena[1]:.1f}")


if __name__ == "__main__":
    main()
