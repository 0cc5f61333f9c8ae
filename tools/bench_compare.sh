#!/usr/bin/env bash
# trainrt against PyTorch on the same Wide ResNet training step, in the same run.
#
#   tools/bench_compare.sh --trainrt build/trainrt [--dataset fashion-mnist|cifar100|both]
#       [--batch 64|128|both] [--precision fp32|bf16|fp32-winograd|all] [--threads 2] [--steps 3] [--warmup 1]
#       [--widths 16,160,320,640]
#
# For each dataset shape (Fashion-MNIST 1x28x28, CIFAR-100 3x32x32) and batch:
# writes the seed's Wide ResNet with `trainrt model wrn` (same architecture as
# tools/wrn_reference.py, which bench_pytorch.py builds), runs `trainrt bench` on it
# (cpu backend, SGD momentum 0.9; fp32, bf16 mixed precision, fp32 with Winograd
# convolutions, or all three), then
# tools/bench_pytorch.py (fp32, best of channels_last and contiguous), and prints the
# figures and the ratios trainrt/PyTorch fp32 of images/s and peak RSS. Both run with the same --threads, one
# after the other; `uptime`'s load average is printed before each, because the
# machine may be shared. Nothing is asserted: this is a benchmark, not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
trainrt=${TRAINRT:-$here/../build/trainrt}
datasets=fashion-mnist
batches=64
threads=2
steps=3
warmup=1
widths=16,160,320,640
precisions=fp32

die() { echo "bench_compare.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --trainrt) trainrt=$2; shift 2 ;;
    --dataset) case $2 in both) datasets="fashion-mnist cifar100" ;; fashion-mnist | cifar100) datasets=$2 ;;
                 *) die "--dataset: expected fashion-mnist, cifar100 or both, got '$2'" ;; esac; shift 2 ;;
    --batch) case $2 in both) batches="64 128" ;; 64 | 128) batches=$2 ;;
               *) die "--batch: expected 64, 128 or both, got '$2'" ;; esac; shift 2 ;;
    --precision) case $2 in all) precisions="fp32 bf16 fp32-winograd" ;; fp32 | bf16 | fp32-winograd) precisions=$2 ;;
                   *) die "--precision: expected fp32, bf16, fp32-winograd or all, got '$2'" ;; esac; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --widths) widths=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -x "$trainrt" ] || die "$trainrt is not an executable (pass --trainrt PATH or set TRAINRT)"
for v in "$threads" "$steps" "$warmup"; do [[ $v =~ ^[0-9]+$ ]] || die "not a count: '$v'"; done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "trainrt: $("$trainrt" --version | head -1); PyTorch: $($py -c 'import torch; print(torch.__version__)')"
echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

for dataset in $datasets; do
  model=$tmp/wrn_$dataset.onnx
  "$trainrt" model wrn --dataset "$dataset" --widths "$widths" -o "$model" >/dev/null
  for batch in $batches; do
    echo
    echo "== Wide ResNet widths $widths, $dataset shape, batch $batch, $threads threads, $warmup warm-up + $steps timed steps"
    for precision in $precisions; do
      echo "load before trainrt $precision: $(uptime | sed 's/.*load average: //')"
      "$trainrt" bench "$model" --batch "$batch" --threads "$threads" --steps "$steps" --warmup "$warmup" \
        --backend cpu --precision "${precision%-winograd}" \
        --conv-algorithm "$([ "$precision" = fp32-winograd ] && echo winograd || echo direct)" | tee "$tmp/trainrt_$precision.txt" | sed "s/^/trainrt $precision | /"
    done
    echo "load before pytorch: $(uptime | sed 's/.*load average: //')"
    $py "$here/bench_pytorch.py" --dataset "$dataset" --batch "$batch" --threads "$threads" --steps "$steps" \
      --warmup "$warmup" --widths "$widths" --json >"$tmp/pytorch.jsonl"
    $py - "$tmp/pytorch.jsonl" $(for p in $precisions; do echo "$p" "$tmp/trainrt_$p.txt"; done) <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows[:-1]:
    print("pytorch  | %-13s %8.2f images/s, ms/step median %.1f mean %.1f, peak RSS %.1f MiB" %
          (r["format"], r["images_per_s"], r["ms_median"], r["ms_mean"], r["peak_rss_mib"]))
best = rows[-1]
print("pytorch  fp32 best (%s) %8.2f images/s, ms/step median %.1f mean %.1f, peak RSS %.1f MiB" %
      (best["format"], best["images_per_s"], best["ms_median"], best["ms_mean"], best["peak_rss_mib"]))
for precision, path in zip(sys.argv[2::2], sys.argv[3::2]):
    text = open(path).read()
    ips = float(re.search(r"^images/s: ([0-9.]+)", text, re.M).group(1))
    med, mean = map(float, re.search(r"^ms/step: median ([0-9.]+), mean ([0-9.]+)", text, re.M).groups())
    rss = float(re.search(r"^peak memory: RSS ([0-9.]+) MiB", text, re.M).group(1))
    print("trainrt  %s cpu               %8.2f images/s, ms/step median %.1f mean %.1f, peak RSS %.1f MiB" %
          (precision, ips, med, mean, rss))
    print("ratio trainrt %s / pytorch fp32: images/s %.2fx, peak RSS %.2fx" %
          (precision, ips / best["images_per_s"], rss / best["peak_rss_mib"]))
PY
    echo "load after: $(uptime | sed 's/.*load average: //')"
  done
done
