# A small CNN with batch norms and dropout, exported by PyTorch in eval
# mode with its BatchNormalization nodes kept (TrainingMode.PRESERVE, no
# constant folding: PyTorch's own exporter would otherwise fold them into
# the convolutions), for tests/passes/test_passes_fold_onnx.c. Writes into
# the folder argv[1]: conv_bn.onnx, x.npy (the input) and y.npy (PyTorch's
# output for it).
import os
import sys

import numpy as np
import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
m = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
    torch.nn.Conv2d(8, 16, 3, stride=2, bias=True), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
    torch.nn.Dropout(0.5), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
    torch.nn.Linear(16, 5)).eval()
# Running statistics and affine parameters of a trained model, not 0 and 1.
with torch.no_grad():
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.3, 0.3)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.uniform_(0.5, 1.5)
            mod.bias.uniform_(-0.3, 0.3)
x = torch.randn(2, 3, 12, 12)
torch.onnx.export(m, x, os.path.join(out, "conv_bn.onnx"), opset_version=17,
                  training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                  input_names=["x"], output_names=["y"])
with torch.no_grad():
    np.save(os.path.join(out, "y.npy"), m(x).numpy())
np.save(os.path.join(out, "x.npy"), x.numpy())
