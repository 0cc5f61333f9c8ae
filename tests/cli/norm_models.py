#!/usr/bin/python3
"""GroupNorm, InstanceNorm and LayerNorm networks, and non-image npz data, exported by PyTorch.

Tiny models built here (random init, fixed seed, batch 4), exported in training mode the way
tests/cli/torchvision_models.py exports torchvision's (whose helpers this script reuses):
  - gn13:  Conv2d -> nn.GroupNorm(4, 8) -> ReLU -> pool -> Linear at opset 13, which PyTorch
           writes as Reshape -> InstanceNormalization(ones, zeros) -> Reshape -> Mul -> Add;
  - in13:  Conv2d -> nn.InstanceNorm2d(8, affine=True) -> ReLU -> pool -> Linear (opset 13);
  - ln17:  Conv2d -> nn.LayerNorm([8, 6, 6]) (LayerNormalization over C,H,W: axis -3) ...
           at opset 17.
For each, `trainrt grad` in fp64 on the reference backend must match PyTorch fp64's loss
(1e-9) and gradients (relative L2 1e-6), and `trainrt train --dataset npz` (float32
[N,3,6,6]) must run two cpu steps. torch 1.13's exporter stops at opset 17, so opset 18's
GroupNormalization is written here with onnx.helper (gn18: GroupNormalization with scale
ones and bias zeros, then Mul/Add per channel, which is nn.GroupNorm's function) and
checked against nn.GroupNorm the same way.
Then `trainrt train --dataset npz` on non-image data for one short epoch each:
  - tokens: int64 ids [N, T] into Embedding -> mean over T -> Linear;
  - audio-like float32 [N, C, L] into Flatten -> Linear -> LayerNorm -> Linear;
and a token npz given to the float model is one clear error line.

    /usr/bin/python3 tests/cli/norm_models.py build/trainrt .
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_models import no_randomness, rel_l2, to_double, torch_gradients, trainrt_gradients, worst_param  # noqa: E402

BATCH, CLASSES = 4, 5


class Net(torch.nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = norm
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


def randomise_affine(model):
    """Norm weights/biases off their ones/zeros init, so their gradients are tested."""
    for m in model.modules():
        if isinstance(m, (torch.nn.GroupNorm, torch.nn.InstanceNorm2d, torch.nn.LayerNorm)):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model


MODELS = {
    "gn13": (lambda: Net(torch.nn.GroupNorm(4, 8)), 13),
    "in13": (lambda: Net(torch.nn.InstanceNorm2d(8, affine=True)), 13),
    "ln17": (lambda: Net(torch.nn.LayerNorm([8, 6, 6])), 17),
}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def save_pb(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def check_model(trainrt, name, tmp):
    make, opset = MODELS[name]
    torch.manual_seed(0)
    model = randomise_affine(no_randomness(make())).train()
    x = torch.randn(BATCH, 3, 6, 6)
    y = torch.randint(0, CLASSES, (BATCH,))
    path32, path64 = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_fp64.onnx")
    torch.onnx.export(model, x, path32, input_names=["input"], output_names=["logits"], opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    ops = {n.op_type for n in onnx.load(path32).graph.node}
    want = {"gn13": "InstanceNormalization", "in13": "InstanceNormalization", "ln17": "LayerNormalization"}[name]
    assert want in ops, "the export has no %s: %s" % (want, sorted(ops))
    onnx.save(to_double(onnx.load(path32)), path64)
    x_path, y_path = os.path.join(tmp, "x.pb"), os.path.join(tmp, "y.pb")
    save_pb(x_path, x.numpy(), "input")
    save_pb(y_path, y.numpy().astype(np.int64), "labels")
    loss64, g64 = torch_gradients(model.double(), x.double(), y)
    tl64, t64 = trainrt_gradients(trainrt, path64, x_path, y_path, "reference", os.path.join(tmp, "ref64"))
    assert set(t64) == set(g64), "parameters differ: %s vs %s" % (sorted(t64), sorted(g64))
    err = rel_l2(t64, g64)
    assert abs(tl64 - loss64) <= 1e-9 * abs(loss64), "fp64 loss %.12g, PyTorch %.12g" % (tl64, loss64)
    assert err <= 1e-6, "fp64 gradients %.3g from PyTorch's, worst %s" % (err, worst_param(t64, g64))
    # Two cpu training steps on float32 npz data of the model's input shape.
    data = os.path.join(tmp, "d.npz")
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.standard_normal((8, 3, 6, 6)).astype(np.float32), y=np.arange(8) % CLASSES)
    r = run([trainrt, "train", path32, "--dataset", "npz", "--data-dir", data, "--batch-size", "4", "--epochs", "1",
             "--backend", "cpu", "--threads", "2", "--log-every", "1"])
    assert r.returncode == 0 and "Epoch =  1" in r.stdout, "cpu training exited %d: %s" % (
        r.returncode, (r.stdout + r.stderr).strip().splitlines()[-3:])
    return "loss %.4f, fp64 reference %.2g; 2 cpu steps" % (loss64, err)


def check_gn18(trainrt, tmp):
    """opset 18's GroupNormalization, written here with onnx.helper (torch 1.13 cannot): with
    scale ones and bias zeros, then Mul/Add per channel, it is nn.GroupNorm's function."""
    from onnx import helper
    torch.manual_seed(0)
    norm, fc = randomise_affine(torch.nn.GroupNorm(2, 4)), torch.nn.Linear(4, CLASSES)
    x = torch.randn(BATCH, 4, 3, 3)
    y = torch.randint(0, CLASSES, (BATCH,))
    F = onnx.TensorProto.FLOAT

    def init(name, t):
        return numpy_helper.from_array(t.detach().numpy().astype(np.float32), name)

    inits = [init("ones", torch.ones(2)), init("zeros", torch.zeros(2)), init("norm.weight", norm.weight.view(4, 1, 1)),
             init("norm.bias", norm.bias.view(4, 1, 1)), init("fc.weight", fc.weight), init("fc.bias", fc.bias)]
    nodes = [helper.make_node("GroupNormalization", ["input", "ones", "zeros"], ["g"], num_groups=2,
                              epsilon=float(np.float32(norm.eps))),
             helper.make_node("Mul", ["g", "norm.weight"], ["m"]), helper.make_node("Add", ["m", "norm.bias"], ["a"]),
             helper.make_node("GlobalAveragePool", ["a"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "gn18", [helper.make_tensor_value_info("input", F, ["N", 4, 3, 3])],
                              [helper.make_tensor_value_info("logits", F, ["N", CLASSES])], inits)
    path64 = os.path.join(tmp, "gn18_fp64.onnx")
    onnx.save(to_double(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])), path64)
    x_path, y_path = os.path.join(tmp, "x.pb"), os.path.join(tmp, "y.pb")
    save_pb(x_path, x.numpy(), "input")
    save_pb(y_path, y.numpy().astype(np.int64), "labels")
    norm.double(), fc.double()
    norm.eps = float(np.float32(norm.eps))
    loss = torch.nn.functional.cross_entropy(fc(norm(x.double()).mean((2, 3))), y)
    loss.backward()
    want = {"norm.weight": norm.weight.grad.numpy().reshape(4, 1, 1), "norm.bias": norm.bias.grad.numpy().reshape(4, 1, 1),
            "fc.weight": fc.weight.grad.numpy(), "fc.bias": fc.bias.grad.numpy()}
    tl64, t64 = trainrt_gradients(trainrt, path64, x_path, y_path, "reference", os.path.join(tmp, "ref64"))
    got = {k: t64[k] for k in want if k in t64}
    assert set(got) == set(want), "gradients of %s, expected %s" % (sorted(t64), sorted(want))
    err = rel_l2(got, want)
    assert abs(tl64 - loss.item()) <= 1e-9 * abs(loss.item()), "fp64 loss %.12g, PyTorch %.12g" % (tl64, loss.item())
    assert err <= 1e-6, "fp64 gradients %.3g from PyTorch's, worst %s" % (err, worst_param(got, want))
    return "loss %.4f, fp64 reference %.2g (GroupNormalization opset 18 against nn.GroupNorm)" % (loss.item(), err)


class Tokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(1))


class Audio(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(2 * 16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(torch.flatten(x, 1)))))


def check_npz(trainrt, tmp):
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    tok, aud = os.path.join(tmp, "tok.onnx"), os.path.join(tmp, "aud.onnx")
    torch.onnx.export(Tokens().train(), torch.zeros(2, 7, dtype=torch.int64), tok, input_names=["ids"],
                      output_names=["logits"], opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, dynamic_axes={"ids": {0: "N"}, "logits": {0: "N"}})
    torch.onnx.export(Audio().train(), torch.zeros(2, 2, 16), aud, input_names=["x"], output_names=["logits"],
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}})
    y = np.arange(40) % CLASSES
    ids = rng.integers(0, 20, (40, 7)).astype(np.int64)
    np.savez(os.path.join(tmp, "tok.npz"), x=ids, y=y, x_val=ids[:8], y_val=y[:8])
    np.savez_compressed(os.path.join(tmp, "aud.npz"), x=rng.standard_normal((40, 2, 16)).astype(np.float32), y=y)
    common = ["--dataset", "npz", "--batch-size", "8", "--epochs", "1", "--backend", "cpu", "--threads", "2"]
    for model, data in ((tok, "tok.npz"), (aud, "aud.npz")):
        r = run([trainrt, "train", model, "--data-dir", os.path.join(tmp, data)] + common)
        assert r.returncode == 0 and "Epoch =  1" in r.stdout, "%s on %s exited %d: %s" % (
            os.path.basename(model), data, r.returncode, (r.stdout + r.stderr).strip().splitlines()[-3:])
    # Token ids given to a float model: one line naming the model, exit 2.
    r = run([trainrt, "train", aud, "--data-dir", os.path.join(tmp, "tok.npz")] + common)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "aud.onnx: model input 'x' is 2x16 per sample of float32, " \
        "dataset npz gives 7 of int64" in lines[0], "token ids to a float model: exit %d, %s" % (r.returncode, lines)
    return "tokens [40,7] and audio [40,2,16]: one epoch each; dtype mismatch refused"


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: norm_models.py TRAINRT SOURCE_DIR")
    trainrt = sys.argv[1]
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    fails = 0
    special = {"gn18": check_gn18, "npz": check_npz}
    for name in list(MODELS) + list(special):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                detail = special[name](trainrt, tmp) if name in special else check_model(trainrt, name, tmp)
                print("PASS   %-6s %s" % (name, detail))
            except Exception as e:  # one case's failure, not the run's
                print("FAIL   %-6s %s: %s" % (name, type(e).__name__, e))
                fails += 1
        sys.stdout.flush()
    print("norm_models: %s" % ("%d FAIL" % fails if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
