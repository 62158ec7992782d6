#!/usr/bin/python3
"""LSTM and GRU cases for tests/schema/test_onnx_rnn.c.

    /usr/bin/python3 rnn.py OUTDIR

Small language models as PyTorch 1.13 exports them (torch.onnx.export):
token ids [batch, 12] -> nn.Embedding(50, 16) -> nn.LSTM or nn.GRU (hidden
32, batch_first) -> nn.Linear(32, 50) logits, in eval mode, seed 0; a
2-layer bidirectional LSTM; opsets 13 and 17; a fixed batch of 3 and a
dynamic batch (run at 3 and 5). Every case NAME gets NAME.onnx,
NAME.in.tokens.npy and NAME.out.0.npy (PyTorch's logits); models with the
last state as a second output get NAME.out.1.npy.

Also single-op cases built with onnx.helper, whose expected values come
from the ONNX operator documentation's equations written in NumPy below:
reverse and bidirectional directions, initial states, layout 1, GRU with
linear_before_reset 0 and 1, and bad attributes.
"""
import os
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

VOCAB, EMB, HID, SEQ = 50, 16, 32, 12


class LM(torch.nn.Module):
    def __init__(self, cell, layers=1, bidirectional=False):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, EMB)
        rnn = torch.nn.LSTM if cell == "lstm" else torch.nn.GRU
        self.rnn = rnn(EMB, HID, num_layers=layers, batch_first=True,
                       bidirectional=bidirectional)
        self.out = torch.nn.Linear(HID * (2 if bidirectional else 1), VOCAB)

    def forward(self, tokens):
        y, _ = self.rnn(self.emb(tokens))
        return self.out(y)


def export_lm(out, name, cell, opset, dynamic, layers=1, bidirectional=False):
    torch.manual_seed(0)
    m = LM(cell, layers, bidirectional).eval()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, VOCAB, (3, SEQ), generator=g)
    kw = {}
    if dynamic:
        kw["dynamic_axes"] = {"tokens": {0: "batch"}, "logits": {0: "batch"}}
    torch.onnx.export(m, (tokens,), os.path.join(out, name + ".onnx"), opset_version=opset,
                      input_names=["tokens"], output_names=["logits"], **kw)
    batches = [3, 5] if dynamic else [3]
    for b in batches:
        case = name if b == 3 else name + "_b%d" % b
        if b != 3:  # the same model file, another batch
            os.link(os.path.join(out, name + ".onnx"), os.path.join(out, case + ".onnx"))
        t = torch.randint(0, VOCAB, (b, SEQ), generator=g)
        with torch.no_grad():
            np.save(os.path.join(out, case + ".out.0.npy"), m(t).numpy())
        np.save(os.path.join(out, case + ".in.tokens.npy"), t.numpy())


# ---- single-op cases: NumPy from the ONNX operator documentation ----------

