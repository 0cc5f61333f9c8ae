#!/usr/bin/python3
"""Decoder layers exported by PyTorch train in trainrt as in PyTorch: ConvTranspose, Resize.

Two tiny models built here (random init with a fixed seed, batch 4, 16x16 inputs), each
ending in a global pool and a Linear head so that a classification loss applies:
  - unet: Conv (stride 2 to go down), ConvTranspose (stride 2; stride 2 with
    output_padding and groups; dilation 2 with padding), nn.Upsample nearest and
    bilinear with align_corners True and False, concatenated skips;
  - generator: a GAN-generator-like stack, ConvTranspose+BatchNorm+ReLU three times
    (1x1 -> 4x4 -> 8x8 -> 16x16), Tanh.
Each is exported in training mode at opset 13, the U-Net at opset 11 too (Resize's
roi/scales inputs differ; imported at 13, which trainrt grad's loss needs), and checked
as tests/cli/torchvision_models.py checks its models (its helpers are reused): `trainrt
selftest` in fp32 and fp16 (the cpu backend against the reference, node by node);
`trainrt grad` in fp64 on the reference backend gives PyTorch fp64's loss (1e-9) and
gradients (relative L2 over all of them < 1e-6); in fp32 on the cpu backend within 3x
PyTorch fp32's distance from fp64 plus 1e-5; and two cpu training steps (`trainrt train
--dataset npz --max-steps 2`) exit 0 (a non-finite loss would stop the run with an
error). About 20 s in all.

    /usr/bin/python3 tests/cli/decoder_models.py build/trainrt .   [MODEL ...]
"""
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_models import (FP32_FACTOR, FP32_FLOOR, FP64_RTOL, LOSS64_RTOL, no_randomness, rel_l2,  # noqa: E402
                                to_double, torch_gradients, trainrt_gradients, worst_param)

BATCH, SIZE, CLASSES = 4, 16, 10
nn = torch.nn


class TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.ReLU())  # MaxPool needs opset 12
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.up_grouped = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False)
        self.dilated = nn.ConvTranspose2d(4, 4, 3, padding=2, dilation=2)
        self.nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.bilinear_ac = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.bilinear = nn.Upsample(size=(SIZE, SIZE), mode="bilinear", align_corners=False)
        self.dec = nn.Sequential(nn.Conv2d(4 + 4 + 4 + 8 + 8 + 8, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8, CLASSES)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        d = torch.cat([e1, self.up(e2), self.dilated(self.up_grouped(e2)), self.nearest(e2), self.bilinear_ac(e2),
                       self.bilinear(e2)], 1)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.dec(d), 1), 1))


class TinyGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.project = nn.Sequential(nn.Conv2d(3, 16, 1), nn.AdaptiveAvgPool2d(1))  # a latent vector per image
        self.body = nn.Sequential(
            nn.ConvTranspose2d(16, 8, 4, 1, 0, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.ConvTranspose2d(8, 4, 4, 2, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
            nn.ConvTranspose2d(4, 3, 4, 2, 1), nn.Tanh())
        self.head = nn.Linear(3, CLASSES)

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.body(self.project(x)), 1), 1))


# name -> (constructor, opset)
MODELS = {
    "unet": (TinyUNet, 13),
    "unet_opset11": (TinyUNet, 11),
    "generator": (TinyGenerator, 13),
}


