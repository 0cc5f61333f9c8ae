#!/usr/bin/python3
"""`trainrt model wrn` output against ONNX's own checker and against PyTorch.

  /usr/bin/python3 tests/cli/onnx_checker.py TRAINRT_BINARY SOURCE_DIR

For each dataset (small widths 4,8,12,16, plus the full-size CIFAR-100 model):
  1. onnx.checker.check_model(full_check=True) accepts the file;
  2. onnx.shape_inference (strict) infers every node output, and each shape equals
     the one `trainrt inspect --json` reports (symbolic batch "N" included);
  3. trainable parameters (initializers minus BN running statistics and Dropout
     ratios) equal PyTorch's numbers in tests/data/wrn_param_counts.json, and the
     initializer names/shapes equal the state_dict of tests/data/wrn_small_train.onnx;
  4. PyTorch's model (tools/wrn_reference.py) loaded with the file's weights gives
     the same logits as `trainrt run` (reference backend) on a random batch;
  5. the full-size model's forward FLOPs per sample (inspect) are DESIGN.md's 4.82 G;
  6. bad flags exit 2 with one line on stderr and leave no file behind.
trainrt has no import->export command, so the PyTorch file's round trip through
trainrt is tested in C++ (tests/models/test_wrn_typed.cpp), not here.
Exits 1 listing every failure.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

SMALL = "4,8,12,16"
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        fail("'%s' exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
        return None
    return p.stdout


def onnx_type(t):
    """'float32[N,16,28,28]' for an onnx TypeProto, as trainrt inspect prints it."""
    tt = t.tensor_type
    name = {onnx.TensorProto.FLOAT: "float32"}.get(tt.elem_type, str(tt.elem_type))
    if not tt.HasField("shape"):
        return name + "[?]"
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    return "%s[%s]" % (name, ",".join(dims))


def trainable(model):
    """PyTorch's count: initializers minus BN running stats and Dropout ratio inputs."""
    skip = set()
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            skip.update(n.input[3:5])
        if n.op_type == "Dropout":
            skip.update(n.input[1:])
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name not in skip)


