#!/usr/bin/python3
"""ONNX cases for the shape and tensor ops (schema/onnx/onnx_map_tensor*.c).

Usage: cases_tensor.py OUTDIR. For each case NAME it writes NAME.onnx,
NAME.in.<input>.npy for every graph input and NAME.out.<k>.npy for every
graph output. Expected values come from NumPy code written from the ONNX
operator documentation (Operators.md), never from flowgraph. Cases whose
name starts with "bad_" are models flowgraph must refuse (no .npy files).

Most ops get two cases: the data as a graph input (the op runs as a
flowgraph node) and, with the suffix "_k", as an initializer (the importer
folds the op on the known value)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(34)
I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min

ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
        np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
        np.dtype(np.bool_): TensorProto.BOOL}


def save(name, nodes, inputs, outputs, opset, inits=(), sym=(), feeds=None):
    """inputs: [(name, array)] graph inputs (dim 0 symbolic "N" when the
    name is in sym); inits: [(name, array)] initializers; outputs:
    [(name, expected array)]. feeds: arrays to write instead of inputs'
    (another batch size of the same model)."""
    gin = []
    for n, a in inputs:
        shape = list(a.shape)
        if n in sym:
            shape[0] = "N"
        gin.append(helper.make_tensor_value_info(n, ELEM[a.dtype], shape))
    gout = [helper.make_tensor_value_info(n, ELEM[np.asarray(a).dtype], None) for n, a in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits]
    g = helper.make_graph(nodes, name, gin, gout, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.save(m, os.path.join(OUT, name + ".onnx"))
    for n, a in (feeds or inputs):
        np.save(os.path.join(OUT, "%s.in.%s.npy" % (name, n)), np.array(a, order="C"))
    for k, (_, a) in enumerate(outputs):
        np.save(os.path.join(OUT, "%s.out.%d.npy" % (name, k)), np.array(a, order="C"))


def both(name, op, data, extra_inits, want, opset, attrs=None, extra_inputs=(), outs=("y",)):
    """One op on data x: as a graph input (name) and as an initializer
    (name_k). extra_inits are the op's other inputs, always initializers."""
    ins = ["x"] + [n for n, _ in extra_inits] + list(extra_inputs)
    node = helper.make_node(op, ins, list(outs), **(attrs or {}))
    wants = want if isinstance(want, list) else [want]
    outputs = list(zip(outs, wants))
    save(name, [node], [("x", data)], outputs, opset, inits=extra_inits)
    save(name + "_k", [node], [], outputs, opset, inits=[("x", data)] + list(extra_inits))


