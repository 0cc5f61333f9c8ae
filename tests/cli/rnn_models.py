#!/usr/bin/python3
"""LSTM, GRU and RNN networks exported by PyTorch, and ONNX recurrent nodes written by hand.

trainrt rewrites each LSTM/GRU/RNN node at import into existing ops unrolled over the
sequence (graph/expand_recurrent.cpp). Tiny models built here (random init, fixed seed,
batch 4, 6 steps), exported in training mode:
  - lstm2bi: nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True), last step
             -> Linear (opset 14: two LSTM nodes with Transpose/Reshape between);
  - gru:     nn.GRU(5, 6) (linear_before_reset=1), mean over time -> Linear (opset 13);
  - rnntanh, rnnrelu: nn.RNN(5, 6, nonlinearity=tanh/relu), 2 layers, last state -> Linear;
  - lstminit: an nn.LSTM whose initial h and c are computed from the input (tanh(Linear)),
             so the node reads initial_h/initial_c and their gradients flow back (opset 13).
For each, `trainrt grad` in fp64 on the reference backend must match PyTorch fp64's loss
(1e-9) and gradients (relative L2 1e-6), and `trainrt train --dataset npz` must run two cpu
steps on float32 data.
  - tokens:  int64 ids [N, T] -> nn.Embedding -> nn.LSTM -> Linear trained for four epochs
             with `trainrt train --dataset npz` on the cpu backend; the validation loss must
             fall, and the exported model (the unrolled graph) must pass onnx.checker.
  - seqlens: ONNX LSTM (bidirectional, B, sequence_lens, initial_h, initial_c, peepholes) and
             GRU (reverse, linear_before_reset=0, sequence_lens) nodes and an RNN node (layout 1,
             LeakyRelu with activation_alpha, clip) written with onnx.helper: `trainrt run`
             in fp64 must give a numpy reference's Y, Y_h and Y_c (1e-12), and `trainrt grad` of a Linear head on Y and Y_h must agree with
             central finite differences of that loss along random directions (1e-6).
  - refused: an activation the spec does not name (Swish) and a symbolic sequence length are one clear error line each.
The cpu runs use one thread: oneDNN's OpenMP threads spin between the many small per-step
nodes, which on a busy two-core machine made these steps ten times slower.

    /usr/bin/python3 tests/cli/rnn_models.py build/trainrt .
"""
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_models import rel_l2, to_double, torch_gradients, trainrt_gradients, worst_param  # noqa: E402

BATCH, STEPS, FEATURES, HIDDEN, CLASSES = 4, 6, 5, 6, 3


class LSTM2Bi(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(FEATURES, HIDDEN, num_layers=2, bidirectional=True, batch_first=True)
        self.fc = torch.nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, x):  # x [N, T, F]
        return self.fc(self.rnn(x)[0][:, -1])


class GRUMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(FEATURES, HIDDEN, batch_first=True)
        self.fc = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):  # x [N, T, F]
        return self.fc(self.rnn(x)[0].mean(1))


class RNNLast(torch.nn.Module):
    def __init__(self, nonlinearity):
        super().__init__()
        self.rnn = torch.nn.RNN(FEATURES, HIDDEN, num_layers=2, nonlinearity=nonlinearity, batch_first=True)
        self.fc = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):  # x [N, T, F]
        return self.fc(self.rnn(x)[1][-1])


class LSTMInit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.init_h = torch.nn.Linear(FEATURES, HIDDEN)
        self.init_c = torch.nn.Linear(FEATURES, HIDDEN)
        self.rnn = torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)
        self.fc = torch.nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, x):  # x [N, T, F]
        m = x.mean(1)
        h0, c0 = torch.tanh(self.init_h(m)).unsqueeze(0), torch.tanh(self.init_c(m)).unsqueeze(0)
        _, (h, c) = self.rnn(x, (h0, c0))
        return self.fc(torch.cat([h[0], c[0]], 1))


