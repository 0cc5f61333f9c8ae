#!/usr/bin/env bash
# Users' own data: `trainrt train --dataset imagefolder` on a generated folder of small
# JPEG and PNG files (RGB, gray, palette, RGBA; mixed-case extensions) trains with a
# finite loss, writes --iteration-times (one positive duration per step) and stops at
# --max-steps; the crop size defaults to the model's input H/W. `--dataset npz` trains
# from stored and deflated .npz files. Each bad input is one stderr line naming the
# file or what differs, exit 2: a corrupt PNG, a truncated JPEG, a file that is not an
# image, an empty class folder, no train/ folder, a val/ class train/ lacks, a model
# whose input is another size, an npz whose samples do not fit the model. `trainrt
# evaluate` of the exported models agrees with the run's last validation.
set -uo pipefail
trainrt=$(realpath "$1")
src=$2
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

/usr/bin/python3 - "$tmp" <<'PY' || { echo "FAIL: generating images, models and npz files (needs python3-pil, numpy, onnx)"; exit 1; }
import os, sys
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
from PIL import Image

root = sys.argv[1]
rng = np.random.default_rng(0)

def image(path, mode, size=(40, 40)):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    a = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    im = Image.fromarray(a)
    if mode == "P":
        im = im.convert("P", palette=Image.ADAPTIVE, colors=16)
    elif mode != "RGB":
        im = im.convert(mode)
    im.save(path, "JPEG" if path.lower().endswith((".jpg", ".jpeg")) else "PNG")

classes = ["cat", "dog", "emu"]
modes = ["RGB", "L", "P", "RGBA", "RGB", "LA", "RGB"]
for split, n in (("train", 7), ("val", 2)):
    for c in classes:
        for i in range(n):
            ext = [".jpg", ".png", ".JPEG", ".Png"][i % 4]
            mode = modes[i % len(modes)]
            if ext.lower() in (".jpg", ".jpeg") and mode in ("P", "RGBA", "LA"):
                mode = "RGB"
            image(f"{root}/data/{split}/{c}/{i:02d}{ext}", mode, (40 + i, 40 - i))

# Tiny folders for the bad cases: one image per class, every one decoded by the first step.
for c in classes:
    image(f"{root}/tiny/train/{c}/a.jpg", "RGB")

