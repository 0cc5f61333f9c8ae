#!/usr/bin/env python3
"""PyTorch golden data for trainrt's training graph on the seed's Wide ResNet.

Builds the seed's model at small widths (4,8,12,16, Fashion-MNIST shape) with
Dropout disabled (p=0), exports it with PyTorch's own exporter (training mode,
opset 13), and records for one fixed batch of 8 images: the loss, the gradient
of every parameter, and every parameter after 3 steps of SGD (lr 0.01,
momentum 0.9, weight decay 5e-4, the seed's DDP settings) on that batch.
Everything is written as ONNX TensorProto files (read by
tests/autodiff/test_wrn_golden.cpp):

    /usr/bin/python3 tools/golden_wrn_training.py tests/data/wrn_golden
"""
import os
import sys

import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wrn_reference as w  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
model = w.build("fashion-mnist", widths=w.SMALL_WIDTHS)
for m in model.modules():
    if isinstance(m, torch.nn.Dropout):
        m.p = 0.0
w.export(model, os.path.join(out, "model.onnx"), 28, 1, training=True)

x = torch.randn(8, 1, 28, 28)
y = torch.randint(0, 10, (8,))


def save(t, name):
    p = numpy_helper.from_array(t.detach().numpy(), name)
    with open(os.path.join(out, name + ".pb"), "wb") as f:
        f.write(p.SerializeToString())


save(x, "input")
save(y.to(torch.int64), "labels")
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
loss_fn = torch.nn.CrossEntropyLoss()
for step in range(3):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    if step == 0:
        save(loss, "loss")
        for name, p in model.named_parameters():
            save(p.grad, "grad." + name)
    opt.step()
for name, p in model.named_parameters():
    save(p, "after3." + name)
print("wrote", out)
