#!/usr/bin/python3
"""Writes tests/data/gelu_tanh_refs.h, the PyTorch references of
tests/kernels/test_gelu_tanh.c.

Run with /usr/bin/python3 (it has PyTorch):
    /usr/bin/python3 tests/gen/gen_gelu_tanh.py > tests/data/gelu_tanh_refs.h

x: 64 values spread over [-9, 9] (seeded), the points where the tanh
argument changes regime (0, +-1e-4, +-0.5, +-3, +-6) and two large ones.
y = torch.nn.functional.gelu(x, approximate='tanh') and dy/dx (autograd),
both in float64.
"""
import torch
import torch.nn.functional as F

torch.manual_seed(35)
D = torch.float64


def emit(name, t):
    v = t.detach().reshape(-1).tolist()
    body = ",\n    ".join(", ".join(repr(float(x)) for x in v[i:i + 4]) for i in range(0, len(v), 4))
    print(f"static const double {name}[{len(v)}] = {{\n    {body}}};")


fixed = torch.tensor([0.0, 1e-4, -1e-4, 0.5, -0.5, 3.0, -3.0, 6.0, -6.0, 40.0, -40.0], dtype=D)
x = torch.cat([torch.rand(64, dtype=D) * 18 - 9, fixed]).requires_grad_(True)
y = F.gelu(x, approximate="tanh")
(dx,) = torch.autograd.grad(y.sum(), x)
print("/* Written by tests/gen/gen_gelu_tanh.py; do not edit. */")
print(f"#define GT_N {x.numel()}")
emit("gt_x", x)
emit("gt_y", y)
emit("gt_dx", dx)
