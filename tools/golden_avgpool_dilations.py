#!/usr/bin/env python3
"""Golden data for AveragePool with dilations (ONNX opset 19) and its gradient.

Writes tests/data/avgpool_dilations.txt (plain text, read by tests/ops/test_pool.cpp):
per case the node's attributes, X, Y, a dY and dX = dY's pull-back through the pool,
all float64. Y follows the opset-19 definition directly, tap by tap, independent of
trainrt's code: the window of output o in dim i starts at o*stride - pad_begin and has
kernel taps `dilation` apart; its mean is over the taps on real input elements
(count_include_pad 0), or over the taps inside input + pads (count_include_pad 1; a
ceil_mode window's taps past the end pad are not counted). Output sizes:
floor/ceil((in + pads - ((k-1)*d + 1)) / s) + 1, a ceil_mode window that would start
past in + pad_begin dropped; SAME_UPPER/LOWER: ceil(in/s) with total pad
(out-1)*s + (k-1)*d + 1 - in, the odd one at the end (UPPER) or beginning (LOWER).

The 2-D cases with explicit pads or VALID and without ceil_mode are checked here against torch's unfold (dilated patches,
zero padding): Y, and dX by autograd. Run with Debian's python3-numpy and python3-torch:

    /usr/bin/python3 tools/golden_avgpool_dilations.py tests/data/avgpool_dilations.txt
"""
import itertools
import math
import sys

import numpy as np
import torch

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


def geometry(in_sizes, k, s, d, pads, ceil_mode):
    """Output sizes and explicit pads (begins, ends) of one case."""
    r = len(in_sizes)
    eff = [(k[i] - 1) * d[i] + 1 for i in range(r)]
    if isinstance(pads, str):
        if pads == "VALID":
            return [(in_sizes[i] - eff[i]) // s[i] + 1 for i in range(r)], [0] * r, [0] * r
        out = [math.ceil(in_sizes[i] / s[i]) for i in range(r)]
        total = [max(0, (out[i] - 1) * s[i] + eff[i] - in_sizes[i]) for i in range(r)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        return (out, small, big) if pads == "SAME_UPPER" else (out, big, small)
    pb, pe = pads[:r], pads[r:]
    out = []
    for i in range(r):
        span = in_sizes[i] + pb[i] + pe[i] - eff[i]
        o = (-(-span // s[i]) if ceil_mode else span // s[i]) + 1
        if ceil_mode and (o - 1) * s[i] >= in_sizes[i] + pb[i]:
            o -= 1
        out.append(o)
    return out, pb, pe


def average_pool(x, k, s, d, pads, ceil_mode, include_pad):
    """Y and the tap lists: for each output position, (input positions, divisor)."""
    r = x.ndim - 2
    in_sizes = x.shape[2:]
    out, pb, pe = geometry(in_sizes, k, s, d, pads, ceil_mode)
    y = np.zeros(x.shape[:2] + tuple(out))
    windows = {}
    for o in itertools.product(*[range(n) for n in out]):
        real, counted = [], 0
        for taps in itertools.product(*[range(k[i]) for i in range(r)]):
            pos = [o[i] * s[i] - pb[i] + taps[i] * d[i] for i in range(r)]
            inside = all(0 <= pos[i] < in_sizes[i] for i in range(r))
            in_pads = all(-pb[i] <= pos[i] < in_sizes[i] + pe[i] for i in range(r))
            if inside:
                real.append(tuple(pos))
            counted += inside if not include_pad else in_pads
        windows[o] = (real, counted)
        for n, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
            y[(n, c) + o] = sum(x[(n, c) + p] for p in real) / counted
    return y, windows


def pull_back(x_shape, dy, windows):
    dx = np.zeros(x_shape)
    for o, (real, counted) in windows.items():
        for n, c in itertools.product(range(x_shape[0]), range(x_shape[1])):
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
    fmt = lambda a: " ".join(repr(float(v)) for v in a.ravel())
    ints = lambda v: ",".join(str(i) for i in v)
    lines = [f"# generated by tools/golden_avgpool_dilations.py with numpy {np.__version__}, torch {torch.__version__}"]
    checked = 0
    for shape, k, s, d, pads, ceil_mode, include_pad in CASES:
        x = rng.standard_normal(shape)
        y, windows = average_pool(x, k, s, d, pads, ceil_mode, include_pad)
        dy = rng.standard_normal(y.shape)
        dx = pull_back(x.shape, dy, windows)
        if len(shape) == 4 and pads not in ("SAME_UPPER", "SAME_LOWER") and not ceil_mode:
            torch_check(x, y, dy, dx, k, s, d, [0] * 4 if pads == "VALID" else pads, include_pad)
            checked += 1
        attrs = [f"kernel_shape={ints(k)}", f"strides={ints(s)}", f"dilations={ints(d)}"]
        attrs.append(f"auto_pad={pads}" if isinstance(pads, str) else f"pads={ints(pads)}")
        attrs += [f"ceil_mode={ceil_mode}", f"count_include_pad={include_pad}"]
        lines.append("case " + " ".join(attrs))
        lines.append("x_shape " + " ".join(str(v) for v in x.shape))
        lines.append("x " + fmt(x))
        lines.append("y_shape " + " ".join(str(v) for v in y.shape))
        lines.append("y " + fmt(y))
        lines.append("dy " + fmt(dy))
        lines.append("dx " + fmt(dx))
    assert checked == 3
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