def check_bad_flags(trainrt, tmp):
    out = os.path.join(tmp, "bad.onnx")
    cases = [(["--dataset", "mnist"], "unknown dataset 'mnist'"),
             (["--dataset", "cifar10", "--widths", "16,160,320"], "--widths"),
             (["--dataset", "cifar10", "--widths", "16,0,320,640"], "--widths"),
             (["--dataset", "cifar10", "--blocks-per-stage", "0"], "--blocks-per-stage"),
             (["--dataset", "cifar10", "--seed", "x"], "--seed"),
             (["--dataset", "cifar10", "--blocks-per-stage", "1000"], "2 GB limit")]
    for flags, want in cases:
        p = subprocess.run([trainrt, "model", "wrn"] + flags + ["-o", out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        lines = p.stderr.strip().splitlines()
        if p.returncode != 2 or len(lines) != 1 or want not in p.stderr:
            fail("model wrn %s: exit %d, stderr %r (expected exit 2, one line with %r)" % (
                " ".join(flags), p.returncode, p.stderr, want))
        if os.path.exists(out) or any(f.startswith("bad.onnx") for f in os.listdir(tmp)):
            fail("model wrn %s left a file behind" % " ".join(flags))
    print("ok bad flags: exit 2, one line, no file")


def check_file(trainrt, path, want_params, torch_names, want_gflops=None):
    label = os.path.basename(path)
    model = onnx.load(path)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # onnx raises ValidationError / InferenceError
        fail("%s: onnx.checker: %s" % (label, str(e).splitlines()[0]))
    try:
        inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as e:
        fail("%s: onnx shape inference: %s" % (label, str(e).splitlines()[0]))
        return
    types = {v.name: onnx_type(v.type) for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    out = run([trainrt, "inspect", path, "--json"])
    if out is None:
        return
    j = json.loads(out)
    compared = 0
    for node in j["nodes"]:
        for o in node["outputs"]:
            want = types.get(o["name"])
            if want is None:
                fail("%s: onnx inferred no type for '%s' (node %s)" % (label, o["name"], node["name"]))
            elif want != o["type"]:
                fail("%s: node %s output '%s': trainrt %s, onnx %s" % (label, node["name"], o["name"], o["type"], want))
            compared += 1
    if compared != len(model.graph.node):
        fail("%s: compared %d outputs for %d nodes" % (label, compared, len(model.graph.node)))
    if types.get("logits") is None or not types["logits"].startswith("float32[N,"):
        fail("%s: logits type %s, expected float32[N,classes]" % (label, types.get("logits")))
    total = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    if j["parameters"] != total:
        fail("%s: inspect says %d parameters, the file holds %d" % (label, j["parameters"], total))
    if trainable(model) != want_params:
        fail("%s: %d trainable parameters, PyTorch has %d" % (label, trainable(model), want_params))
    if torch_names is not None:
        ours = {t.name: list(t.dims) for t in model.graph.initializer if not t.name.endswith(".dropout.ratio")}
        if ours != torch_names:
            fail("%s: initializers differ from PyTorch's state_dict: only trainrt %s, only PyTorch %s" % (
                label, sorted(set(ours) - set(torch_names))[:5], sorted(set(torch_names) - set(ours))[:5]))
    if want_gflops is not None and abs(j["flops_per_sample"] / 1e9 - want_gflops) > 0.01 * want_gflops:
        fail("%s: %.4g forward FLOPs per sample, DESIGN.md says %.3g G" % (label, j["flops_per_sample"], want_gflops))
    print("ok %s: checker, %d shapes equal onnx's, %d trainable parameters, %.3f GFLOP per sample" % (
        label, compared, want_params, j["flops_per_sample"] / 1e9))


def check_against_torch(trainrt, src, path, dataset, tmp):
    """Same weights, same input: PyTorch's logits vs `trainrt run --backend reference`."""
    try:
        import torch
    except ImportError:
        fail("PyTorch is not importable; cannot compare logits")
        return
    sys.path.insert(0, os.path.join(src, "tools"))
    import wrn_reference

    model = onnx.load(path)
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    net = wrn_reference.build(dataset, [int(w) for w in SMALL.split(",")])
    state = {k: v for k, v in weights.items() if not k.endswith(".dropout.ratio")}
    state.update({k: v for k, v in net.state_dict().items() if k.endswith("num_batches_tracked")})
    net.load_state_dict(state, strict=True)
    net.eval()
    cin, side, _ = wrn_reference.DATASETS[dataset]
    x = np.random.default_rng(0).standard_normal((2, cin, side, side)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    xin = os.path.join(tmp, dataset + "_input.pb")
    with open(xin, "wb") as f:
        f.write(numpy_helper.from_array(x, "input").SerializeToString())
    outdir = os.path.join(tmp, dataset + "_out")
    if run([trainrt, "run", path, "--input", "input=" + xin, "--output-dir", outdir, "--backend", "reference"]) is None:
        return
    got_t = onnx.TensorProto()
    with open(os.path.join(outdir, "output_0.pb"), "rb") as f:
        got_t.ParseFromString(f.read())
    got = numpy_helper.to_array(got_t)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        diff = np.abs(got - want).max() if got.shape == want.shape else "shape %s vs %s" % (got.shape, want.shape)
        fail("%s: trainrt logits differ from PyTorch's (max |diff| %s)" % (dataset, diff))
    else:
        print("ok %s: logits equal PyTorch's (max |diff| %.2e)" % (dataset, np.abs(got - want).max()))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    trainrt, src = sys.argv[1], sys.argv[2]
    data = os.path.join(src, "tests", "data")
    for name in ("wrn_param_counts.json", "wrn_small_train.onnx"):  # committed golden files
        path = os.path.join(data, name)
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            print("FAIL: golden file missing or empty: %s" % path)
            return 1
    counts = json.load(open(os.path.join(data, "wrn_param_counts.json")))
    torch_names = {t.name: list(t.dims) for t in onnx.load(os.path.join(data, "wrn_small_train.onnx")).graph.initializer}
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in ("cifar100", "cifar10", "fashion-mnist"):
            path = os.path.join(tmp, dataset + ".onnx")
            if run([trainrt, "model", "wrn", "--dataset", dataset, "--widths", SMALL, "-o", path]) is None:
                continue
            check_file(trainrt, path, counts["small"]["trainable_parameters"][dataset],
                       torch_names if dataset == "fashion-mnist" else None)
            check_against_torch(trainrt, src, path, dataset, tmp)
        # The seed's model itself (68 MB): checker, shapes, 17,175,444 parameters, FLOPs.
        path = os.path.join(tmp, "wrn_cifar100.onnx")
        if run([trainrt, "model", "wrn", "--dataset", "cifar100", "-o", path]) is not None:
            check_file(trainrt, path, counts["trainable_parameters"]["cifar100"], None, want_gflops=4.82)
        check_bad_flags(trainrt, tmp)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
