#!/usr/bin/python3
"""1-D and 3-D convolution networks, exported by PyTorch for training, train in trainrt as in PyTorch.

Three tiny models (a few thousand parameters, batch 3), each exported in training mode
(TrainingMode.TRAINING, no constant folding), as tests/cli/torchvision_models.py exports its own:
  - textcnn: a text CNN over token embeddings: Embedding -> Conv1d -> ReLU -> MaxPool1d ->
    Conv1d (dilation 2) -> ReLU -> global max (GlobalMaxPool) -> Linear; int64 token input;
  - audio: Conv1d (stride 2) + BatchNorm1d + ReLU + MaxPool1d, Conv1d (dilation 2) +
    BatchNorm1d + ReLU + MaxPool1d (stride 2, pad 1), global average, Linear;
  - video: Conv3d + BatchNorm3d + ReLU + MaxPool3d (1,2,2), grouped Conv3d (stride 1,2,2) +
    BatchNorm3d + ReLU + MaxPool3d (ceil_mode), AvgPool3d (count_include_pad), global
    average, Linear.
For each, trainrt must:
  - compute the loss (mean cross entropy) and every parameter's gradient of one batch
    (`trainrt grad`) in fp64 on the reference backend (initializers converted to double,
    a float input cast to double) equal to PyTorch fp64's: loss to 1e-9, all gradients
    together to 1e-6 relative L2;
  - in fp32 on the cpu backend, be no further from PyTorch fp64 than 3x PyTorch fp32's
    own distance from it, plus 1e-5;
  - train two steps on the cpu backend (`trainrt train --dataset npz`, the batch saved as
    x, y arrays) and write the trained model (audio, video: npz takes no int64 token ids).

    /usr/bin/python3 tests/cli/nd_models.py build/trainrt .   [MODEL ...]
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_models import (FP32_FACTOR, FP32_FLOOR, FP64_RTOL, LOSS64_RTOL, no_randomness,  # noqa: E402
                                rel_l2, to_double, torch_gradients, trainrt_gradients, worst_param)

BATCH, CLASSES = 3, 4
nn = torch.nn


class TextCNN(nn.Module):
    def __init__(self, vocab=30, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.conv1 = nn.Conv1d(dim, 12, 3, padding=1)
        self.pool = nn.MaxPool1d(2)
        self.conv2 = nn.Conv1d(12, 12, 3, dilation=2, padding=2)
        self.fc = nn.Linear(12, CLASSES)

    def forward(self, tokens):  # tokens: N,T int64
        x = self.emb(tokens).transpose(1, 2)  # N,dim,T
        x = self.pool(torch.relu(self.conv1(x)))
        x = nn.functional.adaptive_max_pool1d(torch.relu(self.conv2(x)), 1)
        return self.fc(x.flatten(1))


def audio():
    return nn.Sequential(
        nn.Conv1d(1, 8, 5, stride=2, padding=2), nn.BatchNorm1d(8), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(8, 16, 3, dilation=2, padding=2, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
        nn.MaxPool1d(3, stride=2, padding=1), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, CLASSES))


def video():
    return nn.Sequential(
        nn.Conv3d(2, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.MaxPool3d((1, 2, 2)),
        nn.Conv3d(8, 8, 3, stride=(1, 2, 2), padding=1, groups=2), nn.BatchNorm3d(8), nn.ReLU(),
        nn.MaxPool3d(2, ceil_mode=True), nn.AvgPool3d((1, 2, 2), padding=(0, 1, 1), count_include_pad=True),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(8, CLASSES))


# name -> (model, input maker)
MODELS = {
    "textcnn": (TextCNN, lambda: torch.randint(0, 30, (BATCH, 16))),
    "audio": (audio, lambda: torch.randn(BATCH, 1, 64)),
    "video": (video, lambda: torch.randn(BATCH, 2, 4, 12, 12)),
}


def to_double_model(proto, float_input):
    """to_double, without the input's Cast where the input is integer (token ids)."""
    if float_input:
        return to_double(proto)
    g = proto.graph
    name = g.input[0].name
    g.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT  # to_double's Cast is taken out below
    proto = to_double(proto)
    g = proto.graph
    g.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT64
    cast = g.node[0]
    assert cast.op_type == "Cast" and cast.input[0] == name
    for n in g.node[1:]:
        for k, x in enumerate(n.input):
            if x == cast.output[0]:
                n.input[k] = name
    del g.node[0]
    return proto


