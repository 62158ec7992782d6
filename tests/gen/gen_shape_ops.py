#!/usr/bin/python3
"""Writes tests/data/shape_ops_ref.h, the reference table of
tests/kernels/test_shape_ops.c:

    /usr/bin/python3 tests/gen/gen_shape_ops.py > tests/data/shape_ops_ref.h

Element i of input k is ((i + 100 k) * 7) % 11 - 5 (as bool: != 0), the
same function the test feeds. The outputs are NumPy's: np.pad (constant,
reflect, edge), np.tile, np.broadcast_to, np.split, np.stack. The
attributes are flowgraph's (ONNX's): pads are all begins then all ends;
expand broadcasts both ways (np.broadcast_to of the broadcast shape of x
and shape); split with num_outputs gives ceil(dim / n) to all but the last.
"""
import numpy as np

DT = {"f32": (1, np.float32), "f64": (2, np.float64), "i32": (3, np.int32),
      "i64": (4, np.int64), "bool": (5, np.bool_)}


def make(dims, k, dt):
    n = int(np.prod(dims)) if dims else 1
    v = (((np.arange(n) + 100 * k) * 7) % 11 - 5).reshape(dims)
    return (v != 0) if dt == "bool" else v.astype(DT[dt][1])


def onnx_pads(pads, rank):
    return [(pads[d], pads[d + rank]) for d in range(rank)]


def case_pad(name, dt, dims, pads, mode, value=0.0):
    x = make(dims, 0, dt)
    if mode == "constant":
        y = np.pad(x, onnx_pads(pads, len(dims)), mode="constant",
                   constant_values=np.array(value).astype(DT[dt][1]))
    else:
        y = np.pad(x, onnx_pads(pads, len(dims)), mode=mode)
    return dict(name=name, op="pad", dt=dt, dims=dims, n_in=1, ints=pads, mode=mode,
                value=value, axis=0, ys=[y])


def case_tile(name, dt, dims, reps):
    return dict(name=name, op="tile", dt=dt, dims=dims, n_in=1, ints=reps, mode="",
                value=0.0, axis=0, ys=[np.tile(make(dims, 0, dt), reps)])


def case_expand(name, dt, dims, shape):
    x = make(dims, 0, dt)
    to = np.broadcast_shapes(tuple(dims), tuple(shape))
    return dict(name=name, op="expand", dt=dt, dims=dims, n_in=1, ints=shape, mode="",
                value=0.0, axis=0, ys=[np.broadcast_to(x, to)])


def case_split(name, dt, dims, axis, sizes=None, num=None):
    x = make(dims, 0, dt)
    dim = dims[axis]
    if sizes is None:
        chunk = -(-dim // num)
        parts = [chunk] * (num - 1) + [dim - chunk * (num - 1)]
    else:
        parts = sizes
    ys = np.split(x, np.cumsum(parts)[:-1], axis=axis)
    return dict(name=name, op="split", dt=dt, dims=dims, n_in=1,
                ints=sizes if sizes is not None else [], mode="", value=float(num or 0),
                axis=axis, ys=ys)


def case_stack(name, dt, dims, n, axis):
    xs = [make(dims, k, dt) for k in range(n)]
    return dict(name=name, op="stack", dt=dt, dims=dims, n_in=n, ints=[], mode="",
                value=0.0, axis=axis, ys=[np.stack(xs, axis=axis)])


CASES = [
    case_pad("pad_constant_f32", "f32", [2, 3], [1, 0, 0, 2], "constant", 1.5),
    case_pad("pad_constant_i32", "i32", [3], [2, 1], "constant", -7),
    case_pad("pad_constant_bool", "bool", [2, 2], [0, 1, 1, 0], "constant", 1),
    case_pad("pad_reflect_f64", "f64", [3, 4], [2, 1, 1, 3], "reflect"),
    case_pad("pad_reflect_rank3_f32", "f32", [2, 3, 5], [1, 0, 4, 0, 2, 1], "reflect"),
    case_pad("pad_edge_f32", "f32", [2, 2, 3], [0, 1, 2, 1, 0, 3], "edge"),
    case_pad("pad_edge_i64_dim1", "i64", [1, 3], [2, 1, 2, 0], "edge"),
    case_tile("tile_f32", "f32", [2, 3], [2, 3]),
    case_tile("tile_rank3_i64", "i64", [2, 1, 3], [1, 2, 2]),
    case_tile("tile_zero_bool", "bool", [2, 2], [0, 3]),
    case_expand("expand_f32", "f32", [3, 1], [2, 3, 4]),
    case_expand("expand_both_ways_f64", "f64", [2, 1, 3], [4, 1]),
    case_expand("expand_i32", "i32", [1], [2, 2]),
    case_split("split_sizes_f32", "f32", [4, 6], 1, sizes=[1, 2, 3]),
    case_split("split_num_uneven_f64", "f64", [10, 2], 0, num=4),
    case_split("split_num_even_bool", "bool", [2, 6], -1, num=3),
    case_stack("stack_axis1_f32", "f32", [2, 3], 3, 1),
    case_stack("stack_axis_last_i32", "i32", [2, 2], 2, -1),
    case_stack("stack_axis0_f64", "f64", [3], 4, 0),
]


def ints(v):
    return "{" + ", ".join(str(int(a)) for a in v) + "}" if len(v) else "{0}"


print("/* Made by `/usr/bin/python3 tests/gen/gen_shape_ops.py` (NumPy %s); do not edit. */"
      % np.__version__)
print("#ifndef SHAPE_OPS_REF_H\n#define SHAPE_OPS_REF_H\n")
for c in CASES:
    flat = np.concatenate([np.asarray(y, dtype=np.float64).ravel() for y in c["ys"]])
    print("static const double %s_y[] = %s;" % (
        c["name"], "{" + ", ".join(repr(float(v)) for v in flat) + "}" if flat.size else "{0}"))
print("\nstatic const shape_ref SHAPE_REFS[] = {")
for c in CASES:
    outs = ", ".join(ints(y.shape) for y in c["ys"])
    print('    {"%s", "%s", %d, %d, %s, %d, %d, %s, "%s", %r, %d, %d, %d, {%s}, %s_y},' % (
        c["name"], c["op"], DT[c["dt"]][0], len(c["dims"]), ints(c["dims"]), c["n_in"],
        len(c["ints"]), ints(c["ints"]), c["mode"], float(c["value"]), c["axis"],
        len(c["ys"]), c["ys"][0].ndim, outs, c["name"]))
print("};\n\n#endif")
