"""ONNX cases of the importer core (tests/schema/test_onnx_core.c).

Usage: cases_core.py OUTDIR. Writes, per case NAME, NAME.onnx,
NAME.in.<input>.npy per graph input and NAME.out.<k>.npy per graph output.
Expected values are computed here with NumPy from the ONNX operator
documentation, never by flowgraph. Valid models pass onnx.checker; the
error cases (err_*) are built to be refused.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
rng = np.random.default_rng(34)
F, I64, I32, B, D = (TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32,
                     TensorProto.BOOL, TensorProto.DOUBLE)


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def save(name, nodes, inputs, outputs, feeds, expected, opset=13, inits=(),
         check=True, **model_kw):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              **model_kw)
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name + ".onnx"))
    for k, v in feeds.items():
        np.save(os.path.join(OUT, "%s.in.%s.npy" % (name, k)), v)
    for k, v in enumerate(expected):
        np.save(os.path.join(OUT, "%s.out.%d.npy" % (name, k)), v)


def node(op, ins, outs, name=None, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


# ---- Identity, passthrough, dynamic batch -------------------------------------
x = rng.standard_normal((2, 3)).astype(np.float32)
save("identity", [node("Identity", ["x"], ["y"], "id")], [vi("x", F, [2, 3])],
     [vi("y", F, [2, 3])], {"x": x}, [x])
xb = rng.standard_normal((5, 3)).astype(np.float32)
save("identity_batch", [node("Identity", ["x"], ["y"])], [vi("x", F, ["N", 3])],
     [vi("y", F, ["N", 3])], {"x": xb}, [xb])
# A graph output that is the graph input itself, and an unnamed dim.
save("passthrough", [], [vi("x", F, [None, 3])], [vi("x", F, [None, 3])], {"x": xb}, [xb])

# ---- Constant (every value attribute) -----------------------------------------
c = rng.standard_normal((2, 2)).astype(np.float32)
save("constant_value", [node("Constant", [], ["c"], value=numpy_helper.from_array(c))], [],
     [vi("c", F, [2, 2])], {}, [c])
save("constant_float", [node("Constant", [], ["c"], value_float=2.5)], [], [vi("c", F, [])],
     {}, [np.array(2.5, np.float32)])
save("constant_floats", [node("Constant", [], ["c"], value_floats=[1.0, -2.0, 0.25])], [],
     [vi("c", F, [3])], {}, [np.array([1.0, -2.0, 0.25], np.float32)])
save("constant_int", [node("Constant", [], ["c"], value_int=-7)], [], [vi("c", I64, [])], {},
     [np.array(-7, np.int64)])
save("constant_ints", [node("Constant", [], ["c"], value_ints=[3, 1 << 40, -2])], [],
     [vi("c", I64, [3])], {}, [np.array([3, 1 << 40, -2], np.int64)])
cd = rng.standard_normal((3,)).astype(np.float64)
save("constant_double_typed",
     [node("Constant", [], ["c"], value=helper.make_tensor("v", D, [3], cd.tolist()))], [],
     [vi("c", D, [3])], {}, [cd], opset=9)

# ---- initializers: raw_data and each typed field -------------------------------
w = rng.standard_normal((3, 4)).astype(np.float32)
wi = np.array([[1, -2], [3, 1 << 35]], np.int64)
w32 = np.array([7, -8, 9], np.int32)
wb = np.array([True, False, True, True])
wd = rng.standard_normal((2,)).astype(np.float64)
inits = [numpy_helper.from_array(w, "w_raw"),
         helper.make_tensor("w_typed", F, [3, 4], w.flatten().tolist()),
         helper.make_tensor("i64_typed", I64, [2, 2], wi.flatten().tolist()),
         numpy_helper.from_array(wi, "i64_raw"),
         helper.make_tensor("i32_typed", I32, [3], w32.tolist()),
         helper.make_tensor("b_typed", B, [4], wb.tolist()),
         numpy_helper.from_array(wb, "b_raw"),
         helper.make_tensor("d_typed", D, [2], wd.tolist()),
         numpy_helper.from_array(np.array(3.5, np.float32), "scalar")]
save("initializers", [node("Identity", [t.name], [t.name + "_out"]) for t in inits], [],
     [vi(t.name + "_out", t.data_type, list(t.dims)) for t in inits], {},
     [w, w, wi, wi, w32, wb, wb, wd, np.array(3.5, np.float32)], inits=inits)
# Graph outputs that name initializers directly.
save("initializer_output", [], [], [vi("w_raw", F, [3, 4])], {}, [w], inits=inits[:1])

# ---- Cast ----------------------------------------------------------------------
xc = np.array([-2.7, -0.5, 0.0, 0.5, 1.9, 3.0], np.float32)
for to, name, np_t in [(I64, "i64", np.int64), (I32, "i32", np.int32), (D, "f64", np.float64),
                       (B, "bool", np.bool_), (F, "f32", np.float32)]:
    # ONNX Cast: float to integer truncates toward zero (C's conversion).
    want = np.trunc(xc).astype(np_t) if np_t in (np.int64, np.int32) else xc.astype(np_t)
    save("cast_f32_" + name, [node("Cast", ["x"], ["y"], to=to)], [vi("x", F, [6])],
         [vi("y", to, [6])], {"x": xc}, [want])
xi = np.array([-3, 0, 5, 1 << 20], np.int64)
save("cast_i64_f32", [node("Cast", ["x"], ["y"], to=F)], [vi("x", I64, [4])],
     [vi("y", F, [4])], {"x": xi}, [xi.astype(np.float32)], opset=7)
# Cast of a value known at import is folded.
save("cast_known", [node("Constant", [], ["c"], value_floats=[1.5, -2.5, 7.9]),
                    node("Cast", ["c"], ["y"], to=I32)], [], [vi("y", I32, [3])], {},
     [np.array([1, -2, 7], np.int32)])

# ---- Shape, ConstantOfShape, Range ---------------------------------------------
xs = rng.standard_normal((2, 3, 4)).astype(np.float32)
save("shape", [node("Shape", ["x"], ["s"])], [vi("x", F, [2, 3, 4])], [vi("s", I64, [3])],
     {"x": xs}, [np.array([2, 3, 4], np.int64)])
# opset 15: start and end, negative and clamped.
for name, kw, want in [("shape_start", {"start": 1}, [3, 4]),
                       ("shape_start_end", {"start": -2, "end": -1}, [3]),
                       ("shape_clamped", {"start": -10, "end": 10}, [2, 3, 4]),
                       ("shape_empty", {"start": 2, "end": 1}, [])]:
    save(name, [node("Shape", ["x"], ["s"], **kw)], [vi("x", F, [2, 3, 4])],
         [vi("s", I64, [len(want)])], {"x": xs}, [np.array(want, np.int64)], opset=15)
save("constant_of_shape", [node("Shape", ["x"], ["s"]),
                           node("ConstantOfShape", ["s"], ["y"],
                                value=helper.make_tensor("v", I64, [1], [7]))],
     [vi("x", F, [2, 3, 4])], [vi("y", I64, [2, 3, 4])], {"x": xs},
     [np.full((2, 3, 4), 7, np.int64)])
save("constant_of_shape_default",
     [node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([2, 5], np.int64))),
      node("ConstantOfShape", ["s"], ["y"])], [], [vi("y", F, [2, 5])], {},
     [np.zeros((2, 5), np.float32)], opset=9)
# Large enough to become a fill node rather than a tensor held at import.
save("constant_of_shape_big",
     [node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([300, 301], np.int64))),
      node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(
          np.array([1.5], np.float32)))], [], [vi("y", F, [300, 301])], {},
     [np.full((300, 301), 1.5, np.float32)])
for name, dt, np_t, (a, b, d) in [("range_i64", I64, np.int64, (10, -3, -4)),
                                  ("range_f32", F, np.float32, (0.5, 2.0, 0.25)),
                                  ("range_i32", I32, np.int32, (1, 7, 2)),
                                  ("range_empty", I64, np.int64, (5, 2, 1)),
                                  ("range_i64_big", I64, np.int64,
                                   (-(1 << 62), 1 << 62, 1 << 61))]:
    consts = [node("Constant", [], [n_], value=numpy_helper.from_array(np.array(v, np_t)))
              for n_, v in (("a", a), ("b", b), ("d", d))]
    # The operator's definition, written out.
    n_el = max(int(np.ceil((b - a) / d)), 0)
    want = np.array([a + i * d for i in range(n_el)], np_t)
    save(name, consts + [node("Range", ["a", "b", "d"], ["y"])], [],
         [vi("y", dt, [n_el])], {}, [want], opset=11)

# ---- Dropout (inference) -------------------------------------------------------
xd = rng.standard_normal((3, 4)).astype(np.float32)
save("dropout13", [node("Constant", [], ["r"], value=numpy_helper.from_array(
    np.array(0.3, np.float32))), node("Constant", [], ["t"], value=numpy_helper.from_array(
        np.array(False))), node("Dropout", ["x", "r", "t"], ["y", "m"])],
     [vi("x", F, [3, 4])], [vi("y", F, [3, 4]), vi("m", B, [3, 4])], {"x": xd},
     [xd, np.ones((3, 4), np.bool_)])
save("dropout7", [node("Dropout", ["x"], ["y", "m"], ratio=0.2)], [vi("x", F, [3, 4])],
     [vi("y", F, [3, 4]), vi("m", F, [3, 4])], {"x": xd}, [xd, np.ones((3, 4), np.float32)],
     opset=7)
save("dropout12_plain", [node("Dropout", ["x"], ["y"])], [vi("x", F, ["N", 4])],
     [vi("y", F, ["N", 4])], {"x": xd}, [xd], opset=12)

# ---- names and metadata --------------------------------------------------------
# Repeated and missing node names: made unique.
save("names", [node("Identity", ["x"], ["a"], "dup"), node("Identity", ["a"], ["b"], "dup"),
               node("Identity", ["b"], ["c"]), node("Identity", ["c"], ["y"], "last")],
     [vi("x", F, [2, 3])], [vi("y", F, [2, 3]), vi("b", F, [2, 3])], {"x": x}, [x, x],
     check=False)
# One name five times: same, same_2, ..., same_5 (the last one then takes
# its graph output's name).
save("names_many", [node("Identity", ["x" if i == 0 else "t%d" % i], ["t%d" % (i + 1)], "same")
                    for i in range(5)] + [node("Identity", ["t5"], ["y"], "end")],
     [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], {"x": x}, [x], check=False)
meta = helper.make_graph([node("Identity", ["x"], ["y"])], "g_name", [vi("x", F, [2, 3])],
                         [vi("y", F, [2, 3])], doc_string="graph docs")
mm = helper.make_model(meta, opset_imports=[helper.make_opsetid("", 13)],
                       producer_name="cases_core", producer_version="1.2.3",
                       domain="org.flowgraph.test", model_version=42, doc_string="model docs")
helper.set_model_props(mm, {"author": "tests", "license": "MIT"})
onnx.checker.check_model(mm)
onnx.save(mm, os.path.join(OUT, "metadata.onnx"))
np.save(os.path.join(OUT, "metadata.in.x.npy"), x)
np.save(os.path.join(OUT, "metadata.out.0.npy"), x)
# Names with ':' (PyTorch's "onnx::..."), which flowgraph reserves.
save("colon_names", [node("Identity", ["in::x"], ["onnx::y"], "n::1")],
     [vi("in::x", F, [2, 3])], [vi("onnx::y", F, [2, 3])], {"in::x": x}, [x])

# ---- errors --------------------------------------------------------------------
ew = numpy_helper.from_array(np.array([1, 2], np.uint8), "w8")
save("err_uint8_init", [node("Identity", ["w8"], ["y"], "use_w8")], [], [vi("y", TensorProto.UINT8, [2])],
     {}, [], inits=[ew])
save("err_uint8_input", [node("Identity", ["x"], ["y"])], [vi("x", TensorProto.UINT8, [2])],
     [vi("y", TensorProto.UINT8, [2])], {}, [])
save("err_symbolic_dim", [node("Identity", ["x"], ["y"])], [vi("x", F, [2, "S"])],
     [vi("y", F, [2, "S"])], {}, [])
save("err_opset6", [node("Identity", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, [2])], {},
     [], opset=6, check=False)
save("err_opset18", [node("Identity", ["x"], ["y"])], [vi("x", F, [2])], [vi("y", F, [2])], {},
     [], opset=18, check=False)
unm = [node("FooBar", ["x"], ["a"], "f1"), node("Identity", ["a"], ["b"]),
       node("FooBar", ["b"], ["c"], "f2"), node("Baz", ["c"], ["d"], "z1", domain="com.example"),
       node("Identity", ["d"], ["y"])]
g_unm = helper.make_graph(unm, "unm", [vi("x", F, [2])], [vi("y", F, [2])])
m_unm = helper.make_model(g_unm, opset_imports=[helper.make_opsetid("", 13),
                                                helper.make_opsetid("com.example", 3)])
onnx.save(m_unm, os.path.join(OUT, "err_unmapped.onnx"))
save("err_shape_batch", [node("Shape", ["x"], ["s"])], [vi("x", F, ["N", 3])],
     [vi("s", I64, [2])], {}, [])
save("err_cast_to_f16", [node("Cast", ["x"], ["y"], "to_half", to=TensorProto.FLOAT16)],
     [vi("x", F, [2])], [vi("y", TensorProto.FLOAT16, [2])], {}, [])
save("err_dropout_training", [node("Constant", [], ["t"], value=numpy_helper.from_array(
    np.array(True))), node("Dropout", ["x", "", "t"], ["y"], "drop")], [vi("x", F, [2])],
     [vi("y", F, [2])], {}, [])
save("err_constant_sparse", [node("Constant", [], ["y"], "sp", value_string="hi")], [],
     [vi("y", TensorProto.STRING, [])], {}, [], check=False)
# value_info (here on the graph outputs and an intermediate) that disagrees
# with what the node computes.
save("err_declared_shape", [node("Identity", ["x"], ["y"], "ident")], [vi("x", F, [2, 3])],
     [vi("y", F, [3, 2])], {}, [], check=False)
save("err_declared_dtype", [node("Cast", ["x"], ["y"], "caster", to=I64)], [vi("x", F, [2])],
     [vi("y", F, [2])], {}, [], check=False)
g_vi = helper.make_graph([node("Identity", ["x"], ["a"], "first"),
                          node("Identity", ["a"], ["y"], "second")], "vi",
                         [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
                         value_info=[vi("a", F, [2, 4])])
onnx.save(helper.make_model(g_vi, opset_imports=[helper.make_opsetid("", 13)]),
          os.path.join(OUT, "err_declared_value_info.onnx"))
