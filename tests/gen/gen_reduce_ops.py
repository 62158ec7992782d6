#!/usr/bin/python3
"""Writes tests/data/reduce_ops_ref.h, the reference values of
tests/kernels/test_reduce_ops.c.

Run with /usr/bin/python3 (it has PyTorch):
    /usr/bin/python3 tests/gen/gen_reduce_ops.py

Forward cases: reduce_min (torch.amin), reduce_prod (torch.prod), argmin,
logsumexp, cumsum (exclusive and reverse as ONNX CumSum, built from
torch.cumsum and flips) and topk (torch.topk's values; indices in
torch.sort(stable=True)'s order, see below), on odd shapes,
several axes, keepdims, ties, zeros, NaN and large magnitudes. Float cases
are computed by torch in the case's dtype from the same inputs (float32
cases from the inputs rounded to float32).

Gradient cases: torch.autograd of sum(op(x) * w) for reduce_prod with one
and with two zeros in a group (the exact values PyTorch defines there).
"""
import contextlib
import math
import os

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "reduce_ops_ref.h")

torch.manual_seed(33)
torch.set_default_dtype(torch.float64)
NAN = float("nan")
INF = float("inf")
DT = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64}
FG = {"f32": "FG_F32", "f64": "FG_F64", "i32": "FG_I32", "i64": "FG_I64"}


def c(v):
    v = float(v)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(v)


def arr(vs):
    return "{" + ", ".join(c(v) for v in vs) + "}"


def iarr(vs):
    return "{" + ", ".join(str(int(v)) for v in vs) + "}"


def rand(shape, scale=2.0, ints=False):
    t = torch.randn(*shape, dtype=torch.float64) * scale
    return torch.round(t) if ints else torch.round(t * 1e4) / 1e4


def cumsum_ref(x, axis, exclusive, reverse):
    """ONNX CumSum from torch.cumsum: reverse flips the axis around it; an
    exclusive sum is the inclusive one shifted by one, starting at 0."""
    if reverse:
        x = x.flip(axis)
    y = torch.cumsum(x, axis)
    if exclusive:
        n = y.shape[axis]
        y = torch.cat([torch.zeros_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, n - 1)], axis)
    if reverse:
        y = y.flip(axis)
    return y


cases = []  # (name, op, dtype, x (float64 tensor), attrs dict, y tensor, idx tensor or None)


def add(name, op, dt, x, **a):
    xt = x.to(DT[dt])
    idx = None
    if op == "reduce_min":
        dims = a.get("axes") or list(range(x.dim()))
        y = torch.amin(xt, dim=dims, keepdim=bool(a.get("keepdims", 0)))
    elif op == "reduce_prod":
        dims = a.get("axes") or list(range(x.dim()))
        y = xt
        for d in sorted([d % x.dim() for d in dims], reverse=True):
            y = torch.prod(y, dim=d, keepdim=True)
        if not a.get("keepdims", 0):
            y = y.reshape([s for i, s in enumerate(xt.shape)
                           if i not in [d % x.dim() for d in dims]])
    elif op == "argmin":
        y = torch.argmin(xt, dim=a["axis"])
        # torch.argmin returns the first minimum; with NaN the first NaN.
    elif op == "logsumexp":
        dims = a.get("axes") or list(range(x.dim()))
        y = torch.logsumexp(xt, dim=dims, keepdim=bool(a.get("keepdims", 0)))
    elif op == "cumsum":
        y = cumsum_ref(xt, a["axis"], a.get("exclusive", 0), a.get("reverse", 0))
    elif op == "topk":
        # torch.topk's order among equal values is its partial sort's (all
        # 7s give indices 5, 4, 3, ...), not specified; flowgraph puts the
        # lower index first, which is torch.sort(stable=True)'s order. The
        # values are torch.topk's; the indices are the stable sort's, and
        # equal torch.topk's wherever there is no tie.
        ax, k, lg = a.get("axis", -1), a["k"], bool(a.get("largest", 1))
        y, tidx = torch.topk(xt, k, dim=ax, largest=lg, sorted=True)
        sv, si = torch.sort(xt, dim=ax, descending=lg, stable=True)
        sv, idx = sv.narrow(ax, 0, k), si.narrow(ax, 0, k)
        assert torch.equal(torch.nan_to_num(sv.double(), 1e300), torch.nan_to_num(y.double(), 1e300))
        assert all(i == j for i, j, v in zip(tidx.flatten().tolist(), idx.flatten().tolist(),
                                             y.flatten().tolist())
                   if (xt == v).sum() <= 1) or name.startswith("topk_nan")
    cases.append((name, op, dt, x, a, y, idx))


