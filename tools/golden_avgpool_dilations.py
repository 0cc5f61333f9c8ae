#!/usr/bin/env python3
"""Golden data for AveragePool with dilations (ONNX opset 19) and its gradient.

Writes tests/data/avgpool_dilations.txt (plain text, read by tests/ops/test_pool.cpp):
per case the node's attributes, X, Y, a dY and dX = dY's pull-back through the pool,
all float64. Y follows the opset-19 definition directly, tap by tap, independent of
trainrt's code: the window of output o in dim i starts at o*stride - pad_begin and has
kernel taps `dilation` apart; its mean is over the taps on real input elements
(count_include_pad 0), or over the taps inside input + pads (count_include_pad 1; a
ceil_mode window's taps past the end pad are not counted). Output sizes and pads:
tools/pool_golden.py's `geometry`.

The 2-D cases with explicit pads or VALID and without ceil_mode are checked here against torch's unfold (dilated patches,
zero padding): Y, and dX by autograd. Run with Debian's python3-numpy and python3-torch:

    /usr/bin/python3 tools/golden_avgpool_dilations.py tests/data/avgpool_dilations.txt
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pool_golden import geometry, outputs, window_attrs, window_taps, write_cases  # noqa: E402

CASES = [
    # x shape, kernel, strides, dilations, pads (begins then ends) or auto_pad, ceil_mode, count_include_pad
    ((2, 3, 11), [3], [1], [2], [0, 0], 0, 0),
    ((2, 3, 11), [2], [2], [3], [1, 1], 1, 1),
    ((2, 3, 11), [2], [2], [3], [1, 1], 1, 0),
    ((1, 2, 9, 8), [3, 3], [2, 2], [2, 2], [1, 1, 1, 1], 1, 1),
    ((1, 2, 9, 8), [3, 3], [2, 2], [2, 2], [1, 1, 1, 1], 1, 0),
    ((2, 2, 7, 7), [2, 3], [1, 2], [3, 2], [1, 0, 0, 1], 0, 1),
    ((2, 2, 7, 7), [2, 3], [1, 2], [3, 2], [1, 0, 0, 1], 0, 0),
    ((1, 2, 6, 7), [3, 3], [2, 2], [2, 2], "SAME_UPPER", 0, 0),
    ((1, 2, 6, 7), [2, 2], [1, 1], [2, 2], "SAME_LOWER", 0, 1),
    ((1, 3, 8, 9), [3, 2], [1, 2], [2, 3], "VALID", 0, 0),
    ((1, 2, 5, 6, 7), [2, 2, 2], [1, 2, 2], [1, 2, 3], [1, 0, 1, 0, 1, 1], 1, 1),
    ((1, 2, 5, 6, 7), [2, 2, 2], [1, 2, 2], [1, 2, 3], [1, 0, 1, 0, 1, 1], 0, 0),
]


def average_pool(x, k, s, d, pads, ceil_mode, include_pad):
    """Y and the tap lists: for each output position, (input positions, divisor)."""
    r = x.ndim - 2
    in_sizes = x.shape[2:]
    out, pb, pe = geometry(in_sizes, k, s, d, pads, ceil_mode)
    y = np.zeros(x.shape[:2] + tuple(out))
    windows = {}
    for o in outputs(out):
        real, counted = [], 0
        for pos in window_taps(o, k, s, d, pb):
            inside = all(0 <= pos[i] < in_sizes[i] for i in range(r))
            in_pads = all(-pb[i] <= pos[i] < in_sizes[i] + pe[i] for i in range(r))
            if inside:
                real.append(tuple(pos))
            counted += inside if not include_pad else in_pads
        windows[o] = (real, counted)
        for n, c in outputs(x.shape[:2]):
            y[(n, c) + o] = sum(x[(n, c) + p] for p in real) / counted
    return y, windows


def pull_back(x_shape, dy, windows):
    dx = np.zeros(x_shape)
    for o, (real, counted) in windows.items():
        for n, c in outputs(x_shape[:2]):
            for p in real:
                dx[(n, c) + p] += dy[(n, c) + o] / counted
    return dx


def torch_check(x, y, dy, dx, k, s, d, pads, include_pad):
    """2-D explicit pads, no ceil_mode: Y and dX from torch's unfold and autograd."""
    xt = torch.tensor(x, requires_grad=True)
    pt, pl, pb_, pr = pads[0], pads[1], pads[2], pads[3]
    padded = torch.nn.functional.pad(xt, (pl, pr, pt, pb_))
    cols = torch.nn.functional.unfold(padded, k, dilation=d, stride=s)
    ones = torch.nn.functional.pad(torch.ones_like(xt), (pl, pr, pt, pb_))
    counts = torch.nn.functional.unfold(ones, k, dilation=d, stride=s)
    n, c = x.shape[:2]
    kk = k[0] * k[1]
    sums = cols.view(n, c, kk, -1).sum(2)
    div = kk if include_pad else counts.view(n, c, kk, -1).sum(2)
    yt = (sums / div).view(y.shape)
    assert np.allclose(yt.detach().numpy(), y, rtol=0, atol=1e-12), "Y differs from torch's unfold"
    (yt * torch.tensor(dy)).sum().backward()
    assert np.allclose(xt.grad.numpy(), dx, rtol=0, atol=1e-12), "dX differs from torch's autograd"


def main(path):
    rng = np.random.default_rng(19)
    cases, checked = [], 0
    for shape, k, s, d, pads, ceil_mode, include_pad in CASES:
        x = rng.standard_normal(shape)
        y, windows = average_pool(x, k, s, d, pads, ceil_mode, include_pad)
        dy = rng.standard_normal(y.shape)
        dx = pull_back(x.shape, dy, windows)
        if len(shape) == 4 and pads not in ("SAME_UPPER", "SAME_LOWER") and not ceil_mode:
            torch_check(x, y, dy, dx, k, s, d, [0] * 4 if pads == "VALID" else pads, include_pad)
            checked += 1
        attrs = window_attrs(k, s, d, pads, ceil_mode) + [f"count_include_pad={include_pad}"]
        cases.append((attrs, x, y, dy, dx))
    assert checked == 3
    write_cases(path, "tools/golden_avgpool_dilations.py", cases)


if __name__ == "__main__":
    main(sys.argv[1])
