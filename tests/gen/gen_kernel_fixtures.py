#!/usr/bin/python3
"""Writes tests/data/kernel_fixtures.h, the reference cases of tests/kernels/test_kernels.c.

Run with /usr/bin/python3 (it has NumPy):
    /usr/bin/python3 tests/gen/gen_kernel_fixtures.py

Inputs are small deterministic random arrays (a fixed seed); every reference
output is computed here, independently of the C kernels, in float64 with
NumPy or plain Python (math.erf for gelu), then rounded to the kernel's
dtype. Where flowgraph defines behaviour NumPy leaves open (integer division
truncates toward zero, float->int casts saturate with NaN -> 0, argmax of a
NaN, empty reductions) the reference spells out that rule here.

Each case becomes one FG_TEST in tests/kernels/test_kernels.c (one ctest each).
"""
import math
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "kernel_fixtures.h")

rng = np.random.default_rng(20240611)

F32, F64, I32, I64, BOOL = "f32", "f64", "i32", "i64", "bool"
NP = {F32: np.float32, F64: np.float64, I32: np.int32, I64: np.int64, BOOL: np.bool_}
CTYPE = {F32: "float", F64: "double", I32: "int32_t", I64: "int64_t", BOOL: "uint8_t"}
ENUM = {F32: "FG_F32", F64: "FG_F64", I32: "FG_I32", I64: "FG_I64", BOOL: "FG_BOOL"}
KEY_INPUT = {"equal", "greater", "less", "argmax"}
TOL = {F32: (1e-5, 1e-6), F64: (1e-12, 1e-13)}

CASES = []


def dtype_of(a):
    for k, v in NP.items():
        if a.dtype == v:
            return k
    raise ValueError(a.dtype)


def case(name, op, ins, out, params=None, key=None, tol=None, rc=0, err=(), labels=""):
    """ins, out: NumPy arrays with the exact dtype the kernel sees."""
    ins = [np.asarray(a) for a in ins]
    out = np.asarray(out)
    if key is None:
        key = dtype_of(ins[0]) if op in KEY_INPUT else dtype_of(out)
    assert all(c["name"] != name for c in CASES), name
    CASES.append(dict(name=name, op=op, ins=ins, out=out, params=params or {}, key=key, tol=tol,
                      rc=rc, err=list(err), labels=labels))


# ---- input makers ------------------------------------------------------------
def rnd(shape, dt, lo=-2.0, hi=2.0):
    if dt in (F32, F64):
        return rng.uniform(lo, hi, size=shape).astype(NP[dt])
    if dt == BOOL:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.integers(int(lo), int(hi) + 1, size=shape).astype(NP[dt])


def f64(a):
    return np.asarray(a, dtype=np.float64)


def like(ref, dt):
    """Rounds a float64 reference to the kernel's output dtype."""
    return np.asarray(ref).astype(NP[dt])


# ---- elementwise unary ---------------------------------------------------------
def sigmoid_ref(x):
    return np.array([1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))
                     for v in x.ravel()]).reshape(x.shape)


def gelu_ref(x):
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()]).reshape(x.shape)


def unary_cases():
    for dt in (F32, F64):
        x = rnd((3, 5), dt, -3, 3)
        pos = rnd((2, 7), dt, 0.05, 4)
        case(f"neg_{dt}", "neg", [x], like(-f64(x), dt))
        case(f"exp_{dt}", "exp", [x], like(np.exp(f64(x)), dt))
        case(f"log_{dt}", "log", [pos], like(np.log(f64(pos)), dt))
        case(f"sqrt_{dt}", "sqrt", [pos], like(np.sqrt(f64(pos)), dt))
        case(f"rsqrt_{dt}", "rsqrt", [pos], like(1 / np.sqrt(f64(pos)), dt))
        case(f"abs_{dt}", "abs", [x], like(np.abs(f64(x)), dt))
        case(f"tanh_{dt}", "tanh", [x], like(np.tanh(f64(x)), dt))
        # Large |x| must saturate, not overflow to inf/inf = NaN.
        big = np.concatenate([x.ravel(), np.array([-1000, -100, -30, 30, 100, 1000], NP[dt])])
        case(f"sigmoid_{dt}", "sigmoid", [big], like(sigmoid_ref(f64(big)), dt))
        case(f"relu_{dt}", "relu", [x], like(np.maximum(f64(x), 0), dt))
        xv = f64(x)
        case(f"leaky_relu_{dt}", "leaky_relu", [x], like(np.where(xv > 0, xv, 0.2 * xv), dt),
             params={"alpha": 0.2})
        g = np.concatenate([x.ravel(), np.array([-8, -0.5, 0, 0.5, 8], NP[dt])])
        case(f"gelu_{dt}", "gelu", [g], like(gelu_ref(f64(g)), dt))
    # log/sqrt edge values: log 0 = -inf, log/sqrt of a negative = NaN.
    e = np.array([0.0, -1.0, 1.0, np.inf], np.float64)
    case("log_f64_edges", "log", [e], np.array([-np.inf, np.nan, 0.0, np.inf]))
    case("sqrt_f32_edges", "sqrt", [e.astype(np.float32)],
         np.array([0.0, np.nan, 1.0, np.inf], np.float32))
    i32 = np.array([[3, -4, 0], [2**31 - 1, -2**31, -7]], np.int32)
    i64 = np.array([5, -6, 0, 2**63 - 1, -2**63, -1], np.int64)
    # Wrap-around: -INT_MIN == INT_MIN, |INT_MIN| == INT_MIN (NumPy agrees).
    case("neg_i32", "neg", [i32], np.array([[-3, 4, 0], [-(2**31 - 1), -2**31, 7]], np.int32))
    case("neg_i64", "neg", [i64], np.array([-5, 6, 0, -(2**63 - 1), -2**63, 1], np.int64))
    case("abs_i32", "abs", [i32], np.array([[3, 4, 0], [2**31 - 1, -2**31, 7]], np.int32))
    case("abs_i64", "abs", [i64], np.array([5, 6, 0, 2**63 - 1, -2**63, 1], np.int64))
    case("relu_i32", "relu", [i32], np.array([[3, 0, 0], [2**31 - 1, 0, 0]], np.int32))
    case("relu_i64", "relu", [i64], np.array([5, 0, 0, 2**63 - 1, 0, 0], np.int64))
    z = np.zeros((0, 3), np.float32)
    case("exp_f32_empty", "exp", [z], z)


