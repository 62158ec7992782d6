#!/usr/bin/python3
"""ONNX cases of the element-wise, logic and reduction ops (onnx_map_math.c).

usage: cases_math.py OUTDIR

Per case NAME: NAME.onnx, NAME.in.<input>.npy for each graph input and
NAME.out.<k>.npy for each graph output. The expected values come from the
NumPy reference code below, written from the ONNX operator documentation
(Operators.md, onnx 1.12): multidirectional (NumPy) broadcasting, integer
Div truncating toward zero, Clip's min above max giving max, reductions
over every axis when none are given, ArgMax's first index. They never come
from flowgraph. Cases named err_* are models the importer must refuse.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
RNG = np.random.RandomState(34)
ONNX_TYPE = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def vinfo(name, arr, batch=False):
    dims = list(arr.shape)
    if batch:
        dims[0] = "N"
    return helper.make_tensor_value_info(name, ONNX_TYPE[arr.dtype], dims)


def case(name, nodes, inputs, outputs, opset=13, inits=None, batch=False, check=True,
         feeds=None):
    """inputs: [(name, array)] graph inputs; outputs: [(name, array)]
    expected; inits: [(name, array)] initializers; batch: symbolic first
    dim on the inputs (the outputs here never depend on it). feeds: more input files for the same model,
    [(suffix, [(name, array)], [(name, array)])] written as NAME_suffix."""
    inits = inits or []
    graph = helper.make_graph(
        nodes, name, [vinfo(n, a, batch) for n, a in inputs],
        [helper.make_tensor_value_info(n, ONNX_TYPE[a.dtype], list(a.shape)) for n, a in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="cases_math.py")
    model.ir_version = 7
    if check:
        onnx.checker.check_model(model)
    runs = [(name, inputs, outputs)]
    for suffix, ins, outs in feeds or []:
        runs.append((name + "_" + suffix, ins, outs))
    for run_name, ins, outs in runs:
        onnx.save(model, os.path.join(OUT, run_name + ".onnx"))
        for n, a in ins:
            np.save(os.path.join(OUT, "%s.in.%s.npy" % (run_name, n)), a)
        for k, (n, a) in enumerate(outs):
            np.save(os.path.join(OUT, "%s.out.%d.npy" % (run_name, k)), a)


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def f32(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def f64(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape).astype(np.float64)


def ints(dt, *shape, lo=-9, hi=10):
    return RNG.randint(lo, hi, shape).astype(dt)


def trunc_div(a, b):
    """ONNX integer Div: the quotient truncated toward zero (C division)."""
    q = np.abs(a) // np.abs(b)
    return (np.sign(a) * np.sign(b) * q).astype(a.dtype)


# ---- binary arithmetic with broadcasting ------------------------------------

SHAPES = {  # a, b: scalar, row, column, rank-mismatched, equal
    "same": ((2, 3), (2, 3)),
    "scalar": ((2, 3), ()),
    "row": ((2, 3), (3,)),
    "col": ((2, 3), (2, 1)),
    "rank": ((2, 1, 4), (3, 1)),
    "scalar_left": ((), (3, 2)),
}


def binary_cases():
    ops = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}
    for op, ref in ops.items():
        for sname, (sa, sb) in SHAPES.items():
            a, b = f32(*sa), f32(*sb)
            case("%s_f32_%s" % (op.lower(), sname), [node(op, ["a", "b"])],
                 [("a", a), ("b", b)], [("y", ref(a, b).astype(np.float32))])
        for dt, tag in ((np.int32, "i32"), (np.int64, "i64"), (np.float64, "f64")):
            a = ints(dt, 3, 4) if dt != np.float64 else f64(3, 4)
            b = ints(dt, 4) if dt != np.float64 else f64(4)
            case("%s_%s_row" % (op.lower(), tag), [node(op, ["a", "b"])],
                 [("a", a), ("b", b)], [("y", ref(a, b).astype(dt))])
    for sname, (sa, sb) in SHAPES.items():
        a, b = f32(*sa), f32(*sb, lo=0.5, hi=2.0)
        case("div_f32_%s" % sname, [node("Div", ["a", "b"])], [("a", a), ("b", b)],
             [("y", (a / b).astype(np.float32))])
    for dt, tag in ((np.int32, "i32"), (np.int64, "i64")):
        a = np.array([[7, -7, 6, -6], [9, -9, 0, 1]], dtype=dt)
        b = np.array([2, 2, -4, -4], dtype=dt)
        case("div_%s_trunc" % tag, [node("Div", ["a", "b"])], [("a", a), ("b", b)],
             [("y", trunc_div(a, b))])
    # a dynamic batch on the left, a row on the right: fed with 2 and 5 rows
    a2, a5, b = f32(2, 3), f32(5, 3), f32(3)
    case("mul_batch_row", [node("Mul", ["a", "w"])], [("a", a2)], [("y", a2 * b)], batch=True,
         inits=[("w", b)], feeds=[("b5", [("a", a5)], [("y", a5 * b)])])
    # opset 7 form (the first with broadcasting)
    a, b = f32(2, 3), f32(3)
    case("add_opset7", [node("Add", ["a", "b"])], [("a", a), ("b", b)], [("y", a + b)], opset=7)


def pow_cases():
    x, y = f32(2, 3, lo=0.5, hi=2.0), f32(3)
    case("pow_f32_row", [node("Pow", ["x", "e"])], [("x", x), ("e", y)],
         [("y", np.power(x, y).astype(np.float32))], opset=7)
    # a known exponent 2 (layer norms): becomes x * x
    xs = f32(3, 4, lo=-3.0, hi=3.0)
    case("pow_square", [node("Pow", ["x", "two"])], [("x", xs)],
         [("y", np.power(xs, np.float32(2)).astype(np.float32))],
         inits=[("two", np.array(2.0, np.float32))], opset=13)
    case("pow_square_i64_exponent", [node("Pow", ["x", "two"])], [("x", xs.astype(np.float64))],
         [("y", np.power(xs.astype(np.float64), 2))], inits=[("two", np.array([2], np.int64))],
         opset=15)
    # opset 12+: the exponent's type may differ; the output has the base's.
    e = np.array([0, 1, 2, 3], dtype=np.int64)
    x = f32(2, 4, lo=-2.0, hi=2.0)
    case("pow_f32_i64_exponent", [node("Pow", ["x", "e"])], [("x", x), ("e", e)],
         [("y", np.power(x, e.astype(np.float32)).astype(np.float32))], opset=13)
    xb = np.array([[2, -3, 5], [0, 7, -1]], dtype=np.int64)
    eb = np.array([3, 2, 1], dtype=np.int64)
    case("pow_i64_base", [node("Pow", ["x", "e"])], [("x", xb), ("e", eb)],
         [("y", np.power(xb, eb))], opset=15)
    xi = np.array([1, 2, 3, 4], dtype=np.int32)
    ef = np.array(0.5, dtype=np.float32)
    # int base, float exponent: pow in floating point, truncated to int32
    case("pow_i32_f32_exponent", [node("Pow", ["x", "e"])], [("x", xi), ("e", ef)],
         [("y", np.power(xi.astype(np.float64), 0.5).astype(np.int32))], opset=13)
    xd, ed = f64(3, lo=0.5, hi=3.0), f32(3)
    case("pow_f64_f32_exponent", [node("Pow", ["x", "e"])], [("x", xd), ("e", ed)],
         [("y", np.power(xd, ed.astype(np.float64)))], opset=13)


def unary_cases():
    pos = f32(2, 3, lo=0.1, hi=4.0)
    any32 = f32(2, 3)
    cases = [
        ("Sqrt", pos, np.sqrt(pos)),
        ("Reciprocal", pos, (1.0 / pos).astype(np.float32)),
        ("Exp", any32, np.exp(any32)),
        ("Log", pos, np.log(pos)),
        ("Abs", any32, np.abs(any32)),
        ("Neg", any32, -any32),
        ("Floor", any32 * 3, np.floor(any32 * 3)),
        ("Ceil", any32 * 3, np.ceil(any32 * 3)),
    ]
    for op, x, y in cases:
        case("%s_f32" % op.lower(), [node(op, ["x"])], [("x", x)], [("y", y.astype(np.float32))])
    xd = f64(4, lo=0.1, hi=3.0)
    case("sqrt_f64", [node("Sqrt", ["x"])], [("x", xd)], [("y", np.sqrt(xd))])
    s = np.array([-2.5, -0.0, 0.0, 3.0, 1e-30, -7.0], dtype=np.float32)
    case("sign_f32", [node("Sign", ["x"])], [("x", s)], [("y", np.sign(s))], opset=9)
    si = np.array([-5, 0, 3, 2147483647, -2147483648], dtype=np.int32)
    case("sign_i32", [node("Sign", ["x"])], [("x", si)], [("y", np.sign(si))], opset=13)
    ai = np.array([[-4, 0], [7, -1]], dtype=np.int64)
    case("abs_i64", [node("Abs", ["x"])], [("x", ai)], [("y", np.abs(ai))])
    case("neg_i32", [node("Neg", ["x"])], [("x", ai.astype(np.int32))],
         [("y", -ai.astype(np.int32))])
    # Round: halves to even (ONNX Round, opset 11)
    r = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 3.0], dtype=np.float32)
    case("round_f32", [node("Round", ["x"])], [("x", r)], [("y", np.round(r))], opset=11)


def clip_cases():
    x = f32(3, 4, lo=-3.0, hi=3.0)
    # opset 6..10: attributes; absent = no bound
    case("clip_attr_both", [node("Clip", ["x"], min=-1.0, max=0.5)], [("x", x)],
         [("y", np.clip(x, -1.0, 0.5))], opset=10)
    case("clip_attr_min", [node("Clip", ["x"], min=-0.5)], [("x", x)],
         [("y", np.maximum(x, np.float32(-0.5)))], opset=7)
    case("clip_attr_max", [node("Clip", ["x"], max=1.0)], [("x", x)],
         [("y", np.minimum(x, np.float32(1.0)))], opset=10)
    case("clip_attr_none", [node("Clip", ["x"])], [("x", x)], [("y", x)], opset=10)
    # opset 11+: optional inputs
    lo, hi = np.array(-1.0, np.float32), np.array(0.5, np.float32)
    case("clip_in_both", [node("Clip", ["x", "lo", "hi"])], [("x", x)],
         [("y", np.clip(x, lo, hi))], inits=[("lo", lo), ("hi", hi)], opset=11)
    case("clip_in_max", [node("Clip", ["x", "", "hi"])], [("x", x)],
         [("y", np.minimum(x, hi))], inits=[("hi", hi)], opset=13)
    case("clip_in_min", [node("Clip", ["x", "lo"])], [("x", x)], [("y", np.maximum(x, lo))],
         inits=[("lo", lo)], opset=12)
    case("clip_in_none", [node("Clip", ["x"])], [("x", x)], [("y", x)], opset=13)
    # min above max: every value becomes max
    case("clip_min_above_max", [node("Clip", ["x", "hi", "lo"])], [("x", x)],
         [("y", np.full_like(x, -1.0))], inits=[("lo", lo), ("hi", hi)], opset=13)
    # bounds computed at run time (graph inputs)
    case("clip_in_runtime", [node("Clip", ["x", "lo", "hi"])],
         [("x", x), ("lo", lo), ("hi", hi)], [("y", np.clip(x, lo, hi))], opset=13)
    # integer types (opset 12+)
    xi = ints(np.int32, 2, 5)
    case("clip_i32", [node("Clip", ["x", "lo", "hi"])], [("x", xi)], [("y", np.clip(xi, -3, 4))],
         inits=[("lo", np.array(-3, np.int32)), ("hi", np.array(4, np.int32))], opset=12)
    xl = ints(np.int64, 7)
    case("clip_i64_min", [node("Clip", ["x", "lo"])], [("x", xl)], [("y", np.maximum(xl, 0))],
         inits=[("lo", np.array(0, np.int64))], opset=13)
    xd = f64(5, lo=-3.0, hi=3.0)
    case("clip_f64", [node("Clip", ["x", "lo", "hi"])], [("x", xd)], [("y", np.clip(xd, -2, 1))],
         inits=[("lo", np.array(-2.0)), ("hi", np.array(1.0))], opset=13)


def variadic_cases():
    a, b, c = f32(2, 3), f32(3), f32(2, 1)
    ins = [("a", a), ("b", b), ("c", c)]
    case("min_3", [node("Min", ["a", "b", "c"])], ins,
         [("y", np.minimum(np.minimum(a, b), c))])
    case("max_3", [node("Max", ["a", "b", "c"])], ins,
         [("y", np.maximum(np.maximum(a, b), c))])
    case("sum_3", [node("Sum", ["a", "b", "c"])], ins, [("y", (a + b + c).astype(np.float32))])
    case("mean_3", [node("Mean", ["a", "b", "c"])], ins,
         [("y", ((a + b + c) / np.float32(3)).astype(np.float32))])
    case("max_1", [node("Max", ["a"])], [("a", a)], [("y", a)])
    case("sum_1", [node("Sum", ["a"])], [("a", a)], [("y", a)], opset=8)
    case("mean_1", [node("Mean", ["a"])], [("a", a)], [("y", a)])
    ai, bi = ints(np.int32, 3, 1), ints(np.int32, 4)
    case("max_i32", [node("Max", ["a", "b"])], [("a", ai), ("b", bi)],
         [("y", np.maximum(ai, bi))], opset=12)
    case("min_i64", [node("Min", ["a", "b"])], [("a", ai.astype(np.int64)),
                                              ("b", bi.astype(np.int64))],
         [("y", np.minimum(ai, bi).astype(np.int64))], opset=13)
    case("sum_i64_2", [node("Sum", ["a", "b"])], [("a", ai.astype(np.int64)),
                                                ("b", bi.astype(np.int64))],
         [("y", (ai + bi).astype(np.int64))])
    d = f64(4, 1, 3)
    case("mean_f64_rank", [node("Mean", ["a", "d"])], [("a", a.astype(np.float64)), ("d", d)],
         [("y", (a.astype(np.float64) + d) / 2.0)])


def compare_logic_cases():
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)
    b = np.array([3, 2, 5], dtype=np.int64)
    case("equal_i64_row", [node("Equal", ["a", "b"])], [("a", a), ("b", b)], [("y", a == b)])
    af, bf = np.array([[0.5, 1.0], [2.0, -1.0]], np.float32), np.array([[1.0], [2.0]], np.float32)
    case("equal_f32_col", [node("Equal", ["a", "b"])], [("a", af), ("b", bf)],
         [("y", af == bf)], opset=11)
    ab = np.array([True, False, True, False])
    bb = np.array([True, True, False, False])
    case("equal_bool", [node("Equal", ["a", "b"])], [("a", ab), ("b", bb)], [("y", ab == bb)],
         opset=11)
    for op, ref in (("Greater", np.greater), ("Less", np.less)):
        x, y = f32(2, 3), f32(3)
        case("%s_f32_row" % op.lower(), [node(op, ["a", "b"])], [("a", x), ("b", y)],
             [("y", ref(x, y))], opset=9)
        xi, yi = ints(np.int32, 3, 1, lo=-2, hi=3), ints(np.int32, 4, lo=-2, hi=3)
        case("%s_i32_outer" % op.lower(), [node(op, ["a", "b"])], [("a", xi), ("b", yi)],
             [("y", ref(xi, yi))], opset=13)
    x = np.array([[1.0, 2.0, np.nan], [4.0, 2.0, 0.0]], np.float32)
    y = np.array([1.0, 3.0, 1.0], np.float32)
    case("greater_or_equal", [node("GreaterOrEqual", ["a", "b"])], [("a", x), ("b", y)],
         [("y", x >= y)], opset=12)
    case("less_or_equal", [node("LessOrEqual", ["a", "b"])], [("a", x), ("b", y)],
         [("y", x <= y)], opset=16)
    xi = np.array([3, -1, 2], np.int64)
    case("greater_or_equal_i64", [node("GreaterOrEqual", ["a", "b"])],
         [("a", xi), ("b", np.array(2, np.int64))], [("y", xi >= 2)], opset=12)
    m = np.array([[True, False, True], [False, False, True]])
    r = np.array([True, False, False])
    c = np.array([[True], [False]])
    case("not_2d", [node("Not", ["x"])], [("x", m)], [("y", np.logical_not(m))])
    case("and_row", [node("And", ["a", "b"])], [("a", m), ("b", r)],
         [("y", np.logical_and(m, r))], opset=7)
    case("or_col", [node("Or", ["a", "b"])], [("a", m), ("b", c)], [("y", np.logical_or(m, c))])
    case("xor_row", [node("Xor", ["a", "b"])], [("a", m), ("b", r)],
         [("y", np.logical_xor(m, r))])
    case("and_scalar", [node("And", ["a", "b"])], [("a", m), ("b", np.array(True))],
         [("y", m.copy())])


def where_cases():
    cond = np.array([[True], [False]])
    x, y = f32(2, 3), np.array(-5.0, np.float32)
    case("where_f32", [node("Where", ["c", "x", "y"], ["z"])], [("c", cond), ("x", x), ("y", y)],
         [("z", np.where(cond, x, y))], opset=9)
    c3 = np.array([True, False, True, False])
    xi, yi = ints(np.int64, 3, 1), ints(np.int64, 4)
    case("where_i64", [node("Where", ["c", "x", "y"], ["z"])], [("c", c3), ("x", xi), ("y", yi)],
         [("z", np.where(c3, xi, yi))], opset=16)
    xd = f64(2, 2, 4)
    case("where_f64", [node("Where", ["c", "x", "y"], ["z"])], [("c", c3), ("x", xd),
                                                        ("y", np.array(0.0))],
         [("z", np.where(c3, xd, 0.0))])


def reduce_ref(fn, x, axes, keepdims):
    ax = None if axes is None or len(axes) == 0 else tuple(axes)
    return fn(x, axis=ax, keepdims=bool(keepdims))


REDUCERS = {
    "ReduceSum": np.sum,
    "ReduceMean": np.mean,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceProd": np.prod,
    "ReduceL1": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
    "ReduceL2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
    "ReduceSumSquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
    "ReduceLogSum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
    "ReduceLogSumExp": lambda x, axis, keepdims: np.log(
        np.sum(np.exp(x), axis=axis, keepdims=keepdims)),
}


def attr_reduce(op, x, axes, keepdims, opset):
    attrs = {}
    if axes is not None:
        attrs["axes"] = axes
    if keepdims is not None:
        attrs["keepdims"] = keepdims
    return node(op, ["x"], **attrs)


def reduce_cases():
    x = f32(2, 3, 4, lo=0.2, hi=1.5)
    # (tag, axes, keepdims): default, non-default, negative, several, keepdims 0/1
    forms = [("all", None, None), ("ax1", [1], 1), ("neg", [-1], 0), ("ax02", [0, 2], 0),
             ("neg2k", [-2, 0], 1)]
    for op, fn in REDUCERS.items():
        for tag, axes, keep in forms:
            want = reduce_ref(fn, x, axes, 1 if keep is None else keep).astype(np.float32)
            case("%s_%s" % (op.lower(), tag), [attr_reduce(op, x, axes, keep, 11)], [("x", x)],
                 [("y", want)], opset=11)
    # opset 13+ ReduceMean etc. keep the attribute through 17
    case("reducemax_opset17", [attr_reduce("ReduceMax", x, [-1], 0, 17)], [("x", x)],
         [("y", np.max(x, axis=-1))], opset=17)
    # integers
    xi = ints(np.int32, 3, 4)
    case("reducesum_i32", [attr_reduce("ReduceSum", xi, [0], 0, 11)], [("x", xi)],
         [("y", np.sum(xi, axis=0).astype(np.int32))], opset=11)
    xl = ints(np.int64, 3, 4, lo=-3, hi=4)
    case("reduceprod_i64", [attr_reduce("ReduceProd", xl, [1], 1, 13)], [("x", xl)],
         [("y", np.prod(xl, axis=1, keepdims=True))], opset=13)
    case("reducemax_i64", [attr_reduce("ReduceMax", xl, None, 0, 13)], [("x", xl)],
         [("y", np.array(np.max(xl)))], opset=13)
    case("reducemin_i32", [attr_reduce("ReduceMin", xi, [-1], 1, 13)], [("x", xi)],
         [("y", np.min(xi, axis=-1, keepdims=True))], opset=13)
    # integer mean and L2: computed, then truncated toward zero to the input type
    xm = np.array([[-7, 2, 0], [5, 6, -4]], np.int32)
    case("reducemean_i32", [attr_reduce("ReduceMean", xm, [1], 0, 13)], [("x", xm)],
         [("y", np.mean(xm, axis=1).astype(np.int32))], opset=13)
    case("reducel2_i32", [attr_reduce("ReduceL2", xm, [0], 1, 13)], [("x", xm)],
         [("y", np.sqrt(np.sum(xm * xm, axis=0, keepdims=True)).astype(np.int32))], opset=13)
    # a dynamic batch: the same model fed with 2 and 5 rows
    xb2, xb5 = f32(2, 3, 4), f32(5, 3, 4)
    case("reducemean_batch", [attr_reduce("ReduceMean", xb2, [-1], 0, 13)], [("x", xb2)],
         [("y", np.mean(xb2, axis=-1))], opset=13, batch=True,
         feeds=[("b5", [("x", xb5)], [("y", np.mean(xb5, axis=-1))])])
    xd = f64(2, 5)
    case("reducel2_f64", [attr_reduce("ReduceL2", xd, [1], 0, 13)], [("x", xd)],
         [("y", np.sqrt(np.sum(xd * xd, axis=1)))], opset=13)
    case("reducemean_f64", [attr_reduce("ReduceMean", xd, [0], 1, 13)], [("x", xd)],
         [("y", np.mean(xd, axis=0, keepdims=True))], opset=13)
    # ReduceSum-13: axes an input; noop_with_empty_axes
    case("reducesum13_axes", [node("ReduceSum", ["x", "axes"], keepdims=0)], [("x", x)],
         [("y", np.sum(x, axis=(0, 2)))], inits=[("axes", np.array([0, -1], np.int64))])
    case("reducesum13_keep", [node("ReduceSum", ["x", "axes"])], [("x", x)],
         [("y", np.sum(x, axis=1, keepdims=True))], inits=[("axes", np.array([1], np.int64))],
         opset=17)
    case("reducesum13_none", [node("ReduceSum", ["x"], keepdims=0)], [("x", x)],
         [("y", np.array(np.sum(x), np.float32))])
    case("reducesum13_empty_all", [node("ReduceSum", ["x", "axes"])], [("x", x)],
         [("y", np.sum(x, keepdims=True))], inits=[("axes", np.zeros(0, np.int64))])
    case("reducesum13_noop", [node("ReduceSum", ["x", "axes"], noop_with_empty_axes=1)],
         [("x", x)], [("y", x)], inits=[("axes", np.zeros(0, np.int64))])
    case("reducesum13_noop_absent", [node("ReduceSum", ["x"], noop_with_empty_axes=1)],
         [("x", x)], [("y", x)], opset=14)
    case("reducesum13_i64", [node("ReduceSum", ["x", "axes"], keepdims=0)], [("x", xl)],
         [("y", np.sum(xl, axis=1))], inits=[("axes", np.array([1], np.int64))])


def arg_cases():
    x = np.array([[[1, 5, 5], [7, 0, 7]], [[2, 2, 1], [-1, 3, 3]]], np.float32)  # ties
    for op, fn in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
        low = op.lower()
        case("%s_default" % low, [node(op, ["x"])], [("x", x)],
             [("y", np.expand_dims(fn(x, axis=0), 0).astype(np.int64))], opset=11)
        case("%s_neg_nokeep" % low, [node(op, ["x"], axis=-1, keepdims=0)], [("x", x)],
             [("y", fn(x, axis=-1).astype(np.int64))], opset=13)
        case("%s_ax1_keep" % low, [node(op, ["x"], axis=1, keepdims=1, select_last_index=0)],
             [("x", x)], [("y", np.expand_dims(fn(x, axis=1), 1).astype(np.int64))], opset=12)
        xi = ints(np.int32, 3, 5)
        case("%s_i32" % low, [node(op, ["x"], axis=1, keepdims=0)], [("x", xi)],
             [("y", fn(xi, axis=1).astype(np.int64))], opset=13)


def topk_ref(x, k, axis, largest):
    """The k largest (smallest) along axis, ties by the lower index
    (ONNX TopK's rule): a stable sort of -x (x)."""
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def topk_cases():
    x = np.array([[[3, 1, 3, 0, 2], [5, 5, 5, 1, 0], [-1, 4, 2, 4, 4]],
                  [[0, 0, 1, 1, 2], [9, 8, 7, 6, 5], [2, 2, 2, 2, 2]]], np.float32)  # ties
    K = lambda k: np.array([k], np.int64)
    for name, attrs, k, axis, largest, opset in (
            ("topk_default", {}, 3, 2, True, 11),
            ("topk_smallest_ax1", {"axis": 1, "largest": 0}, 2, 1, False, 11),
            ("topk_neg_axis_unsorted", {"axis": -2, "sorted": 0}, 3, 1, True, 13),
            ("topk_opset10_ax0", {"axis": 0}, 1, 0, True, 10),
            ("topk_k0", {}, 0, 2, True, 11)):
        v, i = topk_ref(x, k, axis, largest)
        case(name, [node("TopK", ["x", "k"], ["y", "i"], **attrs)], [("x", x)],
             [("y", v), ("i", i)], opset=opset, inits=[("k", K(k))])
    v, i = topk_ref(x, 2, 2, True)
    case("topk_opset9_attr", [node("TopK", ["x"], ["y", "i"], k=2)], [("x", x)],
         [("y", v), ("i", i)], opset=9)
    xl = ints(np.int64, 4, 6)
    v, i = topk_ref(xl, 4, 1, False)
    case("topk_i64", [node("TopK", ["x", "k"], ["y", "i"], largest=0)], [("x", xl)],
         [("y", v), ("i", i)], opset=13, inits=[("k", K(4))])


def cumsum_cases():
    x = f32(2, 3, 4)
    case("cumsum_axis1", [node("CumSum", ["x", "axis"])], [("x", x)],
         [("y", np.cumsum(x, axis=1))], opset=11, inits=[("axis", np.array(1, np.int64))])
    # exclusive and reverse: the sum of the elements after i, in order from the end
    rev = np.flip(np.cumsum(np.flip(x, -1), -1), -1) - x
    case("cumsum_excl_rev", [node("CumSum", ["x", "axis"], exclusive=1, reverse=1)],
         [("x", x)], [("y", rev)], opset=14, inits=[("axis", np.array([-1], np.int32))])
    xi = ints(np.int32, 3, 5)
    case("cumsum_i32_excl", [node("CumSum", ["x", "axis"], exclusive=1)], [("x", xi)],
         [("y", (np.cumsum(xi, axis=0) - xi).astype(np.int32))], opset=11,
         inits=[("axis", np.array(0, np.int64))])


# ---- folding of values known at import --------------------------------------

def fold_cases():
    # Integer arithmetic on constants folds to a constant: a Shape of a
    # fixed-shape input, multiplied, divided, compared and selected.
    x = f32(2, 3, 4)
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Mul", ["s", "k"], ["m"]),            # [4, 9, 8]
        node("Div", ["m", "two"], ["d"]),          # [2, 4, 4]
        node("Sub", ["d", "s"], ["e"]),            # [0, 1, 0]
        node("Equal", ["e", "zero"], ["q"]),       # [T, F, T]
        node("Where", ["q", "s", "m"], ["w"]),     # [2, 9, 4]
        node("Max", ["w", "k"], ["y"]),            # [2, 9, 4]
        node("Not", ["q"], ["nq"]),
    ]
    k = np.array([2, 3, 2], np.int64)
    s = np.array([2, 3, 4], np.int64)
    m = s * k
    d = trunc_div(m, np.int64(2))
    e = d - s
    q = e == 0
    w = np.where(q, s, m)
    case("fold_known", nodes, [("x", x)], [("y", np.maximum(w, k)), ("nq", ~q)],
         inits=[("k", k), ("two", np.array(2, np.int64)), ("zero", np.array(0, np.int64))])
    # The same with a dynamic batch: Shape's first entry is B. Products and
    # quotients that cancel B are known; B itself never reaches a graph
    # output. Fed with batch 2 and 5, the outputs are the same.
    nodes = [
        node("Shape", ["x"], ["s"]),                  # [B, 3, 4]
        node("Mul", ["s", "k"], ["m"]),               # [2B, 9, 8]
        node("Add", ["m", "s"], ["a"]),               # [3B, 12, 12]
        node("Div", ["a", "s"], ["r"]),               # [3, 4, 3]
        node("Sub", ["m", "s"], ["t"]),               # [B, 6, 4]
        node("Equal", ["t", "s"], ["eq"]),            # [T, F, T]
        node("Greater", ["m", "s"], ["gt"]),          # [T, T, T]
        node("Less", ["s", "zero"], ["neg"]),         # [F, F, F]: B >= 1
        node("Where", ["eq", "m", "a"], ["w"]),       # [2B, 12, 8]
        node("Min", ["w", "a"], ["mn"]),              # [2B, 12, 8]
        node("Div", ["mn", "s"], ["y"]),              # [2, 4, 2]
    ]
    outs = [("r", np.array([3, 4, 3], np.int64)), ("eq", np.array([True, False, True])),
            ("gt", np.array([True, True, True])), ("neg", np.array([False, False, False])),
            ("y", np.array([2, 4, 2], np.int64))]
    x2, x5 = f32(2, 3, 4), f32(5, 3, 4)
    case("fold_batch", nodes, [("x", x2)], outs, batch=True, check=True,
         inits=[("k", k), ("zero", np.array(0, np.int64))],
         feeds=[("b5", [("x", x5)], outs)])
    # The exporters' shape arithmetic feeding a Reshape: Shape -> Gather ->
    # Mul/Div (on B) and Add (on 3) -> Unsqueeze -> Concat -> Reshape. The
    # shape is [2B, 6]: Reshape makes its batch entry -1, so x [B, 3, 4]
    # becomes [2B, 6] for any B.
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i0"], ["b"], axis=0),        # B
        node("Gather", ["s", "i1"], ["c"], axis=0),        # 3
        node("Mul", ["b", "four"], ["b4"]),                # 4B
        node("Div", ["b4", "two"], ["b2"]),                # 2B
        node("Add", ["c", "three"], ["c6"]),               # 6
        node("Unsqueeze", ["b2", "ax0"], ["u0"]),
        node("Unsqueeze", ["c6", "ax0"], ["u1"]),
        node("Concat", ["u0", "u1"], ["shape"], axis=0),   # [2B, 6]
        node("Reshape", ["x", "shape"], ["y"]),
    ]
    scalars = [("i0", np.array(0, np.int64)), ("i1", np.array(1, np.int64)),
               ("four", np.array(4, np.int64)), ("two", np.array(2, np.int64)),
               ("three", np.array(3, np.int64)), ("ax0", np.array([0], np.int64))]
    case("fold_reshape", nodes, [("x", x2)], [("y", x2.reshape(4, 6))], batch=True,
         inits=scalars, feeds=[("b5", [("x", x5)], [("y", x5.reshape(10, 6))])])
    # Reductions of a Shape: ReduceProd of [3, 4] (12) joins B in a
    # Reshape's shape; ReduceProd of [B, 3, 4] is 12B, which over B is 12.
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "i12"], ["g"], axis=0),        # [3, 4]
        node("Gather", ["s", "i0"], ["b"], axis=0),         # [B]
        node("ReduceProd", ["g"], ["p"], keepdims=1),       # [12]
        node("Concat", ["b", "p"], ["shape"], axis=0),      # [B, 12]
        node("Reshape", ["x", "shape"], ["y"]),
        node("ReduceProd", ["s"], ["all"], keepdims=0),     # 12B
        node("Gather", ["s", "zero"], ["bs"], axis=0),      # B
        node("Div", ["all", "bs"], ["per"]),                # 12
        node("ReduceMin", ["g"], ["mn"], axes=[0], keepdims=0),   # 3
        node("ReduceSum", ["g", "ax0"], ["sm"]),            # [7]
    ]
    inits = [("i12", np.array([1, 2], np.int64)), ("i0", np.array([0], np.int64)),
             ("zero", np.array(0, np.int64)), ("ax0", np.array([0], np.int64))]
    tail = [("per", np.array(12, np.int64)), ("mn", np.array(3, np.int64)),
            ("sm", np.array([7], np.int64))]
    case("fold_reduce", nodes, [("x", x2)], [("y", x2.reshape(2, 12))] + tail, batch=True,
         inits=inits, feeds=[("b5", [("x", x5)], [("y", x5.reshape(5, 12))] + tail)])
    # B + 1 has no known form, and the graph has no value for B: refused,
    # naming the node.
    nodes = [node("Shape", ["x"], ["s"]), node("Add", ["s", "one"], ["y"], name="plus_one")]
    case("err_fold_batch_plus_one", nodes, [("x", x2)], [("y", np.array([3, 4, 5], np.int64))],
         batch=True, inits=[("one", np.array(1, np.int64))])


