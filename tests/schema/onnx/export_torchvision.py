"""Writes torchvision models as PyTorch exports them, for the re-export test.

Usage: export_torchvision.py DIR

For resnet18 and squeezenet1_1 (random weights, weights=None: nothing is
downloaded; eval mode), at opset 13 with a dynamic batch: DIR/NAME.onnx, the
input DIR/NAME.in.input.npy ([2, 3, 64, 64]) and PyTorch's output on it,
DIR/NAME.want.npy. The test imports each file into flowgraph, exports it
again and evaluates that file with check_export.py against NAME.want.npy.
"""
import sys

import numpy as np
import torch
import torchvision


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    models = {
        "resnet18": torchvision.models.resnet18(weights=None),
        "squeezenet1_1": torchvision.models.squeezenet1_1(weights=None),
    }
    for name, m in models.items():
        m.eval()
        x = torch.randn(2, 3, 64, 64)
        torch.onnx.export(m, x, "%s/%s.onnx" % (out, name), opset_version=13,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
        np.save("%s/%s.in.input.npy" % (out, name), x.numpy())
        with torch.no_grad():
            np.save("%s/%s.want.npy" % (out, name), m(x).numpy())


if __name__ == "__main__":
    main()