# reduce_min: odd shapes, one or two axes, negative axes, keepdims, all
# axes, NaN, integers.
x = rand([3, 5, 4])
add("min_axis1", "reduce_min", "f64", x, axes=[1])
add("min_axes02_keep", "reduce_min", "f32", x, axes=[0, -1], keepdims=1)
add("min_all", "reduce_min", "f64", x)
add("min_nan", "reduce_min", "f64", torch.tensor([[1.0, NAN, -2.0], [3.0, 0.5, -1.0]]), axes=[-1])
add("min_i32", "reduce_min", "i32", rand([4, 3], 50, ints=True), axes=[0])
add("min_i64_keep", "reduce_min", "i64", rand([2, 3, 5], 1e6, ints=True), axes=[1, 2], keepdims=1)

# reduce_prod: groups with no zero, one zero and two zeros; several axes.
zp = torch.tensor([[0.5, 0.0, 2.0, -1.5], [0.0, 3.0, 0.0, 1.25], [1.5, -0.75, 2.0, 0.8]])
add("prod_zeros_axis1", "reduce_prod", "f64", zp, axes=[1])
add("prod_zeros_axis0_keep", "reduce_prod", "f32", zp, axes=[0], keepdims=1)
add("prod_axes02", "reduce_prod", "f64", rand([2, 3, 5], 1.0), axes=[0, 2])
add("prod_all_keep", "reduce_prod", "f32", rand([3, 3], 1.0), keepdims=1)
add("prod_i64", "reduce_prod", "i64", rand([3, 4], 5, ints=True), axes=[1])
add("prod_i32", "reduce_prod", "i32", rand([2, 5], 4, ints=True), axes=[-1])

# argmin: ties (first index wins), NaN (first NaN), axis 0 and negative axes.
ties = torch.tensor([[3.0, 1.0, 4.0, 1.0, 5.0, 9.0], [2.0, 6.0, 5.0, 3.0, 5.0, 2.0],
                     [7.0, 7.0, 7.0, 7.0, 7.0, 7.0], [-1.0, 0.0, -1.0, NAN, -3.0, NAN]])
add("argmin_ties_axis1", "argmin", "f64", ties, axis=1)
add("argmin_ties_f32", "argmin", "f32", ties, axis=-1)
add("argmin_ties_i32", "argmin", "i32", ties[:3], axis=1)
add("argmin_axis0", "argmin", "f64", rand([3, 5, 2], 1.0), axis=0)
add("argmin_axis0_ties_i64", "argmin", "i64", torch.tensor([[2.0, 1.0, 3.0], [1.0, 1.0, 3.0],
                                                           [1.0, 0.0, 3.0]]), axis=0)

# logsumexp: several axes, keepdims, large magnitudes (no overflow), -inf
# rows and +inf.
add("lse_axis1", "logsumexp", "f64", rand([3, 5]), axes=[1])
add("lse_axes02_keep", "logsumexp", "f32", rand([2, 3, 4]), axes=[0, 2], keepdims=1)
add("lse_all", "logsumexp", "f64", rand([2, 3, 4]))
big = torch.tensor([[1000.0, 1000.5, 999.0], [-1000.0, -1001.0, -999.5], [1e4, 1e4, -1e4],
                    [88.0, 89.0, 90.0]])
add("lse_large_f64", "logsumexp", "f64", big, axes=[-1])
add("lse_large_f32", "logsumexp", "f32", big, axes=[-1])
add("lse_inf", "logsumexp", "f64", torch.tensor([[-INF, -INF], [INF, 1.0], [-INF, 2.0]]), axes=[1])

# cumsum: every exclusive/reverse pair, axis 0, 1, -1, integers.
x = rand([3, 4, 5])
for ex in (0, 1):
    for rv in (0, 1):
        add("cumsum_axis1_e%d_r%d" % (ex, rv), "cumsum", "f64", x, axis=1, exclusive=ex, reverse=rv)
add("cumsum_last_f32", "cumsum", "f32", x, axis=-1)
add("cumsum_last_f32_rev_excl", "cumsum", "f32", x, axis=2, exclusive=1, reverse=1)
add("cumsum_axis0_i32_excl_rev", "cumsum", "i32", rand([4, 3], 100, ints=True), axis=0, exclusive=1,
    reverse=1)