def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstm_ref(x, w, r, b, h0, c0, reverse):
    """One direction: x [T, B, I], w [4H, I], r [4H, H], b [8H]; gates iofc."""
    H = r.shape[1]
    h, c, ys = h0, c0, [None] * x.shape[0]
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in steps:
        gates = x[t] @ w.T + h @ r.T + b[:4 * H] + b[4 * H:]
        i, o, f, cc = np.split(gates, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(cc)
        h = sigmoid(o) * np.tanh(c)
        ys[t] = h
    return np.stack(ys), h, c


def gru_ref(x, w, r, b, h0, reverse, lbr):
    H = r.shape[1]
    wb, rb = b[:3 * H], b[3 * H:]
    h, ys = h0, [None] * x.shape[0]
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in steps:
        xw = x[t] @ w.T + wb
        z = sigmoid(xw[:, :H] + h @ r[:H].T + rb[:H])
        rr = sigmoid(xw[:, H:2 * H] + h @ r[H:2 * H].T + rb[H:2 * H])
        if lbr:
            hc = np.tanh(xw[:, 2 * H:] + rr * (h @ r[2 * H:].T + rb[2 * H:]))
        else:
            hc = np.tanh(xw[:, 2 * H:] + (rr * h) @ r[2 * H:].T + rb[2 * H:])
        h = (1 - z) * hc + z * h
        ys[t] = h
    return np.stack(ys), h


def op_case(out, name, op, direction, layout=0, lbr=None, init=False, attrs=None, opset=14):
    rng = np.random.default_rng(len(name))
    T, B, I, H = 5, 2, 3, 4
    G = 4 if op == "LSTM" else 3
    D = 2 if direction == "bidirectional" else 1
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    w = (rng.standard_normal((D, G * H, I)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((D, G * H, H)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((D, 2 * G * H)) * 0.5).astype(np.float32)
    h0 = rng.standard_normal((D, B, H)).astype(np.float32) if init else np.zeros((D, B, H),
                                                                                np.float32)
    c0 = rng.standard_normal((D, B, H)).astype(np.float32) if init else np.zeros((D, B, H),
                                                                                np.float32)
    ys, hs, cs = [], [], []
    for d in range(D):
        rev = direction == "reverse" or d == 1
        if op == "LSTM":
            y, h, c = lstm_ref(x, w[d], r[d], b[d], h0[d], c0[d], rev)
            cs.append(c)
        else:
            y, h = gru_ref(x, w[d], r[d], b[d], h0[d], rev, lbr)
        ys.append(y)
        hs.append(h)
    Y = np.stack(ys, axis=1)  # [T, D, B, H]
    Yh = np.stack(hs)
    outs = [Y, Yh] + ([np.stack(cs)] if op == "LSTM" else [])
    xin, h0in, c0in = x, h0, c0
    if layout:
        xin = x.transpose(1, 0, 2)
        h0in, c0in = h0.transpose(1, 0, 2), c0.transpose(1, 0, 2)
        outs = [Y.transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]
    inputs = ["X", "W", "R", "B"]
    feeds = {"X": xin}
    inits = [helper.make_tensor("W", TensorProto.FLOAT, w.shape, w.flatten()),
             helper.make_tensor("R", TensorProto.FLOAT, r.shape, r.flatten()),
             helper.make_tensor("B", TensorProto.FLOAT, b.shape, b.flatten())]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, xin.shape)]
    if init:
        inputs += ["", "initial_h"] + (["initial_c"] if op == "LSTM" else [])
        feeds["initial_h"] = h0in
        graph_inputs.append(helper.make_tensor_value_info("initial_h", TensorProto.FLOAT,
                                                          h0in.shape))
        if op == "LSTM":
            feeds["initial_c"] = c0in
            graph_inputs.append(helper.make_tensor_value_info("initial_c", TensorProto.FLOAT,
                                                              c0in.shape))
    onames = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    kw = dict(hidden_size=H, direction=direction)
    if opset >= 14:
        kw["layout"] = layout
    if lbr is not None:
        kw["linear_before_reset"] = lbr
    kw.update(attrs or {})
    node = helper.make_node(op, inputs, onames, name=name, **kw)
    graph = helper.make_graph([node], name, graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, v.shape)
                               for o, v in zip(onames, outs)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, os.path.join(out, name + ".onnx"))
    for k, v in feeds.items():
        np.save(os.path.join(out, "%s.in.%s.npy" % (name, k)), v)
    for i, v in enumerate(outs):
        np.save(os.path.join(out, "%s.out.%d.npy" % (name, i)), v.astype(np.float32))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for opset in (13, 17):
        for cell in ("lstm", "gru"):
            export_lm(out, "%s_lm_op%d" % (cell, opset), cell, opset, False)
            export_lm(out, "%s_lm_op%d_dyn" % (cell, opset), cell, opset, True)
    export_lm(out, "lstm2_bidir_lm", "lstm", 17, True, layers=2, bidirectional=True)
    op_case(out, "lstm_forward", "LSTM", "forward")
    op_case(out, "lstm_reverse_init", "LSTM", "reverse", init=True)
    op_case(out, "lstm_bidir_layout1", "LSTM", "bidirectional", layout=1, init=True)
    op_case(out, "gru_forward_lbr1", "GRU", "forward", lbr=1)
    op_case(out, "gru_bidir_lbr0_init", "GRU", "bidirectional", lbr=0, init=True)
    op_case(out, "gru_reverse_lbr0_layout1", "GRU", "reverse", lbr=0, layout=1)
    op_case(out, "lstm_clip", "LSTM", "forward", attrs={"clip": 2.0})
    op_case(out, "gru_activations", "GRU", "forward", lbr=1,
            attrs={"activations": ["Relu", "Tanh"]})


if __name__ == "__main__":
    main()
