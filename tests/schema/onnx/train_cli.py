#!/usr/bin/python3
"""Reference for tests/tools/test_cli_onnx_train.c.

    /usr/bin/python3 train_cli.py OUTDIR

A PyTorch MLP with its loss (Linear(4, 16), ReLU, Linear(16, 3),
cross-entropy mean over the batch), exported as one ONNX model with inputs
x [N, 4] and y [N] and output "loss" (opset 13, dynamic batch): what a user
exports to fine-tune with `flowgraph train --trainable --optimizer`. Writes
mlp_loss.onnx, x.npy and y.npy (40 rows), and losses.npy: the mean loss of
each of 3 epochs of SGD (lr 0.1, batches of 8 in order, each loss taken
before its update) as PyTorch computes them, and w_last.npy, the last
layer's trained weight.
"""
import os
import sys

import numpy as np
import torch


class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 3))

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.net(x), y)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    m = WithLoss()
    g = torch.Generator().manual_seed(3)
    x = torch.rand(40, 4, generator=g) * 2 - 1
    y = torch.randint(0, 3, (40,), generator=g)
    torch.onnx.export(m, (x[:8], y[:8]), os.path.join(out, "mlp_loss.onnx"), opset_version=13,
                      input_names=["x", "y"], output_names=["loss"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    np.save(os.path.join(out, "x.npy"), x.numpy())
    np.save(os.path.join(out, "y.npy"), y.numpy())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        total = 0.0
        for s in range(0, 40, 8):
            opt.zero_grad()
            loss = m(x[s:s + 8], y[s:s + 8])
            loss.backward()
            opt.step()
            total += loss.item()
        losses.append(total / 5)
    np.save(os.path.join(out, "losses.npy"), np.array(losses))
    np.save(os.path.join(out, "w_last.npy"), m.net[2].weight.detach().numpy())


if __name__ == "__main__":
    main()
