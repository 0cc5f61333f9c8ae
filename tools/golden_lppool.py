#!/usr/bin/env python3
"""Golden data for LpPool (ONNX opsets 11 and 18) and its gradient.

Writes tests/data/lppool.txt (plain text, read by tests/ops/test_pool.cpp, in the format
tools/pool_golden.py writes): per case the node's attributes, X, Y, a dY and
dX = dY's pull-back through the pool, all float64. Y follows the spec's definition tap by
tap, independent of trainrt's code: Y = (sum of |x|^p over the window's taps on real
input elements)^(1/p) (padding adds 0); the windows, dilations, ceil_mode and auto_pad as
tools/pool_golden.py places them. dX = dY * sign(x) |x|^(p-1) / Y^(p-1) summed
over the windows holding x.

The cases without pads, dilations or ceil_mode and with an even p are checked here against
torch's lp_pool (Y, and dX by autograd). Run with Debian's python3-numpy and python3-torch:

    /usr/bin/python3 tools/golden_lppool.py tests/data/lppool.txt
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pool_golden import geometry, outputs, window_attrs, window_taps, write_cases  # noqa: E402

CASES = [
    # x shape, kernel, strides, dilations, pads (begins then ends) or auto_pad, ceil_mode, p
    ((2, 3, 9), [3], [1], [1], [0, 0], 0, 2),
    ((1, 3, 6, 7), [2, 2], [1, 1], [1, 1], [0, 0, 0, 0], 0, 2),
    ((1, 2, 8, 9), [3, 2], [2, 2], [1, 1], [0, 0, 0, 0], 0, 4),
    ((1, 2, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], 0, 3),
    ((1, 2, 5, 6), [2, 2], [2, 2], [1, 1], "SAME_UPPER", 0, 1),
    ((1, 2, 5, 6), [3, 3], [1, 1], [1, 1], "SAME_LOWER", 0, 2),
    ((1, 2, 8, 8), [2, 2], [1, 1], [2, 2], [0, 0, 0, 0], 0, 2),
    ((1, 2, 8, 8), [3, 3], [2, 2], [1, 1], [0, 1, 0, 1], 1, 2),
    ((1, 2, 9, 8), [3, 3], [2, 2], [2, 2], [1, 1, 1, 1], 1, 3),
    ((1, 2, 4, 5, 6), [2, 2, 2], [1, 2, 2], [1, 1, 2], [1, 0, 1, 0, 1, 1], 0, 2),
]


def lp_pool(x, k, s, d, pads, ceil_mode, p):
    r = x.ndim - 2
    in_sizes = x.shape[2:]
    out, pb, pe = geometry(in_sizes, k, s, d, pads, ceil_mode)
    y = np.zeros(x.shape[:2] + tuple(out))
    windows = {}
    for o in outputs(out):
        real = []
        for pos in window_taps(o, k, s, d, pb):
            if all(0 <= pos[i] < in_sizes[i] for i in range(r)):
                real.append(tuple(pos))
        windows[o] = real
        for n, c in outputs(x.shape[:2]):
            y[(n, c) + o] = sum(abs(x[(n, c) + q]) ** p for q in real) ** (1.0 / p)
    return y, windows


def pull_back(x, y, dy, windows, p):
    dx = np.zeros(x.shape)
    for o, real in windows.items():
        for n, c in outputs(x.shape[:2]):
            norm = y[(n, c) + o]
            for q in real:
                v = x[(n, c) + q]
                dx[(n, c) + q] += dy[(n, c) + o] * np.sign(v) * abs(v) ** (p - 1) / norm ** (p - 1)
    return dx


def torch_check(x, y, dy, dx, k, s, p):
    xt = torch.tensor(x, requires_grad=True)
    f = torch.nn.functional.lp_pool1d if x.ndim == 3 else torch.nn.functional.lp_pool2d
    yt = f(xt, p, k[0] if x.ndim == 3 else k, s[0] if x.ndim == 3 else s)
    assert np.allclose(yt.detach().numpy(), y, rtol=1e-12, atol=1e-12), "Y differs from torch's lp_pool"
    (yt * torch.tensor(dy)).sum().backward()
    assert np.allclose(xt.grad.numpy(), dx, rtol=1e-10, atol=1e-12), "dX differs from torch's autograd"


def main(path):
    rng = np.random.default_rng(18)
    cases, checked = [], 0
    for shape, k, s, d, pads, ceil_mode, p in CASES:
        x = rng.standard_normal(shape)
        y, windows = lp_pool(x, k, s, d, pads, ceil_mode, p)
        dy = rng.standard_normal(y.shape)
        dx = pull_back(x, y, dy, windows, p)
        plain = not isinstance(pads, str) and not any(pads) and all(v == 1 for v in d) and not ceil_mode
        if plain and p % 2 == 0:
            torch_check(x, y, dy, dx, k, s, p)
            checked += 1
        cases.append((window_attrs(k, s, d, pads, ceil_mode) + [f"p={p}"], x, y, dy, dx))
    assert checked == 3
    write_cases(path, "tools/golden_lppool.py", cases)


if __name__ == "__main__":
    main(sys.argv[1])
