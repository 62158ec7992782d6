#!/usr/bin/python3
"""The transformer encoder of issue 34, exported by PyTorch for the ONNX
importer's test (tests/schema/test_onnx_transformer.c).

Usage: transformer.py OUTDIR. torch.nn.TransformerEncoder: 2 layers,
d_model 64, 4 heads, dim_feedforward 128, GELU, layer norm, batch_first
(flowgraph's unknown dimension is the leading one), eval mode, random
weights. Exported with torch.onnx.export at opsets 13 and 17, with a fixed
batch and with a dynamic batch axis. For each case NAME it writes
NAME.onnx, NAME.in.x.npy and NAME.out.0.npy (PyTorch's output on that
input). The dynamic models get a second case at another batch size
(NAME_b5: inputs and outputs only, for the same model fed 5 sequences)."""
import os
import sys
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(34)

layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.1,
                                         activation="gelu", batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=2).eval()
SEQ = 10


def reference(x):
    # With gradients on, PyTorch runs the layer op by op (the path the
    # exporter traces), not its fused inference kernel.
    return model(torch.from_numpy(x)).detach().numpy()


def write_case(name, x):
    np.save(os.path.join(OUT, name + ".in.x.npy"), x)
    np.save(os.path.join(OUT, name + ".out.0.npy"), reference(x))


rng = np.random.default_rng(34)
for opset in (13, 17):
    for dyn in (False, True):
        name = "tfm_op%d_%s" % (opset, "dyn" if dyn else "fixed")
        x = rng.standard_normal((2, SEQ, 64)).astype(np.float32)
        path = os.path.join(OUT, name + ".onnx")
        # Not under no_grad: there PyTorch 1.13 takes the fused
        # _transformer_encoder_layer_fwd, which it cannot export.
        torch.onnx.export(model, torch.from_numpy(x), path, opset_version=opset,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}} if dyn else None)
        write_case(name, x)
        if dyn:
            write_case(name + "_b5", rng.standard_normal((5, SEQ, 64)).astype(np.float32))