# ---- broadcasting binary -------------------------------------------------------
def bin_ref(op, a, b):
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "pow": np.power, "maximum": np.maximum, "minimum": np.minimum}[op]
    return fn(f64(a), f64(b))


def binary_cases():
    shapes = [  # (op, dtype, a shape, b shape, label)
        ("add", F32, (3, 1), (4,), "3x1_4"),
        ("add", F64, (1,), (5, 1), "1_5x1"),
        ("sub", F32, (2, 3, 4), (), "scalar_rhs"),
        ("sub", F64, (), (2, 3), "scalar_lhs"),
        ("mul", F32, (2, 3, 4), (3, 1), "2x3x4_3x1"),
        ("mul", F64, (3, 1, 5), (1, 4, 1), "3x1x5_1x4x1"),
        ("div", F32, (4, 5), (4, 5), "same"),
        ("div", F64, (2, 1, 3, 1), (4, 1, 2), "4d"),
        ("pow", F32, (3, 4), (4,), "3x4_4"),
        ("pow", F64, (2, 3), (2, 3), "same"),
        ("maximum", F32, (5, 1), (1, 6), "5x1_1x6"),
        ("maximum", F64, (2, 3, 4), (2, 1, 4), "2x3x4_2x1x4"),
        ("minimum", F32, (6,), (6,), "same"),
        ("minimum", F64, (3, 4), (), "scalar_rhs"),
        ("add", F32, (2, 1, 3), (2, 4, 1), "2x1x3_2x4x1"),
        ("mul", F64, (7, 1, 1, 5), (1, 3, 2, 1), "7x1x1x5_1x3x2x1"),
    ]
    for op, dt, sa, sb, lab in shapes:
        lo = 0.2 if op in ("pow", "div") else -3.0
        a = rnd(sa, dt, lo, 3)
        b = rnd(sb, dt, lo, 3)
        if op == "pow":
            a = rnd(sa, dt, 0.1, 3)
            b = rnd(sb, dt, -2, 2)
        ref = bin_ref(op, a, b)
        case(f"{op}_{dt}_{lab}", op, [a, b], like(ref, dt))
    # NaN propagates through maximum/minimum (np.maximum).
    a = np.array([1.0, np.nan, 3.0, -np.inf], np.float32)
    b = np.array([np.nan, 2.0, 1.0, 0.0], np.float32)
    case("maximum_f32_nan", "maximum", [a, b], np.array([np.nan, np.nan, 3.0, 0.0], np.float32))
    case("minimum_f64_nan", "minimum", [a.astype(np.float64), b.astype(np.float64)],
         np.array([np.nan, np.nan, 1.0, -np.inf]))
    # IEEE division by zero for floats: inf, -inf, NaN (no error).
    case("div_f64_by_zero_ieee", "div", [np.array([1.0, -2.0, 0.0]), np.array(0.0)],
         np.array([np.inf, -np.inf, np.nan]))
    # Size-1 output dims and all-ones shapes.
    u = rnd((1, 3), F64)
    v = rnd((1, 1), F64)
    case("add_f64_unit_dims", "add", [u, v], u + v)
    w = rnd((1, 1, 1), F32)
    case("mul_f32_all_unit", "mul", [w, np.array(3.0, np.float32)], like(f64(w) * 3.0, F32))
    # A zero-element broadcast.
    case("add_f32_empty", "add", [np.zeros((0, 3), np.float32), rnd((3,), F32)],
         np.zeros((0, 3), np.float32))

    # Integers: wrap-around, C division (truncate toward zero).
    a = np.array([[2**31 - 1, -7, 7], [-2**31, 9, -9]], np.int32)
    b = np.array([1, 2, -2], np.int32)
    wrap = lambda v: ((v + 2**31) % 2**32) - 2**31  # noqa: E731
    A, B = a.astype(object), b.astype(object)
    case("add_i32_wrap", "add", [a, b], np.array(wrap(A + B), np.int64).astype(np.int32))
    case("sub_i32", "sub", [a, b], np.array(wrap(A - B), np.int64).astype(np.int32))
    case("mul_i32_wrap", "mul", [a, b], np.array(wrap(A * B), np.int64).astype(np.int32))

    def cdiv(x, y):
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y >= 0) else -q

    da = np.array([[7, -7, 7, -7, 0], [-2**31, 100, -100, 5, 6]], np.int32)
    db = np.array([[2, 2, -2, -2, 3], [-1, 7, 7, 5, -4]], np.int32)
    dq = np.array([[wrap(cdiv(int(x), int(y))) for x, y in zip(r, s)] for r, s in zip(da, db)],
                  np.int64).astype(np.int32)
    case("div_i32_trunc", "div", [da, db], dq)
    ea = rnd((3, 4), I64, -1000, 1000)
    eb = np.array([3, -5, 7, -11], np.int64)
    eq = np.array([[cdiv(int(x), int(y)) for x, y in zip(r, eb)] for r in ea], np.int64)
    case("div_i64_bcast", "div", [ea, eb], eq)
    ia = rnd((4, 3), I64, -50, 50)
    ib = rnd((3,), I64, -50, 50)
    case("sub_i64_bcast", "sub", [ia, ib], ia - ib)
    case("add_i64_scalar", "add", [ia, np.array(2**62, np.int64)], ia + np.int64(2**62))
    case("mul_i64", "mul", [ia, ia], ia * ia)
    ma = rnd((2, 3), I32, -9, 9)
    mb = rnd((3,), I32, -9, 9)
    case("maximum_i32", "maximum", [ma, mb], np.maximum(ma, mb))
    case("minimum_i64", "minimum", [ia, ib], np.minimum(ia, ib))
    case("maximum_i64", "maximum", [ia, ib], np.maximum(ia, ib))
    case("minimum_i32", "minimum", [ma, mb], np.minimum(ma, mb))
    # Division by zero: the error names the flat output index.
    za = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    zb = np.array([1, 1, 0], np.int32)
    case("div_i32_by_zero", "div", [za, zb], np.zeros((2, 3), np.int32), rc=-1,
         err=["division by zero", "output element 2"])
    case("div_i64_by_zero_bcast", "div", [za.astype(np.int64), np.array([[2], [0]], np.int64)],
         np.zeros((2, 3), np.int64), rc=-1, err=["division by zero", "output element 3"])


