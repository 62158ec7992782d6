#!/usr/bin/python3
"""Writes tests/data/resize_fixtures.h, the reference of tests/kernels/test_resize.c.

Run with /usr/bin/python3 (it has PyTorch):
    /usr/bin/python3 tests/gen/gen_resize.py > tests/data/resize_fixtures.h

Each case resizes the last two dims of a small input x, with a fixed
upstream gradient dy, and stores the output y and the input gradient
dx = vjp(y, dy) in float64. Where torch.nn.functional.interpolate has the
case's semantics, y and dx come from it (mode "nearest" is ONNX's
asymmetric + floor, "nearest-exact" half_pixel + round_prefer_ceil,
"bilinear" half_pixel or align_corners). The other cases come from NumPy
written from the ONNX Resize documentation: along each resized axis an
interpolation matrix A (m x n) whose row o holds the weights of output o
(nearest: one 1; linear: 1 - r and r at floor(x) and floor(x) + 1, the
edge value standing in beyond the input, as the reference pads), so that
y = A_h x A_w^T and dx = A_h^T dy A_w. Values are multiples of 1/256.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(35)

COORD = {"half_pixel": 0, "pytorch_half_pixel": 1, "asymmetric": 2, "align_corners": 3}
NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}

# (op, x dims, sizes, scales or None, coordinate mode, nearest mode, torch call or None)
CASES = [
    ("nearest", (2, 3, 5, 7), (10, 14), (2.0, 2.0), "asymmetric", "floor",
     dict(scale_factor=2.0, mode="nearest")),
    ("nearest", (2, 3, 6, 9), (4, 5), None, "asymmetric", "floor", dict(size=(4, 5), mode="nearest")),
    ("nearest", (1, 3, 5, 7), (9, 12), None, "half_pixel", "round_prefer_ceil",
     dict(size=(9, 12), mode="nearest-exact")),
    ("nearest", (1, 2, 5, 7), (9, 12), None, "half_pixel", "round_prefer_floor", None),
    ("nearest", (1, 2, 6, 8), (4, 5), None, "align_corners", "ceil", None),
    ("nearest", (1, 2, 5, 6), (3, 4), None, "pytorch_half_pixel", "floor", None),
    ("nearest", (1, 2, 4, 4), (6, 10), None, "half_pixel", "round_prefer_floor", None),
    ("nearest", (5, 7), (10, 14), None, "asymmetric", "floor", dict(size=(10, 14), mode="nearest")),
    ("linear", (2, 3, 5, 7), (9, 12), None, "half_pixel", None,
     dict(size=(9, 12), mode="bilinear", align_corners=False)),
    ("linear", (2, 3, 5, 7), (9, 12), None, "align_corners", None,
     dict(size=(9, 12), mode="bilinear", align_corners=True)),
    ("linear", (1, 3, 8, 9), (3, 4), None, "half_pixel", None,
     dict(size=(3, 4), mode="bilinear", align_corners=False)),
    ("linear", (1, 3, 5, 7), (7, 10), (1.5, 1.5), "half_pixel", None,
     dict(scale_factor=1.5, mode="bilinear", align_corners=False, recompute_scale_factor=False)),
    ("linear", (1, 2, 5, 6), (1, 3), None, "pytorch_half_pixel", None, None),
    ("linear", (1, 2, 4, 5), (7, 9), None, "asymmetric", None, None),
    ("linear", (3, 5, 7), (9, 12), None, "half_pixel", None,
     dict(size=(9, 12), mode="bilinear", align_corners=False)),
    ("linear", (1, 2, 3, 300), (2, 520), None, "half_pixel", None,
     dict(size=(2, 520), mode="bilinear", align_corners=False)),
]


def src(coord, o, n, m, s):
    if coord == "asymmetric":
        return o / s
    if coord == "align_corners":
        return 0.0 if m == 1 else o * (n - 1) / (m - 1)
    if coord == "pytorch_half_pixel" and m == 1:
        return 0.0
    return (o + 0.5) / s - 0.5


def nearest_round(x, mode):
    f = math.floor(x)
    if mode == "floor":
        return f
    if mode == "ceil":
        return math.ceil(x)
    if mode == "round_prefer_ceil":
        return f + 1 if x - f >= 0.5 else f
    return f + 1 if x - f > 0.5 else f


def matrix(op, coord, nearest, n, m, s):
    a = np.zeros((m, n))
    for o in range(m):
        x = src(coord, o, n, m, s)
        if op == "nearest":
            a[o, min(max(nearest_round(x, nearest), 0), n - 1)] = 1.0
            continue
        f = math.floor(x)
        r = x - f
        for i, w in ((f, 1 - r), (f + 1, r)):
            a[o, min(max(i, 0), n - 1)] += w  # the edge value beyond the input
    return a


def numpy_ref(op, x, dy, sizes, scales, coord, nearest):
    n_h, n_w = x.shape[-2:]
    s = scales or (sizes[0] / n_h, sizes[1] / n_w)
    ah = matrix(op, coord, nearest, n_h, sizes[0], s[0])
    aw = matrix(op, coord, nearest, n_w, sizes[1], s[1])
    return ah @ x @ aw.T, ah.T @ dy @ aw


def torch_ref(x, dy, call):
    xt = torch.tensor(x).reshape((-1,) + x.shape[-3:] if x.ndim >= 3 else (1, 1) + x.shape)
    xt.requires_grad_(True)
    y = F.interpolate(xt, **call)
    y.backward(torch.tensor(dy).reshape(y.shape))
    return y.detach().numpy().reshape(dy.shape), xt.grad.numpy().reshape(x.shape)


def q(shape):
    return np.round(torch.randn(shape, dtype=torch.float64).numpy() * 256) / 256


def arr(name, a):
    vals = a.flatten().tolist()
    lines = ["    " + ", ".join(repr(float(v)) for v in vals[i:i + 6]) + ","
             for i in range(0, len(vals), 6)]
    return "static const double %s[] = {\n%s\n};\n" % (name, "\n".join(lines))


print("/* Generated by tests/gen/gen_resize.py (PyTorch %s); do not edit. */" % torch.__version__)
print("#ifndef FG_RESIZE_FIXTURES_H\n#define FG_RESIZE_FIXTURES_H\n#include <stdint.h>\n")
print("typedef struct resize_case {\n  int linear, rank;\n  int64_t dims[4];\n  int64_t sizes[2];\n"
      "  double scales[2]; /* 0: none given */\n  int coord, nearest;\n"
      "  int from_torch; /* else NumPy from the ONNX documentation */\n"
      "  const double *x, *y, *dy, *dx;\n} resize_case;\n")
rows = []
for k, (op, dims, sizes, scales, coord, nearest, call) in enumerate(CASES):
    x = q(dims)
    ydims = tuple(dims[:-2]) + tuple(sizes)
    dy = q(ydims)
    if call:
        y, dx = torch_ref(x, dy, call)
        y2, dx2 = numpy_ref(op, x, dy, sizes, scales, coord, nearest)
        # the two references agree (float rounding of torch's weights apart)
        assert np.abs(y - y2).max() < 1e-9 and np.abs(dx - dx2).max() < 1e-9, k
    else:
        y, dx = numpy_ref(op, x, dy, sizes, scales, coord, nearest)
    for nm, a in (("x", x), ("y", y), ("dy", dy), ("dx", dx)):
        print(arr("resize_%s_%d" % (nm, k), a))
    d4 = list(dims) + [0] * (4 - len(dims))
    sc = scales or (0.0, 0.0)
    rows.append("    {%d, %d, {%s}, {%d, %d}, {%r, %r}, %d, %d, %d, resize_x_%d, resize_y_%d, "
                "resize_dy_%d, resize_dx_%d}," % (
                    op == "linear", len(dims), ", ".join(str(v) for v in d4), sizes[0], sizes[1],
                    sc[0], sc[1], COORD[coord], NEAREST.get(nearest, 0), call is not None,
                    k, k, k, k))
print("static const resize_case resize_cases[] = {\n%s\n};\n" % "\n".join(rows))
print("#define N_RESIZE_CASES %d\n\n#endif" % len(CASES))
