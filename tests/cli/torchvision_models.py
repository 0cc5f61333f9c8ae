#!/usr/bin/python3
"""torchvision's models, exported by PyTorch for training, train in trainrt as in PyTorch.

For each model (torchvision 0.14, random init with a fixed seed, every Dropout p=0 and
no stochastic depth, num_classes=10, 32x32 inputs, batch 8) the model is exported in
training mode (TrainingMode.TRAINING, no constant folding) and trainrt must:
  - import it, and count its trainable parameters as PyTorch does
    (`trainrt inspect --json` "trainable_parameters" == sum(p.numel() for p in model.parameters()));
  - in a CUDA build, for the CNNs: run every op of the training and evaluation graphs on
    the GPU by the kernel registry (`trainrt inspect --training --device cuda` lists no
    host fallback);
  - pass `trainrt selftest` (the cpu backend against the reference, node by node) in
    fp32 and fp16;
  - build its training graph and compute the loss (mean cross entropy on the logits)
    and every parameter's gradient of one batch (`trainrt grad`), which is what one
    plain SGD step (lr 1, no momentum, no weight decay) subtracts from the weights;
  - in fp64 on the reference backend (the export's initializers converted to double
    behind a Cast of the input), match PyTorch fp64 to 1e-6 relative L2 over all
    gradients together (and the loss to 1e-9): both sides compute the same function
    (PyTorch's epsilons rounded to float as ONNX stores them, the export's float roots
    such as GELU's sqrt(2) made exact again), so only rounding separates them
    (measured 1e-15..1e-11);
  - in fp32 on the cpu backend, be no further from PyTorch fp64 than 3x PyTorch fp32's
    own distance from it, plus 1e-5. At batch 8 and 32x32 these deep BN networks are
    ill-conditioned in fp32 (PyTorch fp32 itself is 6e-6..3e-5 away from fp64 here,
    mobilenet_v2 1.6e-2), so a fixed fp32 tolerance would be either loose or flaky;
    a wrong rule is off by O(1).

Each model is one case with one result line (PASS, FAIL, or XFAIL). A model in
EXPECTED_FAILURES is a known failure: its message must contain each listed text (so the list stays true:
a model that starts to pass, or fails otherwise, fails the test until the list is
updated). Run time: ~3 minutes for all (densenet121 ~45 s), mostly export and PyTorch.

    /usr/bin/python3 tests/cli/torchvision_models.py build/trainrt .   [MODEL ...]
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import torch
import torchvision
from onnx import numpy_helper
from torchvision.models.vision_transformer import VisionTransformer

BATCH, SIZE, CLASSES = 8, 32, 10
FP64_RTOL = 1e-6
LOSS64_RTOL = 1e-9
FP32_FACTOR, FP32_FLOOR = 3.0, 1e-5


def small_vit():
    model = VisionTransformer(image_size=32, patch_size=4, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
                              num_classes=CLASSES)
    # torchvision zero-initialises the head, which zeroes every other gradient: random it is.
    torch.nn.init.normal_(model.heads.head.weight, std=0.1)
    return model


# name -> (constructor, opset)
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=CLASSES), 13),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(num_classes=CLASSES), 13),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=CLASSES), 13),
    "shufflenet_v2_x1_0": (lambda: torchvision.models.shufflenet_v2_x1_0(num_classes=CLASSES), 13),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(num_classes=CLASSES, stochastic_depth_prob=0.0),
                        13),
    "densenet121": (lambda: torchvision.models.densenet121(num_classes=CLASSES), 13),
    "vit_small": (small_vit, 17),
    # Before opset 17 LayerNorm exports as ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add.
    "vit_small_opset13": (small_vit, 13),
}

# Models that cannot train in trainrt yet -> the ops they lack (each must be named in the failure).
EXPECTED_FAILURES = {}


def no_randomness(model):
    """Dropout p=0 and stochastic depth off, so that both frameworks compute the same function."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
        if isinstance(m, torch.nn.MultiheadAttention):
            m.dropout = 0.0
        # ONNX stores epsilon as a float: PyTorch fp64 must add the same number (1e-3 as
        # a float is 1e-3 + 4.7e-11, which moves an fp64 loss by ~1e-9).
        if hasattr(m, "eps") and isinstance(m.eps, float):
            m.eps = float(np.float32(m.eps))
    return model


def exact_roots(values):
    """float32 constants as float64, where one is the float rounding of the square root of
    an integer (GELU's sqrt(2), attention's sqrt(head_dim)) as that root: PyTorch fp64
    divides by the exact root, and the rounded one moves an fp64 loss by ~1e-9."""
    out = values.astype(np.float64)
    flat = out.reshape(-1)
    for i, v in enumerate(flat):
        k = round(v * v)
        if k > 0 and np.float32(np.sqrt(k)) == np.float32(v):
            flat[i] = np.sqrt(k)
    return out