def bad(name, nodes, inputs, outputs, opset, inits=(), sym=()):
    gin = [helper.make_tensor_value_info(n, ELEM[a.dtype], ["N"] * (n in sym) + list(a.shape)[
        (n in sym):]) for n, a in inputs]
    gout = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits]
    g = helper.make_graph(nodes, name, gin, gout, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.save(m, os.path.join(OUT, name + ".onnx"))


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(v):
    return np.array(v, dtype=np.int64)


# ---- NumPy references, from the operator documentation ---------------------

def ref_reshape(x, shape, allowzero=0):
    # "A dimension could also be 0, in which case the actual dimension value
    # is unchanged (i.e. taken from the input tensor)" unless allowzero.
    s = [x.shape[i] if (v == 0 and not allowzero) else v for i, v in enumerate(shape)]
    return x.reshape(s)


def ref_flatten(x, axis):
    if axis < 0:
        axis += x.ndim
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


def ref_unsqueeze(x, axes):
    r = x.ndim + len(axes)
    for a in sorted(a + r if a < 0 else a for a in axes):
        x = np.expand_dims(x, a)
    return x


def ref_slice(x, starts, ends, axes=None, steps=None):
    # Negative starts/ends count from the end, then clamp: exactly Python's
    # slice rules, which the ONNX backend tests use as the reference.
    sl = [slice(None)] * x.ndim
    axes = axes if axes is not None else range(len(starts))
    steps = steps if steps is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[a] = slice(int(s), int(e), int(st))
    return x[tuple(sl)]


def ref_pad(x, pads, mode="constant", value=0.0):
    r = x.ndim
    pos = [(max(pads[i], 0), max(pads[i + r], 0)) for i in range(r)]
    kw = {"constant_values": value} if mode == "constant" else {}
    y = np.pad(x, pos, mode={"edge": "edge", "reflect": "reflect", "constant": "constant"}[mode],
               **kw)
    # Negative pads remove elements from that side.
    sl = tuple(slice(max(-pads[i], 0), y.shape[i] - max(-pads[i + r], 0)) for i in range(r))
    return y[sl]


def ref_one_hot(idx, depth, values, axis=-1):
    # "Any entries in the 'indices' input tensor with values outside the
    # range [-depth, depth-1] will result in one-hot representation with all
    # 'off_value' values"; negative ones count from the end.
    idx = np.asarray(idx).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    r = idx.ndim
    if axis < 0:
        axis += r + 1
    tgt = np.arange(depth).reshape((1,) * axis + (depth,) + (1,) * (r - axis))
    hit = np.expand_dims(idx, axis) == tgt
    return np.where(hit, values[1], values[0]).astype(values.dtype)


# ---- Reshape -----------------------------------------------------------------
x = f32(2, 3, 4)
for nm, shape in [("reshape", [4, 6]), ("reshape_neg", [-1, 4]), ("reshape_zero", [0, -1]),
                  ("reshape_zero_mid", [2, 0, 2, 2])]:
    both(nm, "Reshape", x, [("s", i64(shape))], ref_reshape(x, shape), 13)
# allowzero=1 (opset 14): a 0 is a literal 0.
z = np.zeros((0, 3), np.float32)
both("reshape_allowzero", "Reshape", z, [("s", i64([3, 0]))], ref_reshape(z, [3, 0], 1), 14,
     attrs={"allowzero": 1})
both("reshape_allowzero0", "Reshape", x, [("s", i64([0, 12]))], ref_reshape(x, [0, 12]), 14,
     attrs={"allowzero": 0})

# ---- Flatten -----------------------------------------------------------------
x = f32(2, 3, 4, 5)
for ax in (0, 1, 3, 4, -1, -3):
    both("flatten_%s" % str(ax).replace("-", "m"), "Flatten", x, [], ref_flatten(x, ax), 13,
         attrs={"axis": ax})
both("flatten_default", "Flatten", x, [], ref_flatten(x, 1), 9)

# ---- Transpose ---------------------------------------------------------------
both("transpose_default", "Transpose", x, [], np.transpose(x), 13)
both("transpose_perm", "Transpose", x, [], np.transpose(x, (1, 3, 0, 2)), 13,
     attrs={"perm": [1, 3, 0, 2]})
xi = rng.integers(-50, 50, (3, 4)).astype(np.int64)
both("transpose_i64", "Transpose", xi, [], xi.T, 13, attrs={"perm": [1, 0]})

# ---- Squeeze / Unsqueeze: attribute before 13, input from 13 ---------------
x = f32(1, 3, 1, 4)
both("squeeze_all", "Squeeze", x, [], np.squeeze(x), 13)
both("squeeze_attr", "Squeeze", x, [], np.squeeze(x, 2), 11, attrs={"axes": [-2]})
both("squeeze_input", "Squeeze", x, [("a", i64([0, -2]))], np.squeeze(x, (0, 2)), 13)
x = f32(3, 4)
both("unsqueeze_attr", "Unsqueeze", x, [], ref_unsqueeze(x, [0, 3]), 11, attrs={"axes": [0, 3]})
both("unsqueeze_input", "Unsqueeze", x, [("a", i64([-1, 1]))], ref_unsqueeze(x, [-1, 1]), 13)
both("unsqueeze_scalar", "Unsqueeze", np.float32(2.5), [("a", i64([0]))],
     np.array([2.5], np.float32), 13)

# ---- Concat ------------------------------------------------------------------
a, b = f32(2, 3), f32(2, 5)
for ax in (1, -1):
    nm = "concat_%s" % str(ax).replace("-", "m")
    node = helper.make_node("Concat", ["a", "b"], ["y"], axis=ax)
    want = np.concatenate([a, b], axis=ax)
    save(nm, [node], [("a", a), ("b", b)], [("y", want)], 13)
    save(nm + "_k", [node], [], [("y", want)], 13, inits=[("a", a), ("b", b)])
node = helper.make_node("Concat", ["a", "b"], ["y"], axis=0)
c0 = f32(4, 3)
save("concat_mixed", [node], [("a", a)], [("y", np.concatenate([a, c0]))], 13, inits=[("b", c0)])
e = np.zeros((0,), np.int64)
save("concat_empty_k", [helper.make_node("Concat", ["a", "b"], ["y"], axis=0)], [],
     [("y", i64([7, 8]))], 13, inits=[("a", e), ("b", i64([7, 8]))])

# ---- Split: attribute before 13, input from 13 -------------------------------
x = f32(6, 4)
both("split_equal", "Split", x, [], np.split(x, 3), 13, outs=("y0", "y1", "y2"))
both("split_attr", "Split", x, [], np.split(x, [1], axis=1), 11, attrs={"axis": 1, "split": [1, 3]},
     outs=("y0", "y1"))
both("split_input", "Split", x, [("s", i64([2, 4]))], np.split(x, [2], axis=0), 13,
     outs=("y0", "y1"))
both("split_neg_axis", "Split", x, [], np.split(x, 2, axis=1), 13, attrs={"axis": -1},
     outs=("y0", "y1"))

# ---- Slice: attributes before 10, inputs from 10 ------------------------------
x = f32(5, 6, 7)
both("slice_attr", "Slice", x, [], ref_slice(x, [1, 0], [3, -2], [0, 2]), 9,
     attrs={"starts": [1, 0], "ends": [3, -2], "axes": [0, 2]})
sl_cases = {
    "slice_basic": ([1, 2], [4, 5], None, None),
    "slice_neg": ([-3, -5], [-1, I64_MAX], [0, -1], None),
    "slice_clamp": ([-100, 2], [100, 1000], [1, 2], None),
    "slice_step2": ([0, 1], [I64_MAX, 6], [2, 1], [2, 2]),
    "slice_rev": ([-1], [I64_MIN], [1], [-1]),
    "slice_rev_step": ([4, 5], [0, -100], [0, 2], [-2, -3]),
    "slice_empty": ([3], [1], [0], None),
}
for nm, (st, en, ax, sp) in sl_cases.items():
    ins = [("st", i64(st)), ("en", i64(en))]
    ins += [("ax", i64(ax))] if ax is not None or sp is not None else []
    if sp is not None:
        ins += [("sp", i64(sp))]
    if ax is None and sp is not None:
        ins[2] = ("ax", i64(list(range(len(st)))))
    both(nm, "Slice", x, ins, ref_slice(x, st, en, ax, sp), 13)

# ---- Gather ------------------------------------------------------------------
x = f32(4, 5, 3)
gi = [("gather_axis0", i64([3, 0, 3]), 0), ("gather_axis1", i64([[4, 0], [1, 1]]), 1),
      ("gather_neg_idx", i64([-1, -5, 2]), 1), ("gather_neg_axis", i64([2, 0]), -1),
      ("gather_scalar", i64(2), 0), ("gather_scalar_axis2", i64(-1), 2),
      ("gather_run", i64([1, 2, 3]), 1), ("gather_run_neg", i64([-2, -1]), -1)]
for nm, idx, ax in gi:
    both(nm, "Gather", x, [("i", idx)], np.take(x, idx, axis=ax), 13, attrs={"axis": ax})
# run-time indices (a graph input), negative ones included
idx = i64([[0, -1], [-4, 2]])
node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
save("gather_runtime_idx", [node], [("x", x), ("i", idx)], [("y", np.take(x, idx, axis=1))], 13)
idx32 = np.array([1, -2], np.int32)
save("gather_runtime_i32", [helper.make_node("Gather", ["x", "i"], ["y"])], [("x", x), ("i", idx32)],
     [("y", np.take(x, idx32, axis=0))], 13)

# ---- Expand (both ways: the larger of the two dims) --------------------------
for nm, xs, shape in [("expand_basic", (3, 1), [3, 4]), ("expand_rank_up", (1, 4), [2, 3, 1]),
                      ("expand_keep", (2, 3), [1, 3]), ("expand_ones", (2, 1, 4), [2, 5, 1])]:
    xv = f32(*xs)
    both(nm, "Expand", xv, [("s", i64(shape))], xv * np.ones(shape, np.float32), 13)

# ---- Tile --------------------------------------------------------------------
x = f32(2, 3)
both("tile", "Tile", x, [("r", i64([2, 3]))], np.tile(x, (2, 3)), 13)
both("tile_zero", "Tile", x, [("r", i64([1, 0]))], np.tile(x, (1, 0)), 13)

# ---- Pad: attributes before 11, inputs from 11 -------------------------------
x = f32(3, 4)
both("pad_attr", "Pad", x, [], ref_pad(x, [1, 0, 0, 2], "constant", 1.5), 10,
     attrs={"pads": [1, 0, 0, 2], "value": 1.5})
for mode in ("constant", "reflect", "edge"):
    pads = [1, 2, 2, 1]
    ins = [("p", i64(pads))] + ([("v", np.array(-2.0, np.float32))] if mode == "constant" else [])
    both("pad_" + mode, "Pad", x, ins, ref_pad(x, pads, mode, -2.0), 13, attrs={"mode": mode})
both("pad_negative", "Pad", x, [("p", i64([-1, 2, 1, -2]))], ref_pad(x, [-1, 2, 1, -2]), 13)
both("pad_default", "Pad", x, [("p", i64([0, 1, 0, 1]))], ref_pad(x, [0, 1, 0, 1]), 11)

# ---- OneHot ------------------------------------------------------------------
idx = i64([[1, -1, 3], [0, 7, -4]])  # 7 is out of range: a row of off values
vals = np.array([-1.0, 5.0], np.float32)
for ax in (-1, 0, 1):
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=ax)
    save("one_hot_%s" % str(ax).replace("-", "m"), [node], [("i", idx)],
         [("y", ref_one_hot(idx, 4, vals, ax))], 11, inits=[("d", i64(4)), ("v", vals)])