# name: (model, opset, op the export must hold); all batch_first ([N, T, F] inputs)
MODELS = {
    "lstm2bi": (LSTM2Bi, 14, "LSTM"),
    "gru": (GRUMean, 13, "GRU"),
    "rnntanh": (lambda: RNNLast("tanh"), 13, "RNN"),
    "rnnrelu": (lambda: RNNLast("relu"), 17, "RNN"),
    "lstminit": (LSTMInit, 13, "LSTM"),
}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def save_pb(path, array, name):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def check_model(trainrt, name, tmp):
    make, opset, op = MODELS[name]
    torch.manual_seed(0)
    model = make().train()
    x = torch.randn(BATCH, STEPS, FEATURES)
    y = torch.randint(0, CLASSES, (BATCH,))
    path32, path64 = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_fp64.onnx")
    torch.onnx.export(model, x, path32, input_names=["input"], output_names=["logits"], opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    ops = [n.op_type for n in onnx.load(path32).graph.node]
    assert op in ops, "the export has no %s: %s" % (op, sorted(set(ops)))
    onnx.save(to_double(onnx.load(path32)), path64)
    x_path, y_path = os.path.join(tmp, "x.pb"), os.path.join(tmp, "y.pb")
    save_pb(x_path, x.numpy(), "input")
    save_pb(y_path, y.numpy().astype(np.int64), "labels")
    loss64, g64 = torch_gradients(model.double(), x.double(), y)
    tl64, t64 = trainrt_gradients(trainrt, path64, x_path, y_path, "reference", os.path.join(tmp, "ref64"))
    assert set(t64) == set(g64), "parameters differ: %s vs %s" % (sorted(t64), sorted(g64))
    err = rel_l2(t64, g64)
    assert abs(tl64 - loss64) <= 1e-9 * abs(loss64), "fp64 loss %.12g, PyTorch %.12g" % (tl64, loss64)
    assert err <= 1e-6, "fp64 gradients %.3g from PyTorch's, worst %s" % (err, worst_param(t64, g64))
    data = os.path.join(tmp, "d.npz")
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8, STEPS, FEATURES)).astype(np.float32)
    np.savez(data, x=xs, y=np.arange(8) % CLASSES)
    r = run([trainrt, "train", path32, "--dataset", "npz", "--data-dir", data, "--batch-size", "4", "--epochs", "1",
             "--backend", "cpu", "--threads", "1", "--log-every", "1"])
    assert r.returncode == 0 and "Epoch =  1" in r.stdout, "cpu training exited %d: %s" % (
        r.returncode, (r.stdout + r.stderr).strip().splitlines()[-3:])
    return "loss %.4f, fp64 reference %.2g; 2 cpu steps" % (loss64, err)


class Tokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.rnn = torch.nn.LSTM(8, 12, batch_first=True)
        self.fc = torch.nn.Linear(12, CLASSES)

    def forward(self, ids):
        return self.fc(self.rnn(self.emb(ids))[1][0][0])


def check_tokens(trainrt, tmp):
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    path = os.path.join(tmp, "tok.onnx")
    torch.onnx.export(Tokens().train(), torch.zeros(2, 7, dtype=torch.int64), path, input_names=["ids"],
                      output_names=["logits"], opset_version=13, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, dynamic_axes={"ids": {0: "N"}, "logits": {0: "N"}})
    # The class is the last token mod 3: the final state can learn it.
    ids = rng.integers(0, 20, (64, 7)).astype(np.int64)
    y = (ids[:, -1] % CLASSES).astype(np.int64)
    np.savez(os.path.join(tmp, "tok.npz"), x=ids, y=y)
    r = run([trainrt, "train", path, "--data-dir", os.path.join(tmp, "tok.npz"), "--dataset", "npz", "--batch-size",
             "16", "--epochs", "4", "--backend", "cpu", "--threads", "1", "--base-lr", "0.5", "--export",
             os.path.join(tmp, "trained.onnx")])
    assert r.returncode == 0 and "Epoch =  4" in r.stdout, "training exited %d: %s" % (
        r.returncode, (r.stdout + r.stderr).strip().splitlines()[-3:])
    losses = [float(l.split("Validation Loss = ")[1].split(",")[0]) for l in r.stdout.splitlines()
              if "Validation Loss = " in l]
    assert len(losses) == 4 and losses[-1] < losses[0], "validation loss did not fall: %s" % losses
    # The export holds the unrolled graph: standard ONNX, the model's interface.
    trained = onnx.load(os.path.join(tmp, "trained.onnx"))
    onnx.checker.check_model(trained, full_check=True)
    assert [i.name for i in trained.graph.input] == ["ids"] and [o.name for o in trained.graph.output] == ["logits"]
    return "Embedding -> LSTM -> Linear, 4 cpu epochs, validation loss %.3f -> %.3f" % (losses[0], losses[-1])


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def lstm_reference(x, w, r, b, lens, h0, c0, p):
    """ONNX LSTM (default activations), [T,N,I] layout, directions forward then reverse."""
    steps, batch, _ = x.shape
    dirs, hid = w.shape[0], r.shape[2]
    y = np.zeros((steps, dirs, batch, hid))
    yh, yc = np.zeros((dirs, batch, hid)), np.zeros((dirs, batch, hid))
    for d in range(dirs):
        h, c = h0[d].copy(), c0[d].copy()
        for t in (range(steps) if d == 0 else reversed(range(steps))):
            g = x[t] @ w[d].T + h @ r[d].T + b[d, :4 * hid] + b[d, 4 * hid:]
            i, o, f, cc = np.split(g, 4, axis=1)
            pi, po, pf = np.split(p[d], 3)
            i, f = sigmoid(i + pi * c), sigmoid(f + pf * c)
            c_new = f * c + i * np.tanh(cc)
            h_new = sigmoid(o + po * c_new) * np.tanh(c_new)
            m = (t < lens)[:, None]
            h, c = np.where(m, h_new, h), np.where(m, c_new, c)
            y[t, d] = np.where(m, h_new, 0)
        yh[d], yc[d] = h, c
    return y, yh, yc


