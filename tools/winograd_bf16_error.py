#!/usr/bin/env python3
"""Would a bf16 Winograd convolution keep bf16's accuracy?  The error, against a direct
sum in double, of Winograd F(4x4,3x3) and F(2x2,3x3) whose transformed operands are
rounded to bf16 before the products (what a bf16 matmul, such as oneDNN's on AVX-512 BF16
CPUs, would read), next to a direct bf16 convolution's (inputs and output rounded).

The inputs and filters are bf16 numbers in every variant (mixed precision rounds them
first), so the figures isolate what the transforms add. Printed per layer shape of the Wide
ResNet (input channels 16, 160, 320, 640): max and rms of |out - direct in double| over
the output's rms. Needs numpy; under a second.

    python3 tools/winograd_bf16_error.py [--seed 0]
"""
import argparse

import numpy as np


def to_bf16(a):
    """Round float32 values to the nearest bf16 (ties to even), kept as float32."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


# F(m x m, 3x3): input transform B^T (t x t), filter transform G (t x 3), output
# transform A^T (m x t), t = m + 2. Interpolation points 0, 1, -1, 2, -2 (and infinity).
F4 = dict(
    m=4,
    bt=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
        [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
    g=[[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
       [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
    at=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])
F2 = dict(
    m=2,
    bt=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    g=[[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
    at=[[1, 1, 1, 0], [0, 1, -1, -1]])


def winograd(x, w, f, round_operands):
    """Same-padded 3x3 convolution of x (C,H,W) with w (K,C,3,3); H, W multiples of m."""
    m = f["m"]
    bt, g, at = (np.array(f[k], np.float64) for k in ("bt", "g", "at"))
    t = m + 2
    C, H, W = x.shape
    u = np.einsum("ai,kcij,bj->abkc", g, w, g).astype(np.float32)
    if round_operands:
        u = to_bf16(u)
    xp = np.pad(x, ((0, 0), (1, t), (1, t)))
    out = np.zeros((w.shape[0], H, W))
    for i in range(0, H, m):
        for j in range(0, W, m):
            v = np.einsum("ai,cij,bj->abc", bt, xp[:, i:i + t, j:j + t], bt).astype(np.float32)
            if round_operands:
                v = to_bf16(v)
            prod = np.einsum("abkc,abc->abk", u.astype(np.float64), v.astype(np.float64))
            out[:, i:i + m, j:j + m] = np.einsum("ia,abk,jb->kij", at, prod, at)
    return out


def direct(x, w):
    C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    return sum(np.einsum("kc,chw->khw", w[:, :, i, j], xp[:, i:i + H, j:j + W]) for i in range(3) for j in range(3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print("input channels | variant | max |err| / rms | rms err / rms")
    for c in (16, 160, 320, 640):
        x = to_bf16(rng.standard_normal((c, 8, 8))).astype(np.float64)
        w = to_bf16(rng.standard_normal((32, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float64)
        ref = direct(x, w)
        scale = np.sqrt(np.mean(ref ** 2))
        rows = [("direct, bf16 output", to_bf16(ref).astype(np.float64)),
                ("F(4x4,3x3), fp32 operands", winograd(x, w, F4, False)),
                ("F(4x4,3x3), bf16 operands", winograd(x, w, F4, True)),
                ("F(2x2,3x3), bf16 operands", winograd(x, w, F2, True))]
        for name, out in rows:
            err = np.abs(out - ref)
            print("%d | %s | %.2e | %.2e" % (c, name, err.max() / scale, np.sqrt(np.mean(err ** 2)) / scale))


if __name__ == "__main__":
    main()