node = helper.make_node("OneHot", ["i", "d", "v"], ["y"])
vi = i64([0, 9])
fi = np.array([2.0, 0.0, -1.0], np.float32)
save("one_hot_float_idx", [node], [("i", fi)], [("y", ref_one_hot(fi, 3, vi))], 9,
     inits=[("d", np.array([3.0], np.float32)), ("v", vi)])

# ---- shape arithmetic with a symbolic batch ----------------------------------
# x [N, 3, 4]: Shape -> Gather(0) -> Unsqueeze -> Concat with [12] -> Reshape
# gives [N, 12], run at two batch sizes.
def dyn_reshape_nodes():
    return [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(i64(0))),
        helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
        helper.make_node("Constant", [], ["ax0"], value=numpy_helper.from_array(i64([0]))),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Constant", [], ["twelve"], value=numpy_helper.from_array(i64([12]))),
        helper.make_node("Concat", ["n1", "twelve"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]


for b in (2, 5):
    xb = f32(b, 3, 4)
    save("dyn_reshape_b%d" % b, dyn_reshape_nodes(), [("x", xb)], [("y", xb.reshape(b, 12))], 13,
         sym=("x",))
# Shape of a tensor whose leading dim merged the batch with others: x [N,
# 6, 4] reshaped to [-1, 4] is [6N, 4]; Shape must say 6N, so that
# dividing it by 6 gives N back for the second Reshape (Swin's windows
# do this with a dynamic batch).
for b in (2, 3):
    xb = f32(b, 6, 4)
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["m"]),
             helper.make_node("Shape", ["m"], ["sh"]),
             helper.make_node("Gather", ["sh", "i0"], ["g"], axis=0),
             helper.make_node("Div", ["g", "six"], ["n"]),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "rest"], ["s2"], axis=0),
             helper.make_node("Reshape", ["m", "s2"], ["y"])]
    save("dyn_shape_merged_batch_b%d" % b, nodes, [("x", xb)], [("y", xb.reshape(b, 24))], 13,
         sym=("x",), inits=[("s1", i64([-1, 4])), ("i0", i64(0)), ("six", i64(6)),
                            ("ax0", i64([0])), ("rest", i64([24]))])
