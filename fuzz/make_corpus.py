#!/usr/bin/python3
"""Seed corpora for the fuzz targets, generated from the project's own files.

    /usr/bin/python3 fuzz/make_corpus.py build-fz/corpus

writes build-fz/corpus/{onnx_import,tensor_proto,dataset,checkpoint,image_jpeg,image_png}/ (a few hundred small files).
Nothing here is committed: the seeds are rebuilt from tests/data/*.onnx,
tests/data/wrn_golden/*.pb, ONNX's node tests (Debian libonnx-testdata, when
installed) and small models / IDX / CIFAR files made below with known structure,
so that libFuzzer starts from inputs that get deep into each reader.
"""
import gzip
import hashlib
import os
import random
import struct
import zlib
import sys

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_TESTS = "/usr/share/libonnx-testdata/data/node"
# Node tests of op families trainrt implements (prefixes of test folder names).
NODE_PREFIXES = ("test_relu", "test_gemm", "test_conv_", "test_maxpool_2d", "test_averagepool_2d",
                 "test_globalaveragepool", "test_batchnorm", "test_add", "test_sub", "test_mul", "test_div",
                 "test_sigmoid", "test_tanh", "test_leakyrelu", "test_softmax", "test_logsoftmax", "test_flatten",
                 "test_reshape", "test_transpose", "test_concat", "test_dropout", "test_matmul", "test_sum",
                 "test_identity", "test_cast_", "test_reduce_mean", "test_sce_", "test_pad", "test_neg")


def put(folder, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def node_test_files(name, limit_per_prefix=6):
    if not os.path.isdir(NODE_TESTS):
        return []
    out, seen = [], {}
    for test in sorted(os.listdir(NODE_TESTS)):
        prefix = next((p for p in NODE_PREFIXES if test.startswith(p)), None)
        if prefix is None or test.endswith("_expanded") or seen.get(prefix, 0) >= limit_per_prefix:
            continue
        seen[prefix] = seen.get(prefix, 0) + 1
        path = os.path.join(NODE_TESTS, test, name)
        if os.path.isfile(path):
            out.append(path)
    return out


def small_models():
    """Float models with initializers, so the fuzzer reaches build_training_graph."""
    try:
        import numpy as np
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        print("make_corpus: python3-onnx missing, hand-made models skipped", file=sys.stderr)
        return []
    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def model(nodes, inputs, outputs, inits, opset=17):
        g = helper.make_graph(nodes, "seed", inputs, outputs, inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    gemm = model([helper.make_node("Gemm", ["x", "W", "b"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["y"])],
                 [x], [y], [init("W", 3, 4), init("b", 3)])
    xi = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 6, 6])
    yo = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])
    cnn = model([
        helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Dropout", ["p"], ["d"]),
        helper.make_node("GlobalAveragePool", ["d"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ], [xi], [yo], [init("cw", 2, 1, 3, 3), init("s", 2), init("bb", 2), init("m", 2),
                    numpy_helper.from_array(np.ones(2, np.float32), "v"), init("fw", 5, 2), init("fb", 5)])
    # Scalar loss inside the model (used as its own loss).
    lx = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    lo = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
    own_loss = model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Sigmoid", ["h"], ["s"]),
                      helper.make_node("ReduceMean", ["s"], ["loss"], keepdims=0)], [lx], [lo], [init("W", 4, 2)],
                     opset=13)
    # External data: 12 floats at offset 4 of weights.bin (the fuzz target's scratch folder
    # holds a 64-byte weights.bin and an `escape` symlink to /etc).
    ext = onnx.ModelProto()
    ext.CopyFrom(gemm)
    w = ext.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "4"), ("length", "48")):
        e = w.external_data.add()
        e.key, e.value = k, v
    escape = onnx.ModelProto()
    escape.CopyFrom(ext)
    escape.graph.initializer[0].external_data[0].value = "escape/hostname"
    return [m.SerializeToString() for m in (gemm, cnn, own_loss, ext, escape)]


def idx_images(n, rows, cols, rng):
    return struct.pack(">IIII", 0x803, n, rows, cols) + bytes(rng.randrange(256) for _ in range(n * rows * cols))


def idx_labels(n, rng):
    return struct.pack(">II", 0x801, n) + bytes(rng.randrange(10) for _ in range(n))


def cifar(n, label_bytes, rng):
    out = b""
    for _ in range(n):
        labels = bytes([rng.randrange(20), rng.randrange(100)]) if label_bytes == 2 else bytes([rng.randrange(10)])
        out += labels + bytes(rng.randrange(256) for _ in range(3072))
    return out