def compare_cases():
    a = rnd((3, 4), F32, -2, 2)
    b = a[1].copy()  # ensure some equal elements under broadcasting
    case("equal_f32_bcast", "equal", [a, b], np.equal(a, b))
    x = rnd((2, 3), F64)
    y = rnd((3,), F64)
    case("greater_f64", "greater", [x, y], np.greater(x, y))
    nanx = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
    nany = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    case("less_f32_nan", "less", [nanx, nany], np.less(nanx, nany))
    case("equal_f32_nan", "equal", [nanx, nany], np.equal(nanx, nany))
    i = rnd((4, 1), I32, -3, 3)
    j = rnd((5,), I32, -3, 3)
    case("less_i32_bcast", "less", [i, j], np.less(i, j))
    case("greater_i32", "greater", [i, j], np.greater(i, j))
    k = rnd((2, 5), I64, -2, 2)
    case("equal_i64", "equal", [k, np.array(0, np.int64)], np.equal(k, 0))
    case("greater_i64", "greater", [k, k[0]], np.greater(k, k[0]))
    case("less_f64", "less", [x, np.array(0.0)], np.less(x, 0.0))
    p = rnd((3, 4), BOOL)
    q = rnd((4,), BOOL)
    case("equal_bool", "equal", [p, q], np.equal(p, q))


def select_cases():
    c = rnd((3, 1), BOOL)
    x = rnd((3, 4), F32)
    y = np.array(-9.5, np.float32)
    case("select_f32_bcast", "select", [c, x, y], np.where(c, x, y))
    c2 = rnd((2, 1, 4), BOOL)
    x2 = rnd((3, 1), F64)
    y2 = rnd((4,), F64)
    case("select_f64_3way", "select", [c2, x2, y2], np.where(c2, x2, y2))
    c3 = rnd((5,), BOOL)
    x3, y3 = rnd((5,), I64, -99, 99), rnd((5,), I64, -99, 99)
    case("select_i64_same", "select", [c3, x3, y3], np.where(c3, x3, y3))
    cs = np.array(False)
    xs = rnd((2, 2), F32)
    case("select_f32_scalar_cond", "select", [cs, xs, np.array(1.0, np.float32)],
         np.full((2, 2), 1.0, np.float32))
    xb, yb = rnd((2, 3), BOOL), rnd((2, 3), BOOL)
    cb = rnd((3,), BOOL)
    case("select_bool", "select", [cb, xb, yb], np.where(cb, xb, yb))
    xi = rnd((4, 2), I32, -50, 50)
    ci = rnd((4, 1), BOOL)
    case("select_i32", "select", [ci, xi, np.array(7, np.int32)], np.where(ci, xi, 7).astype(np.int32))


# ---- matmul --------------------------------------------------------------------
def mm_ref(a, b, ta, tb):
    a, b = f64(a), f64(b)
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def mm_case(name, dt, sa, sb, ta=0, tb=0, tol=None):
    lo, hi = (-5, 5) if dt in (I32, I64) else (-1, 1)
    a, b = rnd(sa, dt, lo, hi), rnd(sb, dt, lo, hi)
    ref = mm_ref(a, b, ta, tb)
    out = ref.astype(NP[dt]) if dt in (I32, I64) else like(ref, dt)
    case(name, "matmul", [a, b], out, params={"transpose_a": ta, "transpose_b": tb}, tol=tol)