# [N, -1]: the batch entry and a -1 (x.view(x.size(0), -1)), shape sliced
# from Shape with a negative index, and Expand to Shape(x) over x's batch.
for b in (3, 1):
    xb = f32(b, 3, 4)
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Slice", ["sh", "s0", "s1"], ["n1"]),
        helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
        helper.make_node("Gather", ["sh", "gi"], ["g"], axis=0),
        helper.make_node("Concat", ["g", "k4"], ["es"], axis=0),
        helper.make_node("Expand", ["x1", "es"], ["y2"]),
        helper.make_node("Slice", ["x", "s1", "big"], ["y3"]),
    ]
    x1 = xb[:, :, :1]
    save("dyn_flatten_b%d" % b, nodes, [("x", xb), ("x1", x1)],
         [("y", xb.reshape(b, -1)), ("y2", x1 * np.ones((b, 3, 4), np.float32)), ("y3", xb[1:])],
         13, sym=("x", "x1"),
         inits=[("s0", i64([0])), ("s1", i64([1])), ("m1", i64([-1])), ("gi", i64([-3, 1])),
                ("k4", i64([4])), ("big", i64([I64_MAX]))])

# An initializer used first as a node's input (it becomes a graph
# constant, which holds its bytes from then on) and then for its value
# (a shape, a folded Transpose), which the importer reads from the
# graph's copy.
xs, xi, x2, w = f32(3, 4), np.array([5, -7], np.int64), f32(3, 4), f32(3, 4)
nodes = [helper.make_node("Add", ["xi", "s"], ["y1"]),
         helper.make_node("Reshape", ["xs", "s"], ["y2"]),
         helper.make_node("Add", ["x2", "w"], ["y3"]),
         helper.make_node("Transpose", ["w"], ["y4"])]
save("init_used_then_read", nodes, [("xi", xi), ("xs", xs), ("x2", x2)],
     [("y1", xi + np.array([2, 6], np.int64)), ("y2", xs.reshape(2, 6)), ("y3", x2 + w),
      ("y4", w.T)], 13, inits=[("s", i64([2, 6])), ("w", w)])

