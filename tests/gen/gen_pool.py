#!/usr/bin/python3
"""Writes tests/data/pool_fixtures.h, the PyTorch reference of tests/kernels/test_pool.c.

Run with /usr/bin/python3 (it has PyTorch):
    /usr/bin/python3 tests/gen/gen_pool.py > tests/data/pool_fixtures.h

Each case is one pooling call on a small NCHW input with odd sizes and
channels that are not a multiple of 8: x, a fixed upstream gradient dy, and
torch.nn.functional's output y and input gradient dx = vjp(y, dy), in
float64. Values are multiples of 1/256 (exact in float32, so the f32 run
sees the same ties and order). Some inputs are drawn from a few levels so
that windows hold equal maxima: the gradient must go to the first one, as
torch's CPU kernel does.

torch pads symmetrically only; asymmetric pads (top, left, bottom, right)
are computed as an explicit F.pad (with -inf for max, 0 for avg) followed
by an unpadded pool. For avg with count_include_pad=0 the padded sum is
divided by the pooled count of a padded ones-mask. Those cases keep
ceil_mode 0, where the two formulations agree.
"""
import torch
import torch.nn.functional as F

torch.manual_seed(33)


def q(t):
    return torch.round(t * 256) / 256


def rand_x(shape, ties):
    if ties:
        return torch.randint(-3, 3, shape).double() / 2
    return q(torch.randn(shape, dtype=torch.float64))


