#!/usr/bin/env bash
# A torchvision ShuffleNetV2 x0.5 (10 classes) exported by PyTorch in training mode at
# opset 13, once with a fixed batch of 2 and once with a dynamic batch (dynamic_axes):
# its channel shuffles and chunks compute Reshape shapes and Slice bounds from Shape
# (Shape -> Gather -> Div -> Unsqueeze -> Concat -> Reshape). trainrt must import both,
# fold those chains (before autodiff for the fixed batch, when the plan is specialised
# for the dynamic one), build the training graph and train one epoch with finite losses
# on a tiny random CIFAR-10 folder. (Batch 1 cannot be exported: PyTorch's
# BatchNormalization refuses training on the last stage's 1x1 maps with one image.)
# Skipped (exit 0) where /usr/bin/python3 has no torchvision.
set -uo pipefail
trainrt=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

/usr/bin/python3 -c "import torch, torchvision" 2>/dev/null || { echo "skipped: no torch/torchvision"; exit 0; }
/usr/bin/python3 - "$tmp" <<'PY' >"$tmp/export.log" 2>&1 || { echo "FAIL: export: $(tail -3 "$tmp/export.log")"; exit 1; }
import os, sys
import numpy as np
import torch, torchvision
out = sys.argv[1]
torch.manual_seed(0)
m = torchvision.models.shufflenet_v2_x0_5(num_classes=10)
x = torch.randn(2, 3, 32, 32)
common = dict(opset_version=13, training=torch.onnx.TrainingMode.TRAINING, input_names=["input"],
              output_names=["logits"], do_constant_folding=False)
torch.onnx.export(m, x, os.path.join(out, "fixed.onnx"), **common)
torch.onnx.export(m, x, os.path.join(out, "dynamic.onnx"), dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                  **common)
rng = np.random.default_rng(0)
os.makedirs(os.path.join(out, "cifar"))
for name, n in [("data_batch_%d.bin" % i, 16) for i in range(1, 6)] + [("test_batch.bin", 8)]:
    records = np.concatenate([rng.integers(0, 10, (n, 1)), rng.integers(0, 256, (n, 3072))], axis=1)
    records.astype(np.uint8).tofile(os.path.join(out, "cifar", name))
PY
for model in fixed dynamic; do
  batch=2
  [ $model = dynamic ] && batch=8
  if ! "$trainrt" train "$tmp/$model.onnx" --dataset cifar10 --data-dir "$tmp/cifar" --limit-train 16 \
    --limit-test 8 --epochs 1 --batch-size $batch --threads 1 --log-every 1 >"$tmp/$model.log" 2>&1; then
    fail "$model: train: $(tail -3 "$tmp/$model.log")"
    continue
  fi
  grep -q "^Training complete" "$tmp/$model.log" || fail "$model: no 'Training complete' line: $(tail -3 "$tmp/$model.log")"
  grep -qwiE "nan|inf" "$tmp/$model.log" && fail "$model: a non-finite value: $(grep -wiE "nan|inf" "$tmp/$model.log" | head -2)"
done

[ $fails -eq 0 ] && echo "train_shufflenet: fixed and dynamic batch exports train, passed"
exit $((fails > 0))