# The ops on data whose leading dim is the symbolic batch, at two batch
# sizes each (the op runs as a flowgraph node with an unknown dim).
def dyn(name, op, shape, inits, ref, opset=13, attrs=None, outs=("y",), data=None):
    node = helper.make_node(op, ["x"] + [n for n, _ in inits], list(outs), **(attrs or {}))
    for b in (2, 3):
        xb = data(b) if data else f32(b, *shape)
        wants = ref(xb)
        wants = wants if isinstance(wants, list) else [wants]
        save("%s_b%d" % (name, b), [node], [("x", xb)], list(zip(outs, wants)), opset,
             inits=inits, sym=("x",))


dyn("dyn_squeeze", "Squeeze", (1, 4), [("a", i64([1]))], lambda v: np.squeeze(v, 1))
dyn("dyn_unsqueeze", "Unsqueeze", (4,), [("a", i64([1, -1]))], lambda v: ref_unsqueeze(v, [1, -1]))
dyn("dyn_transpose", "Transpose", (5, 3), [], lambda v: np.transpose(v, (2, 0, 1)),
    attrs={"perm": [2, 0, 1]})
dyn("dyn_gather_axis1", "Gather", (5, 3), [("i", i64([[2, -5], [4, 4]]))],
    lambda v: np.take(v, [[2, -5], [4, 4]], axis=1), attrs={"axis": 1})
dyn("dyn_gather_token", "Gather", (5, 3), [("i", i64(0))], lambda v: v[:, 0], attrs={"axis": 1})
dyn("dyn_split_axis1", "Split", (6,), [("s", i64([4, 2]))], lambda v: np.split(v, [4], axis=1),
    attrs={"axis": 1}, outs=("y0", "y1"))
dyn("dyn_slice_step", "Slice", (7, 2), [("st", i64([-1])), ("en", i64([I64_MIN])),
                                        ("ax", i64([1])), ("sp", i64([-3]))],
    lambda v: v[:, -1::-3])
dyn("dyn_pad_crop", "Pad", (4,), [("p", i64([0, -1, 0, 2]))], lambda v: ref_pad(v, [0, -1, 0, 2]))
dyn("dyn_tile", "Tile", (2,), [("r", i64([1, 3]))], lambda v: np.tile(v, (1, 3)))
dyn("dyn_flatten_op", "Flatten", (2, 3), [], lambda v: ref_flatten(v, 1))
dyn("dyn_expand", "Expand", (1, 4), [("s", i64([3, 1]))], lambda v: v * np.ones((3, 1), np.float32))
dyn("dyn_one_hot", "OneHot", (3,), [("d", i64(5)), ("v", np.array([0, 1], np.int64))],
    lambda v: ref_one_hot(v, 5, np.array([0, 1], np.int64), 1), opset=11, attrs={"axis": 1},
    data=lambda b: rng.integers(-5, 6, (b, 3)).astype(np.int64))
concat_node = helper.make_node("Concat", ["x", "c"], ["y"], axis=1)
for b in (2, 3):
    xb, cb = f32(b, 2), f32(b, 3)
    save("dyn_concat_b%d" % b, [concat_node], [("x", xb), ("c", cb)],
         [("y", np.concatenate([xb, cb], 1))], 13, sym=("x", "c"))

