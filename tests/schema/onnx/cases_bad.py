"""Malformed and hostile ONNX files (tests/schema/test_onnx_badfiles.c).

Usage: cases_bad.py OUTDIR. Writes NAME.onnx per case: one or more per row
of the importer's untrusted-file rules (truncated protobuf, wrong wire
types, tensors whose dims overflow or disagree with their data, node inputs
naming nothing, cycles, duplicate outputs, opsets out of range, external
data leaving the model's folder, attributes of the wrong type, empty
graphs, a 2 GB length prefix), plus valid external-data models with their
expected outputs (NAME.out.0.npy) for the positive cases. Bytes that
onnx's own API refuses to write are encoded by hand (pb_* below).
"""
import os
import sys

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, helper, numpy_helper

OUT = sys.argv[1]
F = TensorProto.FLOAT


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def write(name, data):
    if not isinstance(data, (bytes, bytearray)):
        data = data.SerializeToString()
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(data)


# ---- a hand encoder for bytes no API writes ------------------------------------
def pb_varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_tag(field, wt):
    return pb_varint(field << 3 | wt)


def pb_len(field, payload):
    return pb_tag(field, 2) + pb_varint(len(payload)) + payload


def pb_int(field, v):
    return pb_tag(field, 0) + pb_varint(v)


OPSET13 = pb_len(8, pb_len(1, b"") + pb_int(2, 13))

# A small valid model: y = Identity(x) with an initializer w (raw_data).
w = np.arange(6, dtype=np.float32).reshape(2, 3)
good = model([helper.make_node("Identity", ["x"], ["y"], name="id")], [vi("x", F, [2, 3])],
             [vi("y", F, [2, 3])], [numpy_helper.from_array(w, "w")])
good_bytes = good.SerializeToString()
write("good", good_bytes)

# ---- truncated protobuf ----------------------------------------------------------
# Cut inside the initializer's raw_data: a length runs past the end.
cut = good_bytes.index(w.tobytes()) + 5
write("truncated_raw", good_bytes[:cut])
write("truncated_varint", pb_int(1, 8)[:1] + b"\x80")  # a varint cut in its middle

# ---- wrong wire types ------------------------------------------------------------
# ir_version (a varint) sent as a 32-bit value.
write("wire_top", pb_tag(1, 5) + b"\x08\x00\x00\x00" + OPSET13)
# op_type of node 0 (a string) sent as a varint, two messages deep.
node = pb_len(1, b"x") + pb_len(2, b"y") + pb_len(3, b"n0") + pb_int(4, 7)
write("wire_node", pb_int(1, 8) + OPSET13 + pb_len(7, pb_len(1, node)))
# a start-group wire type, which ONNX never uses
write("wire_group", pb_int(1, 8) + OPSET13 + pb_len(7, pb_tag(2, 3)))

# ---- tensors: dims past 2^63, dims against data ----------------------------------
t = TensorProto(name="huge", data_type=F, dims=[1 << 32, 1 << 32, 4])
write("dims_overflow", model([helper.make_node("Identity", ["huge"], ["y"])], [],
                             [vi("y", F, None)], [t]))
t = TensorProto(name="big", data_type=F, dims=[1 << 20, 1 << 20], raw_data=b"\0" * 16)
write("dims_vs_raw", model([helper.make_node("Identity", ["big"], ["y"])], [],
                           [vi("y", F, None)], [t]))
t = TensorProto(name="short", data_type=F, dims=[2, 3], float_data=[1.0, 2.0])
write("dims_vs_typed", model([helper.make_node("Identity", ["short"], ["y"])], [],
                             [vi("y", F, None)], [t]))
t = TensorProto(name="neg", data_type=F, dims=[2, -3])
write("dims_negative", model([helper.make_node("Identity", ["neg"], ["y"])], [],
                             [vi("y", F, None)], [t]))
t = TensorProto(name="mixed", data_type=TensorProto.INT64, dims=[2], float_data=[1.0, 2.0])
write("typed_wrong_field", model([helper.make_node("Identity", ["mixed"], ["y"])], [],
                                 [vi("y", TensorProto.INT64, None)], [t]))

# ---- node inputs, cycles, duplicates ---------------------------------------------
write("input_no_tensor", model([helper.make_node("Identity", ["x"], ["a"], name="first"),
                                helper.make_node("Identity", ["ghost"], ["y"], name="second")],
                               [vi("x", F, [2])], [vi("y", F, [2])]))
