#!/usr/bin/env bash
# trainrt against PyTorch on the same Wide ResNet training step, in the same run.
#
#   tools/bench_compare.sh --trainrt build/trainrt [--dataset fashion-mnist|cifar100|both]
#       [--batch 64|128|both] [--precision fp32|bf16|fp32-winograd|fp32-winograd-own|all] [--threads 2]
#       [--steps 3] [--warmup 1]
#       [--widths 16,160,320,640] [--python PY] [--pytorch-precisions fp32|fp32,bf16]
#
# For each dataset shape (Fashion-MNIST 1x28x28, CIFAR-100 3x32x32) and batch:
# writes the seed's Wide ResNet with `trainrt model wrn` (same architecture as
# tools/wrn_reference.py, which bench_pytorch.py builds), runs `trainrt bench` on it
# (cpu backend, SGD momentum 0.9; fp32, bf16 mixed precision, fp32 with Winograd
# convolutions, or all three; fp32-winograd-own: the cpu backend's own Winograd on
# row-major layouts where oneDNN has its own, TRAINRT_WINOGRAD=own with --layouts plain,
# in `all` on CPUs with AVX-512, where it differs from fp32-winograd), then
# tools/bench_pytorch.py (channels_last and contiguous, in fp32 and, where the CPU has
# native bf16 (AVX-512 BF16 or AMX), bf16 autocast too), and prints the figures and the
# ratios of trainrt's images/s and peak RSS to PyTorch's best run. Both run with the same
# --threads, one after the other; `uptime`'s load average is printed before each, because
# the machine may be shared. Nothing is asserted: this is a benchmark, not a test.
#
# PyTorch is the one a user installs today: PyPI's newest torch, in a virtual
# environment of its own (TRAINRT_TORCH_VENV, default ~/.cache/trainrt/torch-venv),
# made on first use with `python3 -m venv` and `pip install torch` (several GB and some
# minutes; never in CI). --python PY runs another one instead (e.g. /usr/bin/python3,
# Debian's python3-torch); where the install fails, Debian's is used with a line saying so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=
venv=${TRAINRT_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/trainrt/torch-venv}
pt_precisions=fp32
grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && pt_precisions=fp32,bf16  # bf16 autocast only where it is native
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
    --precision) case $2 in all) precisions="fp32 bf16 fp32-winograd all-own" ;;
                   fp32 | bf16 | fp32-winograd | fp32-winograd-own) precisions=$2 ;;
                   *) die "--precision: expected fp32, bf16, fp32-winograd, fp32-winograd-own or all, got '$2'" ;;
                 esac; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --widths) widths=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --pytorch-precisions) case $2 in fp32 | fp32,bf16 | bf16,fp32 | bf16) pt_precisions=$2 ;;
                            *) die "--pytorch-precisions: expected fp32, bf16 or fp32,bf16, got '$2'" ;; esac; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -x "$trainrt" ] || die "$trainrt is not an executable (pass --trainrt PATH or set TRAINRT)"
if [[ " $precisions " == *" bf16 "* ]] && ! grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  precisions=$(echo "$precisions" | sed 's/\bbf16 //; s/ bf16$//')
  echo "bench_compare.sh: trainrt bf16 left out (no AVX-512 BF16 on this CPU: trainrt refuses it there)"
fi
# all: the own Winograd's run only where oneDNN has a Winograd of its own (AVX-512)
if "$trainrt" --version | grep -q 'Winograd on' && "$trainrt" --version | grep -q 'blocked layouts on'; then
  precisions=${precisions/all-own/fp32-winograd-own}
else
  precisions=${precisions/ all-own/}
fi
for v in "$threads" "$steps" "$warmup"; do [[ $v =~ ^[0-9]+$ ]] || die "not a count: '$v'"; done

if [ -z "$py" ]; then
  if ! "$venv/bin/python3" -c 'import torch' 2>/dev/null; then
    echo "bench_compare.sh: installing PyPI's torch into $venv (first use: several GB)" >&2
    if ! { /usr/bin/python3 -m venv "$venv" && "$venv/bin/python3" -m pip install --quiet torch numpy; }; then
      echo "bench_compare.sh: PyPI's torch could not be installed in $venv: using /usr/bin/python3's torch instead" >&2
      py=/usr/bin/python3
    fi
  fi
  py=${py:-$venv/bin/python3}
fi
"$py" -c 'import torch' 2>/dev/null || die "$py has no torch (pass --python PY)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "trainrt: $("$trainrt" --version | head -1); PyTorch: $("$py" -c 'import torch; print(torch.__version__)') ($py), timed in $pt_precisions"
echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

for dataset in $datasets; do
  model=$tmp/wrn_$dataset.onnx
  "$trainrt" model wrn --dataset "$dataset" --widths "$widths" -o "$model" >/dev/null
  for batch in $batches; do
    echo
    echo "== Wide ResNet widths $widths, $dataset shape, batch $batch, $threads threads, $warmup warm-up + $steps timed steps"
    for precision in $precisions; do
      echo "load before trainrt $precision: $(uptime | sed 's/.*load average: //')"
      own=; layouts=blocked
      [ "$precision" = fp32-winograd-own ] && own=own layouts=plain
      TRAINRT_WINOGRAD=$own "$trainrt" bench "$model" --batch "$batch" --threads "$threads" --steps "$steps" \
        --warmup "$warmup" --backend cpu --precision "${precision%%-*}" --layouts "$layouts" \
        --conv-algorithm "$([[ $precision == fp32-winograd* ]] && echo winograd || echo direct)" | tee "$tmp/trainrt_$precision.txt" | sed "s/^/trainrt $precision | /"
    done
    echo "load before pytorch: $(uptime | sed 's/.*load average: //')"
    "$py" "$here/bench_pytorch.py" --dataset "$dataset" --batch "$batch" --threads "$threads" --steps "$steps" \
      --warmup "$warmup" --widths "$widths" --precisions "$pt_precisions" --json >"$tmp/pytorch.jsonl"
    "$py" - "$tmp/pytorch.jsonl" $(for p in $precisions; do echo "$p" "$tmp/trainrt_$p.txt"; done) <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows[:-1]:
    print("pytorch  | %-13s %-4s %8.2f images/s, ms/step median %.1f mean %.1f, peak RSS %.1f MiB" %
          (r["format"], r["precision"], r["images_per_s"], r["ms_median"], r["ms_mean"], r["peak_rss_mib"]))
best = rows[-1]
print("pytorch  best (%s %s, torch %s) %8.2f images/s, ms/step median %.1f mean %.1f, peak RSS %.1f MiB" %
      (best["format"], best["precision"], best["torch"], best["images_per_s"], best["ms_median"], best["ms_mean"],
       best["peak_rss_mib"]))
for precision, path in zip(sys.argv[2::2], sys.argv[3::2]):
    text = open(path).read()
    ips = float(re.search(r"^images/s: ([0-9.]+)", text, re.M).group(1))
    med, mean = map(float, re.search(r"^ms/step: median ([0-9.]+), mean ([0-9.]+)", text, re.M).groups())
    rss = float(re.search(r"^peak memory: RSS ([0-9.]+) MiB", text, re.M).group(1))
    print("trainrt  %s cpu               %8.2f images/s, ms/step median %.1f mean %.1f, peak RSS %.1f MiB" %
          (precision, ips, med, mean, rss))
    print("ratio trainrt %s / pytorch best: images/s %.2fx, peak RSS %.2fx" %
          (precision, ips / best["images_per_s"], rss / best["peak_rss_mib"]))
PY
    echo "load after: $(uptime | sed 's/.*load average: //')"
  done
done