# ---- Mod (folded at import only) ---------------------------------------------

def py_mod(a, b, fmod):
    """Mod from the operator documentation, on Python's unbounded ints:
    fmod 0 takes the divisor's sign (Python's %), fmod 1 the dividend's
    (C's fmod: a - b * trunc(a / b))."""
    if not fmod:
        return a % b
    q = abs(a) // abs(b)
    return a - b * (q if (a < 0) == (b < 0) else -q)


def mod_ref(a, b, fmod):
    a2, b2 = np.broadcast_arrays(a, b)
    out = [py_mod(int(x), int(y), fmod) for x, y in zip(a2.ravel(), b2.ravel())]
    return np.array(out, a.dtype).reshape(a2.shape)


def mod_cases():
    i64min = np.iinfo(np.int64).min
    a = np.array([7, -7, 7, -7, 0, 9, -9, i64min, 12], np.int64)
    b = np.array([3, 3, -3, -3, 5, -1, 4, -1, 12], np.int64)
    for fmod in (0, 1):
        for dt in (np.int64, np.int32):
            aa = a.astype(dt) if dt == np.int64 else np.array([7, -7, 7, -7, 0, 9, -9, -2**31, 12], dt)
            bb = b.astype(dt)
            case("mod_known_%s_f%d" % (np.dtype(dt).name, fmod),
                 [node("Mod", ["a", "b"], fmod=fmod)], [], [("y", mod_ref(aa, bb, fmod))],
                 inits=[("a", aa), ("b", bb)])
    # Broadcast, and a folded remainder feeding a run-time Add.
    a2 = ints(np.int64, 2, 3, lo=-20, hi=21)
    b2 = np.array([4, -5, 6], np.int64)
    xi = ints(np.int64, 2, 3)
    case("mod_known_feeds_add", [node("Mod", ["a", "b"], ["m"]), node("Add", ["x", "m"])],
         [("x", xi)], [("y", xi + mod_ref(a2, b2, 0))], inits=[("a", a2), ("b", b2)])
    # A dynamic batch: Shape(x) is [B, 6, 4]; 4B % 2 and B % B are 0
    # whatever B is, 6 % 4 and 4 % 3 are known; fed with batch 2 and 5.
    x2, x5 = f32(2, 6, 4), f32(5, 6, 4)
    nodes = [node("Shape", ["x"], ["s"]),
             node("Mul", ["s", "k"], ["m"]),           # [4B, 6, 4]
             node("Mod", ["m", "d"], ["r"]),           # [0, 2, 1]
             node("Mod", ["s", "s"], ["z"], fmod=1)]   # [0, 0, 0]
    outs = [("r", np.array([0, 2, 1], np.int64)), ("z", np.array([0, 0, 0], np.int64))]
    case("mod_fold_batch", nodes, [("x", x2)], outs, batch=True,
         inits=[("k", np.array([4, 1, 1], np.int64)), ("d", np.array([2, 4, 3], np.int64))],
         feeds=[("b5", [("x", x5)], outs)])
    # Refused: a run-time input, a zero divisor, floats with fmod 0, fmod 2,
    # and B % 4 (no known form).
    case("err_mod_runtime", [node("Mod", ["a", "b"], name="rt_mod")],
         [("a", xi)], [("y", xi)], inits=[("b", b2)])
    case("err_mod_zero", [node("Mod", ["a", "b"], name="mod0")], [],
         [("y", np.zeros(2, np.int64))],
         inits=[("a", np.array([4, 5], np.int64)), ("b", np.array([2, 0], np.int64))])
    case("err_mod_float_fmod0", [node("Mod", ["a", "b"], name="fmod0")], [],
         [("y", np.zeros(2, np.float32))],
         inits=[("a", f32(2)), ("b", f32(2))], check=False)
    case("err_mod_fmod2", [node("Mod", ["a", "b"], fmod=2, name="fmod2")], [],
         [("y", np.zeros(2, np.int64))],
         inits=[("a", np.array([4, 5], np.int64)), ("b", np.array([2, 3], np.int64))], check=False)
    case("err_mod_bool", [node("Mod", ["a", "b"], name="bmod2")], [],
         [("y", np.zeros(2, np.bool_))],
         inits=[("a", np.array([True, False])), ("b", np.array([True, True]))], check=False)
    case("err_mod_one_input", [node("Mod", ["a"], name="mod1")], [], [("y", np.zeros(2, np.int64))],
         inits=[("a", np.array([4, 5], np.int64))], check=False)
    case("err_mod_batch", [node("Shape", ["x"], ["s"]), node("Mod", ["s", "d"], name="bmod")],
         [("x", x2)], [("y", np.zeros(3, np.int64))], batch=True,
         inits=[("d", np.array([4, 4, 4], np.int64))])