write("cycle", model([helper.make_node("Identity", ["b"], ["a"], name="A"),
                      helper.make_node("Identity", ["a"], ["b"], name="B"),
                      helper.make_node("Identity", ["b"], ["y"], name="C")], [],
                     [vi("y", F, [2])]))
write("self_loop", model([helper.make_node("Identity", ["y"], ["y"], name="loop")], [],
                         [vi("y", F, [2])]))
write("dup_output", model([helper.make_node("Identity", ["x"], ["a"], name="one"),
                           helper.make_node("Identity", ["x"], ["a"], name="two")],
                          [vi("x", F, [2])], [vi("a", F, [2])]))
write("dup_output_input", model([helper.make_node("Identity", ["x"], ["x"], name="over")],
                                [vi("x", F, [2])], [vi("x", F, [2])]))
write("dup_graph_output", model([helper.make_node("Identity", ["x"], ["y"])],
                                [vi("x", F, [2])], [vi("y", F, [2]), vi("y", F, [2])]))
write("graph_output_no_tensor", model([helper.make_node("Identity", ["x"], ["y"])],
                                      [vi("x", F, [2])], [vi("z", F, [2])]))

# ---- opsets ----------------------------------------------------------------------
ident = [helper.make_node("Identity", ["x"], ["y"])]
write("opset_99", model(ident, [vi("x", F, [2])], [vi("y", F, [2])], opset=99))
write("opset_0", model(ident, [vi("x", F, [2])], [vi("y", F, [2])], opset=0))
m = model(ident, [vi("x", F, [2])], [vi("y", F, [2])])
del m.opset_import[:]
write("opset_none", m)

