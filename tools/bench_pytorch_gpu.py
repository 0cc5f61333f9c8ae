#!/usr/bin/env python3
"""PyTorch's training step of the seed's Wide ResNet on this node's GPU: the figure
trainrt's `bench --device cuda` is compared with (tools/gpu_run.sh, the GPU bundle's
run.sh, runs it and prints both in one table).

The model is tools/wrn_reference.py's (the seed's model.py), CIFAR-100 shape 3x32x32,
100 classes; the step and its timing are tools/bench_pytorch.py's run_one: one random
batch reused every step, cross-entropy, SGD momentum 0.9, channels_last, cudnn.benchmark,
median of the timed steps after the warm-up, each step timed between CUDA events. fp32
runs with PyTorch's default math (cuDNN convolutions may use TF32:
torch.backends.cudnn.allow_tf32 is left as PyTorch sets it, True; matrix products at its
default), bf16 under torch.autocast. One line per point:

    pytorch: batch 32 precision fp32 images/s 2790.1 ms/step 11.47 (...)
    pytorch: batch 1024 precision bf16 FAILED: CUDA out of memory ...

    python3 tools/bench_pytorch_gpu.py --points 32:fp32,1024:bf16            # the kit's two points
    python3 tools/bench_pytorch_gpu.py --device cpu --points 2:fp32 --steps 1 --warmup 0 --widths small
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_pytorch  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--points", default="32:fp32,1024:bf16", help="BATCH:PRECISION,... (precision fp32 or bf16)")
    p.add_argument("--dataset", default="cifar100", choices=["cifar100", "cifar10", "fashion-mnist"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--widths", default="16,160,320,640", help="comma list, or small (4,8,12,16)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (--device cpu)")
    a = p.parse_args()
    points = []
    for item in a.points.split(","):
        batch, _, precision = item.partition(":")
        if not batch.isdigit() or int(batch) < 1 or precision not in ("fp32", "bf16"):
            p.error("--points: expected BATCH:fp32 or BATCH:bf16, got '%s'" % item)
        points.append((int(batch), precision))
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")

    import torch
    if a.device == "cuda" and not torch.cuda.is_available():
        print("pytorch: no usable GPU (torch.cuda.is_available() is False; torch %s)" % torch.__version__, flush=True)
        return 2
    where = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    math = "cudnn.allow_tf32 %s, matmul.allow_tf32 %s" % (torch.backends.cudnn.allow_tf32,
                                                          torch.backends.cuda.matmul.allow_tf32)
    failed = 0
    for batch, precision in points:
        run = argparse.Namespace(device=a.device, precision=precision, dataset=a.dataset, batch=batch,
                                 steps=a.steps, warmup=a.warmup, widths=a.widths, threads=a.threads, lr=0.01,
                                 seed=0, format="channels_last")
        try:
            r = bench_pytorch.run_one(run)
        except Exception as e:  # one point's failure (out of memory) leaves the others
            failed += 1
            print("pytorch: batch %d precision %s FAILED: %s" % (batch, precision, str(e).splitlines()[0][:200]),
                  flush=True)
            continue
        finally:
            if a.device == "cuda":
                torch.cuda.empty_cache()
        print("pytorch: batch %d precision %s images/s %.1f ms/step %.2f (torch %s, %s, channels_last, %s%s, "
              "loss %.3f -> %.3f)" % (batch, precision, r["images_per_s"], r["ms_median"], r["torch"], where,
                                      "cudnn.benchmark, " if a.device == "cuda" else "", math,
                                      r["loss_first"], r["loss_last"]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
