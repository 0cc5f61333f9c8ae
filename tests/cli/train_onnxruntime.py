#!/usr/bin/env python3
"""`trainrt train --export/--export-inference` give models ONNX Runtime runs like trainrt does.

A tiny Wide ResNet is trained briefly on Fashion-MNIST, exported, passed through
onnx.checker (full check, shape inference included), then run in ONNX Runtime
(pip onnxruntime in <build dir>/pydeps, installed by tools/setup.sh) on 256 test
images: its logits must match `trainrt run` on the same input tensor, and its
accuracy must match `trainrt evaluate` on the same images. The inference export
(BatchNormalization folded into Conv, Dropout removed, standard ONNX ops only) must
pass the same checker, keep the interface, and give the same logits in ONNX Runtime.
Usage: train_onnxruntime.py <trainrt binary> <source dir>
"""
import gzip
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

trainrt, src = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(trainrt)), "pydeps"))
try:
    import onnxruntime as ort
except ImportError as e:
    print(f"FAIL: onnxruntime is not installed in <build>/pydeps (run tools/setup.sh): {e}")
    sys.exit(1)

N = 256
DATA = "/usr/share/datasets/fashion-mnist"


def sh(*args):
    r = subprocess.run([trainrt, *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: trainrt {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
        sys.exit(1)
    return r.stdout


def idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


with tempfile.TemporaryDirectory() as tmp:
    model = os.path.join(tmp, "wrn.onnx")
    trained = os.path.join(tmp, "trained.onnx")
    infer = os.path.join(tmp, "infer.onnx")
    sh("model", "wrn", "--dataset", "fashion-mnist", "--widths", "4,8,8,8", "--blocks-per-stage", "1", "-o", model)
    sh("train", model, "--dataset", "fashion-mnist", "--limit-train", "512", "--limit-test", "64", "--epochs", "1",
       "--batch-size", "32", "--optimizer", "adam", "--base-lr", "0.005", "--threads", "2", "--export", trained,
       "--export-inference", infer)

    m = onnx.load(trained)
    onnx.checker.check_model(m, full_check=True)
    original = onnx.load(model)
    assert [i.name for i in m.graph.input] == [i.name for i in original.graph.input]
    assert [o.name for o in m.graph.output] == [o.name for o in original.graph.output]
    # Trained: parameters and BatchNormalization running statistics changed.
    before = {t.name: numpy_helper.to_array(t) for t in original.graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    assert before.keys() == after.keys()
    assert not np.array_equal(before["fc.weight"], after["fc.weight"])
    assert any("running_mean" in n and not np.array_equal(before[n], after[n]) for n in before), "BN stats unchanged"

    images = idx(f"{DATA}/t10k-images-idx3-ubyte.gz", 16)[: N * 784].reshape(N, 1, 28, 28)
    labels = idx(f"{DATA}/t10k-labels-idx1-ubyte.gz", 8)[:N].astype(np.int64)
    x = ((images.astype(np.float32) / 255.0 - np.float32(0.2860)) / np.float32(0.3530)).astype(np.float32)

    sess = ort.InferenceSession(trained, providers=["CPUExecutionProvider"])
    in_name = sess.get_inputs()[0].name
    ort_logits = sess.run(None, {in_name: x})[0]
    assert ort_logits.shape == (N, 10), ort_logits.shape

    xpb = os.path.join(tmp, "x.pb")
    with open(xpb, "wb") as f:
        f.write(numpy_helper.from_array(x, in_name).SerializeToString())
    outdir = os.path.join(tmp, "out")
    sh("run", trained, "--input", f"{in_name}={xpb}", "--output-dir", outdir, "--threads", "2")
    t = onnx.TensorProto()
    with open(os.path.join(outdir, "output_0.pb"), "rb") as f:
        t.ParseFromString(f.read())
    ours = numpy_helper.to_array(t)
    diff = float(np.max(np.abs(ours - ort_logits)))
    scale = float(np.max(np.abs(ort_logits)))
    print(f"max |trainrt - onnxruntime| logits = {diff:.3g} (logit scale {scale:.3g})")
    assert diff <= 1e-4 * max(1.0, scale), diff

    ort_acc = float(np.mean(np.argmax(ort_logits, axis=1) == labels))
    out = sh("evaluate", trained, "--dataset", "fashion-mnist", "--limit", str(N), "--threads", "2")
    ev_acc = float(out.split("Test Accuracy = ")[1].split()[0])
    print(f"accuracy: onnxruntime {ort_acc:.4f}, trainrt evaluate {ev_acc:.3f}")
    # evaluate prints 3 decimals and normalises with its own table: allow rounding + one image.
    assert abs(ort_acc - ev_acc) <= 0.0005 + 1.0 / N, (ort_acc, ev_acc)
    # A 16-step run barely beats chance (eval-mode BatchNorm statistics still near their
    # initial values); the logits must still depend on the image.
    assert float(np.std(ort_logits, axis=0).max()) > 1e-3, "logits do not depend on the input"

    mi = onnx.load(infer)
    onnx.checker.check_model(mi, full_check=True)
    assert [i.name for i in mi.graph.input] == [i.name for i in original.graph.input]
    assert [o.name for o in mi.graph.output] == [o.name for o in original.graph.output]
    ops = {n.op_type for n in mi.graph.node}
    assert not ops & {"BatchNormalization", "Dropout", "Identity"}, ops
    assert all(n.domain in ("", "ai.onnx") for n in mi.graph.node), {n.domain for n in mi.graph.node}
    assert len(mi.graph.node) < len(m.graph.node), (len(mi.graph.node), len(m.graph.node))
    infer_logits = ort.InferenceSession(infer, providers=["CPUExecutionProvider"]).run(None, {in_name: x})[0]
    d2 = float(np.max(np.abs(infer_logits - ort_logits)))
    print(f"max |inference export - full export| logits in onnxruntime = {d2:.3g}")
    assert d2 <= 1e-4 * max(1.0, scale), d2

print("train_onnxruntime: all checks passed")
