#!/usr/bin/python3
"""PyTorch reference for trainrt's Wide ResNet builder (models/wrn.cpp).

The model is the seed's model.py (seeds/pytorch-on-olivia-single-gpu.md) with two
changes that do not alter it: explicit pads (padding=1 for 3x3, 0 for 1x1; PyTorch
1.13's exporter cannot export padding='same') and configurable widths / blocks
per stage / input channels / classes. Module names are the seed's, so state_dict
names (input_block.cbr.0.weight, block1.scale.weight, ...) match trainrt's.

  /usr/bin/python3 tools/wrn_reference.py counts
      prints trainable parameter counts (CIFAR-100: 17,175,444; Fashion-MNIST: 17,117,466)
  /usr/bin/python3 tools/wrn_reference.py write-test-data [--out tests/data]
      writes wrn_param_counts.json and two small-width (4,8,12,16) Fashion-MNIST
      shaped models exported at opset 13: wrn_small_train.onnx (training mode) and
      wrn_small_eval.onnx (default eval export)
"""

import argparse
import json
import os
import sys

import torch
import torch.nn as nn

SEED_WIDTHS = [16, 160, 320, 640]
SMALL_WIDTHS = [4, 8, 12, 16]
DATASETS = {  # name: (input channels, image side, classes)
    "cifar100": (3, 32, 100),
    "cifar10": (3, 32, 10),
    "fashion-mnist": (1, 28, 10),
}


class cbrblock(nn.Module):
    def __init__(self, input_channels, output_channels):
        super().__init__()
        self.cbr = nn.Sequential(
            nn.Conv2d(input_channels, output_channels, kernel_size=3, stride=(1, 1), padding=1, bias=False),
            nn.BatchNorm2d(output_channels), nn.ReLU())

    def forward(self, x):
        return self.cbr(x)


class conv_block(nn.Module):
    def __init__(self, input_channels, output_channels, scale_input):
        super().__init__()
        self.scale_input = scale_input
        if self.scale_input:
            self.scale = nn.Conv2d(input_channels, output_channels, kernel_size=1, stride=(1, 1), padding=0)
        self.layer1 = cbrblock(input_channels, output_channels)
        self.dropout = nn.Dropout(p=0.01)
        self.layer2 = cbrblock(output_channels, output_channels)

    def forward(self, x):
        residual = x
        out = self.layer1(x)
        out = self.dropout(out)
        out = self.layer2(out)
        if self.scale_input:
            residual = self.scale(residual)
        return out + residual


class WideResNet(nn.Module):
    """The seed's WideResNet. Stage s (1-based) has `blocks_per_stage` conv_blocks
    named block{(s-1)*blocks_per_stage+1}...; a MaxPool2d(2) named pool1, pool2
    follows stage 1 and 2. With the defaults this is exactly the seed's model."""

    def __init__(self, num_classes, in_channels=3, widths=SEED_WIDTHS, blocks_per_stage=2):
        super().__init__()
        c = [in_channels] + list(widths)
        self.input_block = cbrblock(c[0], c[1])
        self.order = []
        k = 0
        for stage in range(3):
            for b in range(blocks_per_stage):
                k += 1
                cin = c[stage + 1] if b == 0 else c[stage + 2]
                name = "block%d" % k
                setattr(self, name, conv_block(cin, c[stage + 2], scale_input=cin != c[stage + 2]))
                self.order.append(name)
            if stage < 2:
                setattr(self, "pool%d" % (stage + 1), nn.MaxPool2d(2))
                self.order.append("pool%d" % (stage + 1))
        self.pool = nn.AvgPool2d(7)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(c[4], num_classes)

    def forward(self, x):
        out = self.input_block(x)
        for name in self.order:
            out = getattr(self, name)(out)
        out = self.pool(out)
        out = self.flat(out)
        return self.fc(out)


def build(dataset, widths=SEED_WIDTHS, blocks_per_stage=2):
    cin, _, classes = DATASETS[dataset]
    return WideResNet(classes, cin, widths, blocks_per_stage)


def trainable_parameters(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def counts(widths=SEED_WIDTHS, blocks_per_stage=2):
    return {d: trainable_parameters(build(d, widths, blocks_per_stage)) for d in DATASETS}


def export(model, path, side, cin, training):
    x = torch.zeros(2, cin, side, side)
    kwargs = dict(opset_version=13, input_names=["input"], output_names=["logits"],
                  dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    if training:
        model.train()
        kwargs.update(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    else:
        model.eval()
    torch.onnx.export(model, x, path, **kwargs)


def write_test_data(out, command):
    os.makedirs(out, exist_ok=True)
    seed = counts()
    small = counts(SMALL_WIDTHS)
    data = {
        "command": command,
        "torch_version": torch.__version__,
        "what": "trainable parameter counts (model.parameters(), requires_grad) of the seed's WideResNet",
        "widths": SEED_WIDTHS,
        "blocks_per_stage": 2,
        "trainable_parameters": seed,
        "small": {"widths": SMALL_WIDTHS, "blocks_per_stage": 2, "trainable_parameters": small},
        "small_models": {
            "wrn_small_train.onnx": "fashion-mnist shape [N,1,28,28], 10 classes, opset 13, TrainingMode.TRAINING",
            "wrn_small_eval.onnx": "fashion-mnist shape [N,1,28,28], 10 classes, opset 13, default (eval) export",
        },
    }
    with open(os.path.join(out, "wrn_param_counts.json"), "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    torch.manual_seed(0)
    model = build("fashion-mnist", SMALL_WIDTHS)
    export(model, os.path.join(out, "wrn_small_train.onnx"), 28, 1, training=True)
    export(model, os.path.join(out, "wrn_small_eval.onnx"), 28, 1, training=False)
    for name in ("wrn_param_counts.json", "wrn_small_train.onnx", "wrn_small_eval.onnx"):
        print("wrote %s (%d bytes)" % (os.path.join(out, name), os.path.getsize(os.path.join(out, name))))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("counts", help="print trainable parameter counts")
    c.add_argument("--widths", default=",".join(map(str, SEED_WIDTHS)))
    c.add_argument("--blocks-per-stage", type=int, default=2)
    w = sub.add_parser("write-test-data", help="write tests/data/wrn_* files")
    w.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
    a = p.parse_args()
    if a.cmd == "counts":
        widths = [int(v) for v in a.widths.split(",")]
        for d, n in counts(widths, a.blocks_per_stage).items():
            print("%-14s %12s trainable parameters" % (d, format(n, ",")))
    else:
        write_test_data(os.path.normpath(a.out), "/usr/bin/python3 tools/wrn_reference.py write-test-data")


if __name__ == "__main__":
    sys.exit(main())
