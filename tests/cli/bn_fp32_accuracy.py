#!/usr/bin/python3
"""The cpu backend's fp32 gradients of a batch-norm network are as close to fp64 as PyTorch's.

torchvision's shufflenet_v2_x0_5 (random init, fixed seed, 10 classes, batch 8, 32x32,
exported by PyTorch in training mode, as tests/cli/torchvision_models.py does, whose helpers
this script reuses): at 32x32 its stages normalise 4x4, 2x2 and 1x1 maps, 128, 32 and 8
values a channel at batch 8. Batch statistics that lose digits in fp32 are amplified there by
1/sqrt(var + eps) on nearly constant channels and can flip the following Relus. With oneDNN's
fp32 statistics the cpu backend's gradients were 4.8e-2 (relative L2 over all parameter
gradients) from PyTorch fp64's, against PyTorch fp32's 6.5e-5; with statistics summed in
double (ops/norm_cpu.cpp) 4.3e-5. The bound is torchvision_models.py's: 3x PyTorch fp32's
own distance from fp64, plus 1e-5. ~30 s on 2 busy cores, mostly the export and PyTorch.

    /usr/bin/python3 tests/cli/bn_fp32_accuracy.py build/trainrt .
"""
import os
import sys
import tempfile
import warnings

import torch
import torchvision

import torchvision_models as tm


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: bn_fp32_accuracy.py TRAINRT [SOURCE_DIR]")
    trainrt = sys.argv[1]
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.manual_seed(0)
    model = tm.no_randomness(torchvision.models.shufflenet_v2_x0_5(num_classes=tm.CLASSES)).train()
    x = torch.randn(tm.BATCH, 3, tm.SIZE, tm.SIZE)
    y = torch.randint(0, tm.CLASSES, (tm.BATCH,))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        x_path, y_path = tm.export_for_training(model, x, y, path, 13, tmp)
        _, g32 = tm.torch_gradients(model, x, y)
        _, g64 = tm.torch_gradients(model.double(), x.double(), y)
        try:
            _, t32 = tm.trainrt_gradients(trainrt, path, x_path, y_path, "cpu", os.path.join(tmp, "cpu32"))
        except RuntimeError as e:
            print("FAIL: %s" % e)
            return 1
    if sorted(t32) != sorted(g64):
        print("FAIL: parameters differ from PyTorch's")
        return 1
    err, torch_err = tm.rel_l2(t32, g64), tm.rel_l2(g32, g64)
    bound = tm.FP32_FACTOR * torch_err + tm.FP32_FLOOR
    line = "cpu fp32 gradients %.3g from PyTorch fp64's, PyTorch fp32 %.3g (bound %.3g)" % (err, torch_err, bound)
    if err > bound:
        print("FAIL: %s, worst %s" % (line, tm.worst_param(t32, g64)))
        return 1
    print("bn_fp32_accuracy: ok (%s)" % line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
