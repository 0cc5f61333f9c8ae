#!/usr/bin/env bash
# The system's oneDNN (Debian's 2.6, OpenMP) against PyPI's oneDNN 3 (onednn-cpu-tbb,
# TBB) on the Wide ResNet's 3x3 convolutions, forward and both gradients, in one run.
#
#   tools/bench_onednn.sh [--dataset fashion-mnist|cifar100] [--batch N] [--rounds 3] [--reps 3]
#       [--algorithm direct|winograd|auto] [--threads 2]
#
# Builds bench/onednn_conv.cpp twice (it includes nothing of trainrt), once against each
# library, then runs the two programs alternately --rounds times and prints, per layer
# and pass, the implementation each library chose and its median milliseconds over the
# rounds, then the sum over the step (each layer as often as the model has it) and the
# ratio. `uptime` is printed before each round: the machine may be shared.
#
# PyPI's packages (onednn-cpu-tbb and onednn-devel-cpu-tbb, oneDNN 3.2, and
# intel-cmplr-lib-rt, the Intel compiler runtime that library needs) are fetched once
# into TRAINRT_ONEDNN_CACHE (default ~/.cache/trainrt/onednn3) with `pip download`;
# never in CI. PyPI's newer `onednn` package (3.13) is a SYCL build that needs a SYCL
# CPU device (an OpenCL runtime), so it is not the one compared here. Nothing is
# asserted: this is a benchmark, not a test.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${TRAINRT_ONEDNN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainrt/onednn3}
dataset=fashion-mnist
batch=64
rounds=3
reps=3
algorithm=direct
threads=2

die() { echo "bench_onednn.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --dataset) case $2 in fashion-mnist | cifar100) dataset=$2 ;; *) die "--dataset: expected fashion-mnist or cifar100, got '$2'" ;; esac; shift 2 ;;
    --batch) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--batch: expected a positive integer, got '$2'"; batch=$2; shift 2 ;;
    --rounds) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--rounds: expected a positive integer, got '$2'"; rounds=$2; shift 2 ;;
    --reps) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--reps: expected a positive integer, got '$2'"; reps=$2; shift 2 ;;
    --algorithm) case $2 in direct | winograd | auto) algorithm=$2 ;; *) die "--algorithm: expected direct, winograd or auto, got '$2'" ;; esac; shift 2 ;;
    --threads) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--threads: expected a positive integer, got '$2'"; threads=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

fetch() {  # unpacks the wheels once; the libraries and headers then live under $cache/root
  [ -f "$cache/root/.complete" ] && return 0
  mkdir -p "$cache/wheels" "$cache/root"
  echo "bench_onednn.sh: fetching onednn-cpu-tbb, onednn-devel-cpu-tbb and intel-cmplr-lib-rt from PyPI into $cache"
  /usr/bin/python3 -m pip download -q --no-deps -d "$cache/wheels" \
    onednn-cpu-tbb==2023.2.0 onednn-devel-cpu-tbb==2023.2.0 intel-cmplr-lib-rt \
    || die "pip download failed (PyPI unreachable?)"
  for w in "$cache"/wheels/*.whl; do /usr/bin/python3 -m zipfile -e "$w" "$cache/root"; done
  touch "$cache/root/.complete"
}
fetch
inc=$(dirname "$(find "$cache/root" -name dnnl.hpp -path '*include*' | head -1)")
lib3=$(dirname "$(find "$cache/root" -name 'libdnnl.so.3' | head -1)")
rt=$(dirname "$(find "$cache/root" -name 'libimf.so' | head -1)")
[ -d "$inc" ] && [ -d "$lib3" ] && [ -d "$rt" ] || die "the unpacked wheels in $cache/root lack dnnl.hpp, libdnnl.so.3 or libimf.so"

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
src=$here/../bench/onednn_conv.cpp
g++ -O2 -std=c++17 "$src" -ldnnl -o "$bin/system"
g++ -O2 -std=c++17 -I"$inc" "$src" "$lib3/libdnnl.so.3" -Wl,--allow-shlib-undefined -o "$bin/pypi"

args=(--dataset "$dataset" --batch "$batch" --reps "$reps" --algorithm "$algorithm")
for r in $(seq 1 "$rounds"); do
  echo "round $r: $(uptime)"
  OMP_NUM_THREADS=$threads "$bin/system" "${args[@]}" > "$bin/system.$r"
  # oneTBB takes every core it sees; taskset gives it --threads of them.
  LD_LIBRARY_PATH="$lib3:$rt" taskset -c "0-$((threads - 1))" "$bin/pypi" "${args[@]}" > "$bin/pypi.$r"
done
/usr/bin/python3 - "$bin" "$rounds" <<'PY'
import statistics, sys
folder, rounds = sys.argv[1], int(sys.argv[2])
def read(name):  # per round: header, {layer pass: (impl, ms or None)}, step ms
    runs = []
    for r in range(1, rounds + 1):
        lines = open(f"{folder}/{name}.{r}").read().splitlines()
        rows, step = {}, None
        for l in lines[1:]:
            f = l.split()
            if f[0] == "step_3x3_ms":
                step = float(f[1])
            else:
                rows[f[0] + " " + f[1]] = (f[2], float(f[4]) if f[2] != "none" else None)
        runs.append((lines[0], rows, step))
    return runs
sysr, pypi = read("system"), read("pypi")
print(sysr[0][0].lstrip("# "), "|", pypi[0][0].lstrip("# "))
print(f"{'layer pass':34} {'system impl':14} {'ms':>9} {'PyPI impl':14} {'ms':>9} {'PyPI speed':>11}")
for key in sysr[0][1]:
    si, pi = sysr[0][1][key][0], pypi[0][1].get(key, ("none", None))[0]
    sm = [r[1][key][1] for r in sysr if r[1][key][1] is not None]
    pm = [r[1][key][1] for r in pypi if key in r[1] and r[1][key][1] is not None]
    s_ms = statistics.median(sm) if sm else float("nan")
    p_ms = statistics.median(pm) if pm else float("nan")
    print(f"{key:34} {si:14} {s_ms:9.3f} {pi:14} {p_ms:9.3f} {s_ms / p_ms if p_ms else float('nan'):10.2f}x")
ss = [r[2] for r in sysr if r[2] is not None]
ps = [r[2] for r in pypi if r[2] is not None]
if ss and ps:
    s, p = statistics.median(ss), statistics.median(ps)
    print(f"step's 3x3 convolutions: system {s:.1f} ms, PyPI {p:.1f} ms: PyPI is {s / p:.2f}x the system's speed")
PY