# ---- external data ---------------------------------------------------------------
def external(name, location, dims=(2, 3), offset=None, length=None):
    t = TensorProto(name="ext", data_type=F, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    write(name, model([helper.make_node("Identity", ["ext"], ["y"], name="use_ext")], [],
                      [vi("y", F, list(dims))], [t]))


ext = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
with open(os.path.join(OUT, "weights.bin"), "wb") as f:
    f.write(b"\x11" * 16 + ext.tobytes() + b"\x22" * 8)
os.makedirs(os.path.join(OUT, "sub"), exist_ok=True)
with open(os.path.join(OUT, "sub", "w.bin"), "wb") as f:
    f.write(ext.tobytes())
external("ext_ok", "weights.bin", offset=16, length=24)
np.save(os.path.join(OUT, "ext_ok.out.0.npy"), ext)
external("ext_subdir", "sub/w.bin")
np.save(os.path.join(OUT, "ext_subdir.out.0.npy"), ext)
external("ext_dotdot", "../weights.bin")
external("ext_dotdot_inner", "sub/../../weights.bin")
external("ext_absolute", "/etc/passwd")
# A link inside the folder that leads out of it (to the folder above).
os.symlink(os.path.dirname(os.path.abspath(OUT)), os.path.join(OUT, "escape.bin"))
external("ext_symlink", "escape.bin")
external("ext_missing", "nothere.bin")
external("ext_length", "weights.bin", offset=16, length=20)
external("ext_offset", "weights.bin", offset=40)
external("ext_offset_text", "weights.bin", offset="-5")
external("ext_no_location", "")

# ---- large raw_data, which fg_onnx_load reads from the file ---------------------
# y = x + w + b: w [64, 64] (16 KiB of raw_data, left in the file while the
# rest decodes), b [64] (256 bytes, decoded with the message).
bw = np.sin(np.arange(64 * 64, dtype=np.float64)).astype(np.float32).reshape(64, 64)
bb = np.cos(np.arange(64, dtype=np.float64)).astype(np.float32)
bx = np.linspace(-2, 2, 64 * 64, dtype=np.float32).reshape(64, 64)
big_nodes = [helper.make_node("Add", ["x", "w"], ["xw"], name="add_w"),
             helper.make_node("Add", ["xw", "b"], ["y"], name="add_b")]
big_io = ([vi("x", F, [64, 64])], [vi("y", F, [64, 64])])


def big_case(name, data, want):
    write(name, data)
    np.save(os.path.join(OUT, name + ".in.x.npy"), bx)
    np.save(os.path.join(OUT, name + ".out.0.npy"), want)


big = model(big_nodes, *big_io, [numpy_helper.from_array(bw, "w"),
                                 numpy_helper.from_array(bb, "b")])
big_case("big_raw_ok", big, bx + bw + bb)
# w's raw_data twice: protobuf keeps the last (zeros first, then w).
w_twice = (pb_int(1, 64) + pb_int(1, 64) + pb_int(2, F) + pb_len(8, b"w") +
           pb_len(9, b"\0" * bw.nbytes) + pb_len(9, bw.tobytes()))
g_twice = model(big_nodes, *big_io, [numpy_helper.from_array(bb, "b")])
assert onnx.TensorProto.FromString(w_twice).raw_data == bw.tobytes()
g_bytes = g_twice.graph.SerializeToString() + pb_len(5, w_twice)
g_twice.ClearField("graph")
big_case("big_raw_twice", g_twice.SerializeToString() + pb_len(7, g_bytes), bx + bw + bb)
# Two graph fields, which protobuf merges: the nodes in the first, w and b
# in the second.
m = model(big_nodes, *big_io)
second = helper.make_graph([], "", [], [], initializer=[numpy_helper.from_array(bw, "w"),
                                                        numpy_helper.from_array(bb, "b")])
merged = m.SerializeToString() + pb_len(7, second.SerializeToString())
assert len(onnx.ModelProto.FromString(merged).graph.initializer) == 2
big_case("big_graph_twice", merged, bx + bw + bb)
# 4 bytes more raw_data than the dims hold; and the file cut inside w's.
t = numpy_helper.from_array(bw, "w")
t.raw_data = bw.tobytes() + b"\0" * 4
write("big_raw_long", model(big_nodes, *big_io, [t, numpy_helper.from_array(bb, "b")]))
big_bytes = big.SerializeToString()
write("big_raw_truncated", big_bytes[:big_bytes.index(bw.tobytes()) + 1000])
# A varint of more than 64 bits (ir_version) in front of a model with w;
# and, after w, a graph output (field 12) sent as a varint: the messages
# name the byte of the file (saved as NAME.at.npy).
write("big_varint_65_bits", pb_tag(1, 0) + b"\xff" * 9 + b"\x7f" + big_bytes)
g_bytes = big.graph.SerializeToString() + pb_int(12, 5)
m = onnx.ModelProto()
m.CopyFrom(big)
m.ClearField("graph")
head = m.SerializeToString() + pb_tag(7, 2) + pb_varint(len(g_bytes))
write("big_bad_output", head + g_bytes)
np.save(os.path.join(OUT, "big_bad_output.at.npy"), np.array(len(head) + len(g_bytes) - 2))

# ---- attributes of the wrong type ------------------------------------------------
write("attr_type", model([helper.make_node("Cast", ["x"], ["y"], name="caster", to=1.0)],
                         [vi("x", F, [2])], [vi("y", F, [2])]))
write("attr_constant_type", model([helper.make_node("Constant", [], ["y"], name="konst",
                                                    value=3)], [], [vi("y", F, [])]))

# ---- empty graphs ----------------------------------------------------------------
write("empty_graph", model([], [], []))
m = helper.make_model(helper.make_graph([], "g", [], []),
                      opset_imports=[helper.make_opsetid("", 13)])
m.ClearField("graph")
write("no_graph", m)

# ---- a 2 GB length prefix --------------------------------------------------------
write("length_2gb", pb_int(1, 8) + OPSET13 + pb_tag(7, 2) + pb_varint(1 << 31) + b"\0" * 64)
write("length_huge", pb_int(1, 8) + pb_tag(7, 2) + pb_varint((1 << 64) - 1))
# initializer count claims: a packed int64 field with a 2 GB length inside a tensor
tensor = pb_len(1, b"\x02") + pb_int(2, 7) + pb_tag(7, 2) + pb_varint(1 << 31)
write("length_2gb_inner", pb_int(1, 8) + OPSET13 + pb_len(7, pb_len(5, tensor)))

# ---- nesting deeper than any model ------------------------------------------------
g = GraphProto(name="leaf")
for i in range(40):
    a = AttributeProto(name="then_branch", type=AttributeProto.GRAPH)
    a.g.CopyFrom(g)
    n = NodeProto(op_type="If", input=["c"], output=["o%d" % i])
    n.attribute.append(a)
    g = GraphProto(name="level%d" % i)
    g.node.append(n)
m = onnx.ModelProto(ir_version=8, graph=g)
m.opset_import.add(domain="", version=13)
write("deep_nesting", m)