# ---- DepthToSpace, SpaceToDepth, Trilu --------------------------------------
# The documentation's reference (reshape to six dims, transpose, reshape),
# checked in this script against each output element's source written as
# an index formula, so the two readings of the definition agree.
def ref_depth_to_space(x, b, mode="DCR"):
    n, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    y = t.reshape(n, c // (b * b), h * b, w * b)
    c2 = c // (b * b)
    for i in np.ndindex(*y.shape):
        q, ch, hh, ww = i
        off = (hh % b) * b + ww % b
        src = off * c2 + ch if mode == "DCR" else ch * b * b + off
        assert y[i] == x[q, src, hh // b, ww // b] or np.isnan(y[i])
    return y


def ref_space_to_depth(x, b):
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(
        n, c * b * b, h // b, w // b)
    for i in np.ndindex(*y.shape):
        q, ch, hh, ww = i
        blk, src = divmod(ch, c)
        assert y[i] == x[q, src, hh * b + blk // b, ww * b + blk % b]
    return y


x = f32(2, 8, 2, 3)
both("depth_to_space_dcr", "DepthToSpace", x, [], ref_depth_to_space(x, 2), 13,
     attrs={"blocksize": 2})
both("depth_to_space_opset9", "DepthToSpace", x, [], ref_depth_to_space(x, 2), 9,
     attrs={"blocksize": 2})
x = f32(1, 18, 2, 2)
both("depth_to_space_crd", "DepthToSpace", x, [], ref_depth_to_space(x, 3, "CRD"), 11,
     attrs={"blocksize": 3, "mode": "CRD"})
x = f32(2, 3, 4, 6)
both("space_to_depth", "SpaceToDepth", x, [], ref_space_to_depth(x, 2), 13,
     attrs={"blocksize": 2})
x = f32(1, 2, 3, 3)
both("space_to_depth_b1", "SpaceToDepth", x, [], x, 9, attrs={"blocksize": 1})
# The round trip is the identity (SpaceToDepth inverts DCR).
x = f32(2, 2, 4, 6)
save("space_depth_round_trip",
     [helper.make_node("SpaceToDepth", ["x"], ["m"], blocksize=2),
      helper.make_node("DepthToSpace", ["m"], ["y"], blocksize=2)], [("x", x)], [("y", x)], 13)

# Trilu keeps NaN and infinities inside its triangle and zeros outside.
x = f32(2, 3, 4, 5)
x[0, 0, 0, 4], x[0, 0, 3, 0], x[1, 2, 1, 1] = np.nan, np.inf, -np.inf
both("trilu_upper", "Trilu", x, [], np.triu(x), 14)
both("trilu_lower_k_m1", "Trilu", x, [("k", i64(-1))], np.tril(x, -1), 14, attrs={"upper": 0})
both("trilu_upper_k2", "Trilu", x, [("k", i64(2))], np.triu(x, 2), 14, attrs={"upper": 1})
both("trilu_upper_k_past", "Trilu", x, [("k", i64(9))], np.triu(x, 9), 14)
both("trilu_lower_k_low", "Trilu", x, [("k", i64(I64_MIN))], np.tril(x, -99), 14,
     attrs={"upper": 0})
xi = rng.integers(-9, 10, (6, 3)).astype(np.int64)
both("trilu_int64_lower_k1", "Trilu", xi, [("k", i64(1))], np.tril(xi, 1), 14,
     attrs={"upper": 0})
# An empty matrix of 2^40 rows: the mask has no cells to fill.
xe = np.zeros((1 << 40, 0), np.float32)
both("trilu_empty_tall", "Trilu", xe, [], xe.copy(), 14)
dyn("dyn_depth_to_space", "DepthToSpace", (8, 2, 3), [], lambda v: ref_depth_to_space(v, 2),
    attrs={"blocksize": 2})
dyn("dyn_space_to_depth", "SpaceToDepth", (3, 4, 2), [], lambda v: ref_space_to_depth(v, 2),
    attrs={"blocksize": 2})
dyn("dyn_trilu", "Trilu", (4, 4), [("k", i64(-1))], lambda v: np.tril(v, -1), opset=14,
    attrs={"upper": 0})

# ---- bad models ------------------------------------------------------------
x = f32(2, 3)
# DepthToSpace, SpaceToDepth and Trilu refusals.
bad("bad_depth_to_space_rank", [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)],
    [("x", f32(8, 2, 2))], ["y"], 13)
bad("bad_depth_to_space_channels",
    [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)], [("x", f32(1, 6, 2, 2))],
    ["y"], 13)
bad("bad_depth_to_space_mode",
    [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="DRC")],
    [("x", f32(1, 8, 2, 2))], ["y"], 13)
bad("bad_depth_to_space_no_block", [helper.make_node("DepthToSpace", ["x"], ["y"])],
    [("x", f32(1, 8, 2, 2))], ["y"], 13)
bad("bad_space_to_depth_block0", [helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=0)],
    [("x", f32(1, 2, 4, 4))], ["y"], 13)
bad("bad_space_to_depth_width", [helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)],
    [("x", f32(1, 2, 4, 5))], ["y"], 13)
bad("bad_depth_to_space_zero_open_batch",
    [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)], [("x", f32(1, 0, 2, 2))],
    ["y"], 13, sym=("x",))
bad("bad_space_to_depth_zero_open_batch",
    [helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)], [("x", f32(1, 2, 0, 4))],
    ["y"], 13, sym=("x",))
bad("bad_trilu_rank", [helper.make_node("Trilu", ["x"], ["y"])], [("x", f32(5))], ["y"], 14)
bad("bad_trilu_upper", [helper.make_node("Trilu", ["x"], ["y"], upper=2)], [("x", f32(3, 3))],
    ["y"], 14)
bad("bad_trilu_k_runtime", [helper.make_node("Trilu", ["x", "k"], ["y"])],
    [("x", f32(3, 3)), ("k", i64(1))], ["y"], 14)