def to_double(model_proto):
    """The same model computing in fp64: float initializers, constants and casts become
    double, and the float input is cast to double first (its name and type stay)."""
    g = model_proto.graph
    F, D = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE
    for i, t in enumerate(g.initializer):
        if t.data_type == F:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == F:
                a.i = D
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F:
                a.t.CopyFrom(numpy_helper.from_array(exact_roots(numpy_helper.to_array(a.t)), a.t.name))
    for v in list(g.value_info) + list(g.output):
        if v.type.tensor_type.elem_type == F:
            v.type.tensor_type.elem_type = D
    inp = g.input[0].name
    cast_out = inp + "_fp64"
    for n in g.node:
        for k, x in enumerate(n.input):
            if x == inp:
                n.input[k] = cast_out
    g.node.insert(0, onnx.helper.make_node("Cast", [inp], [cast_out], name="input_to_fp64", to=D))
    return model_proto


def torch_gradients(model, x, y):
    """(loss, {param name: gradient}) of one batch in training mode."""
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), {k: p.grad.detach().numpy().astype(np.float64) for k, p in model.named_parameters()}


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def trainrt_gradients(trainrt, model_path, x_path, y_path, backend, out):
    cmd = [trainrt, "grad", model_path, "--input", "input=" + x_path, "--labels", y_path, "--backend", backend,
           "--output-dir", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("trainrt grad --backend %s exited %d: %s" % (backend, r.returncode, r.stderr.strip()))
    grads = {}
    for f in sorted(os.listdir(out)):
        if f.startswith("grad_"):
            name, g = load(os.path.join(out, f))
            grads[name] = g.astype(np.float64)
    return float(load(os.path.join(out, "loss.pb"))[1]), grads


def rel_l2(got, want):
    """Relative L2 distance over all gradients together (names must match)."""
    num = sum(float(np.sum((got[k] - want[k]) ** 2)) for k in want)
    den = sum(float(np.sum(want[k] ** 2)) for k in want)
    return (num / den) ** 0.5


def worst_param(got, want):
    return max(want, key=lambda k: np.linalg.norm(got[k] - want[k]) / max(np.linalg.norm(want[k]), 1e-30))


def export_for_training(model, x, y, path, opset, tmp):
    """Exports `model` in training mode to `path` and writes the batch as `tmp`/x.pb and
    `tmp`/y.pb; returns (x_path, y_path). The export's forward pass updates BN running
    statistics: they are restored (the gradients ignore them)."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.onnx.export(model, x, path, input_names=["input"], output_names=["logits"], opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model.load_state_dict(state)
    x_path, y_path = os.path.join(tmp, "x.pb"), os.path.join(tmp, "y.pb")
    with open(x_path, "wb") as f:
        f.write(numpy_helper.from_array(x.numpy(), "input").SerializeToString())
    with open(y_path, "wb") as f:
        f.write(numpy_helper.from_array(y.numpy().astype(np.int64), "labels").SerializeToString())
    return x_path, y_path


def check_model(trainrt, name, tmp):
    """Returns the result line's details; raises AssertionError/RuntimeError on failure."""
    make, opset = MODELS[name]
    torch.manual_seed(0)
    model = no_randomness(make()).train()
    x = torch.randn(BATCH, 3, SIZE, SIZE)
    y = torch.randint(0, CLASSES, (BATCH,))
    path32 = os.path.join(tmp, name + ".onnx")
    path64 = os.path.join(tmp, name + "_fp64.onnx")
    x_path, y_path = export_for_training(model, x, y, path32, opset, tmp)
    onnx.save(to_double(onnx.load(path32)), path64)

    # Parameter count as PyTorch counts it.
    r = subprocess.run([trainrt, "inspect", path32, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        if r.returncode != 2 or not r.stdout.startswith("{"):
            raise RuntimeError("trainrt inspect exited %d: %s" % (r.returncode, r.stderr.strip()))
    info = json.loads(r.stdout)
    if info.get("unsupported"):
        ops = {}
        for node in info["unsupported"]:  # "node 3 'name' (Op)"
            op = node[node.rfind("(") + 1:-1]
            ops[op] = ops.get(op, 0) + 1
        raise RuntimeError("unsupported ops: %s" % ", ".join("%s x%d" % kv for kv in sorted(ops.items())))
    want_count = sum(p.numel() for p in model.parameters())
    assert info["trainable_parameters"] == want_count, \
        "trainable parameters %d, PyTorch counts %d" % (info["trainable_parameters"], want_count)

    # A CUDA build: the CNNs' training and evaluation graphs need no op on the host.
    r = subprocess.run([trainrt, "inspect", path32, "--training", "--device", "cuda"], capture_output=True, text=True)
    if r.returncode == 0 and not name.startswith("vit"):
        for graph in ("evaluation graph", "fused training graph"):
            line = [l for l in r.stdout.splitlines() if l.startswith("cuda host fallbacks of the %s:" % graph)]
            assert line == ["cuda host fallbacks of the %s: none" % graph], "cuda: %s" % line

    # trainrt selftest on the export: the cpu backend against the reference, node by node,
    # in fp32 and fp16 (before it compared whole fp32 runs, which differ by 0.5-3% on
    # these deep batch-norm networks between two correct backends).
    for precision in ("fp32", "fp16"):
        r = subprocess.run([trainrt, "selftest", path32, "--batch", str(BATCH), "--precision", precision],
                           capture_output=True, text=True)
        assert r.returncode == 0 and "selftest passed" in r.stdout, "selftest --precision %s exited %d: %s" % (
            precision, r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:])

    loss32, g32 = torch_gradients(model, x, y)
    model64 = model.double()
    loss64, g64 = torch_gradients(model64, x.double(), y)

    t0 = time.time()
    tl64, t64 = trainrt_gradients(trainrt, path64, x_path, y_path, "reference", os.path.join(tmp, "ref64"))
    t_ref = time.time() - t0
    missing, extra = sorted(set(g64) - set(t64)), sorted(set(t64) - set(g64))
    assert not missing and not extra, "parameters differ: PyTorch only %s, trainrt only %s" % (missing[:5], extra[:5])
    for k in g64:
        assert t64[k].shape == g64[k].shape, "gradient of %s is %s, PyTorch's %s" % (k, t64[k].shape, g64[k].shape)
    err64 = rel_l2(t64, g64)
    lerr64 = abs(tl64 - loss64) / abs(loss64)
    assert lerr64 <= LOSS64_RTOL, "fp64 loss %.12g, PyTorch %.12g" % (tl64, loss64)
    assert err64 <= FP64_RTOL, "fp64 gradients %.3g from PyTorch's (tolerance %.0e), worst %s" % (
        err64, FP64_RTOL, worst_param(t64, g64))

    t0 = time.time()
    _, t32 = trainrt_gradients(trainrt, path32, x_path, y_path, "cpu", os.path.join(tmp, "cpu32"))
    t_cpu = time.time() - t0
    err32, torch_err32 = rel_l2(t32, g64), rel_l2(g32, g64)
    bound = FP32_FACTOR * torch_err32 + FP32_FLOOR
    assert err32 <= bound, "fp32 cpu gradients %.3g from PyTorch fp64's, PyTorch fp32 %.3g (bound %.3g), worst %s" % (
        err32, torch_err32, bound, worst_param(t32, g64))
    return ("%d params, loss %.4f; fp64 reference %.2g (%.1f s); fp32 cpu %.2g, PyTorch fp32 %.2g (%.1f s)" %
            (want_count, loss64, err64, t_ref, err32, torch_err32, t_cpu))


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: torchvision_models.py TRAINRT SOURCE_DIR [MODEL ...]")
    trainrt = sys.argv[1]
    names = sys.argv[3:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit("unknown models %s (known: %s)" % (unknown, ", ".join(MODELS)))
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)  # the exporter's notes on training-mode export
    fails = 0
    for name in names:
        t0 = time.time()
        lacks = EXPECTED_FAILURES.get(name)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                detail = check_model(trainrt, name, tmp)
                error = None
            except (AssertionError, RuntimeError) as e:
                error = str(e) or type(e).__name__
            except Exception as e:  # an export or a file that went wrong: this model's failure, not the run's
                error = "%s: %s" % (type(e).__name__, e)
        took = "%.1f s" % (time.time() - t0)
        if lacks is None and error is None:
            print("PASS   %-20s %s; %s" % (name, detail, took))
        elif lacks is None:
            print("FAIL   %-20s %s (%s)" % (name, error, took))
            fails += 1
        elif error is None:
            print("FAIL   %-20s listed as failing with %s but passes: remove it from EXPECTED_FAILURES (%s)" %
                  (name, ", ".join(lacks), detail))
            fails += 1
        elif not all(op in error for op in lacks):
            print("FAIL   %-20s listed as failing with %s but fails otherwise: %s" % (name, ", ".join(lacks), error))
            fails += 1
        else:
            print("XFAIL  %-20s expected (%s): %s" % (name, ", ".join(lacks), error))
        sys.stdout.flush()
    print("torchvision_models: %s" % ("%d FAIL" % fails if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