def matmul_cases():
    mm_case("matmul_f32_7x13x5", F32, (7, 13), (13, 5))
    mm_case("matmul_f64_7x13x5", F64, (7, 13), (13, 5))
    for dt in (F32, F64):
        for ta in (0, 1):
            for tb in (0, 1):
                sa = (6, 3) if ta else (3, 6)
                sb = (4, 6) if tb else (6, 4)
                mm_case(f"matmul_{dt}_t{ta}{tb}", dt, sa, sb, ta, tb)
    mm_case("matmul_f32_batch_shared_b", F32, (2, 3, 4, 5), (5, 6))
    mm_case("matmul_f64_batch_bcast_both", F64, (2, 1, 3, 4), (1, 5, 4, 2))
    mm_case("matmul_f32_batch_bcast_both", F32, (2, 1, 3, 4), (1, 5, 4, 2))
    mm_case("matmul_f32_batch_ta_shared_b", F32, (3, 5, 4), (5, 2), ta=1)
    mm_case("matmul_f64_shared_a", F64, (5, 6), (2, 3, 6, 4))
    mm_case("matmul_f64_batch_tb", F64, (4, 2, 3), (4, 5, 3), tb=1)
    mm_case("matmul_f32_unit_batches", F32, (1, 3, 4), (1, 4, 2))
    mm_case("matmul_f64_vector_like", F64, (1, 6), (6, 1))
    mm_case("matmul_i32", I32, (3, 4), (4, 2))
    mm_case("matmul_i64_ta_batch", I64, (2, 4, 3), (4, 5), ta=1)
    # Zero-sized dims: K == 0 gives zeros; M == 0 and batch == 0 give nothing.
    for name, sa, sb in (("k0", (3, 0), (0, 4)), ("m0", (0, 5), (5, 3)),
                         ("batch0", (0, 2, 3), (3, 4)), ("n0", (2, 3), (3, 0))):
        for dt in (F32, F64):
            a = np.zeros(sa, NP[dt])
            b = np.zeros(sb, NP[dt])
            case(f"matmul_{dt}_{name}", "matmul", [a, b], like(mm_ref(a, b, 0, 0), dt),
                 params={"transpose_a": 0, "transpose_b": 0})


# ---- reductions ----------------------------------------------------------------
def red_case(name, op, x, axes, keepdims=0, tol=None):
    dt = dtype_of(x)
    ax = tuple(range(x.ndim)) if axes is None else tuple(axes)
    if dt in (I32, I64):
        xi = x.astype(object)
        if op == "reduce_sum":
            ref = np.sum(x.astype(np.int64), axis=ax, keepdims=bool(keepdims)).astype(NP[dt])
        elif op == "reduce_max":
            ref = np.max(x, axis=ax, keepdims=bool(keepdims))
        else:  # integer mean: exact sum / count, truncated toward zero
            s = np.sum(xi, axis=ax, keepdims=bool(keepdims))
            cnt = int(np.prod([x.shape[a] for a in ax]))
            ref = np.vectorize(lambda v: abs(v) // cnt * (1 if v >= 0 else -1), otypes=[object])(s)
            ref = np.asarray(ref).astype(NP[dt])
        out = np.asarray(ref, NP[dt])
    else:
        fn = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max}[op]
        with np.errstate(all="ignore"):
            out = like(fn(f64(x), axis=ax, keepdims=bool(keepdims)), dt)
    params = {"axes": list(ax), "keepdims": keepdims}
    case(name, op, [x], out, params=params, tol=tol)


def reduce_cases():
    red_case("reduce_sum_f32_axis1", "reduce_sum", rnd((4, 5, 6), F32), [1])
    red_case("reduce_sum_f32_axes02", "reduce_sum", rnd((3, 4, 5), F32), [0, 2])
    red_case("reduce_sum_f64_all", "reduce_sum", rnd((3, 4, 5), F64), None)
    red_case("reduce_sum_f32_keepdims", "reduce_sum", rnd((3, 4, 5), F32), [1], keepdims=1)
    red_case("reduce_sum_f64_axes13", "reduce_sum", rnd((2, 3, 4, 5), F64), [1, 3])
    red_case("reduce_sum_f32_last", "reduce_sum", rnd((5, 7), F32), [1])
    red_case("reduce_sum_f32_wide_axis0", "reduce_sum", rnd((3, 300), F32), [0])
    red_case("reduce_sum_f64_unit_dims", "reduce_sum", rnd((3, 1, 4), F64), [1])
    red_case("reduce_sum_i32_axis0", "reduce_sum", rnd((4, 3), I32, -100, 100), [0])
    red_case("reduce_sum_i64_all", "reduce_sum", rnd((2, 3, 4), I64, -10**12, 10**12), None)
    red_case("reduce_mean_f32_last", "reduce_mean", rnd((4, 6), F32), [1])
    red_case("reduce_mean_f64_axes02_keep", "reduce_mean", rnd((3, 4, 5), F64), [0, 2], keepdims=1)
    red_case("reduce_mean_f32_all", "reduce_mean", rnd((6, 7), F32), None)
    red_case("reduce_mean_i32_axis1", "reduce_mean", rnd((3, 4), I32, -50, 50), [1])
    red_case("reduce_mean_i64_axis0", "reduce_mean", rnd((3, 4), I64, -50, 50), [0])
    red_case("reduce_max_f32_axis0", "reduce_max", rnd((5, 4), F32), [0])
    red_case("reduce_max_f64_axes12", "reduce_max", rnd((2, 3, 4), F64), [1, 2])
    xn = rnd((3, 4), F64)
    xn[1, 2] = np.nan
    red_case("reduce_max_f64_nan", "reduce_max", xn, [1])
    red_case("reduce_max_i32_axis1", "reduce_max", rnd((3, 5), I32, -99, 99), [1])
    red_case("reduce_max_i64_all", "reduce_max", rnd((2, 3), I64, -99, 99), None)
    # Empty reduced set: sum 0, mean NaN, max -inf.
    e = np.zeros((0, 3), np.float32)
    case("reduce_sum_f32_empty_set", "reduce_sum", [e], np.zeros(3, np.float32),
         params={"axes": [0], "keepdims": 0})
    case("reduce_mean_f32_empty_set", "reduce_mean", [e], np.full(3, np.nan, np.float32),
         params={"axes": [0], "keepdims": 0})
    case("reduce_max_f64_empty_set", "reduce_max", [e.astype(np.float64)], np.full(3, -np.inf),
         params={"axes": [0], "keepdims": 0})
    case("reduce_sum_f64_empty_out", "reduce_sum", [np.zeros((0, 3))], np.zeros((0,)),
         params={"axes": [1], "keepdims": 0})