bad("bad_trilu_k_two", [helper.make_node("Trilu", ["x", "k"], ["y"])], [("x", f32(3, 3))], ["y"],
    14, inits=[("k", i64([1, 2]))])
# Shape of [N + 2, 3] (x with two more rows): not a multiple of the batch.
bad("bad_shape_batch_plus_rows", [helper.make_node("Concat", ["x", "c"], ["m"], axis=0),
                                  helper.make_node("Shape", ["m"], ["sh"]),
                                  helper.make_node("Reshape", ["m", "sh"], ["y"])],
    [("x", f32(2, 3))], ["y"], 13, inits=[("c", f32(2, 3))], sym=("x",))
bad("bad_reshape_two_neg", [helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", x)], ["y"], 13,
    inits=[("s", i64([-1, -1]))])
bad("bad_reshape_runtime_shape", [helper.make_node("Reshape", ["x", "s"], ["y"])],
    [("x", x), ("s", i64([3, 2]))], ["y"], 13)
bad("bad_reshape_count", [helper.make_node("Reshape", ["x", "s"], ["y"])], [], ["y"], 13,
    inits=[("x", x), ("s", i64([4, 2]))])
bad("bad_squeeze_axis", [helper.make_node("Squeeze", ["x", "a"], ["y"])], [("x", x)], ["y"], 13,
    inits=[("a", i64([2]))])
bad("bad_squeeze_not_one", [helper.make_node("Squeeze", ["x"], ["y"], axes=[1])], [("x", x)],
    ["y"], 11)
bad("bad_unsqueeze_twice", [helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0, -4])],
    [("x", x)], ["y"], 11)
bad("bad_transpose_perm", [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0])], [("x", x)],
    ["y"], 13)
bad("bad_gather_index", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [("x", x)], ["y"],
    13, inits=[("i", i64([3]))])
bad("bad_gather_axis", [helper.make_node("Gather", ["x", "i"], ["y"], axis=2)], [("x", x)], ["y"],
    13, inits=[("i", i64([0]))])
bad("bad_slice_step0", [helper.make_node("Slice", ["x", "a", "b", "c", "d"], ["y"])], [("x", x)],
    ["y"], 13, inits=[("a", i64([0])), ("b", i64([1])), ("c", i64([0])), ("d", i64([0]))])
bad("bad_concat_no_axis", [helper.make_node("Concat", ["x", "x"], ["y"])], [("x", x)], ["y"], 13)
bad("bad_split_sizes", [helper.make_node("Split", ["x"], ["y", "z"], axis=1, split=[1, 1])],
    [("x", x)], ["y", "z"], 11)
bad("bad_pad_mode", [helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")], [("x", x)], ["y"],
    13, inits=[("p", i64([0, 0, 0, 0]))])
bad("bad_expand", [helper.make_node("Expand", ["x", "s"], ["y"])], [("x", x)], ["y"], 13,
    inits=[("s", i64([4, 3]))])
bad("bad_tile_repeats", [helper.make_node("Tile", ["x", "r"], ["y"])], [("x", x)], ["y"], 13,
    inits=[("r", i64([2]))])
# What depends on the batch size where flowgraph cannot follow it: a second
# batch entry in a shape, Expand growing a dim of 1 to the batch, a slice
# of the batch dim from its end.
xs = f32(2, 3)
bad("bad_reshape_two_batch", [
    helper.make_node("Shape", ["x"], ["sh"]),
    helper.make_node("Slice", ["sh", "s0", "s1"], ["n1"]),
    helper.make_node("Concat", ["n1", "n1", "k3"], ["shape"], axis=0),
    helper.make_node("Reshape", ["x", "shape"], ["y"])], [("x", xs)], ["y"], 13,
    inits=[("s0", i64([0])), ("s1", i64([1])), ("k3", i64([3]))], sym=("x",))
bad("bad_expand_to_batch", [
    helper.make_node("Shape", ["x"], ["sh"]),
    helper.make_node("Expand", ["w", "sh"], ["y"])], [("x", xs), ("w", f32(1, 3))], ["y"], 13,
    sym=("x",))
bad("bad_slice_batch_from_end", [helper.make_node("Slice", ["x", "a", "b"], ["y"])], [("x", xs)],
    ["y"], 13, inits=[("a", i64([-1])), ("b", i64([I64_MAX]))], sym=("x",))
# Values a file may hold that would overflow 64-bit arithmetic.
bad("bad_pad_huge", [helper.make_node("Pad", ["x", "p"], ["y"])], [("x", xs)], ["y"], 13,
    inits=[("p", i64([I64_MIN, 0, 0, 0]))])
bad("bad_tile_overflow", [helper.make_node("Tile", ["x", "r"], ["y"])], [("x", xs)], ["y"], 13,
    inits=[("r", i64([1, I64_MAX]))])
bad("bad_split_overflow", [helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)], [("x", xs)],
    ["y", "z"], 13, inits=[("s", i64([I64_MAX, I64_MAX]))])
