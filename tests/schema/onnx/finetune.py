#!/usr/bin/python3
"""Fine-tuning reference for tests/schema/test_onnx_finetune.c.

    /usr/bin/python3 finetune.py OUTDIR

torchvision's resnet18 (weights=None, seed 0) in eval mode with every batch
norm folded into the convolution before it (torch.nn.utils.fusion), which is
the graph torch.onnx.export writes for an eval-mode model anyway (with
random statistics, see fold()), so that
flowgraph's variables and PyTorch's parameters are the same tensors. Writes
resnet18_fused.onnx (opset 13, batch 2 of 3x64x64), the input and labels as
.npy, and the losses of 3 SGD steps (lr 0.01, cross-entropy mean over the
batch) as PyTorch computes them: losses.npy, one loss per step, each taken
before that step's update.
"""
import os
import sys

import numpy as np
import torch
import torchvision
from torch.nn.utils.fusion import fuse_conv_bn_eval


def fused_resnet18():
    torch.manual_seed(0)
    m = torchvision.models.resnet18(weights=None).eval()

    def fold(parent, conv_name, bn_name):
        conv, bn = getattr(parent, conv_name), getattr(parent, bn_name)
        # Fresh statistics would fold into all-zero biases, which the
        # exporter stores once for every convolution (Identity aliases):
        # trained, one shared variable would differ from PyTorch's separate
        # parameters. Random statistics and affine terms keep them apart.
        with torch.no_grad():
            c = bn.num_features
            bn.running_mean.copy_(torch.randn(c) * 0.1)
            bn.running_var.copy_(torch.rand(c) * 0.5 + 0.75)
            bn.weight.copy_(torch.rand(c) * 0.5 + 0.75)
            bn.bias.copy_(torch.randn(c) * 0.1)
        setattr(parent, conv_name, fuse_conv_bn_eval(conv, bn))
        setattr(parent, bn_name, torch.nn.Identity())

    fold(m, "conv1", "bn1")
    for layer in (m.layer1, m.layer2, m.layer3, m.layer4):
        for block in layer:
            fold(block, "conv1", "bn1")
            fold(block, "conv2", "bn2")
            if block.downsample is not None:
                fold(block.downsample, "0", "1")
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    m = fused_resnet18()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(2, 3, 64, 64, generator=g) * 2 - 1
    y = torch.tensor([3, 7], dtype=torch.int64)
    torch.onnx.export(m, (x,), os.path.join(out, "resnet18_fused.onnx"), opset_version=13,
                      input_names=["input"], output_names=["output"])
    np.save(os.path.join(out, "input.npy"), x.numpy())
    np.save(os.path.join(out, "labels.npy"), y.numpy())
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.save(os.path.join(out, "losses.npy"), np.array(losses, dtype=np.float64))


if __name__ == "__main__":
    main()