def gru_reference(x, w, r, b, lens):
    """ONNX GRU, direction reverse, linear_before_reset 0, no initial state."""
    steps, batch, _ = x.shape
    hid = r.shape[2]
    y = np.zeros((steps, 1, batch, hid))
    h = np.zeros((batch, hid))
    wz, wr, wh = np.split(w[0], 3)
    rz, rr, rh = np.split(r[0], 3)
    bw, br = np.split(b[0][:3 * hid], 3), np.split(b[0][3 * hid:], 3)
    for t in reversed(range(steps)):
        z = sigmoid(x[t] @ wz.T + h @ rz.T + bw[0] + br[0])
        rg = sigmoid(x[t] @ wr.T + h @ rr.T + bw[1] + br[1])
        hh = np.tanh(x[t] @ wh.T + (rg * h) @ rh.T + br[2] + bw[2])
        h_new = (1 - z) * hh + z * h
        m = (t < lens)[:, None]
        h = np.where(m, h_new, h)
        y[t, 0] = np.where(m, h_new, 0)
    return y, h[None]


def seqlens_models(rng):
    """(model with the outputs of all three nodes, the LSTM and GRU with a Linear head -> logits,
    the input, numpy reference outputs, the head model's float initializers)."""
    D = onnx.TensorProto.DOUBLE
    hid, lens = 3, np.array([STEPS, 2, 4, 1], np.int32)
    x = rng.standard_normal((STEPS, BATCH, FEATURES))
    lw, lr = rng.standard_normal((2, 4 * hid, FEATURES)) * 0.5, rng.standard_normal((2, 4 * hid, hid)) * 0.5
    lb, lp = rng.standard_normal((2, 8 * hid)) * 0.5, rng.standard_normal((2, 3 * hid)) * 0.5
    lh0, lc0 = rng.standard_normal((2, BATCH, hid)), rng.standard_normal((2, BATCH, hid))
    gw, gr = rng.standard_normal((1, 3 * hid, FEATURES)) * 0.5, rng.standard_normal((1, 3 * hid, hid)) * 0.5
    gb = rng.standard_normal((1, 6 * hid)) * 0.5
    fc1, fc2 = rng.standard_normal((CLASSES, STEPS * 2 * hid)), rng.standard_normal((CLASSES, 2 * hid + hid))
    inits = {"lstm.W": lw, "lstm.R": lr, "lstm.B": lb, "lstm.P": lp, "h0": lh0, "c0": lc0, "gru.W": gw, "gru.R": gr,
             "gru.B": gb, "fc1": fc1, "fc2": fc2}
    tensors = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    tensors.append(numpy_helper.from_array(lens, "lens"))
    tensors.append(numpy_helper.from_array(np.array([BATCH, -1], np.int64), "flat"))
    nodes = [helper.make_node("LSTM", ["input", "lstm.W", "lstm.R", "lstm.B", "lens", "h0", "c0", "lstm.P"],
                              ["Y", "Y_h", "Y_c"], name="lstm", hidden_size=hid, direction="bidirectional"),
             helper.make_node("GRU", ["input", "gru.W", "gru.R", "gru.B", "lens"], ["GY", "GY_h"], name="gru",
                              hidden_size=hid, direction="reverse")]
    # RNN at layout 1 ([N,T,I] in, [N,T,D,H] out) with LeakyRelu(alpha 0.2) and clip 0.8.
    rw, rr = rng.standard_normal((1, hid, FEATURES)), rng.standard_normal((1, hid, hid))
    tensors += [numpy_helper.from_array(rw, "rnn.W"), numpy_helper.from_array(rr, "rnn.R")]
    nodes += [helper.make_node("Transpose", ["input"], ["xb"], perm=[1, 0, 2]),
              helper.make_node("RNN", ["xb", "rnn.W", "rnn.R"], ["RY", "RY_h"], name="rnn", hidden_size=hid, layout=1,
                               activations=["LeakyRelu"], activation_alpha=[0.2], clip=0.8)]
    ref = lstm_reference(x, lw, lr, lb, lens, lh0, lc0, lp) + gru_reference(x, gw, gr, gb, lens)
    h, ry = np.zeros((BATCH, hid)), []
    for t in range(STEPS):
        a = np.clip(x[t] @ rw[0].T + h @ rr[0].T, -np.float32(0.8), np.float32(0.8))
        h = np.where(a > 0, a, np.float32(0.2) * a)
        ry.append(h)
    ref += (np.stack(ry, 1)[:, :, None], h[:, None])
    outs = ["Y", "Y_h", "Y_c", "GY", "GY_h", "RY", "RY_h"]
    # The activations that map onto the unary table's Elu (alpha 0.5), Softsign and Softplus.
    for name, alpha, f in [("Elu", [0.5], lambda a: np.where(a < 0, 0.5 * np.expm1(a), a)),
                           ("Softsign", [], lambda a: a / (1 + np.abs(a))),
                           ("Softplus", [], lambda a: np.log1p(np.exp(a)))]:
        extra = dict(activation_alpha=alpha) if alpha else {}
        nodes.append(helper.make_node("RNN", ["input", "rnn.W", "rnn.R"], ["", name + "_h"], name="rnn_" + name,
                                      hidden_size=hid, activations=[name], **extra))
        h = np.zeros((BATCH, hid))
        for t in range(STEPS):
            h = f(x[t] @ rw[0].T + h @ rr[0].T)
        ref += (h[None],)
        outs.append(name + "_h")
    value = helper.make_tensor_value_info("input", D, [STEPS, BATCH, FEATURES])
    plain = helper.make_graph(nodes, "seqlens", [value], [helper.make_tensor_value_info(o, D, ref[k].shape)
                                                          for k, o in enumerate(outs)], tensors)
    # Head: logits = fc1 . flatten(Y as [N,T,D,H]) + fc2 . [Y_h fwd | Y_c rev | GY_h]
    head = nodes + [
        helper.make_node("Transpose", ["Y"], ["Yt"], perm=[2, 0, 1, 3]),
        helper.make_node("Reshape", ["Yt", "flat"], ["Yf"]),
        helper.make_node("Gemm", ["Yf", "fc1"], ["l1"], transB=1),
        helper.make_node("Split", ["Y_h"], ["Yh0", "Yh1"], axis=0),
        helper.make_node("Split", ["Y_c"], ["Yc0", "Yc1"], axis=0),
        helper.make_node("Concat", ["Yh0", "Yc1", "GY_h"], ["s"], axis=2),
        helper.make_node("Squeeze", ["s", "axis0"], ["s2"]),
        helper.make_node("Gemm", ["s2", "fc2"], ["l2"], transB=1),
        helper.make_node("Add", ["l1", "l2"], ["logits"])]
    tensors.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
    headed = helper.make_graph(head, "seqlens_head", [value], [helper.make_tensor_value_info("logits", D, [BATCH, CLASSES])],
                               tensors)
    make = lambda g: helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])  # noqa: E731
    return make(plain), make(headed), x, dict(zip(outs, ref)), inits


