#!/usr/bin/python3
"""PyTorch's training step on the seed's Wide ResNet: the baseline for `trainrt bench`.

Same model (tools/wrn_reference.py, the seed's model.py), same random-batch setup as
`trainrt bench` (one batch of normal images and uniform labels reused every step),
SGD momentum 0.9, cross-entropy loss, torch.set_num_threads(--threads). Both memory
formats, contiguous (NCHW) and channels_last (model and input converted), are timed in
each precision of --precisions (fp32; bf16: the step under CPU bf16 autocast, as a
PyTorch user turns it on), each pair in its own child process so that each has its own
peak RSS. The best images/s of them all is reported as PyTorch's figure.

    python3 tools/bench_pytorch.py --dataset fashion-mnist --batch 64 --threads 2 --steps 3 --warmup 1 \
        --precisions fp32,bf16

Prints one line per format and precision and a final 'best:' line; with --json, one
JSON object per run and one for the best (used by tools/bench_compare.sh).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FORMATS = ("channels_last", "contiguous")
PRECISIONS = ("fp32", "bf16")


def run_one(a):
    """Times one memory format in this process; returns a result dict. With a.device
    "cuda" (tools/bench_pytorch_gpu.py) the model and batch live on the GPU, cuDNN picks
    its algorithms (cudnn.benchmark), a.precision "bf16" runs the step under bf16
    autocast, and each step is timed between CUDA events, queued without a host sync."""
    import contextlib
    import torch
    sys.path.insert(0, HERE)
    import wrn_reference as w

    device = getattr(a, "device", "cpu")
    precision = getattr(a, "precision", "fp32")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
    widths = w.SMALL_WIDTHS if a.widths == "small" else [int(v) for v in a.widths.split(",")]
    cin, side, classes = w.DATASETS[a.dataset]
    model = w.build(a.dataset, widths).to(device)
    model.train()
    x = torch.randn(a.batch, cin, side, side, device=device)
    y = torch.randint(0, classes, (a.batch,), device=device)
    if a.format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    autocast = (torch.autocast(device_type=device, dtype=torch.bfloat16) if precision == "bf16" else
                contextlib.nullcontext())

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    first = None
    for _ in range(a.warmup):
        first = step().item()
    ms = []
    if device == "cuda":
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)]
        marks[0].record()
        for i in range(a.steps):
            loss = step()
            marks[i + 1].record()
        torch.cuda.synchronize()
        ms = [marks[i].elapsed_time(marks[i + 1]) for i in range(a.steps)]
        last = loss.item()
    else:
        for _ in range(a.steps):
            t0 = time.perf_counter()
            last = step().item()
            ms.append((time.perf_counter() - t0) * 1e3)
    if first is None:
        first = last
    median = statistics.median(ms)
    return {
        "framework": "pytorch",
        "torch": torch.__version__,
        "device": device,
        "precision": precision,
        "format": a.format,
        "dataset": a.dataset,
        "input": [a.batch, cin, side, side],
        "widths": widths,
        "threads": torch.get_num_threads(),
        "steps_ms": [round(v, 1) for v in ms],
        "ms_median": median,
        "ms_mean": statistics.mean(ms),
        "images_per_s": a.batch * 1e3 / median,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "loss_first": first,
        "loss_last": last,
    }


def describe(r):
    return ("%-13s %s ms/step median %.1f mean %.1f, images/s %.2f, peak RSS %.1f MiB, loss %.4f -> %.4f (steps %s)" %
            (r["format"], r.get("precision", "fp32"), r["ms_median"], r["ms_mean"], r["images_per_s"], r["peak_rss_mib"], r["loss_first"],
             r["loss_last"], " ".join("%.1f" % v for v in r["steps_ms"])))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "cifar100", "cifar10"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--widths", default="16,160,320,640", help="comma list, or small (4,8,12,16)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=FORMATS + ("both",), default="both")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32", help="with one --format: the run's precision")
    p.add_argument("--precisions", default="fp32", help="with --format both: comma list of fp32, bf16")
    p.add_argument("--json", action="store_true", help="print JSON objects instead of text")
    a = p.parse_args()
    for name in ("batch", "threads", "steps"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name)
    if a.warmup < 0:
        p.error("--warmup must be >= 0")

    precisions = [v for v in a.precisions.split(",") if v]
    if not precisions or any(v not in PRECISIONS for v in precisions):
        p.error("--precisions: a comma list of fp32, bf16, got '%s'" % a.precisions)

    if a.format != "both":
        print(json.dumps(run_one(a)))
        return 0
    results = []
    for precision in precisions:
        for fmt in FORMATS:
            cmd = [sys.executable, os.path.abspath(__file__), "--format", fmt, "--precision", precision] + [
                "--%s=%s" % (k, getattr(a, k))
                for k in ("dataset", "batch", "threads", "steps", "warmup", "widths", "lr", "seed")]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            results.append(r)
            print(json.dumps(r) if a.json else "pytorch " + describe(r), flush=True)
    best = max(results, key=lambda r: r["images_per_s"])
    if a.json:
        print(json.dumps(dict(best, best=True)))
    else:
        print("pytorch best: %s %s, %.2f images/s, ms/step median %.1f, peak RSS %.1f MiB (torch %s, %d threads, %s %s)" %
              (best["format"], best["precision"], best["images_per_s"], best["ms_median"], best["peak_rss_mib"],
               best["torch"], best["threads"], a.dataset, best["input"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