def model(path, in_shape, classes=3):
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N"] + list(in_shape))
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])
    inits, nodes = [], []
    if len(in_shape) == 3:
        w = rng.normal(0, 0.3, (4, in_shape[0], 3, 3)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "conv.weight"))
        nodes += [helper.make_node("Conv", ["input", "conv.weight"], ["c"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c"], ["r"]),
                  helper.make_node("GlobalAveragePool", ["r"], ["g"]),
                  helper.make_node("Flatten", ["g"], ["f"])]
        features = 4
    else:
        nodes.append(helper.make_node("Flatten", ["input"], ["f"]))
        features = int(np.prod(in_shape))
    inits.append(numpy_helper.from_array(rng.normal(0, 0.3, (classes, features)).astype(np.float32), "fc.weight"))
    inits.append(numpy_helper.from_array(np.zeros(classes, np.float32), "fc.bias"))
    nodes.append(helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1))
    g = helper.make_graph(nodes, "m", [x], [y], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)

model(f"{root}/m32.onnx", [3, 32, 32])
model(f"{root}/m28.onnx", [1, 28, 28])
model(f"{root}/mlp.onnx", [2, 6])
x = rng.normal(0, 1, (24, 2, 6)).astype(np.float32)
y = rng.integers(0, 3, 24)
np.savez(f"{root}/a.npz", x=x, y=y, x_val=x[:6].astype(np.float64), y_val=y[:6].astype(np.int32))
np.savez_compressed(f"{root}/c.npz", x=(x * 40 + 128).clip(0, 255).astype(np.uint8), y=y)
np.savez(f"{root}/wrong.npz", x=x.reshape(24, 12), y=y)
PY

common=(--batch-size 8 --threads 2 --seed 1 --log-every 0)

# Training: 21 images of batch 8 are 2 steps an epoch; --max-steps 3 validates epoch 1 and stops in epoch 2.
"$trainrt" train "$tmp/m32.onnx" --dataset imagefolder --data-dir "$tmp/data" --image-size 32 "${common[@]}" \
  --max-steps 3 --iteration-times "$tmp/iter.txt" --base-lr 0.05 --momentum 0.9 >"$tmp/train.log" 2>&1 ||
  fail "imagefolder training exited $?: $(tail -3 "$tmp/train.log")"
grep -q "on imagefolder with Batch Size: 8 (21 training images, 6 test images" "$tmp/train.log" ||
  fail "start line: $(grep Training "$tmp/train.log")"
grep -q "^Epoch =  1: .*Validation Loss = [0-9.]*, Validation Accuracy = [0-9.]*," "$tmp/train.log" ||
  fail "no finite epoch line: $(cat "$tmp/train.log")"
grep -q "Stopped after --max-steps 3 steps (epoch 2, step 1 of 2)" "$tmp/train.log" ||
  fail "--max-steps did not stop the run in epoch 2: $(cat "$tmp/train.log")"
grep -q "^Epoch =  2" "$tmp/train.log" && fail "a partial epoch was validated"
[ "$(wc -l <"$tmp/iter.txt")" -eq 3 ] || fail "--iteration-times has $(wc -l <"$tmp/iter.txt") lines, expected 3"
awk '!($1 > 0 && $1 < 600) { bad = 1 } END { exit bad }' "$tmp/iter.txt" || fail "bad durations: $(cat "$tmp/iter.txt")"

# The crop size defaults to the model's fixed input H/W (32 here, not 224).
"$trainrt" train "$tmp/m32.onnx" --dataset imagefolder --data-dir "$tmp/data" "${common[@]}" --max-steps 1 \
  >"$tmp/auto.log" 2>&1 || fail "--image-size from the model: $(tail -2 "$tmp/auto.log")"

# npz: float32 arrays with a float64/int32 validation split (stored), and uint8 deflated without one.
for f in a c; do
  "$trainrt" train "$tmp/mlp.onnx" --dataset npz --data-dir "$tmp/$f.npz" "${common[@]}" --epochs 2 \
    >"$tmp/npz.log" 2>&1 || fail "npz $f training exited $?: $(tail -3 "$tmp/npz.log")"
  grep -q "^Epoch =  2: .*Validation Loss = [0-9]" "$tmp/npz.log" || fail "npz $f: $(cat "$tmp/npz.log")"
done
grep -q "24 training images, 24 test images" "$tmp/npz.log" || fail "npz without x_val: $(grep Training "$tmp/npz.log")"

# `trainrt evaluate` of an export reads the same data the same way: an image folder's val/
# (resize + center crop, --mean/--std as given) and an npz's x_val/y_val give the loss and
# accuracy the run's last validation printed.
agrees() {  # agrees LOG EXPORT [evaluate flags]: the last epoch line of LOG vs evaluate of EXPORT
  local log=$1 model=$2
  shift 2
  local want got
  want=$(grep "^Epoch" "$log" | tail -1 | sed -n 's/.*Validation Loss = \([0-9.]*\), Validation Accuracy = \([0-9.]*\).*/\1 \2/p')
  "$trainrt" evaluate "$model" --threads 2 --batch-size 8 "$@" >"$tmp/eval.log" 2>&1 || {
    fail "evaluate $*: $(cat "$tmp/eval.log")"
    return
  }
  got=$(sed -n 's/^Test Loss = \([0-9.]*\), Test Accuracy = \([0-9.]*\).*/\1 \2/p' "$tmp/eval.log")
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "evaluate $* gives '$got', training validated '$want'"
}
"$trainrt" train "$tmp/m32.onnx" --dataset imagefolder --data-dir "$tmp/data" "${common[@]}" --epochs 1 \
  --mean 0.5,0.4,0.3 --std 0.2 --export "$tmp/folder.onnx" >"$tmp/folder.log" 2>&1 ||
  fail "imagefolder with --export: $(tail -2 "$tmp/folder.log")"
agrees "$tmp/folder.log" "$tmp/folder.onnx" --dataset imagefolder --data-dir "$tmp/data" --mean 0.5,0.4,0.3 --std 0.2
"$trainrt" train "$tmp/mlp.onnx" --dataset npz --data-dir "$tmp/a.npz" "${common[@]}" --epochs 1 \
  --export "$tmp/npz.onnx" >"$tmp/npz1.log" 2>&1 || fail "npz with --export: $(tail -2 "$tmp/npz1.log")"
agrees "$tmp/npz1.log" "$tmp/npz.onnx" --dataset npz --data-dir "$tmp/a.npz"
grep -q "(6 images)" "$tmp/eval.log" || fail "evaluate of the npz did not use x_val (6 images): $(cat "$tmp/eval.log")"
expect_error 2 "m28.onnx: model input 'input' is 1x28x28 per sample, dataset imagefolder gives 3x32x32 (--image-size 32)$" -- \
  "$trainrt" evaluate "$tmp/m28.onnx" --dataset imagefolder --data-dir "$tmp/data" --image-size 32 --threads 2
expect_error 2 ": --dataset: " -- "$trainrt" evaluate "$tmp/m28.onnx" --dataset imagenet

# Bad inputs: one line each, exit 2.
bad() {  # bad PATTERN [flags]: training on the copy of the tiny folder in $tmp/bad
  local pattern=$1
  shift
  expect_error 2 "$pattern" -- "$trainrt" train "$tmp/m32.onnx" --dataset imagefolder --data-dir "$tmp/bad" \
    --image-size 32 --batch-size 3 --threads 2 --epochs 1 --log-every 0 "$@"
}
reset() { rm -rf "$tmp/bad" && cp -r "$tmp/tiny" "$tmp/bad"; }

reset
"$trainrt" train "$tmp/m32.onnx" --dataset imagefolder --data-dir "$tmp/bad" --image-size 32 --batch-size 3 --threads 2 \
  --epochs 1 --log-every 0 >"$tmp/tiny.log" 2>&1 || fail "the tiny folder itself does not train: $(tail -2 "$tmp/tiny.log")"
reset
cp "$tmp/data/train/cat/01.png" "$tmp/bad/train/dog/b.png"
printf '\x05' | dd of="$tmp/bad/train/dog/b.png" bs=1 seek=23 conv=notrunc 2>/dev/null  # height 5: IHDR's CRC fails
bad "bad/train/dog/b.png: corrupt or truncated PNG"
reset
head -c 600 "$tmp/bad/train/emu/a.jpg" >"$tmp/bad/train/emu/cut.jpg"
bad "bad/train/emu/cut.jpg: corrupt or truncated JPEG"
reset
echo "a text file" >"$tmp/bad/train/cat/notes.jpg"
bad "bad/train/cat/notes.jpg: not a JPEG or PNG image"
reset
rm "$tmp/bad/train/emu/a.jpg"
bad "bad/train/emu: class folder has no images"
reset
mv "$tmp/bad/train" "$tmp/bad/training"
bad "bad/train: folder not found"
reset
mkdir -p "$tmp/bad/val/zebra" && cp "$tmp/bad/train/cat/a.jpg" "$tmp/bad/val/zebra/"
bad "bad/val/zebra: class 'zebra' is not a class of .*bad/train"
expect_error 2 "m28.onnx: model input 'input' is 1x28x28 per sample, dataset imagefolder gives 3x32x32 (--image-size 32)$" -- \
  "$trainrt" train "$tmp/m28.onnx" --dataset imagefolder --data-dir "$tmp/tiny" --image-size 32 --threads 2
expect_error 2 "mlp.onnx: model input 'input' is 2x6 per sample, dataset npz gives 12$" -- \
  "$trainrt" train "$tmp/mlp.onnx" --dataset npz --data-dir "$tmp/wrong.npz" --threads 2
expect_error 2 ": --image-size: applies to --dataset imagefolder" -- \
  "$trainrt" train "$tmp/mlp.onnx" --dataset npz --data-dir "$tmp/a.npz" --image-size 32

exit $((fails > 0))
