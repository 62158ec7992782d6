#!/usr/bin/python3
"""Models using PyTorch's pixel_shuffle and triu/tril, exported by
torch.onnx.export, for tests/schema/test_onnx_tensor.c: what the exporter
writes as DepthToSpace (mode CRD) and Trilu, checked against PyTorch's own
output rather than a reading of the ONNX documentation.

Usage: torch_blocks.py OUTDIR. For each case NAME it writes NAME.onnx,
NAME.in.x.npy and NAME.out.0.npy (PyTorch's output on that input), and
for the dynamic-batch export NAME_b3.onnx, the same file fed 3 images.
- espcn_op13 / espcn_op17: an ESPCN super-resolution net (the upscaling
  model of PyTorch's ONNX tutorial): conv 5x5, tanh, conv 3x3, tanh, conv
  3x3 to 3 * 3^2 channels, pixel_shuffle(3); batch 1, 16x16, opset 13 and
  17; espcn_dyn: the batch axis left open, fed 3 images.
- causal_op14: torch.triu(q k^T / sqrt(d), 1) and torch.tril(q, -1) of
  run-time tensors (Trilu with k = 1 and -1; opset 14, where Trilu
  appeared)."""
import os
import sys
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(35)


class Espcn(torch.nn.Module):
    def __init__(self, r=3):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 5, padding=2)
        self.c2 = torch.nn.Conv2d(16, 8, 3, padding=1)
        self.c3 = torch.nn.Conv2d(8, 3 * r * r, 3, padding=1)
        self.r = r

    def forward(self, x):
        x = torch.tanh(self.c2(torch.tanh(self.c1(x))))
        return torch.nn.functional.pixel_shuffle(self.c3(x), self.r)


class Causal(torch.nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d)

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        s = torch.triu(q @ k.transpose(1, 2) / 8 ** 0.5, 1)
        return s + torch.tril(q, -1).sum(2, keepdim=True)


def export(model, name, x, opset, dyn=False, more=()):
    axes = {"x": {0: "batch"}, "y": {0: "batch"}} if dyn else None
    torch.onnx.export(model, torch.from_numpy(x), os.path.join(OUT, name + ".onnx"),
                      opset_version=opset, input_names=["x"], output_names=["y"],
                      dynamic_axes=axes)
    for tag, xi in [(name, x)] + list(more):
        if tag != name:  # the same file, fed another batch
            with open(os.path.join(OUT, name + ".onnx"), "rb") as f:
                data = f.read()
            with open(os.path.join(OUT, tag + ".onnx"), "wb") as f:
                f.write(data)
        np.save(os.path.join(OUT, tag + ".in.x.npy"), xi)
        with torch.no_grad():
            np.save(os.path.join(OUT, tag + ".out.0.npy"), model(torch.from_numpy(xi)).numpy())


espcn = Espcn().eval()
img = np.random.default_rng(35).standard_normal((1, 3, 16, 16)).astype(np.float32)
export(espcn, "espcn_op13", img, 13)
export(espcn, "espcn_op17", img, 17)
img3 = np.random.default_rng(36).standard_normal((3, 3, 16, 16)).astype(np.float32)
export(espcn, "espcn_dyn", img, 13, dyn=True, more=[("espcn_dyn_b3", img3)])
seq = np.random.default_rng(37).standard_normal((2, 6, 8)).astype(np.float32)
export(Causal().eval(), "causal_op14", seq, 14)
