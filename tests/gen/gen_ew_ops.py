#!/usr/bin/python3
"""Prints the reference table of tests/kernels/test_ew_ops.c (CASES).

Run with /usr/bin/python3 (it has PyTorch):
    /usr/bin/python3 tests/gen/gen_ew_ops.py

Each row is one op with its attributes and edge inputs (kinks, 0, +-3 for
the hard ops, halves for round, the softplus threshold, NaN and infinities
where the op defines them); the outputs are torch.nn.functional / torch.*
in float64, and again in float32 on the inputs rounded to float32.
"""
import math

import torch
import torch.nn.functional as F

NAN = float("nan")
CASES = [
    ("softplus", 1, 20, [-30, -1, 0, 1, 19.5, 20, 20.5, 40], lambda t: F.softplus(t, 1, 20)),
    ("softplus", 2, 1, [-1, 0, 0.25, 0.5, 0.5000001, 3, -40], lambda t: F.softplus(t, 2, 1)),
    ("selu", 0, 0, [-5, -1, -0.1, 0, 1e-9, 0.5, 3], F.selu),
    ("silu", 0, 0, [-100, -3, -1, 0, 1, 3, 100], F.silu),
    ("hard_sigmoid", 0, 0, [-4, -3, -2.5, 0, 1, 3, 4, NAN], F.hardsigmoid),
    ("hard_swish", 0, 0, [-4, -3, -2.5, 0, 1, 3, 4, NAN], F.hardswish),
    ("mish", 0, 0, [-20, -1, 0, 0.5, 1, 20, 100], F.mish),
    ("sign", 0, 0, [-2.5, -0.0, 0, 1e-30, 3, NAN, -math.inf], torch.sign),
    ("reciprocal", 0, 0, [-4, -0.5, 0.1, 3, 0, -0.0, math.inf], torch.reciprocal),
    ("floor", 0, 0, [-2.5, -1.5, -0.5, -0.0, 0.5, 1.5, 2.7, NAN], torch.floor),
    ("ceil", 0, 0, [-2.5, -1.5, -0.5, -0.0, 0.5, 1.5, 2.7, NAN], torch.ceil),
    ("round", 0, 0, [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999999999999994, 2.4, -2.6],
     torch.round),
    ("clip", -1, 2, [NAN, -3, -1, 0, 2, 2.5, -math.inf], lambda t: torch.clamp(t, -1, 2)),
    ("clip", 1, 1, [NAN, -3, 0.5, 1, 1.5, math.inf], lambda t: torch.clamp(t, 1, 1)),
]


def c(v):
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(float(v))


def arr(vs):
    return "{" + ", ".join(c(v) for v in vs) + "}"


for op, a, b, xs, f in CASES:
    y64 = f(torch.tensor(xs, dtype=torch.float64)).tolist()
    y32 = f(torch.tensor(xs, dtype=torch.float32)).tolist()
    print("    {\"%s\", %s, %s, %d, %s," % (op, c(a), c(b), len(xs), arr(xs)))
    print("     %s," % arr(y64))
    print("     %s}," % arr(y32))