# (op, dims, kernel, strides, pads t,l,b,r, dilations, ceil, count_include_pad, out_size, ties)
CASES = [
    ("max_pool2d", (2, 3, 7, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0, 1, None, False),
    ("max_pool2d", (2, 3, 7, 10), (2, 3), (1, 2), (0, 1, 0, 1), (1, 1), 1, 1, None, False),
    ("max_pool2d", (1, 5, 11, 10), (3, 3), (2, 2), (1, 1, 1, 1), (2, 2), 0, 1, None, False),
    ("max_pool2d", (1, 5, 10, 10), (2, 3), (3, 2), (1, 1, 1, 1), (2, 1), 1, 1, None, False),
    ("max_pool2d", (2, 3, 8, 7), (3, 3), (2, 1), (1, 0, 0, 1), (1, 1), 0, 1, None, False),
    ("max_pool2d", (1, 3, 9, 8), (3, 2), (2, 2), (1, 1, 1, 0), (2, 1), 0, 1, None, False),
    ("max_pool2d", (2, 5, 8, 8), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, 1, None, True),
    ("avg_pool2d", (2, 3, 7, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0, 1, None, False),
    ("avg_pool2d", (2, 3, 7, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0, 0, None, False),
    ("avg_pool2d", (2, 5, 8, 7), (3, 2), (2, 2), (1, 1, 1, 1), (1, 1), 1, 0, None, False),
    ("avg_pool2d", (2, 5, 8, 7), (3, 2), (2, 2), (1, 1, 1, 1), (1, 1), 1, 1, None, False),
    ("avg_pool2d", (1, 3, 7, 8), (3, 3), (2, 3), (0, 1, 1, 0), (1, 1), 0, 1, None, False),
    ("avg_pool2d", (1, 3, 7, 8), (3, 3), (2, 3), (0, 1, 1, 0), (1, 1), 0, 0, None, False),
    ("avg_pool2d", (1, 3, 6, 9), (2, 4), (1, 3), (0, 0, 0, 0), (1, 1), 1, 1, None, False),
    ("adaptive_avg_pool2d", (2, 3, 7, 9), None, None, None, None, 0, 0, (3, 4), False),
    ("adaptive_avg_pool2d", (1, 5, 10, 6), None, None, None, None, 0, 0, (4, 5), False),
    ("adaptive_avg_pool2d", (1, 3, 5, 5), None, None, None, None, 0, 0, (7, 6), False),
    ("global_avg_pool", (2, 5, 3, 7), None, None, None, None, 0, 0, (1, 1), False),
    ("global_max_pool", (2, 5, 3, 7), None, None, None, None, 0, 0, (1, 1), False),
    ("global_max_pool", (1, 3, 4, 5), None, None, None, None, 0, 0, (1, 1), True),
    # The gradients' fast loops: 2x2 stride 2 without padding (odd sizes
    # leave a row and a column no window covers), and 2x2 / 3x3 windows at
    # stride 1 with ties.
    ("max_pool2d", (2, 5, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0, 1, None, True),
    ("max_pool2d", (2, 3, 9, 7), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0, 1, None, False),
    ("max_pool2d", (1, 3, 7, 9), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1), 0, 1, None, True),
    ("max_pool2d", (1, 3, 7, 9), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0, 1, None, True),
    ("avg_pool2d", (2, 3, 9, 7), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0, 1, None, False),
]


def pool(op, x, k, s, p, d, ceil, cip, osz):
    if op == "adaptive_avg_pool2d":
        return F.adaptive_avg_pool2d(x, osz)
    if op == "global_avg_pool":
        return F.adaptive_avg_pool2d(x, 1)
    if op == "global_max_pool":
        return F.adaptive_max_pool2d(x, 1)
    sym = p[0] == p[2] and p[1] == p[3]
    if op == "max_pool2d":
        if sym:
            return F.max_pool2d(x, k, s, (p[0], p[1]), d, ceil_mode=bool(ceil))
        assert not ceil
        xp = F.pad(x, (p[1], p[3], p[0], p[2]), value=float("-inf"))
        return F.max_pool2d(xp, k, s, 0, d)
    if sym:
        return F.avg_pool2d(x, k, s, (p[0], p[1]), ceil_mode=bool(ceil),
                            count_include_pad=bool(cip))
    assert not ceil
    xp = F.pad(x, (p[1], p[3], p[0], p[2]))
    y = F.avg_pool2d(xp, k, s, 0)
    if cip:
        return y
    ones = F.pad(torch.ones_like(x), (p[1], p[3], p[0], p[2]))
    return y / F.avg_pool2d(ones, k, s, 0)


def c(v):
    return repr(float(v))


def arr(name, t):
    vals = t.flatten().tolist()
    lines = []
    for i in range(0, len(vals), 8):
        lines.append("    " + ", ".join(c(v) for v in vals[i:i + 8]) + ",")
    return "static const double %s[] = {\n%s\n};\n" % (name, "\n".join(lines))


def ints(v, n):
    return "{" + ", ".join(str(int(a)) for a in (v if v is not None else [0] * n)) + "}"


print("/* Generated by tests/gen/gen_pool.py (PyTorch %s); do not edit. */" % torch.__version__)
print("#ifndef FG_POOL_FIXTURES_H\n#define FG_POOL_FIXTURES_H\n#include <stdint.h>\n")
print("typedef struct pool_case {\n  const char *op;\n  int64_t dims[4];\n"
      "  int64_t kernel[2], strides[2], pads[4], dilations[2];\n"
      "  int ceil_mode, count_include_pad;\n  int64_t out[2]; /* output H, W */\n"
      "  const double *x, *y, *dy, *dx;\n} pool_case;\n")
rows = []
for i, (op, dims, k, s, p, d, ceil, cip, osz, ties) in enumerate(CASES):
    x = rand_x(dims, ties).requires_grad_(True)
    y = pool(op, x, k, s, p, d, ceil, cip, osz)
    if ceil and op in ("max_pool2d", "avg_pool2d"):
        y_floor = pool(op, x, k, s, p, d, 0, cip, osz)
        assert y_floor.shape != y.shape, "case %d: ceil_mode must change the output" % i
    dy = q(torch.randn(y.shape, dtype=torch.float64))
    (dx,) = torch.autograd.grad(y, x, dy)
    print(arr("pool_x_%d" % i, x.detach()))
    print(arr("pool_y_%d" % i, y.detach()))
    print(arr("pool_dy_%d" % i, dy))
    print(arr("pool_dx_%d" % i, dx))
    rows.append('    {"%s", %s, %s, %s, %s, %s, %d, %d, {%d, %d}, pool_x_%d, pool_y_%d, '
                'pool_dy_%d, pool_dx_%d},' % (op, ints(dims, 4), ints(k, 2), ints(s, 2),
                                               ints(p, 4), ints(d, 2), ceil, cip,
                                               y.shape[2], y.shape[3], i, i, i, i))
print("static const pool_case pool_cases[] = {\n%s\n};\n" % "\n".join(rows))
print("#endif")