def argmax_ref(x, axis):
    """First index of the maximum; the first NaN wins (np.argmax)."""
    return np.argmax(x, axis=axis).astype(np.int64)


def argmax_cases():
    t = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [5, 1, 5, 5]], np.float32)
    case("argmax_f32_ties", "argmax", [t], argmax_ref(t, 1), params={"axis": 1})
    n = rnd((4, 3), F64)
    n[2, 0] = np.nan
    n[3, 0] = np.nan
    n[1, 2] = np.nan
    case("argmax_f64_nan_axis0", "argmax", [n], argmax_ref(n, 0), params={"axis": 0})
    i = rnd((3, 6), I32, -3, 3)
    case("argmax_i32_axis1", "argmax", [i], argmax_ref(i, 1), params={"axis": 1})
    j = rnd((2, 5, 3), I64, -2, 2)
    case("argmax_i64_middle", "argmax", [j], argmax_ref(j, 1), params={"axis": 1})
    f = rnd((2, 3, 4), F32)
    case("argmax_f32_axis0", "argmax", [f], argmax_ref(f, 0), params={"axis": 0})


# ---- softmax family ------------------------------------------------------------
def softmax_ref(x, axis):
    x = f64(x)
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax_ref(x, axis):
    x = f64(x)
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def softmax_cases():
    for dt in (F32, F64):
        x = rnd((3, 5), dt, -4, 4)
        case(f"softmax_{dt}_last", "softmax", [x], like(softmax_ref(x, 1), dt), params={"axis": 1})
        y = rnd((4, 3), dt, -4, 4)
        case(f"softmax_{dt}_axis0", "softmax", [y], like(softmax_ref(y, 0), dt), params={"axis": 0})
        case(f"log_softmax_{dt}_last", "log_softmax", [x], like(log_softmax_ref(x, 1), dt),
             params={"axis": 1})
        case(f"log_softmax_{dt}_axis0", "log_softmax", [y], like(log_softmax_ref(y, 0), dt),
             params={"axis": 0})
    z = rnd((2, 3, 4), F32, -3, 3)
    case("softmax_f32_middle", "softmax", [z], like(softmax_ref(z, 1), F32), params={"axis": 1})
    case("log_softmax_f64_middle", "log_softmax", [f64(z)], log_softmax_ref(z, 1), params={"axis": 1})
    big = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]])
    case("softmax_f64_large_logits", "softmax", [big], softmax_ref(big, 1), params={"axis": 1})
    case("log_softmax_f32_large_logits", "log_softmax", [big.astype(np.float32)],
         like(log_softmax_ref(big, 1), F32), params={"axis": 1})
    case("softmax_f32_empty", "softmax", [np.zeros((0, 4), np.float32)],
         np.zeros((0, 4), np.float32), params={"axis": 1})


def xent_ref(logits, labels):
    ls = log_softmax_ref(logits, 1)
    return -np.mean(ls[np.arange(len(labels)), labels])