def cross_entropy(logits, y):
    z = logits - logits.max(1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(y)), y]))


def run_outputs(trainrt, path, x_path, out):
    r = run([trainrt, "run", path, "--input", "input=" + x_path, "--backend", "reference", "--output-dir", out])
    if r.returncode != 0:
        raise RuntimeError("trainrt run exited %d: %s" % (r.returncode, r.stderr.strip()))
    got = {}
    for f in os.listdir(out):
        t = onnx.TensorProto()
        with open(os.path.join(out, f), "rb") as fh:
            t.ParseFromString(fh.read())
        got[t.name or os.path.splitext(f)[0]] = numpy_helper.to_array(t)
    return got


def check_seqlens(trainrt, tmp):
    rng = np.random.default_rng(2)
    plain, headed, x, ref, inits = seqlens_models(rng)
    onnx.checker.check_model(plain)
    p_plain, p_head = os.path.join(tmp, "plain.onnx"), os.path.join(tmp, "head.onnx")
    onnx.save(plain, p_plain)
    onnx.save(headed, p_head)
    x_path, y_path = os.path.join(tmp, "x.pb"), os.path.join(tmp, "y.pb")
    save_pb(x_path, x, "input")
    y = np.array([0, 2, 1, 2], np.int64)
    save_pb(y_path, y, "labels")
    got = run_outputs(trainrt, p_plain, x_path, os.path.join(tmp, "out"))
    worst = 0.0
    for k, want in ref.items():
        assert k in got, "trainrt run wrote %s, not %s" % (sorted(got), k)
        assert got[k].shape == want.shape, "%s is %s, expected %s" % (k, got[k].shape, want.shape)
        worst = max(worst, float(np.max(np.abs(got[k] - want))))
    assert worst <= 1e-12, "outputs differ from the numpy reference by %.3g" % worst
    # Gradients against central differences of the same loss along random directions.
    loss, grads = trainrt_gradients(trainrt, p_head, x_path, y_path, "reference", os.path.join(tmp, "g"))
    params = [k for k in inits if k in grads]
    assert len(params) == len(inits), "gradients of %s, expected %s" % (sorted(grads), sorted(inits))
    model = onnx.load(p_head)
    worst_fd = 0.0
    for trial in range(2):
        v = {k: rng.standard_normal(inits[k].shape) for k in params}
        eps, ls = 1e-5, []
        for sign in (1, -1):
            m = onnx.ModelProto()
            m.CopyFrom(model)
            for i, t in enumerate(m.graph.initializer):
                if t.name in v:
                    m.graph.initializer[i].CopyFrom(numpy_helper.from_array(inits[t.name] + sign * eps * v[t.name], t.name))
            path = os.path.join(tmp, "fd%d.onnx" % sign)
            onnx.save(m, path)
            ls.append(cross_entropy(run_outputs(trainrt, path, x_path, os.path.join(tmp, "fd%d" % (trial * 2 + sign)))
                                    ["logits"], y))
        fd = (ls[0] - ls[1]) / (2 * eps)
        an = sum(float(np.sum(grads[k] * v[k])) for k in params)
        worst_fd = max(worst_fd, abs(fd - an) / max(abs(an), 1e-12))
    assert worst_fd <= 1e-6, "directional derivative %.3g from central differences" % worst_fd
    return "LSTM bidirectional + GRU reverse with sequence_lens, RNN layout 1: outputs %.2g from numpy, " \
           "gradients %.2g from finite differences (loss %.4f)" % (worst, worst_fd, loss)