def checkpoints():
    """Checkpoint payloads as training/checkpoint.h lays them out (fuzz_checkpoint: odd first
    byte = payload, the target adds the header; even = whole file)."""
    try:
        import numpy as np
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        return []
    fields = {"epoch": "1", "step_in_epoch": "3", "global_step": "7", "seed": "42", "lr": "0x1.999999999999ap-4",
              "epoch_loss_sum": "0x1.8p+1", "epoch_seconds": "0x1p+0", "total_seconds": "0x1p+1",
              "total_images": "256", "val_accuracy": "0x1.8p-1", "config.batch-size": "64"}
    m = onnx.ModelProto()
    m.producer_name = "trainrt-checkpoint"
    m.graph.name = "checkpoint"
    m.graph.initializer.extend([numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w"),
                                numpy_helper.from_array(np.array(5, dtype=np.int64), "step")])
    for k, v in fields.items():
        helper.set_model_props(m, {**{e.key: e.value for e in m.metadata_props}, k: v})
    payload = m.SerializeToString()
    header = b"trainrt-checkpoint\n" + struct.pack("<IQI", 1, len(payload), zlib.crc32(payload))
    return [b"\x01" + payload, b"\x00" + header + payload, b"\x00" + header[:10]]


def npz_bytes(compressed, rng):
    import io
    import numpy as np
    x = np.array([rng.random() for _ in range(2 * 3 * 2)], dtype=np.float32).reshape(2, 3, 2)
    y = np.array([0, 1], dtype=np.int64)
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, x=x, y=y, x_val=x[:1].astype(np.uint8), y_val=y[:1])
    return buf.getvalue()


def images(fmt, rng):
    """Small images in the modes the decoder converts (PIL, python3-pil); none without PIL."""
    try:
        from PIL import Image
    except ImportError:
        return []
    import io
    out = []
    modes = ("RGB", "L", "CMYK") if fmt == "JPEG" else ("RGB", "RGBA", "L", "LA", "P", "I;16", "1")
    for mode in modes:
        for w, h in ((3, 2), (17, 9)):
            im = Image.new("RGB", (w, h))
            im.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(w * h)])
            im = im.convert(mode if mode != "I;16" else "I").convert(mode) if mode != "RGB" else im
            buf = io.BytesIO()
            kw = {"progressive": True} if fmt == "JPEG" and w == 17 else {"interlace": 1} if w == 17 else {}
            try:
                im.save(buf, fmt, **kw)
            except (OSError, ValueError):
                continue
            out.append(buf.getvalue())
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    root = sys.argv[1]
    rng = random.Random(0)

    onnx_dir = os.path.join(root, "onnx_import")
    for name in sorted(os.listdir(os.path.join(SRC, "tests", "data"))):
        if name.endswith(".onnx"):
            put(onnx_dir, open(os.path.join(SRC, "tests", "data", name), "rb").read())
    for path in node_test_files("model.onnx"):
        put(onnx_dir, open(path, "rb").read())
    for m in small_models():
        put(onnx_dir, m)

    tp_dir = os.path.join(root, "tensor_proto")
    golden = os.path.join(SRC, "tests", "data", "wrn_golden")
    for name in sorted(os.listdir(golden))[:40]:
        if name.endswith(".pb"):
            put(tp_dir, open(os.path.join(golden, name), "rb").read())
    for path in node_test_files(os.path.join("test_data_set_0", "input_0.pb"), 2):
        put(tp_dir, open(path, "rb").read())

    ds_dir = os.path.join(root, "dataset")
    for rows, cols, n in ((2, 3, 2), (4, 4, 3), (28, 28, 1)):
        img = idx_images(n, rows, cols, rng)
        lab = idx_labels(n, rng)
        put(ds_dir, b"\x00" + img)
        put(ds_dir, b"\x00" + gzip.compress(img, mtime=0))
        put(ds_dir, b"\x01" + lab)
        put(ds_dir, b"\x01" + gzip.compress(lab, mtime=0))
        put(ds_dir, b"\x04" + struct.pack(">I", len(img)) + img + lab)
    put(ds_dir, b"\x02" + cifar(2, 1, rng))
    put(ds_dir, b"\x03" + cifar(2, 2, rng))
    put(ds_dir, b"\x03" + gzip.compress(cifar(1, 2, rng), mtime=0))
    for compressed in (False, True):
        put(ds_dir, b"\x05" + npz_bytes(compressed, rng))
    jpeg_dir = os.path.join(root, "image_jpeg")
    png_dir = os.path.join(root, "image_png")
    for fmt, folder in (("JPEG", jpeg_dir), ("PNG", png_dir)):
        for data in images(fmt, rng):
            put(folder, data)
    ck_dir = os.path.join(root, "checkpoint")
    for c in checkpoints():
        put(ck_dir, c)
    for d in (onnx_dir, tp_dir, ds_dir, ck_dir, jpeg_dir, png_dir):
        os.makedirs(d, exist_ok=True)  # a seedless target still starts (from empty input)
        print(f"{d}: {len(os.listdir(d))} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