def check_model(trainrt, name, tmp):
    make, opset = MODELS[name]
    torch.manual_seed(0)
    model = no_randomness(make()).train()
    x = torch.randn(BATCH, 3, SIZE, SIZE)
    y = torch.randint(0, CLASSES, (BATCH,))
    path32 = os.path.join(tmp, name + ".onnx")
    path64 = os.path.join(tmp, name + "_fp64.onnx")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.onnx.export(model, x, path32, input_names=["input"], output_names=["logits"], opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model.load_state_dict(state)
    if opset < 13:
        # The opset-11 form of the ops (Resize with roi and scales inputs), imported at opset
        # 13: the training graph's SoftmaxCrossEntropyLoss needs opset 12 or newer, and these
        # ops mean the same at 11 and 13.
        m = onnx.load(path32)
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = 13
        onnx.save(m, path32)
    onnx.save(to_double(onnx.load(path32)), path64)
    ops = sorted({n.op_type for n in onnx.load(path32).graph.node})
    for op in ("ConvTranspose", "Resize") if name.startswith("unet") else ("ConvTranspose",):
        assert op in ops, "the export has no %s: %s" % (op, ops)
    x_path, y_path = os.path.join(tmp, "x.pb"), os.path.join(tmp, "y.pb")
    with open(x_path, "wb") as f:
        f.write(numpy_helper.from_array(x.numpy(), "input").SerializeToString())
    with open(y_path, "wb") as f:
        f.write(numpy_helper.from_array(y.numpy().astype(np.int64), "labels").SerializeToString())

    # The cpu backend against the reference, node by node, in fp32 and fp16.
    for precision in ("fp32", "fp16"):
        r = subprocess.run([trainrt, "selftest", path32, "--batch", str(BATCH), "--precision", precision],
                           capture_output=True, text=True)
        assert r.returncode == 0 and "selftest passed" in r.stdout, "selftest --precision %s exited %d: %s" % (
            precision, r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:])

    loss32, g32 = torch_gradients(model, x, y)
    loss64, g64 = torch_gradients(model.double(), x.double(), y)
    tl64, t64 = trainrt_gradients(trainrt, path64, x_path, y_path, "reference", os.path.join(tmp, "ref64"))
    missing, extra = sorted(set(g64) - set(t64)), sorted(set(t64) - set(g64))
    assert not missing and not extra, "parameters differ: PyTorch only %s, trainrt only %s" % (missing[:5], extra[:5])
    err64 = rel_l2(t64, g64)
    lerr64 = abs(tl64 - loss64) / abs(loss64)
    assert lerr64 <= LOSS64_RTOL, "fp64 loss %.12g, PyTorch %.12g" % (tl64, loss64)
    assert err64 <= FP64_RTOL, "fp64 gradients %.3g from PyTorch's, worst %s" % (err64, worst_param(t64, g64))

    _, t32 = trainrt_gradients(trainrt, path32, x_path, y_path, "cpu", os.path.join(tmp, "cpu32"))
    err32, torch_err32 = rel_l2(t32, g64), rel_l2(g32, g64)
    bound = FP32_FACTOR * torch_err32 + FP32_FLOOR
    assert err32 <= bound, "fp32 cpu gradients %.3g from PyTorch fp64's (bound %.3g), worst %s" % (
        err32, bound, worst_param(t32, g64))

    # Two training steps on the cpu backend.
    npz = os.path.join(tmp, "data.npz")
    rng = np.random.default_rng(0)
    np.savez(npz, x=rng.standard_normal((16, 3, SIZE, SIZE)).astype(np.float32),
             y=rng.integers(0, CLASSES, 16).astype(np.int64))
    r = subprocess.run([trainrt, "train", path32, "--dataset", "npz", "--data-dir", npz, "--batch-size", str(BATCH),
                        "--max-steps", "2", "--backend", "cpu", "--log-every", "0"], capture_output=True, text=True)
    assert r.returncode == 0, "trainrt train exited %d: %s" % (r.returncode, (r.stdout + r.stderr).strip()[-400:])
    return "loss %.4f; fp64 reference %.2g; fp32 cpu %.2g, PyTorch fp32 %.2g; 2 cpu steps" % (
        loss64, err64, err32, torch_err32)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: decoder_models.py TRAINRT SOURCE_DIR [MODEL ...]")
    trainrt = sys.argv[1]
    names = sys.argv[3:] or list(MODELS)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    fails = 0
    for name in names:
        t0 = time.time()
        with tempfile.TemporaryDirectory() as tmp:
            try:
                print("PASS   %-14s %s; %.1f s" % (name, check_model(trainrt, name, tmp), time.time() - t0))
            except Exception as e:  # noqa: BLE001  one line per model
                print("FAIL   %-14s %s: %s" % (name, type(e).__name__, e))
                fails += 1
        sys.stdout.flush()
    print("decoder_models: %s" % ("%d FAIL" % fails if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
