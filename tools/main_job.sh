#!/usr/bin/env bash
# The main job: build the seed's Wide ResNet for Fashion-MNIST and show it.
# Grows into "train it and export the trained .onnx" as training lands.
set -euo pipefail
BUILD_DIR=${1:-build}
OUT=${TRAINRT_OUT:-out}
mkdir -p "$OUT"
trainrt="$BUILD_DIR/trainrt"
"$trainrt" --version
"$trainrt" model wrn --dataset fashion-mnist -o "$OUT/wrn-fashion-mnist.onnx"
"$trainrt" inspect "$OUT/wrn-fashion-mnist.onnx" | tail -n 5
echo "main job: built; model written to $OUT/wrn-fashion-mnist.onnx; inspect printed"