def check_model(trainrt, name, tmp):
    make, make_input = MODELS[name]
    torch.manual_seed(0)
    model = no_randomness(make()).train()
    x = make_input()
    y = torch.randint(0, CLASSES, (BATCH,))
    path32 = os.path.join(tmp, name + ".onnx")
    path64 = os.path.join(tmp, name + "_fp64.onnx")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.onnx.export(model, x, path32, input_names=["input"], output_names=["logits"], opset_version=13,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model.load_state_dict(state)  # the export's forward pass updated BN running statistics
    float_input = x.is_floating_point()
    onnx.save(to_double_model(onnx.load(path32), float_input), path64)
    x_np = x.numpy() if float_input else x.numpy().astype(np.int64)
    x_path, y_path = os.path.join(tmp, "x.pb"), os.path.join(tmp, "y.pb")
    with open(x_path, "wb") as f:
        f.write(numpy_helper.from_array(x_np, "input").SerializeToString())
    with open(y_path, "wb") as f:
        f.write(numpy_helper.from_array(y.numpy().astype(np.int64), "labels").SerializeToString())
    params = sum(p.numel() for p in model.parameters())

    loss32, g32 = torch_gradients(model, x, y)
    model64 = model.double()
    loss64, g64 = torch_gradients(model64, x.double() if float_input else x, y)

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

    _, t32 = trainrt_gradients(trainrt, path32, x_path, y_path, "cpu", os.path.join(tmp, "cpu32"))
    err32, torch_err32 = rel_l2(t32, g64), rel_l2(g32, g64)
    bound = FP32_FACTOR * torch_err32 + FP32_FLOOR
    assert err32 <= bound, "fp32 cpu gradients %.3g from PyTorch fp64's, PyTorch fp32 %.3g (bound %.3g), worst %s" % (
        err32, torch_err32, bound, worst_param(t32, g64))

    line = "%d params, loss %.4f; fp64 reference %.2g (%.1f s); fp32 cpu %.2g, PyTorch fp32 %.2g" % (
        params, loss64, err64, t_ref, err32, torch_err32)
    if not float_input:  # `--dataset npz` reads float and uint8 samples only, not int64 token ids
        return line + "; no train steps (npz takes no int64 tokens)"
    # Two training steps on the cpu backend over the batch saved as an npz dataset.
    npz = os.path.join(tmp, name + ".npz")
    np.savez(npz, x=x_np, y=y.numpy().astype(np.int64))
    out = os.path.join(tmp, name + "_trained.onnx")
    r = subprocess.run([trainrt, "train", path32, "--dataset", "npz", "--data-dir", npz, "--backend", "cpu",
                        "--batch-size", str(BATCH), "--max-steps", "2", "--export", out],
                       capture_output=True, text=True)
    assert r.returncode == 0 and os.path.exists(out), "trainrt train exited %d: %s" % (
        r.returncode, (r.stdout + r.stderr).strip().splitlines()[-3:])
    return line + "; 2 cpu train steps"


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: nd_models.py TRAINRT SOURCE_DIR [MODEL ...]")
    trainrt = sys.argv[1]
    names = sys.argv[3:] or list(MODELS)
    failed = 0
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                print("PASS %-8s %s" % (name, check_model(trainrt, name, tmp)), flush=True)
            except (AssertionError, RuntimeError) as e:
                failed += 1
                print("FAIL %-8s %s" % (name, e), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