add("cumsum_i64", "cumsum", "i64", rand([2, 7], 1e9, ints=True), axis=1)

# topk: ties (lower index first), largest and smallest, axis 0 and -1,
# k = the whole dim, k = 1, NaN, integers.
tk = torch.tensor([[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0], [2.0, 6.0, 5.0, 3.0, 5.0, 2.0, 6.0],
                   [7.0, 7.0, 7.0, 7.0, 7.0, 7.0, 7.0]])
add("topk_ties_largest", "topk", "f64", tk, k=3)
add("topk_ties_smallest", "topk", "f64", tk, k=4, largest=0)
add("topk_ties_f32_all", "topk", "f32", tk, k=7, axis=1)
add("topk_i32_ties", "topk", "i32", tk, k=2)
add("topk_axis0", "topk", "f64", rand([6, 4], 1.0), k=2, axis=0)
add("topk_axis1_of3", "topk", "f32", rand([2, 5, 3], 1.0), k=3, axis=1, largest=0)
add("topk_k1_i64", "topk", "i64", rand([3, 5], 1e6, ints=True), k=1)
add("topk_nan_largest", "topk", "f64", torch.tensor([[1.0, NAN, 3.0, NAN, -1.0]]), k=3)
add("topk_nan_smallest", "topk", "f64", torch.tensor([[1.0, NAN, 3.0, 1.0, -1.0]]), k=5, largest=0)

out = open(OUT, "w")
redirect = contextlib.redirect_stdout(out)
redirect.__enter__()
print("/* Generated by tests/gen/gen_reduce_ops.py (torch %s); do not edit. Regenerate with" %
      torch.__version__)
print(" *   /usr/bin/python3 tests/gen/gen_reduce_ops.py")
print(" * Read by tests/kernels/test_reduce_ops.c only. */")
print("#ifndef FG_REDUCE_OPS_REF_H\n#define FG_REDUCE_OPS_REF_H\n")
for i, (name, op, dt, x, a, y, idx) in enumerate(cases):
    xs = x.to(DT[dt]).double().flatten().tolist()
    print("static const double rc%d_x[] = %s;" % (i, arr(xs)))
    ys = y.double().flatten().tolist() if op != "argmin" else [0.0]
    print("static const double rc%d_y[] = %s;" % (i, arr(ys)))
    ii = (idx if idx is not None else (y if op == "argmin" else torch.zeros(1))).flatten().tolist()
    print("static const int64_t rc%d_i[] = %s;" % (i, iarr(ii)))
print("\nstatic const red_case CASES[] = {")
for i, (name, op, dt, x, a, y, idx) in enumerate(cases):
    axes = a.get("axes") or []
    print("    {\"%s\", \"%s\", %s, %d, %s, %d, %s, %d, %d, %d, %d, %d, %d, %d, %s, rc%d_x, rc%d_y, "
          "rc%d_i}," % (name, op, FG[dt], x.dim(), iarr(list(x.shape)), len(axes),
                        iarr(axes) if axes else "{0}", a.get("keepdims", 0), a.get("axis", -1),
                        a.get("exclusive", 0), a.get("reverse", 0), a.get("k", 0),
                        a.get("largest", 1), y.dim(), iarr(list(y.shape)) if y.dim() else "{0}",
                        i, i, i))
print("};\n")

# reduce_prod's gradient at zeros: d sum(prod(x, 1) * w) / dx, w = (1.5, -2, 0.5).
zx = zp.clone().requires_grad_(True)
w = torch.tensor([1.5, -2.0, 0.5], dtype=torch.float64)
(torch.prod(zx, dim=1) * w).sum().backward()
print("/* torch.autograd: d/dx sum(prod(x, dim=1) * w) for x = prod_zeros_axis1's input (rows with")
print(" * one zero, two zeros, none), w = {1.5, -2, 0.5}. */")
print("static const double PROD_GRAD_X[] = %s;" % arr(zp.flatten().tolist()))
print("static const double PROD_GRAD_W[] = %s;" % arr(w.tolist()))
print("static const double PROD_GRAD_DX[] = %s;" % arr(zx.grad.flatten().tolist()))
print("\n#endif")
redirect.__exit__(None, None, None)
out.close()
