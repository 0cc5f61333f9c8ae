#!/usr/bin/python3
"""`trainrt run` on PyTorch's own export of a small Wide ResNet gives PyTorch's logits.

tests/data/wrn_small_eval.onnx (widths 4,8,12,16, Fashion-MNIST shape, eval export,
opset 13: Conv with BatchNorm folded in, Pad, MaxPool, AveragePool, Flatten, Gemm)
is run on the reference and cpu backends on the batch in
tests/data/wrn_small_eval_golden/input_0.pb, and the logits are compared with
output_0.pb, which PyTorch computed for that file (tools/golden_wrn_eval.py; it
checks the model it ran is bit-identical to the committed one). Needs numpy and
onnx only.

Tolerance: |got - want| <= 2e-5 + 1e-4 * |want| per logit. The logits are O(0.1-0.4);
PyTorch's own fp32 result is within 5e-8 of its fp64 result (meta.json), and
both trainrt backends were measured within 4.5e-8 of PyTorch's logits; other
summation orders (oneDNN's algorithm choice on another CPU) may move an fp32 logit
by ~1e-6, so 2e-5 leaves a wide margin, while any wrong
semantics (a pad, a pool window or divisor, Gemm's transB, a folded bias) moves
logits by 1e-3 or more. The classes PyTorch ranks first must match too.

    /usr/bin/python3 tests/cli/run_golden.py build/trainrt .     (CTest runs it this way)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ATOL, RTOL = 2e-5, 1e-4


def golden(path):
    """A committed golden file: a missing or empty one ends the test naming it."""
    if not os.path.isfile(path):
        sys.exit("FAIL: golden file missing: %s" % path)
    if os.path.getsize(path) == 0:
        sys.exit("FAIL: golden file empty: %s" % path)
    return path


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: run_golden.py TRAINRT SOURCE_DIR")
    trainrt, src = sys.argv[1], sys.argv[2]
    model = golden(os.path.join(src, "tests", "data", "wrn_small_eval.onnx"))
    folder = os.path.join(src, "tests", "data", "wrn_small_eval_golden")
    want = load(golden(os.path.join(folder, "output_0.pb")))
    batch = golden(os.path.join(folder, "input_0.pb"))
    assert want.shape == (8, 10) and want.dtype == np.float32, want.shape
    # meta.json, written with output_0.pb by the same script, describes these logits.
    with open(golden(os.path.join(folder, "meta.json"))) as f:
        meta = json.load(f)
    assert abs(float(np.abs(want).max()) - meta["logits_abs_max"]) < 1e-7, (np.abs(want).max(), meta)
    # The golden batch must exercise the model: distinct logits per image.
    assert np.ptp(want, axis=0).max() > 1e-2, "golden logits do not vary across the batch"
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("reference", "cpu"):
            out = os.path.join(tmp, backend)
            cmd = [trainrt, "run", model, "--input", "input=" + batch,
                   "--backend", backend, "--output-dir", out]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL %s: exit %d: %s" % (backend, r.returncode, r.stderr.strip()))
                fails += 1
                continue
            got = load(os.path.join(out, "output_0.pb"))
            if got.dtype != want.dtype or got.shape != want.shape:
                print("FAIL %s: logits are %s%s, expected %s%s" % (backend, got.dtype, list(got.shape), want.dtype,
                                                                   list(want.shape)))
                fails += 1
                continue
            diff = np.abs(got.astype(np.float64) - want)
            bad = diff > ATOL + RTOL * np.abs(want)
            same_top = (got.argmax(axis=1) == want.argmax(axis=1)).all()
            print("%-9s max |trainrt - PyTorch| = %.3g (tolerance %.0e + %.0e*|want|), top class %s" %
                  (backend, diff.max(), ATOL, RTOL, "matches" if same_top else "DIFFERS"))
            if bad.any() or not same_top:
                i = np.unravel_index(np.argmax(diff), diff.shape)
                print("FAIL %s: %d/%d logits out of tolerance; worst at %s: %.7g vs %.7g" %
                      (backend, bad.sum(), bad.size, tuple(int(v) for v in i), got[i], want[i]))
                fails += 1
    print("run_golden: %s" % ("%d FAIL" % fails if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
