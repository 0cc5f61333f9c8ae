#!/usr/bin/python3
"""fp32 gradient accuracy of trainrt's cpu backend beside PyTorch's, for torchvision models.

For each model (built, exported and fed as tests/cli/torchvision_models.py does: batch 8,
3x32x32, training mode, mean cross entropy) prints the relative L2 distance over all
parameter gradients together of
  - trainrt cpu fp32 from trainrt reference fp64 (the export made double),
  - trainrt reference fp32 from the same (the plain loops' own fp32 rounding),
  - PyTorch fp32 from PyTorch fp64 (same weights, input and loss),
and the parameter whose gradient the cpu backend misses most.

    /usr/bin/python3 tools/grad_accuracy.py TRAINRT[,TRAINRT...] [--seed S] [--threads T] [MODEL ...]
    (default models: densenet121 mobilenet_v2 shufflenet_v2_x1_0 resnet18; seed 0 is the test's
    weights and batch; threads: the cpu backend's, 0 = all cores). Several trainrt binaries
    (comma-separated, e.g. before and after a change) each get a cpu fp32 column, beside one
    PyTorch measurement; the reference columns come from the first.
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "cli"))
import torchvision_models as tm  # noqa: E402


def measure(binaries, name, tmp, seed, threads):
    # The test's models, or any torchvision classification model by its constructor's name.
    make, opset = tm.MODELS.get(name, (lambda: getattr(torchvision.models, name)(num_classes=tm.CLASSES), 13))
    torch.manual_seed(seed)
    model = tm.no_randomness(make()).train()
    x = torch.randn(tm.BATCH, 3, tm.SIZE, tm.SIZE)
    y = torch.randint(0, tm.CLASSES, (tm.BATCH,))
    path32, path64 = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_fp64.onnx")
    x_path, y_path = tm.export_for_training(model, x, y, path32, opset, tmp)
    onnx.save(tm.to_double(onnx.load(path32)), path64)
    _, g32 = tm.torch_gradients(model, x, y)
    _, g64 = tm.torch_gradients(model.double(), x.double(), y)
    def run(path, backend, out, trainrt=binaries[0]):
        out = os.path.join(tmp, out)
        cmd = [trainrt, "grad", path, "--input", "input=" + x_path, "--labels", y_path, "--backend", backend,
               "--threads", str(threads), "--output-dir", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
        return {tm.load(os.path.join(out, f))[0]: tm.load(os.path.join(out, f))[1].astype(np.float64)
                for f in os.listdir(out) if f.startswith("grad_")}

    t64 = run(path64, "reference", "ref64")
    ref32 = run(path32, "reference", "ref32")
    cpu32 = [run(path32, "cpu", "cpu32_%d" % i, b) for i, b in enumerate(binaries)]
    return ([tm.rel_l2(c, t64) for c in cpu32], tm.rel_l2(ref32, t64), tm.rel_l2(g32, g64),
            tm.worst_param(cpu32[-1], t64))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit("usage: grad_accuracy.py TRAINRT [--seed S] [--threads T] [MODEL ...]")
    binaries, seed, threads, names = args[0].split(","), 0, 0, []
    rest = iter(args[1:])
    for a in rest:
        if a == "--seed":
            seed = int(next(rest))
        elif a == "--threads":
            threads = int(next(rest))
        else:
            names.append(a)
    names = names or ["densenet121", "mobilenet_v2", "shufflenet_v2_x1_0", "resnet18"]
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    cpu_cols = "".join("%12s" % ("cpu fp32 #%d" % i if len(binaries) > 1 else "cpu fp32") for i in range(len(binaries)))
    print("%-20s %s %12s %12s %8s  %s" % ("model", cpu_cols, "ref fp32", "torch fp32", "cpu/torch", "worst (last cpu)"))
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            cpu, ref, pt, worst = measure(binaries, name, tmp, seed, threads)
        print("%-20s %s %12.2e %12.2e %8.1f  %s" % (name, "".join("%12.2e" % c for c in cpu), ref, pt, cpu[-1] / pt,
                                                    worst))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