def xent_cases():
    lg = rnd((6, 10), F32, -3, 3)
    lb = rng.integers(0, 10, size=6).astype(np.int32)
    case("xent_f32_i32_labels", "softmax_cross_entropy", [lg, lb], like(xent_ref(lg, lb), F32))
    lg2 = rnd((5, 4), F64, -3, 3)
    lb2 = rng.integers(0, 4, size=5).astype(np.int64)
    case("xent_f64_i64_labels", "softmax_cross_entropy", [lg2, lb2], np.array(xent_ref(lg2, lb2)))
    lg3 = np.array([[500.0, -500.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    lb3 = np.array([1, 2], np.int64)
    case("xent_f32_large_logits", "softmax_cross_entropy", [lg3, lb3],
         like(xent_ref(lg3, lb3), F32))
    case("xent_f32_empty_batch", "softmax_cross_entropy",
         [np.zeros((0, 10), np.float32), np.zeros((0,), np.int32)], np.array(np.nan, np.float32))
    bad = np.array([1, 0, 9, 12, 3], np.int32)
    case("xent_label_out_of_range", "softmax_cross_entropy", [rnd((5, 10), F32), bad],
         np.array(0, np.float32), rc=-1, err=["labels[3] = 12", "[0, 10)"], labels="badinput")
    neg = np.array([0, -1], np.int64)
    case("xent_label_negative", "softmax_cross_entropy", [rnd((2, 3), F64), neg],
         np.array(0.0), rc=-1, err=["labels[1] = -1", "[0, 3)"], labels="badinput")


# ---- casts ---------------------------------------------------------------------
def cast_ref(x, src, dst):
    """flowgraph's cast rules, element by element."""
    def one(v):
        if dst == BOOL:
            return bool(v != 0)  # NaN != 0: True
        if dst in (F32, F64):
            return float(v)
        if src in (F32, F64):
            v = float(v)
            if math.isnan(v):
                return 0
            lo, hi = (-2**31, 2**31 - 1) if dst == I32 else (-2**63, 2**63 - 1)
            if v >= hi:
                return hi
            if v <= lo:
                return lo
            return int(v)  # truncates toward zero
        v = int(v)
        if dst == I32:  # i64 -> i32 wraps
            return ((v + 2**31) % 2**32) - 2**31
        return v
    flat = [one(v) for v in x.ravel()]
    if dst in (F32, F64):
        with np.errstate(over="ignore"):  # 1e300 -> inf in f32, as C does
            return np.array(flat, np.float64).astype(NP[dst]).reshape(x.shape)
    return np.array(flat, dtype=object).astype(NP[dst]).reshape(x.shape)


def cast_cases():
    src_vals = {
        F32: np.array([1.5, -2.7, 0.0, np.nan, np.inf, -np.inf, 3e9, -3e9, 0.49], np.float32),
        F64: np.array([2.9, -0.5, 0.0, np.nan, 1e300, -1e19, 1e19, -7.0, 123456.75]),
        I32: np.array([0, 1, -1, 2**31 - 1, -2**31, 16777217, 42, -42, 7], np.int32),
        I64: np.array([0, 5, -5, 2**40 + 3, -2**35, 2**63 - 1, 2**53 + 1, -3, 2**31], np.int64),
        BOOL: np.array([1, 0, 1, 1, 0, 0, 1, 0, 1], np.bool_),
    }
    for src, x in src_vals.items():
        for dst in (F32, F64, I32, I64, BOOL):
            case(f"cast_{src}_to_{dst}", "cast", [x.reshape(3, 3)],
                 cast_ref(x.reshape(3, 3), src, dst))
    case("cast_f32_to_i64_empty", "cast", [np.zeros((2, 0), np.float32)], np.zeros((2, 0), np.int64))


# ---- data movement -------------------------------------------------------------
def shape_cases():
    x = rnd((2, 6), F32)
    case("reshape_f32", "reshape", [x], x.reshape(3, 4))
    i = rnd((2, 3), I64, -99, 99)
    case("identity_i64", "identity", [i], i)
    b = rnd((5,), BOOL)
    case("stop_gradient_bool", "stop_gradient", [b], b)
    d = rnd((3,), F64)
    case("identity_f64", "identity", [d], d.copy())

    t = rnd((2, 3, 4), F32)
    case("transpose_f32_201", "transpose", [t], np.transpose(t, (2, 0, 1)), params={"perm": [2, 0, 1]})
    t2 = rnd((3, 5), F64)
    case("transpose_f64_2d", "transpose", [t2], t2.T, params={"perm": [1, 0]})
    t3 = rnd((2, 3, 4, 5), I32, -99, 99)
    case("transpose_i32_0213", "transpose", [t3], np.transpose(t3, (0, 2, 1, 3)),
         params={"perm": [0, 2, 1, 3]})
    t4 = rnd((3, 1, 2), BOOL)
    case("transpose_bool_120", "transpose", [t4], np.transpose(t4, (1, 2, 0)), params={"perm": [1, 2, 0]})
    t5 = rnd((4, 2, 3), I64, -9, 9)
    case("transpose_i64_identity_perm", "transpose", [t5], t5, params={"perm": [0, 1, 2]})
    case("transpose_f32_empty", "transpose", [np.zeros((0, 3), np.float32)],
         np.zeros((3, 0), np.float32), params={"perm": [1, 0]})

    c = [rnd((1, 3), F32), rnd((2, 3), F32), rnd((3, 3), F32)]
    case("concat_f32_axis0", "concat", c, np.concatenate(c, 0), params={"axis": 0})
    d = [rnd((2, 1, 2), I64, -9, 9), rnd((2, 3, 2), I64, -9, 9)]
    case("concat_i64_axis1", "concat", d, np.concatenate(d, 1), params={"axis": 1})
    e = [rnd((2, 2), F64), np.zeros((2, 0)), rnd((2, 3), F64)]
    case("concat_f64_with_empty", "concat", e, np.concatenate(e, 1), params={"axis": 1})
    f = [rnd((2, 2), BOOL), rnd((2, 2), BOOL)]
    case("concat_bool_last", "concat", f, np.concatenate(f, 1), params={"axis": 1})

    s = rnd((5, 6), F32)
    case("slice_f32_2d", "slice", [s], s[1:4, 2:5], params={"begin": [1, 2]})
    s3 = rnd((3, 4, 5), F64)
    case("slice_f64_3d", "slice", [s3], s3[1:3, 0:4, 3:5], params={"begin": [1, 0, 3]})
    s4 = rnd((4, 3), I32, -9, 9)
    case("slice_i32_empty", "slice", [s4], s4[2:2, :], params={"begin": [2, 0]})
    case("slice_i64_rows", "slice", [s4.astype(np.int64)], s4[1:3, :].astype(np.int64),
         params={"begin": [1, 0]})

    pr = rnd((5, 3), F32)
    ix = np.array([4, 0, 4, 2, 0], np.int32)
    case("gather_f32_repeated", "gather", [pr, ix], pr[ix])
    pr2 = rnd((4, 2), F64)
    ix2 = np.array([[3, 1, 1], [0, 3, 2]], np.int64)
    case("gather_f64_2d_indices", "gather", [pr2, ix2], pr2[ix2])
    pr3 = rnd((3, 2, 2), I32, -9, 9)
    ix3 = np.array([2, 2, 0], np.int64)
    case("gather_i32_3d_params", "gather", [pr3, ix3], pr3[ix3])
    pr4 = rnd((6,), I64, -9, 9)
    ix4 = np.array([5, 0, 3], np.int32)
    case("gather_i64_1d", "gather", [pr4, ix4], pr4[ix4])
    case("gather_f32_no_indices", "gather", [pr, np.zeros((0,), np.int32)], np.zeros((0, 3), np.float32))
    pb, ib = rnd((3, 2), BOOL), np.array([1, 1, 0], np.int32)
    case("gather_bool", "gather", [pb, ib], pb[ib])
    case("gather_index_too_large", "gather", [pr, np.array([1, 2, 3, 5], np.int32)],
         np.zeros((4, 3), np.float32), rc=-1, err=["indices[3] = 5", "[0, 5)"], labels="badinput")
    case("gather_index_negative", "gather", [pr2, np.array([[0, 1], [-1, 2]], np.int64)],
         np.zeros((2, 2, 2)), rc=-1, err=["indices[2] = -1", "[0, 4)"], labels="badinput")

    oi = np.array([0, 2, 1, 3], np.int32)
    case("one_hot_f32", "one_hot", [oi], np.eye(4, dtype=np.float32)[oi], params={"depth": 4})
    oi2 = np.array([[1, 0], [2, 2]], np.int64)
    case("one_hot_i64_2d", "one_hot", [oi2], np.eye(3, dtype=np.int64)[oi2], params={"depth": 3})
    case("one_hot_f64", "one_hot", [oi], np.eye(5)[oi], params={"depth": 5})
    case("one_hot_i32", "one_hot", [oi2], np.eye(4, dtype=np.int32)[oi2], params={"depth": 4})
    case("one_hot_bool", "one_hot", [oi], np.eye(4, dtype=np.bool_)[oi], params={"depth": 4})
    case("one_hot_out_of_range", "one_hot", [np.array([1, 7, 0], np.int32)],
         np.zeros((3, 4), np.float32), params={"depth": 4}, rc=-1, err=["indices[1] = 7", "[0, 4)"],
         labels="badinput")
    case("one_hot_negative", "one_hot", [np.array([[0], [-2]], np.int64)], np.zeros((2, 1, 3)),
         params={"depth": 3}, rc=-1, err=["indices[1] = -2", "[0, 3)"], labels="badinput")


def misc_cases():
    case("fill_f32", "fill", [], np.full((2, 3), 2.5, np.float32), params={"value": 2.5})
    case("fill_f64_empty", "fill", [], np.zeros((0, 2)), params={"value": 1.0})
    case("fill_i32_truncates", "fill", [], np.full((4,), -3, np.int32), params={"value": -3.7})
    case("fill_i64", "fill", [], np.full((2, 2), 12345678901, np.int64), params={"value": 12345678901.0})
    case("fill_bool", "fill", [], np.ones((3,), np.bool_), params={"value": 1.0})
    case("fill_f64_neg_zero", "fill", [], np.full((2,), -0.0), params={"value": -0.0})
    case("zeros_like_f64", "zeros_like", [rnd((2, 3), F64)], np.zeros((2, 3)))
    case("zeros_like_i32", "zeros_like", [rnd((4,), I32, -9, 9)], np.zeros((4,), np.int32))
    case("ones_like_f32", "ones_like", [rnd((3, 2), F32)], np.ones((3, 2), np.float32))
    case("ones_like_i64", "ones_like", [rnd((3,), I64)], np.ones((3,), np.int64))
    case("ones_like_bool", "ones_like", [rnd((2, 2), BOOL)], np.ones((2, 2), np.bool_))
    v = rnd((2, 3), F32)
    case("assign_f32", "assign", [rnd((2, 3), F32), v], v)
    w = rnd((4,), I64, -99, 99)
    case("assign_i64", "assign", [rnd((4,), I64), w], w)


# ---- C emission ----------------------------------------------------------------
def c_scalar(v, dt):
    if dt in (F32, F64):
        v = float(v)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "-INFINITY"
        if dt == F32:
            s = "%.9g" % v
            if not any(ch in s for ch in ".e"):
                s += ".0"
            return s + "f"
        return repr(v)
    if dt == BOOL:
        return "1" if v else "0"
    v = int(v)
    if dt == I64:
        return "INT64_MIN" if v == -2**63 else "INT64_C(%d)" % v
    return "INT32_MIN" if v == -2**31 else str(v)


def c_array(name, a):
    dt = dtype_of(a)
    if a.size == 0:
        return None
    vals = [c_scalar(v, dt) for v in a.ravel()]
    lines, cur = [], "  "
    for s in vals:
        if len(cur) + len(s) + 2 > 98:
            lines.append(cur.rstrip())
            cur = "  "
        cur += s + ", "
    lines.append(cur.rstrip())
    return "static const %s %s[%d] = {\n%s\n};\n" % (CTYPE[dt], name, a.size, "\n".join(lines))


def c_tensor(arr, data_name):
    dt = dtype_of(arr)
    dims = ", ".join(str(d) for d in arr.shape) or "0"
    return "{%s, %d, {%s}, %s}" % (ENUM[dt], arr.ndim, dims, data_name or "NULL")


# The member of fg_op_params each op's kernels read.
PARAM_MEMBER = {"matmul": "matmul", "reduce_sum": "reduce", "reduce_mean": "reduce",
                "reduce_max": "reduce", "argmax": "argmax", "softmax": "softmax",
                "log_softmax": "softmax", "concat": "concat", "transpose": "transpose",
                "slice": "slice", "slice_grad": "slice", "one_hot": "one_hot", "fill": "fill",
                "leaky_relu": "leaky_relu"}


def c_params(op, p):
    parts = []
    for k, v in p.items():
        if k == "axes":
            parts.append(".n_axes = %d" % len(v))
            if v:
                parts.append(".axes = {%s}" % ", ".join(str(x) for x in v))
        elif k in ("perm", "begin"):
            parts.append(".%s = {%s}" % (k, ", ".join(str(x) for x in v)))
        elif k in ("alpha", "value"):
            parts.append(".%s = %r" % (k, float(v)))
        else:
            parts.append(".%s = %d" % (k, int(v)))
    if not parts:
        return "{{0}}"
    return "{.%s = {%s}}" % (PARAM_MEMBER[op], ", ".join(parts))


def c_str(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"') if s is not None else "NULL"


def main():
    unary_cases()
    binary_cases()
    compare_cases()
    select_cases()
    matmul_cases()
    reduce_cases()
    argmax_cases()
    softmax_cases()
    xent_cases()
    cast_cases()
    shape_cases()
    misc_cases()

    out = ["/* Generated by tests/gen/gen_kernel_fixtures.py; do not edit. Regenerate with",
           " *   /usr/bin/python3 tests/gen/gen_kernel_fixtures.py",
           " * Reference outputs come from NumPy / Python in float64, rounded to the",
           " * kernel's dtype. Read by tests/kernels/test_kernels.c only. */",
           "#ifndef FG_KERNEL_FIXTURES_H", "#define FG_KERNEL_FIXTURES_H", "",
           "#include <math.h>", "#include <stdint.h>", "", '#include "kernels/kernel.h"', "",
           "typedef struct fgk_ftensor {", "  fg_dtype dtype;", "  int rank;",
           "  int64_t dims[FG_MAX_RANK];", "  const void *data; /* NULL when empty */",
           "} fgk_ftensor;", "",
           "typedef struct fgk_fcase {", "  const char *name, *op;",
           "  fg_dtype key; /* the registry key */", "  int n_in;", "  fgk_ftensor in[4];",
           "  fgk_ftensor out;", "  fg_op_params p;",
           "  double rtol, atol; /* |got - want| <= atol + rtol * |want| */",
           "  int rc;            /* expected return value */",
           "  const char *err[2]; /* substrings of the error text when rc != 0 */",
           "} fgk_fcase;", ""]
    rows = []
    for n, c in enumerate(CASES):
        names = []
        for k, a in enumerate(c["ins"]):
            arr = c_array("fgk_c%d_in%d" % (n, k), a)
            if arr:
                out.append(arr)
            names.append("fgk_c%d_in%d" % (n, k) if arr else None)
        o = np.asarray(c["out"])
        arr = c_array("fgk_c%d_out" % n, o) if c["rc"] == 0 else None
        if arr:
            out.append(arr)
        dt = dtype_of(o)
        rtol, atol = c["tol"] or TOL.get(dt, (0.0, 0.0))
        ins = ", ".join(c_tensor(a, nm) for a, nm in zip(c["ins"], names)) or "{0}"
        errs = c["err"] + [None] * (2 - len(c["err"]))
        rows.append("  {%s, %s, %s, %d, {%s},\n   %s,\n   %s, %r, %r, %d, {%s, %s}}," % (
            c_str(c["name"]), c_str(c["op"]), ENUM[c["key"]], len(c["ins"]), ins,
            c_tensor(o, arr and "fgk_c%d_out" % n), c_params(c["op"], c["params"]), rtol, atol, c["rc"],
            c_str(errs[0]), c_str(errs[1])))
    out.append("static const fgk_fcase fgk_cases[] = {")
    out.extend(rows)
    out.append("};")
    out.append("")
    out.append("/* X(test name, labels, index into fgk_cases) */")
    out.append("#define FGK_FIXTURE_CASES(X) \\")
    for n, c in enumerate(CASES):
        out.append("  X(%s, %s, %d)%s" % (c["name"], c_str(c["labels"]), n,
                                          " \\" if n + 1 < len(CASES) else ""))
    out.append("")
    out.append("#endif")
    with open(OUT, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote %d cases to %s" % (len(CASES), os.path.normpath(OUT)))


if __name__ == "__main__":
    main()
