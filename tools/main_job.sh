#!/usr/bin/env bash
# The main job: the seed's Wide ResNet trained on Fashion-MNIST (Debian's
# dataset-fashion-mnist), then exported as a trained .onnx and evaluated again
# from the exported file. Widths and data are cut down so it finishes in a few
# minutes on 2 cores; the seed's full model is `--widths 16,160,320,640` and the
# full data is `--limit-train 0` (set TRAINRT_WIDTHS / TRAINRT_LIMIT / TRAINRT_EPOCHS).
# A checkpoint is written after each epoch; SIGTERM/SIGUSR1 (Slurm's warning before a
# time limit) writes one at the next step and exits 0.
set -euo pipefail
BUILD_DIR=${1:-build}
OUT=${TRAINRT_OUT:-out}
WIDTHS=${TRAINRT_WIDTHS:-8,16,32,64}
LIMIT=${TRAINRT_LIMIT:-20000}
EPOCHS=${TRAINRT_EPOCHS:-2}
mkdir -p "$OUT"
trainrt="$BUILD_DIR/trainrt"
"$trainrt" --version
"$trainrt" model wrn --dataset fashion-mnist --widths "$WIDTHS" -o "$OUT/wrn-fashion-mnist.onnx"
"$trainrt" inspect "$OUT/wrn-fashion-mnist.onnx" | tail -n 4
"$trainrt" train "$OUT/wrn-fashion-mnist.onnx" --dataset fashion-mnist --epochs "$EPOCHS" --batch-size 64 \
  --optimizer adam --base-lr 0.002 --lr-schedule cosine --limit-train "$LIMIT" --log-every 50 \
  --metrics "$OUT/metrics.jsonl" --checkpoint-dir "$OUT/checkpoints" --export "$OUT/wrn-fashion-mnist-trained.onnx"
"$trainrt" evaluate "$OUT/wrn-fashion-mnist-trained.onnx" --dataset fashion-mnist
"$trainrt" plot "$OUT/metrics.jsonl" -o "$OUT/curves.svg" || echo "main job: no curves (gnuplot missing?)"
echo "main job: trained model in $OUT/wrn-fashion-mnist-trained.onnx, metrics in $OUT/metrics.jsonl," \
  "curves in $OUT/curves.svg, checkpoints in $OUT/checkpoints (continue a stopped run with --resume auto)"