def check_refused(trainrt, tmp):
    F = onnx.TensorProto.FLOAT
    w = numpy_helper.from_array(np.zeros((1, 4, 2), np.float32), "W")
    r = numpy_helper.from_array(np.zeros((1, 4, 1), np.float32), "R")
    x_path = os.path.join(tmp, "x.pb")
    save_pb(x_path, np.zeros((5, 3, 2), np.float32), "x")
    cases = {  # name: (X's declared shape, LSTM attributes, expected error text)
        "unknown": ([5, 3, 2], dict(activations=["Sigmoid", "Swish", "Tanh"]), "activation 'Swish' is not supported"),
        "dynamic": (["T", 3, 2], {}, "needs a static sequence length: X is [T,3,2]"),
    }
    for name, (shape, attrs, want) in cases.items():
        node = helper.make_node("LSTM", ["x", "W", "R"], ["Y"], name="lstm_" + name, hidden_size=1, **attrs)
        g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", F, shape)],
                              [helper.make_tensor_value_info("Y", F, None)], [w, r])
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)
        res = run([trainrt, "run", path, "--input", "x=" + x_path, "--output-dir", os.path.join(tmp, name)])
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and want in lines[0] and "'lstm_%s' (LSTM)" % name in lines[0], \
            "%s: exit %d, %s" % (name, res.returncode, lines)
    return "unknown activation and a symbolic sequence length: one error line each, exit 2"


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: rnn_models.py TRAINRT SOURCE_DIR")
    trainrt = sys.argv[1]
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    fails = 0
    special = {"tokens": check_tokens, "seqlens": check_seqlens, "refused": check_refused}
    for name in list(MODELS) + list(special):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                detail = special[name](trainrt, tmp) if name in special else check_model(trainrt, name, tmp)
                print("PASS   %-8s %s" % (name, detail))
            except Exception as e:  # one case's failure, not the run's
                print("FAIL   %-8s %s: %s" % (name, type(e).__name__, e))
                fails += 1
        sys.stdout.flush()
    print("rnn_models: %s" % ("%d FAIL" % fails if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