bad("bad_slice_step_min", [helper.make_node("Slice", ["x", "a", "b", "c", "d"], ["y"])],
    [("x", xs)], ["y"], 13,
    inits=[("a", i64([0])), ("b", i64([1])), ("c", i64([0])), ("d", i64([I64_MIN]))])
bad("bad_one_hot_depth", [helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
    [("i", i64([1, 2]))], ["y"], 11, inits=[("d", i64(10**12)), ("v", f32(2))])


# ---- ScatterND (folded at import only) ----------------------------------------
def ref_scatter_nd(data, indices, updates, reduction="none"):
    """The operator documentation's reference: each k-tuple of indices
    (negative counting from the end) picks a slice of data, replaced by
    or combined with the matching slice of updates, tuples in order."""
    out = np.copy(data)
    for idx in np.ndindex(indices.shape[:-1]):
        at = tuple(int(v) for v in indices[idx])
        if reduction == "none":
            out[at] = updates[idx]
        elif reduction == "add":
            out[at] = out[at] + updates[idx]
        else:
            out[at] = out[at] * updates[idx]
    return out


def scatter_case(name, data, indices, updates, opset=13, reduction=None):
    attrs = {"reduction": reduction} if reduction else {}
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], **attrs)
    want = ref_scatter_nd(data, indices, updates, reduction or "none")
    save(name, [node], [], [("y", want)], opset, inits=[("d", data), ("i", indices), ("u", updates)])


# Slices (k = 1 of rank 3), single elements with negative indices, a
# k = 2 tuple of rank 3, and Swin's mask: zeros written region by region.
scatter_case("scatter_nd_slices_k", f32(4, 5, 3), i64([[1], [3]]), f32(2, 5, 3))
scatter_case("scatter_nd_elems_k", i64(np.arange(12).reshape(3, 4)),
             i64([[0, 1], [2, -1], [-3, 0]]), i64([100, 200, 300]))
scatter_case("scatter_nd_k2_k", f32(3, 4, 2), i64([[[0, 3]], [[2, -2]]]), f32(2, 1, 2))
mask = np.zeros((6, 6), np.float32)
rows = np.array([[r, c] for r in range(4, 6) for c in range(0, 4)], np.int64).reshape(2, 4, 2)
scatter_case("scatter_nd_mask_k", mask, rows, np.full((2, 4), 3.0, np.float32))
# Opset 16's reductions, with a repeated tuple.
rep = i64([[1], [1], [0]])
scatter_case("scatter_nd_add_k", f32(3, 2), rep, f32(3, 2), 16, "add")
scatter_case("scatter_nd_mul_k", np.array([[2, 3], [4, 5], [6, 7]], np.int32), rep,
             np.array([[3, 3], [-1, 2], [5, 5]], np.int32), 16, "mul")
# A folded ScatterND feeding a run-time Add.
sd, si, su, sx = f32(3, 2), i64([[2], [0]]), f32(2, 2), f32(3, 2)
save("scatter_nd_feeds_add", [helper.make_node("ScatterND", ["d", "i", "u"], ["s"]),
                              helper.make_node("Add", ["x", "s"], ["y"])],
     [("x", sx)], [("y", sx + ref_scatter_nd(sd, si, su))], 13,
     inits=[("d", sd), ("i", si), ("u", su)])
# Refused: data fed at run time, an index out of range, updates of the
# wrong shape, an unknown reduction.
bad("bad_scatter_nd_runtime", [helper.make_node("ScatterND", ["d", "i", "u"], ["y"], "rt_sc")],
    [("d", sd)], ["y"], 13, inits=[("i", si), ("u", su)])
bad("bad_scatter_nd_index", [helper.make_node("ScatterND", ["d", "i", "u"], ["y"])], [], ["y"],
    13, inits=[("d", sd), ("i", i64([[0], [3]])), ("u", su)])
bad("bad_scatter_nd_updates", [helper.make_node("ScatterND", ["d", "i", "u"], ["y"])], [], ["y"],
    13, inits=[("d", sd), ("i", si), ("u", f32(2, 3))])
bad("bad_scatter_nd_reduction", [helper.make_node("ScatterND", ["d", "i", "u"], ["y"],
                                                  reduction="xor")], [], ["y"],
    16, inits=[("d", sd), ("i", si), ("u", su)])