# ---- refused models ----------------------------------------------------------

def error_cases():
    x = f32(2, 3)
    case("err_reduce_axis_range", [node("ReduceSum", ["x"], axes=[2], name="bad_axes")],
         [("x", x)], [("y", np.zeros(2, np.float32))], opset=11, check=False)
    case("err_reduce_axis_twice", [node("ReduceMean", ["x"], axes=[1, -1], name="twice")],
         [("x", x)], [("y", np.zeros(2, np.float32))], opset=11, check=False)
    case("err_reduce_axes_runtime", [node("ReduceSum", ["x", "axes"], name="rt_axes")],
         [("x", x), ("axes", np.array([1], np.int64))], [("y", np.zeros((2, 1), np.float32))],
         opset=13)
    case("err_add_shapes", [node("Add", ["a", "b"], name="bad_add")],
         [("a", x), ("b", f32(4))], [("y", np.zeros((2, 3), np.float32))], check=False)
    case("err_sum_shapes", [node("Sum", ["a", "b", "c"], name="bad_sum")],
         [("a", x), ("b", f32(3)), ("c", f32(5, 1, 2))], [("y", np.zeros((5, 2, 3), np.float32))],
         check=False)
    case("err_argmax_last", [node("ArgMax", ["x"], select_last_index=1, name="last")],
         [("x", x)], [("y", np.zeros((1, 3), np.int64))], opset=12)
    case("err_argmax_axis", [node("ArgMin", ["x"], axis=-3, name="argax")], [("x", x)],
         [("y", np.zeros((1, 3), np.int64))], check=False)
    case("err_topk_k", [node("TopK", ["x", "k"], ["y", "i"], name="top9")], [("x", x)],
         [("y", np.zeros((2, 3), np.float32)), ("i", np.zeros((2, 3), np.int64))], opset=11,
         inits=[("k", np.array([9], np.int64))], check=False)
    case("err_topk_k_len", [node("TopK", ["x", "k"], ["y", "i"], name="top2k")], [("x", x)],
         [("y", np.zeros((2, 1), np.float32)), ("i", np.zeros((2, 1), np.int64))], opset=11,
         inits=[("k", np.array([1, 1], np.int64))], check=False)
    case("err_cumsum_axis", [node("CumSum", ["x", "axis"], name="cs3")], [("x", x)],
         [("y", x)], opset=11, inits=[("axis", np.array(2, np.int64))], check=False)
    case("err_keepdims", [node("ReduceMax", ["x"], keepdims=2, name="keep2")], [("x", x)],
         [("y", np.zeros((1, 3), np.float32))])
    case("err_div_zero_known", [node("Div", ["a", "b"], name="div0")], [],
         [("y", np.zeros(2, np.int64))],
         inits=[("a", np.array([4, 5], np.int64)), ("b", np.array([2, 0], np.int64))])
    case("err_reducesum13_attr", [node("ReduceSum", ["x"], axes=[0], name="old_axes")],
         [("x", x)], [("y", np.zeros(3, np.float32))], opset=13, check=False)


def main():
    os.makedirs(OUT, exist_ok=True)
    binary_cases()
    pow_cases()
    unary_cases()
    clip_cases()
    variadic_cases()
    compare_logic_cases()
    where_cases()
    reduce_cases()
    arg_cases()
    topk_cases()
    cumsum_cases()
    fold_cases()
    mod_cases()
    error_cases()


if __name__ == "__main__":
    main()
