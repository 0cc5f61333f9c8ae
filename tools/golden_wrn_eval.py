#!/usr/bin/python3
"""PyTorch's logits for tests/data/wrn_small_eval.onnx on a fixed batch (golden data).

tests/data/wrn_small_eval.onnx is PyTorch's own eval-mode export (opset 13, BatchNorm
folded into Conv by the exporter) of the seed's Wide ResNet at widths 4,8,12,16,
Fashion-MNIST shape, built by tools/wrn_reference.py with torch.manual_seed(0). This
script rebuilds that model the same way, re-exports it and checks that every
initializer and the node list are identical to the committed file (so the logits
belong to that file and not to some other draw of the weights), then writes:

    tests/data/wrn_small_eval_golden/input_0.pb    'input'  float32 [8,1,28,28]
    tests/data/wrn_small_eval_golden/output_0.pb   'logits' float32 [8,10], PyTorch fp32 eval
    tests/data/wrn_small_eval_golden/meta.json     command, torch version, fp32-vs-fp64 gap

The batch is 8 images with pixel statistics like normalised Fashion-MNIST (a seeded
normal draw, half of the pixels zeroed the way the dark background is), so every
ReLU sees both signs. tests/cli/run_golden.py compares `trainrt run` on both
backends with output_0.pb; it needs numpy and onnx only, not PyTorch.

    /usr/bin/python3 tools/golden_wrn_eval.py [--out tests/data/wrn_small_eval_golden]
"""
import argparse
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wrn_reference as w  # noqa: E402

MODEL = os.path.normpath(os.path.join(HERE, "..", "tests", "data", "wrn_small_eval.onnx"))


def same_model(a, b):
    """'' when the two ModelProtos have the same nodes and bit-identical initializers."""
    ia = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    ib = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
    if sorted(ia) != sorted(ib):
        return "initializer names differ"
    for k in ia:
        if ia[k].shape != ib[k].shape or ia[k].tobytes() != ib[k].tobytes():
            return "initializer %s differs" % k
    na = [(n.op_type, list(n.input), list(n.output)) for n in a.graph.node]
    nb = [(n.op_type, list(n.input), list(n.output)) for n in b.graph.node]
    return "" if na == nb else "node lists differ"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(os.path.dirname(MODEL), "wrn_small_eval_golden"))
    a = p.parse_args()

    warnings.filterwarnings("ignore", category=UserWarning)  # the exporter's notes on num_batches_tracked
    torch.manual_seed(0)  # as tools/wrn_reference.py write-test-data
    model = w.build("fashion-mnist", w.SMALL_WIDTHS)
    with tempfile.TemporaryDirectory() as tmp:
        # write-test-data exports the training file first; its trace runs the model in
        # training mode once, which moves the BatchNorm running statistics.
        w.export(model, os.path.join(tmp, "train.onnx"), 28, 1, training=True)
        path = os.path.join(tmp, "eval.onnx")
        w.export(model, path, 28, 1, training=False)
        why = same_model(onnx.load(path), onnx.load(MODEL))
    if why:
        sys.exit("golden_wrn_eval: the rebuilt model is not %s (%s); regenerate both with "
                 "tools/wrn_reference.py write-test-data" % (MODEL, why))

    g = torch.Generator().manual_seed(20261122)
    x = torch.randn(8, 1, 28, 28, generator=g) * 1.5
    x[torch.rand(8, 1, 28, 28, generator=g) < 0.5] = -0.8  # background pixels after normalisation
    with torch.no_grad():
        logits = model(x)
        exact = model.double()(x.double())
    gap = (logits.double() - exact).abs().max().item()

    os.makedirs(a.out, exist_ok=True)
    for t, name, file in ((x, "input", "input_0.pb"), (logits, "logits", "output_0.pb")):
        with open(os.path.join(a.out, file), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy().astype(np.float32), name).SerializeToString())
    meta = {
        "command": "/usr/bin/python3 tools/golden_wrn_eval.py",
        "model": "tests/data/wrn_small_eval.onnx",
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "input": "input_0.pb: float32 [8,1,28,28], torch.Generator seed 20261122",
        "output": "output_0.pb: PyTorch fp32 eval-mode logits [8,10]",
        "logits_abs_max": float(logits.abs().max().item()),
        "fp32_vs_fp64_max_abs_diff": gap,
    }
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print("wrote %s: logits |max| %.4g, PyTorch fp32 vs fp64 max abs diff %.3g" % (a.out, meta["logits_abs_max"], gap))


if __name__ == "__main__":
    main()
