#!/usr/bin/python3
"""torchvision models exported to ONNX by PyTorch, for
tests/schema/test_onnx_models.c.

usage: models.py OUT_DIR

For each of resnet18, mobilenet_v2 and squeezenet1_1 (torchvision 0.14,
weights=None: random initialisation, nothing downloaded) at opsets 13 and
17, and swin_t at opset 17 with a fixed batch only (its shifted-window
mask is Mod and ScatterND on shapes, which flowgraph folds at import; its
window arithmetic on an unknown batch is refused), exports with
torch.onnx.export in eval mode:
- NAME_fixed: batch 1 fixed in the file;
- NAME_dyn: dynamic_axes {'input': {0: 'batch'}, 'output': {0: 'batch'}},
  with inputs of batch 1 and of batch 3.
Each model gets OUT_DIR/NAME.onnx and, per input set k (0, and 1 for the
dynamic ones), NAME.<k>.in.input.npy and NAME.<k>.out.0.npy: a random
224x224 image batch (225x225 for squeezenet1_1) and PyTorch's output on
it. The batch-norm statistics are randomised too (the freshly built ones
are 0 and 1), so that the folding of batch norm into the convolutions
carries real numbers. Writes
OUT_DIR/complete last: its presence says every file is there.
"""
import os
import sys

import numpy as np
import torch
import torchvision

OUT = sys.argv[1]
MODELS = ("resnet18", "mobilenet_v2", "squeezenet1_1", "swin_t")
OPSETS = {"swin_t": (17,)}
KINDS = {"swin_t": ("fixed",)}


def build(name):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.running_mean.copy_(torch.rand(c, generator=g) * 0.2 - 0.1)
                mod.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(c, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(c, generator=g) * 0.2 - 0.1)
    return m.eval()


def main():
    os.makedirs(OUT, exist_ok=True)
    done = os.path.join(OUT, "complete")
    if os.path.exists(done):
        os.remove(done)
    for name in MODELS:
        model = build(name)
        g = torch.Generator().manual_seed(2)
        # squeezenet's max pools use ceil_mode: at 225 pixels each of them
        # keeps a partial last window (at 224 every division is exact)
        size = 225 if name == "squeezenet1_1" else 224
        inputs = [torch.randn(b, 3, size, size, generator=g) for b in (1, 3)]
        with torch.no_grad():
            outputs = [model(x) for x in inputs]
        for opset in OPSETS.get(name, (13, 17)):
            for kind in KINDS.get(name, ("fixed", "dyn")):
                tag = "%s_op%d_%s" % (name, opset, kind)
                dyn = {"input": {0: "batch"}, "output": {0: "batch"}} if kind == "dyn" else None
                torch.onnx.export(model, inputs[0], os.path.join(OUT, tag + ".onnx"),
                                  opset_version=opset, input_names=["input"],
                                  output_names=["output"], dynamic_axes=dyn)
                for k in range(2 if kind == "dyn" else 1):
                    np.save(os.path.join(OUT, "%s.%d.in.input.npy" % (tag, k)),
                            inputs[k].numpy())
                    np.save(os.path.join(OUT, "%s.%d.out.0.npy" % (tag, k)), outputs[k].numpy())
    with open(done, "w") as f:
        f.write("ok\n")


main()
