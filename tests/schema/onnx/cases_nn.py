#!/usr/bin/python3
"""ONNX cases for the neural-network op mappers (schema/onnx/onnx_map_nn.c
and its siblings), checked by tests/schema/test_onnx_nn.c.

usage: cases_nn.py OUT_DIR

Writes, per case NAME, OUT_DIR/NAME.onnx, NAME.in.<input>.npy for each graph
input and NAME.out.<k>.npy for each graph output k. Expected values come
from PyTorch (torch.nn.functional, where its semantics are ONNX's) or from
NumPy reference code written from the ONNX operator documentation; never
from flowgraph. Cases named bad_* hold only the model: the C test expects
the import to fail.
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
RNG = np.random.default_rng(34)
DT = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
      np.int64: TensorProto.INT64, np.int32: TensorProto.INT32, np.bool_: TensorProto.BOOL}
# Ops this onnx (1.12) has no schema for: such models skip the checker.
UNCHECKED = {"Gelu"}


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def tdt(a):
    return DT[a.dtype.type]


def case(name, nodes, inputs, outputs, inits=None, opset=13, dyn=()):
    """inputs: {name: array} fed at run time; inits: {name: array} stored as
    initializers; outputs: [(name, expected array)]; dyn: input names whose
    leading dimension is the symbolic 'N'."""
    inits = inits or {}
    vis = []
    for k, a in inputs.items():
        shape = list(a.shape)
        if k in dyn:
            shape[0] = "N"
        vis.append(helper.make_tensor_value_info(k, tdt(a), shape))
    vos = []
    for k, a in outputs:
        a = np.asarray(a)
        shape = list(a.shape)
        if dyn and shape and shape[0] == inputs[dyn[0]].shape[0]:
            shape[0] = "N"
        vos.append(helper.make_tensor_value_info(k, tdt(a), shape))
    g = helper.make_graph(nodes, name, vis, vos,
                          [numpy_helper.from_array(a, k) for k, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    if not any(nd.op_type in UNCHECKED for nd in nodes) and not name.startswith("bad_"):
        onnx.checker.check_model(m)
    onnx.save(m, os.path.join(OUT, name + ".onnx"))
    for k, a in inputs.items():
        np.save(os.path.join(OUT, "%s.in.%s.npy" % (name, k)), a)
    for i, (_, a) in enumerate(outputs):
        np.save(os.path.join(OUT, "%s.out.%d.npy" % (name, i)), np.asarray(a))


def bad(name, nodes, inputs, inits=None, opset=13, out_dt=TensorProto.FLOAT):
    vis = [helper.make_tensor_value_info(k, tdt(a), list(a.shape)) for k, a in inputs.items()]
    vos = [helper.make_tensor_value_info(nodes[-1].output[0], out_dt, None)]
    g = helper.make_graph(nodes, name, vis, vos,
                          [numpy_helper.from_array(a, k) for k, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.save(m, os.path.join(OUT, name + ".onnx"))


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def n(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


# ---- Conv -------------------------------------------------------------------

def same_pads(ins, ks, ss, ds, upper):
    """ONNX SAME_*: output ceil(in / stride); the odd pad at the end (upper)
    or the beginning (lower). Returns ONNX-ordered pads."""
    b, e = [], []
    for i, k, s, d in zip(ins, ks, ss, ds):
        out = -(-i // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - i, 0)
        lo = total // 2 if upper else total - total // 2
        b.append(lo)
        e.append(total - lo)
    return b + e


def conv_ref(x, w, b, strides, pads, dil, group):
    """torch's conv with ONNX pads (begins then ends) applied by F.pad."""
    ns = x.ndim - 2
    tp = []
    for k in reversed(range(ns)):  # F.pad wants the last axis first
        tp += [pads[k], pads[ns + k]]
    xp = F.pad(t(x), tp)
    fn = F.conv1d if ns == 1 else F.conv2d
    return fn(xp, t(w), None if b is None else t(b), stride=strides, dilation=dil,
              groups=group).numpy()


def conv_cases():
    x = rand(2, 3, 7, 8)
    w = rand(4, 3, 3, 3)
    b = rand(4)
    case("conv2d_basic", [n("Conv", ["x", "w", "b"])], {"x": x},
         [("y", conv_ref(x, w, b, 1, [0] * 4, 1, 1))], {"w": w, "b": b})
    case("conv2d_opset7", [n("Conv", ["x", "w", "b"], kernel_shape=[3, 3])], {"x": x},
         [("y", conv_ref(x, w, b, 1, [0] * 4, 1, 1))], {"w": w, "b": b}, opset=7)
    case("conv2d_dynbatch", [n("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1])], {"x": x},
         [("y", conv_ref(x, w, b, 1, [1] * 4, 1, 1))], {"w": w, "b": b}, dyn=("x",))
    w2 = rand(5, 3, 3, 2)
    p = [1, 2, 0, 1]
    case("conv2d_pads_strides_dil",
         [n("Conv", ["x", "w"], pads=p, strides=[2, 1], dilations=[1, 2])], {"x": x},
         [("y", conv_ref(x, w2, None, [2, 1], p, [1, 2], 1))], {"w": w2})
    xg = rand(1, 6, 6, 5)
    wg = rand(9, 2, 3, 3)
    bg = rand(9)
    case("conv2d_group", [n("Conv", ["x", "w", "b"], group=3, pads=[1, 1, 1, 1])], {"x": xg},
         [("y", conv_ref(xg, wg, bg, 1, [1] * 4, 1, 3))], {"w": wg, "b": bg})
    wd = rand(6, 1, 3, 3)
    case("conv2d_depthwise", [n("Conv", ["x", "w"], group=6, strides=[2, 2])], {"x": xg},
         [("y", conv_ref(xg, wd, None, 2, [0] * 4, 1, 6))], {"w": wd})
    for mode, up in (("SAME_UPPER", True), ("SAME_LOWER", False)):
        p = same_pads([7, 8], [3, 3], [2, 2], [1, 1], up)
        case("conv2d_" + mode.lower(), [n("Conv", ["x", "w", "b"], auto_pad=mode, strides=[2, 2])],
             {"x": x}, [("y", conv_ref(x, w, b, 2, p, 1, 1))], {"w": w, "b": b})
        # stride 1: the pads do not depend on the input size, so a dynamic
        # batch is fine (and here the spatial size is known anyway)
        # extents 5 and 2: total pads 4 and 1, the odd one placed by the mode
        p = same_pads([7, 8], [3, 2], [1, 1], [2, 1], up)
        case("conv2d_%s_dil" % mode.lower(),
             [n("Conv", ["x", "w"], auto_pad=mode, dilations=[2, 1])], {"x": x},
             [("y", conv_ref(x, w2, None, 1, p, [2, 1], 1))], {"w": w2})
    case("conv2d_valid", [n("Conv", ["x", "w"], auto_pad="VALID", strides=[1, 2])], {"x": x},
         [("y", conv_ref(x, w, None, [1, 2], [0] * 4, 1, 1))], {"w": w})
    case("conv2d_kernel_shape", [n("Conv", ["x", "w"], kernel_shape=[3, 2])], {"x": x},
         [("y", conv_ref(x, w2, None, 1, [0] * 4, 1, 1))], {"w": w2})
    x64, w64 = rand(1, 2, 5, 5, dtype=np.float64), rand(3, 2, 2, 2, dtype=np.float64)
    case("conv2d_f64", [n("Conv", ["x", "w"], pads=[0, 1, 1, 0])], {"x": x64},
         [("y", conv_ref(x64, w64, None, 1, [0, 1, 1, 0], 1, 1))], {"w": w64})
    x1, w1, b1 = rand(2, 4, 11), rand(6, 2, 3), rand(6)
    case("conv1d", [n("Conv", ["x", "w", "b"], pads=[1, 2], strides=[2], dilations=[2], group=2)],
         {"x": x1}, [("y", conv_ref(x1, w1, b1, 2, [1, 2], 2, 2))], {"w": w1, "b": b1})
    p = same_pads([11], [3], [3], [1], True)
    w1s = rand(5, 4, 3)
    case("conv1d_same_upper", [n("Conv", ["x", "w"], auto_pad="SAME_UPPER", strides=[3])],
         {"x": x1}, [("y", conv_ref(x1, w1s, None, 3, p, 1, 1))], {"w": w1s})
    bad("bad_conv_kernel_shape", [n("Conv", ["x", "w"], kernel_shape=[2, 2])], {"x": x}, {"w": w})
    bad("bad_conv_group", [n("Conv", ["x", "w"], group=2)], {"x": x}, {"w": w})
    bad("bad_conv_auto_pad", [n("Conv", ["x", "w"], auto_pad="SAME")], {"x": x}, {"w": w})
    bad("bad_conv_3d", [n("Conv", ["x", "w"])], {"x": rand(1, 2, 3, 4, 5)},
        {"w": rand(2, 2, 1, 1, 1)})
    bad("bad_conv_weight_rank", [n("Conv", ["x", "w"])], {"x": x}, {"w": rand(4, 3, 3)})


# ---- ConvTranspose ------------------------------------------------------------

def convt_ref(x, w, b, strides, dil, group, out_pad, pads):
    """The full transposed convolution (torch, no padding), cropped by the
    ONNX pads (begins then ends)."""
    ns = x.ndim - 2
    fn = F.conv_transpose1d if ns == 1 else F.conv_transpose2d
    y = fn(t(x), t(w), None if b is None else t(b), stride=strides, dilation=dil, groups=group,
           output_padding=out_pad).numpy()
    sl = [slice(None), slice(None)]
    for k in range(ns):
        sl.append(slice(pads[k], y.shape[2 + k] - pads[ns + k]))
    return y[tuple(sl)]


def convt_total(ins, ks, ss, ds, ops, outs, upper):
    """ONNX ConvTranspose: pads from a wanted output size."""
    b, e = [], []
    for i, k, s, d, op, o in zip(ins, ks, ss, ds, ops, outs):
        total = s * (i - 1) + op + ((k - 1) * d + 1) - o
        lo = total // 2 if upper else total - total // 2
        b.append(lo)
        e.append(total - lo)
    return b + e


def convt_cases():
    x, w, b = rand(2, 4, 5, 5), rand(4, 2, 3, 3), rand(2)
    case("convt2d_basic", [n("ConvTranspose", ["x", "w", "b"])], {"x": x},
         [("y", convt_ref(x, w, b, 1, 1, 1, 0, [0] * 4))], {"w": w, "b": b})
    p = [1, 0, 1, 1]
    case("convt2d_strides_pads_outpad",
         [n("ConvTranspose", ["x", "w", "b"], strides=[2, 3], pads=p, output_padding=[1, 2])],
         {"x": x}, [("y", convt_ref(x, w, b, [2, 3], 1, 1, [1, 2], p))], {"w": w, "b": b},
         dyn=("x",))
    wg = rand(4, 3, 2, 3)
    case("convt2d_group_dil", [n("ConvTranspose", ["x", "w"], group=2, dilations=[2, 1],
                                 strides=[2, 2])],
         {"x": x}, [("y", convt_ref(x, wg, None, 2, [2, 1], 2, 0, [0] * 4))], {"w": wg})
    p = convt_total([5, 5], [3, 3], [2, 2], [1, 1], [0, 0], [10, 9], False)
    case("convt2d_output_shape", [n("ConvTranspose", ["x", "w"], strides=[2, 2],
                                    output_shape=[10, 9])],
         {"x": x}, [("y", convt_ref(x, w, None, 2, 1, 1, 0, p))], {"w": w})
    for mode, up in (("SAME_UPPER", True), ("SAME_LOWER", False)):
        p = convt_total([5, 5], [3, 3], [2, 2], [1, 1], [0, 0], [10, 10], up)
        case("convt2d_" + mode.lower(), [n("ConvTranspose", ["x", "w"], strides=[2, 2],
                                           auto_pad=mode)],
             {"x": x}, [("y", convt_ref(x, w, None, 2, 1, 1, 0, p))], {"w": w})
    x1, w1 = rand(1, 3, 6), rand(3, 2, 4)
    case("convt1d", [n("ConvTranspose", ["x", "w"], strides=[2], pads=[1, 2])], {"x": x1},
         [("y", convt_ref(x1, w1, None, 2, 1, 1, 0, [1, 2]))], {"w": w1})
    bad("bad_convt_output_padding",
        [n("ConvTranspose", ["x", "w"], strides=[2, 2], output_padding=[2, 0])], {"x": x}, {"w": w})
    bad("bad_convt_channels", [n("ConvTranspose", ["x", "w"])], {"x": x}, {"w": rand(3, 2, 3, 3)})


# ---- pools --------------------------------------------------------------------

def pool_ref(x, kernel, strides, pads, dil, ceil_mode, is_max, cip):
    """Pooling from the ONNX text: windows over the input padded by pads,
    output size floor (or ceil) of (in + pads - extent) / stride + 1, where a
    ceil window must start inside the input or its leading padding (the
    rule PyTorch, which exports ceil_mode, applies). Max and average over
    the window's elements inside the input; count_include_pad 1 divides by
    the window's elements inside the padded input instead."""
    ns = x.ndim - 2
    outs = []
    for k in range(ns):
        i, kk, s, d = x.shape[2 + k], kernel[k], strides[k], dil[k]
        pb, pe = pads[k], pads[ns + k]
        ext = d * (kk - 1) + 1
        num = i + pb + pe - ext
        o = (-(-num // s) if ceil_mode else num // s) + 1
        if ceil_mode and (o - 1) * s >= i + pb:
            o -= 1
        outs.append(o)
    y = np.zeros(x.shape[:2] + tuple(outs), dtype=x.dtype)
    for idx in np.ndindex(*outs):
        coords, inside_pad = [], []
        for k in range(ns):
            start = idx[k] * strides[k] - pads[k]
            c = [start + j * dil[k] for j in range(kernel[k])]
            lim = x.shape[2 + k] + pads[ns + k]
            inside_pad.append(sum(1 for v in c if -pads[k] <= v < lim))
            coords.append([v for v in c if 0 <= v < x.shape[2 + k]])
        sub = x[(slice(None), slice(None)) + np.ix_(*coords)]
        flat = sub.reshape(x.shape[0], x.shape[1], -1)
        if is_max:
            v = flat.max(axis=2)
        else:
            cnt = int(np.prod(inside_pad)) if cip else flat.shape[2]
            v = flat.sum(axis=2) / cnt
        y[(slice(None), slice(None)) + idx] = v
    return y


def pool_cases():
    x = rand(2, 3, 9, 8)
    P = lambda *a: pool_ref(x, *a)  # noqa: E731
    case("maxpool2d_basic", [n("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2])], {"x": x},
         [("y", P([3, 3], [2, 2], [0] * 4, [1, 1], 0, True, 0))])
    # the torch reference says the same for this one
    assert np.allclose(F.max_pool2d(t(x), 3, 2).numpy(),
                       P([3, 3], [2, 2], [0] * 4, [1, 1], 0, True, 0))
    case("maxpool2d_default_strides", [n("MaxPool", ["x"], kernel_shape=[2, 3])], {"x": x},
         [("y", P([2, 3], [1, 1], [0] * 4, [1, 1], 0, True, 0))], opset=8)
    p = [1, 0, 1, 1]
    case("maxpool2d_pads_dil", [n("MaxPool", ["x"], kernel_shape=[3, 2], strides=[1, 2], pads=p,
                                  dilations=[2, 1])],
         {"x": x}, [("y", P([3, 2], [1, 2], p, [2, 1], 0, True, 0))], opset=11)
    case("maxpool2d_ceil", [n("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
         {"x": x}, [("y", P([3, 3], [2, 2], [0] * 4, [1, 1], 1, True, 0))], dyn=("x",))
    assert np.allclose(F.max_pool2d(t(x), 3, 2, ceil_mode=True).numpy(),
                       P([3, 3], [2, 2], [0] * 4, [1, 1], 1, True, 0))
    p = [1, 1, 0, 1]
    case("maxpool2d_ceil_pads", [n("MaxPool", ["x"], kernel_shape=[2, 3], strides=[2, 3], pads=p,
                                   ceil_mode=1)],
         {"x": x}, [("y", P([2, 3], [2, 3], p, [1, 1], 1, True, 0))])
    for mode, up in (("SAME_UPPER", True), ("SAME_LOWER", False)):
        # total pads 1 and 1: odd, so the mode decides the side
        p = same_pads([9, 8], [2, 3], [2, 3], [1, 1], up)
        assert p in ([0, 0, 1, 1], [1, 1, 0, 0])
        case("maxpool2d_" + mode.lower(),
             [n("MaxPool", ["x"], kernel_shape=[2, 3], strides=[2, 3], auto_pad=mode)], {"x": x},
             [("y", P([2, 3], [2, 3], p, [1, 1], 0, True, 0))])
        case("avgpool2d_" + mode.lower(),
             [n("AveragePool", ["x"], kernel_shape=[2, 3], strides=[2, 3], auto_pad=mode)],
             {"x": x}, [("y", P([2, 3], [2, 3], p, [1, 1], 0, False, 0))])
    case("maxpool2d_valid", [n("MaxPool", ["x"], kernel_shape=[3, 3], auto_pad="VALID",
                               strides=[2, 1])],
         {"x": x}, [("y", P([3, 3], [2, 1], [0] * 4, [1, 1], 0, True, 0))])
    p = [2, 1, 2, 0]
    case("maxpool2d_big_pads", [n("MaxPool", ["x"], kernel_shape=[3, 3], pads=p)], {"x": x},
         [("y", P([3, 3], [1, 1], p, [1, 1], 0, True, 0))])
    case("maxpool2d_storage_order", [n("MaxPool", ["x"], kernel_shape=[2, 2], storage_order=1)],
         {"x": x}, [("y", P([2, 2], [1, 1], [0] * 4, [1, 1], 0, True, 0))], opset=10)
    x1 = rand(2, 3, 10)
    case("maxpool1d", [n("MaxPool", ["x"], kernel_shape=[3], strides=[2], pads=[1, 1],
                         ceil_mode=1)],
         {"x": x1}, [("y", pool_ref(x1, [3], [2], [1, 1], [1], 1, True, 0))])
    p = [1, 1, 1, 0]
    case("avgpool2d_basic", [n("AveragePool", ["x"], kernel_shape=[3, 3], pads=p)], {"x": x},
         [("y", P([3, 3], [1, 1], p, [1, 1], 0, False, 0))], opset=7)
    case("avgpool2d_count_include_pad", [n("AveragePool", ["x"], kernel_shape=[3, 3], pads=p,
                                           count_include_pad=1, strides=[2, 1])],
         {"x": x}, [("y", P([3, 3], [2, 1], p, [1, 1], 0, False, 1))], dyn=("x",))
    assert np.allclose(F.avg_pool2d(t(x), 3, [2, 1], 1, count_include_pad=True).numpy(),
                       P([3, 3], [2, 1], [1] * 4, [1, 1], 0, False, 1))
    case("avgpool2d_ceil", [n("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1], ceil_mode=1)],
         {"x": x}, [("y", P([3, 3], [2, 2], [1] * 4, [1, 1], 1, False, 0))], opset=10)
    assert np.allclose(F.avg_pool2d(t(x), 3, 2, 1, ceil_mode=True, count_include_pad=False).numpy(),
                       P([3, 3], [2, 2], [1] * 4, [1, 1], 1, False, 0))
    p = [2, 0, 1, 2]
    for cip in (0, 1):
        case("avgpool2d_big_pads_cip%d" % cip,
             [n("AveragePool", ["x"], kernel_shape=[3, 3], pads=p, count_include_pad=cip)],
             {"x": x}, [("y", P([3, 3], [1, 1], p, [1, 1], 0, False, cip))])
    case("avgpool1d", [n("AveragePool", ["x"], kernel_shape=[4], strides=[3], pads=[2, 1])],
         {"x": x1}, [("y", pool_ref(x1, [4], [3], [2, 1], [1], 0, False, 0))])
    case("globalavgpool", [n("GlobalAveragePool", ["x"])], {"x": x},
         [("y", x.mean(axis=(2, 3), keepdims=True))], dyn=("x",))
    case("globalmaxpool", [n("GlobalMaxPool", ["x"])], {"x": x},
         [("y", x.max(axis=(2, 3), keepdims=True))])
    x5 = rand(2, 3, 2, 3, 4)
    case("globalavgpool_3d", [n("GlobalAveragePool", ["x"])], {"x": x5},
         [("y", x5.mean(axis=(2, 3, 4), keepdims=True))])
    case("globalmaxpool_1d", [n("GlobalMaxPool", ["x"])], {"x": x1},
         [("y", x1.max(axis=2, keepdims=True))])
    bad("bad_maxpool_indices", [n("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])], {"x": x},
        opset=12)
    bad("bad_maxpool_no_kernel", [n("MaxPool", ["x"])], {"x": x})
    bad("bad_avgpool_auto_pad", [n("AveragePool", ["x"], kernel_shape=[2, 2], auto_pad="same")],
        {"x": x})
    bad("bad_maxpool_3d", [n("MaxPool", ["x"], kernel_shape=[1, 1, 1])], {"x": x5})
    bad("bad_maxpool_ceil_mode", [n("MaxPool", ["x"], kernel_shape=[2, 2], ceil_mode=2)],
        {"x": x})


# ---- normalizations -------------------------------------------------------------

EPS = float(np.float32(1e-5))  # ONNX's float attribute default


def bn_ref(x, s, b, m, v, eps):
    sh = (1, -1) + (1,) * (x.ndim - 2)
    return (x - m.reshape(sh)) / np.sqrt(v.reshape(sh) + eps) * s.reshape(sh) + b.reshape(sh)


def norm_cases():
    x = rand(2, 3, 4, 5)
    s, b, m = rand(3), rand(3), rand(3)
    v = RNG.uniform(0.5, 2.0, 3).astype(np.float32)
    w = {"s": s, "b": b, "m": m, "v": v}
    eps = float(np.float32(1e-3))
    case("bn_opset15", [n("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)],
         {"x": x}, [("y", bn_ref(x, s, b, m, v, eps))], w, opset=15, dyn=("x",))
    case("bn_opset14_training_mode0",
         [n("BatchNormalization", ["x", "s", "b", "m", "v"], training_mode=0)],
         {"x": x}, [("y", bn_ref(x, s, b, m, v, EPS))], w, opset=14)
    x2 = rand(4, 3)
    case("bn_opset9_2d", [n("BatchNormalization", ["x", "s", "b", "m", "v"])], {"x": x2},
         [("y", bn_ref(x2, s, b, m, v, EPS))], w, opset=9)
    # opset 7, spatial 0: statistics per activation, [C, H, W]
    sa, ba, ma = rand(3, 4, 5), rand(3, 4, 5), rand(3, 4, 5)
    va = RNG.uniform(0.5, 2.0, (3, 4, 5)).astype(np.float32)
    case("bn_opset7_spatial0", [n("BatchNormalization", ["x", "s", "b", "m", "v"], spatial=0)],
         {"x": x}, [("y", (x - ma) / np.sqrt(va + EPS) * sa + ba)],
         {"s": sa, "b": ba, "m": ma, "v": va}, opset=7)
    case("bn_opset7_spatial1", [n("BatchNormalization", ["x", "s", "b", "m", "v"])],
         {"x": x}, [("y", bn_ref(x, s, b, m, v, EPS))], w, opset=7)
    # training_mode 1: the batch's mean and population variance; running
    # statistics input * momentum + batch * (1 - momentum)
    mom = float(np.float32(0.8))
    bm = x.mean(axis=(0, 2, 3))
    bv = x.var(axis=(0, 2, 3))
    case("bn_training_mode1",
         [n("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
            momentum=0.8)],
         {"x": x}, [("y", bn_ref(x, s, b, bm, bv, EPS)), ("rm", m * mom + bm * (1 - mom)),
                    ("rv", v * mom + bv * (1 - mom))], w, opset=15)
    bad("bad_bn_opset9_training_outputs",
        [n("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean", "var"])], {"x": x}, w,
        opset=9)
    bad("bad_bn_training_mode", [n("BatchNormalization", ["x", "s", "b", "m", "v"],
                                   training_mode=2)], {"x": x}, w, opset=15)

    # LayerNormalization (opset 17), from the operator's function body
    def ln_ref(x, sc, bb, axis, eps=EPS):
        ax = tuple(range(axis % x.ndim, x.ndim))
        mean = x.mean(axis=ax, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
        inv = 1 / np.sqrt(var + eps)
        y = (x - mean) * inv * sc
        return (y + bb if bb is not None else y), mean, inv

    x3 = rand(2, 3, 8)
    sc, bb = rand(8), rand(8)
    case("ln_last", [n("LayerNormalization", ["x", "s", "b"])], {"x": x3},
         [("y", ln_ref(x3, sc, bb, -1)[0])], {"s": sc, "b": bb}, opset=17, dyn=("x",))
    sc2, bb2 = rand(3, 8), rand(3, 8)
    y, mean, inv = ln_ref(x3, sc2, bb2, 1, 1e-3)
    case("ln_axis1_stats", [n("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=1,
                              epsilon=1e-3)],
         {"x": x3}, [("y", y), ("mean", mean), ("inv", inv)], {"s": sc2, "b": bb2}, opset=17)
    y, _, _ = ln_ref(x3, sc2, None, -2)
    case("ln_negative_axis_no_bias", [n("LayerNormalization", ["x", "s"], axis=-2)], {"x": x3},
         [("y", y)], {"s": sc2}, opset=17)
    # a scale that broadcasts to the normalised dims rather than matching them
    y, _, _ = ln_ref(x3, sc, bb, 1)
    case("ln_broadcast_scale", [n("LayerNormalization", ["x", "s", "b"], axis=1)], {"x": x3},
         [("y", y)], {"s": sc, "b": bb}, opset=17)
    x64 = rand(2, 5, dtype=np.float64)
    s64, b64 = rand(5, dtype=np.float64), rand(5, dtype=np.float64)
    case("ln_f64_stash11", [n("LayerNormalization", ["x", "s", "b"], stash_type=11)], {"x": x64},
         [("y", ln_ref(x64, s64, b64, -1)[0])], {"s": s64, "b": b64}, opset=17)
    # stash_type 1 on double input: stage one in float32
    y32 = ln_ref(x64.astype(np.float32), np.float32(1), None, -1)[0].astype(np.float64)
    case("ln_f64_stash1", [n("LayerNormalization", ["x", "s", "b"])], {"x": x64},
         [("y", y32 * s64 + b64)], {"s": s64, "b": b64}, opset=17)
    # nn.LayerNorm as PyTorch exports it below opset 17 (the layer_norm
    # pass makes one node of it), with a dynamic batch
    ln_nodes = [n("ReduceMean", ["x"], ["m"], axes=[-1]), n("Sub", ["x", "m"], ["d"]),
                n("Pow", ["d", "two"], ["p"]), n("ReduceMean", ["p"], ["v"], axes=[-1]),
                n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["sd"]),
                n("Div", ["d", "sd"], ["nd"]), n("Mul", ["nd", "s"], ["sc"]),
                n("Add", ["sc", "b"], ["y"])]
    case("ln_decomposed_op14", ln_nodes, {"x": x3}, [("y", ln_ref(x3, sc, bb, -1)[0])],
         {"s": sc, "b": bb, "two": np.array(2, np.float32), "eps": np.array(EPS, np.float32)},
         opset=14, dyn=("x",))
    bad("bad_ln_stash_type", [n("LayerNormalization", ["x", "s"], stash_type=10)], {"x": x3},
        {"s": sc}, opset=17)
    bad("bad_ln_axis", [n("LayerNormalization", ["x", "s"], axis=-4)], {"x": x3}, {"s": sc},
        opset=17)
    bad("bad_ln_axis_rank", [n("LayerNormalization", ["x", "s"], axis=3)], {"x": x3}, {"s": sc},
        opset=17)

    si, bi = rand(3), rand(3)
    case("instancenorm", [n("InstanceNormalization", ["x", "s", "b"], epsilon=1e-4)], {"x": x},
         [("y", F.instance_norm(t(x), weight=t(si), bias=t(bi), eps=float(np.float32(1e-4)))
           .numpy())], {"s": si, "b": bi}, dyn=("x",))
    x1 = rand(2, 3, 7)
    case("instancenorm_1d", [n("InstanceNormalization", ["x", "s", "b"])], {"x": x1},
         [("y", F.instance_norm(t(x1), weight=t(si), bias=t(bi), eps=EPS).numpy())],
         {"s": si, "b": bi}, opset=7)


# ---- Gemm and MatMul ------------------------------------------------------------

def gemm_cases():
    a, b, c = rand(3, 4), rand(4, 5), rand(3, 5)
    case("gemm_default", [n("Gemm", ["a", "b", "c"])], {"a": a}, [("y", a @ b + c)],
         {"b": b, "c": c})
    at, bt, c1 = rand(4, 3), rand(5, 4), rand(5)
    case("gemm_trans_alpha_beta_bcast",
         [n("Gemm", ["a", "b", "c"], transA=1, transB=1, alpha=0.5, beta=2.0)], {"a": at},
         [("y", 0.5 * at.T @ bt.T + 2.0 * c1)], {"b": bt, "c": c1})
    ccol = rand(3, 1)
    case("gemm_c_column", [n("Gemm", ["a", "b", "c"], transB=1)], {"a": a, "b": bt, "c": ccol},
         [("y", a @ bt.T + ccol)], opset=9)
    cs = rand(1)
    case("gemm_c_scalar", [n("Gemm", ["a", "b", "c"], beta=-1.5)], {"a": a},
         [("y", a @ b - 1.5 * cs)], {"b": b, "c": cs}, opset=7)
    case("gemm_no_c", [n("Gemm", ["a", "b"], alpha=3.0)], {"a": a}, [("y", 3.0 * a @ b)],
         {"b": b}, opset=11, dyn=("a",))
    cnan = np.full((3, 5), np.nan, dtype=np.float32)
    case("gemm_beta0", [n("Gemm", ["a", "b", "c"], beta=0.0)], {"a": a}, [("y", a @ b)],
         {"b": b, "c": cnan})
    a64, b64 = rand(2, 3, dtype=np.float64), rand(3, 2, dtype=np.float64)
    case("gemm_f64", [n("Gemm", ["a", "b"], transA=0)], {"a": a64, "b": b64}, [("y", a64 @ b64)])
    bad("bad_gemm_c", [n("Gemm", ["a", "b", "c"])], {"a": a}, {"b": b, "c": rand(4, 5)})
    bad("bad_gemm_rank", [n("Gemm", ["a", "b"])], {"a": rand(2, 3, 4)}, {"b": b})
    bad("bad_gemm_int", [n("Gemm", ["a", "b"])], {"a": np.ones((3, 4), np.int64)},
        {"b": np.ones((4, 5), np.int64)}, out_dt=TensorProto.INT64)

    mm = [("matmul_2d", (3, 4), (4, 5)), ("matmul_batched", (2, 3, 4), (2, 4, 5)),
          ("matmul_broadcast", (2, 1, 3, 4), (5, 4, 6)), ("matmul_rank_mixed", (3, 4), (2, 4, 5)),
          ("matmul_1d_left", (4,), (2, 4, 5)), ("matmul_1d_right", (2, 3, 4), (4,)),
          ("matmul_1d_both", (4,), (4,)), ("matmul_1d_2d", (4,), (4, 3))]
    for name, sa, sb in mm:
        x, y = rand(*sa), rand(*sb)
        case(name, [n("MatMul", ["a", "b"])], {"a": x, "b": y}, [("y", np.matmul(x, y))])
    x, y = rand(3, 2, 4), rand(4, 6)
    case("matmul_dynbatch_weight", [n("MatMul", ["a", "b"])], {"a": x}, [("y", x @ y)], {"b": y},
         opset=9, dyn=("a",))


# ---- activations ------------------------------------------------------------------

def act_cases():
    x = rand(2, 3, 4) * 3
    x[0, 0, :3] = [0.0, -0.0, 25.0]
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    one = [
        ("relu", n("Relu", ["x"]), np.maximum(x, 0), 14),
        ("leakyrelu_default", n("LeakyRelu", ["x"]), np.where(x > 0, x, f32(0.01) * x), 7),
        ("leakyrelu_alpha", n("LeakyRelu", ["x"], alpha=0.2), np.where(x > 0, x, f32(0.2) * x), 16),
        ("elu_default", n("Elu", ["x"]), np.where(x > 0, x, np.expm1(x)), 7),
        ("elu_alpha", n("Elu", ["x"], alpha=0.5), np.where(x > 0, x, 0.5 * np.expm1(x)), 7),
        ("selu_default", n("Selu", ["x"]),
         F.selu(t(x)).numpy(), 7),
        ("selu_alpha_gamma", n("Selu", ["x"], alpha=2.0, gamma=0.5),
         0.5 * np.where(x > 0, x, 2.0 * np.expm1(x)), 7),
        ("sigmoid", n("Sigmoid", ["x"]), 1 / (1 + np.exp(-x)), 13),
        ("hardsigmoid_default", n("HardSigmoid", ["x"]), np.clip(f32(0.2) * x + 0.5, 0, 1), 7),
        ("hardsigmoid_torch", n("HardSigmoid", ["x"], alpha=1 / 6, beta=0.5),
         F.hardsigmoid(t(x)).numpy(), 7),
        ("hardsigmoid_alpha_beta", n("HardSigmoid", ["x"], alpha=0.3, beta=0.25),
         np.clip(f32(0.3) * x + 0.25, 0, 1), 7),
        ("hardswish", n("HardSwish", ["x"]), x * np.clip(x / 6 + 0.5, 0, 1), 14),
        ("tanh", n("Tanh", ["x"]), np.tanh(x), 13),
        ("softplus", n("Softplus", ["x"]), np.logaddexp(0, x.astype(np.float64)), 7),
        ("erf", n("Erf", ["x"]), torch.erf(t(x)).numpy(), 13),
        ("gelu", n("Gelu", ["x"]), F.gelu(t(x)).numpy(), 17),
        ("gelu_tanh", n("Gelu", ["x"], approximate="tanh"),
         F.gelu(t(x), approximate="tanh").numpy(), 17),
    ]
    for name, node, want, opset in one:
        case(name, [node], {"x": x}, [("y", want.astype(np.float32))], opset=opset,
             dyn=("x",) if name == "relu" else ())
    x64 = rand(3, 4, dtype=np.float64) * 30
    case("softplus_f64", [n("Softplus", ["x"])], {"x": x64}, [("y", np.logaddexp(0, x64))])
    case("sigmoid_f64", [n("Sigmoid", ["x"])], {"x": x64}, [("y", 1 / (1 + np.exp(-x64)))])
    for name, slope in (("prelu_channel", rand(3, 1)), ("prelu_scalar", rand(1)),
                        ("prelu_full", rand(2, 3, 4))):
        case(name, [n("PRelu", ["x", "s"])], {"x": x}, [("y", np.where(x < 0, x * slope, x))],
             {"s": slope}, opset=9)
    s = rand(4)
    case("prelu_input_slope", [n("PRelu", ["x", "s"])], {"x": x, "s": s},
         [("y", np.where(x < 0, x * s, x))], opset=16)
    bad("bad_prelu_slope", [n("PRelu", ["x", "s"])], {"x": x}, {"s": rand(3)})
    bad("bad_gelu_approximate", [n("Gelu", ["x"], approximate="fast")], {"x": x}, opset=17)


# ---- softmax family -------------------------------------------------------------------

def softmax_ref(x, axes, log):
    m = x.max(axis=axes, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis=axes, keepdims=True)
    return (x - m - np.log(s)) if log else e / s


def softmax_cases():
    x = rand(2, 3, 4) * 4
    for op, log in (("Softmax", False), ("LogSoftmax", True)):
        lo = op.lower()
        # opset 11: coerced to 2-D at axis (default 1): normalised over
        # axes axis..rank-1 together
        for axis, axes in ((None, (1, 2)), (2, (2,)), (-2, (1, 2)), (0, (0, 1, 2))):
            attrs = {} if axis is None else {"axis": axis}
            nm = "%s_opset11_%s" % (lo, "default" if axis is None else str(axis).replace("-", "m"))
            case(nm, [n(op, ["x"], **attrs)], {"x": x}, [("y", softmax_ref(x, axes, log))],
                 opset=11, dyn=("x",) if axis is None else ())
        # opset 13: one axis (default -1)
        for axis, ax in ((None, 2), (1, 1), (-3, 0)):
            attrs = {} if axis is None else {"axis": axis}
            nm = "%s_opset13_%s" % (lo, "default" if axis is None else str(axis).replace("-", "m"))
            case(nm, [n(op, ["x"], **attrs)], {"x": x}, [("y", softmax_ref(x, (ax,), log))],
                 opset=13)
    x2 = rand(3, 5)
    case("softmax_opset7", [n("Softmax", ["x"])], {"x": x2}, [("y", softmax_ref(x2, (1,), False))],
         opset=7)
    bad("bad_softmax_axis", [n("Softmax", ["x"], axis=3)], {"x": x})


# ---- losses ------------------------------------------------------------------------

def loss_cases():
    def torch_loss(kind, x, lab, w, red, ii):
        fn = F.cross_entropy if kind == "sce" else F.nll_loss
        kw = {"reduction": red}
        if w is not None:
            kw["weight"] = t(w)
        if ii is not None:
            kw["ignore_index"] = ii
        return fn(t(x), t(lab.astype(np.int64)), **kw).numpy()

    specs = [
        ("mean", (4, 5), None, None, np.int64),
        ("sum", (4, 5), None, None, np.int64),
        ("none", (4, 5), None, None, np.int32),
        ("mean_weights", (4, 5), True, None, np.int64),
        ("mean_ignore", (6, 5), None, 1, np.int64),
        ("mean_weights_ignore_kdim", (3, 4, 2, 3), True, 2, np.int64),
        ("none_kdim_ignore_negative", (3, 4, 5), None, -1, np.int64),
        ("sum_weights_kdim", (2, 3, 4), True, None, np.int32),
    ]
    for tag, shape, use_w, ii, ldt in specs:
        red = tag.split("_")[0]
        x = rand(*shape)
        lab_shape = (shape[0],) + shape[2:]
        lab = RNG.integers(0, shape[1], lab_shape).astype(ldt)
        if ii is not None:
            lab.reshape(-1)[::3] = ii
        w = RNG.uniform(0.2, 2.0, shape[1]).astype(np.float32) if use_w else None
        attrs = {"reduction": red}
        if ii is not None:
            attrs["ignore_index"] = ii
        for kind, op in (("sce", "SoftmaxCrossEntropyLoss"), ("nll", "NegativeLogLikelihoodLoss")):
            xin = x if kind == "sce" else F.log_softmax(t(x), 1).numpy()
            ins = ["x", "lab"] + (["w"] if use_w else [])
            want = torch_loss(kind, xin, lab, w, red, ii)
            case("%s_%s" % (kind, tag), [n(op, ins, **attrs)], {"x": xin, "lab": lab},
                 [("y", want)], {"w": w} if use_w else {}, opset=13 if kind == "sce" else 12)
    x = rand(4, 5)
    lab = RNG.integers(0, 5, 4).astype(np.int64)
    case("sce_log_prob", [n("SoftmaxCrossEntropyLoss", ["x", "lab"], ["y", "lp"])],
         {"x": x, "lab": lab},
         [("y", F.cross_entropy(t(x), t(lab)).numpy()), ("lp", F.log_softmax(t(x), 1).numpy())],
         opset=12, dyn=("x", "lab"))
    bad("bad_loss_reduction", [n("SoftmaxCrossEntropyLoss", ["x", "lab"], reduction="avg")],
        {"x": x, "lab": lab})
    bad("bad_loss_labels", [n("NegativeLogLikelihoodLoss", ["x", "lab"])],
        {"x": x, "lab": lab.astype(np.float32)})


# ---- gradients through the mappers (imported with trainable weights) ---------------

def grad_case(name, nodes, inputs, inits, fn, wrt, opset=13):
    """A loss model whose initializers the C test imports as variables: it
    checks the loss (output 0) and, per initializer k in wrt,
    NAME.grad.<k>.npy, the gradient of the loss that PyTorch's autograd
    gives through fn(inputs, params) (the same computation written with
    torch.nn.functional)."""
    params = {k: t(v).clone().requires_grad_(k in wrt) for k, v in inits.items()}
    loss = fn({k: t(v) for k, v in inputs.items()}, params)
    loss.backward()
    case(name, nodes, inputs, [("loss", loss.detach().numpy())], inits, opset=opset)
    for k in wrt:
        np.save(os.path.join(OUT, "%s.grad.%s.npy" % (name, k)), params[k].grad.numpy())


def grad_cases():
    # Conv -> BatchNormalization (inference) -> PRelu -> MaxPool -> AveragePool
    # (count_include_pad 0, pads) -> GlobalAveragePool -> Flatten -> Gemm ->
    # SoftmaxCrossEntropyLoss with class weights
    x = rand(2, 3, 8, 8)
    lab = np.array([1, 4], dtype=np.int64)
    w = {"cw": rand(4, 3, 3, 3) * 0.3, "cb": rand(4), "bs": rand(4), "bb": rand(4),
         "bm": rand(4) * 0.1, "bv": RNG.uniform(0.5, 1.5, 4).astype(np.float32),
         "sl": rand(4, 1, 1) * 0.2, "gw": rand(5, 4), "gb": rand(5),
         "cls": RNG.uniform(0.5, 2.0, 5).astype(np.float32)}
    nodes = [n("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 0, 1, 2], strides=[1, 2]),
             n("BatchNormalization", ["c", "bs", "bb", "bm", "bv"], ["bn"]),
             n("PRelu", ["bn", "sl"], ["p"]),
             n("MaxPool", ["p"], ["mp"], kernel_shape=[2, 2], strides=[2, 1]),
             n("AveragePool", ["mp"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             n("GlobalAveragePool", ["ap"], ["gp"]), n("Flatten", ["gp"], ["f"]),
             n("Gemm", ["f", "gw", "gb"], ["logits"], transB=1, alpha=0.7),
             n("SoftmaxCrossEntropyLoss", ["logits", "lab", "cls"], ["loss"])]

    def cnn(i, q):
        c = F.conv2d(F.pad(i["x"], [0, 2, 1, 1]), q["cw"], q["cb"], stride=[1, 2])
        bn = F.batch_norm(c, q["bm"], q["bv"], q["bs"], q["bb"], training=False, eps=EPS)
        p = torch.where(bn < 0, bn * q["sl"], bn)
        mp = F.max_pool2d(p, 2, [2, 1])
        ap = F.avg_pool2d(mp, 3, 1, 1, count_include_pad=False)
        f = ap.mean(dim=(2, 3))
        logits = 0.7 * f @ q["gw"].T + q["gb"]
        return F.cross_entropy(logits, i["lab"], weight=q["cls"])

    grad_case("grad_cnn", nodes, {"x": x, "lab": lab}, w, cnn,
              ("cw", "cb", "bs", "bb", "sl", "gw", "gb"))

    # Gemm -> LayerNormalization -> HardSigmoid (composed) -> Selu (composed)
    # -> MatMul -> LogSoftmax (opset 11, coerced) -> NegativeLogLikelihoodLoss
    # with an ignored label; and ConvTranspose on the side, summed in
    x = rand(4, 6)
    lab = np.array([0, 2, -1, 1], dtype=np.int64)
    w = {"w1": rand(6, 8) * 0.5, "b1": rand(8), "ls": rand(8), "lb": rand(8), "w2": rand(8, 3)}
    nodes = [n("Gemm", ["x", "w1", "b1"], ["h"]),
             n("LayerNormalization", ["h", "ls", "lb"], ["ln"]),
             n("HardSigmoid", ["ln"], ["hs"], alpha=0.3, beta=0.4),
             n("Selu", ["hs"], ["se"], alpha=1.5, gamma=1.2),
             n("MatMul", ["se", "w2"], ["z"]),
             n("LogSoftmax", ["z"], ["lp"]),
             n("NegativeLogLikelihoodLoss", ["lp", "lab"], ["loss"], ignore_index=-1)]

    def mlp(i, q):
        h = i["x"] @ q["w1"] + q["b1"]
        ln = F.layer_norm(h, [8], q["ls"], q["lb"], eps=EPS)
        hs = torch.clamp(float(np.float32(0.3)) * ln + float(np.float32(0.4)), 0, 1)
        se = 1.2 * torch.where(hs > 0, hs, 1.5 * torch.expm1(hs))
        lp = F.log_softmax(se @ q["w2"], 1)
        return F.nll_loss(lp, i["lab"], ignore_index=-1)

    grad_case("grad_mlp", nodes, {"x": x, "lab": lab}, w, mlp, ("w1", "b1", "ls", "lb", "w2"),
              opset=17)


# ---- Einsum -------------------------------------------------------------------

def einsum_cases():
    """np.einsum is the reference (the operator documentation's semantics;
    ONNX equations may hold spaces, NumPy's may not)."""
    def ein(name, eq, shapes, dtype=np.float32, opset=12):
        xs = {"x%d" % i: rand(*s, dtype=dtype) for i, s in enumerate(shapes)}
        want = np.einsum(eq.replace(" ", ""), *[a.astype(np.float64) for a in xs.values()])
        case(name, [n("Einsum", list(xs), equation=eq)], xs,
             [("y", np.asarray(want).astype(dtype))], opset=opset)

    ein("einsum_attn_scores", "bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)])
    ein("einsum_attn_values", "bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 5)])
    ein("einsum_maxvit", "B G H I D, B G H J D -> B G H I J", [(1, 2, 3, 4, 5), (1, 2, 3, 6, 5)])
    ein("einsum_implicit_matmul", "ij,jk", [(3, 4), (4, 5)])
    ein("einsum_outer", "i,j->ij", [(3,), (4,)])
    ein("einsum_two_contracted", "abc,cbd->ad", [(2, 3, 4), (4, 3, 5)])
    ein("einsum_sum_out", "ij,jk->i", [(3, 4), (4, 5)])
    ein("einsum_dot", "i,i->", [(6,), (6,)])
    ein("einsum_batch_permuted", "bij,bjk->kbi", [(2, 3, 4), (2, 4, 5)])
    ein("einsum_a_transposed", "bki,bkj->bij", [(2, 4, 3), (2, 4, 5)])
    ein("einsum_transpose", "ijk->kij", [(2, 3, 4)])
    ein("einsum_reduce", "ijk->j", [(2, 3, 4)])
    ein("einsum_f64", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], dtype=np.float64)
    # A symbolic batch: the first batch label, fed with 2 and with 3; the
    # second equation reshapes [B, 2, 3, 5] to [B, 6, 5] and back.
    for b in (2, 3):
        for tag, eq, s0, s1 in (("", "bid,bjd->bij", (4, 5), (6, 5)),
                                ("_grouped", "bijd,bkd->bijk", (2, 3, 5), (4, 5))):
            xs = {"x0": rand(b, *s0), "x1": rand(b, *s1)}
            case("einsum_dyn%s_b%d" % (tag, b), [n("Einsum", ["x0", "x1"], equation=eq)], xs,
                 [("y", np.einsum(eq, xs["x0"], xs["x1"]))], opset=12, dyn=("x0", "x1"))
    # Refused: an ellipsis, a diagonal, three operands, sizes that differ,
    # an output label in no input, a term of the wrong rank, an implicit
    # output of more than 8 labels, no equation, integers.
    a, b, c = rand(2, 3), rand(3, 4), rand(4, 2)

    def refused(name, eq, ins, **kw):
        attrs = {"equation": eq} if eq is not None else {}
        bad(name, [n("Einsum", list(ins), **attrs)], ins, opset=12, **kw)

    refused("bad_einsum_ellipsis", "...j,jk->...k", {"a": a, "b": b})
    refused("bad_einsum_diagonal", "ii->i", {"a": rand(3, 3)})
    refused("bad_einsum_three", "ij,jk,kl->il", {"a": a, "b": b, "c": c})
    refused("bad_einsum_sizes", "ij,jk->ik", {"a": a, "c": c})
    refused("bad_einsum_out_label", "ij,jk->iz", {"a": a, "b": b})
    refused("bad_einsum_rank", "ijk,jk->i", {"a": a, "b": b})
    refused("bad_einsum_no_equation", None, {"a": a, "b": b})
    # Two terms of 5 labels, none shared, no "->": an implicit output of 10
    # labels, more than a tensor's 8 dims (its rank once overran the term).
    refused("bad_einsum_implicit_wide", "abcde,fghij",
            {"a": rand(1, 1, 1, 1, 2), "b": rand(1, 1, 1, 1, 2)})
    refused("bad_einsum_int", "ij,jk->ik",
            {"a": np.ones((2, 3), np.int64), "b": np.ones((3, 4), np.int64)},
            out_dt=TensorProto.INT64)


# ---- Resize -----------------------------------------------------------------

def resize_ref(x, sizes, scales, coord, mode, nearest="round_prefer_floor"):
    """The operator documentation's Resize on the last two axes: along each,
    output o reads source coordinate x(o) by the coordinate mode; nearest
    rounds it by nearest_mode, linear blends floor(x) and floor(x) + 1 with
    weights 1 - r and r, the edge value standing in beyond the input."""
    def matrix(n, m, s):
        a = np.zeros((m, n))
        for o in range(m):
            if coord == "asymmetric":
                c = o / s
            elif coord == "align_corners":
                c = 0.0 if m == 1 else o * (n - 1) / (m - 1)
            elif coord == "pytorch_half_pixel" and m == 1:
                c = 0.0
            else:
                c = (o + 0.5) / s - 0.5
            f = np.floor(c)
            if mode == "nearest":
                r = {"floor": f, "ceil": np.ceil(c),
                     "round_prefer_ceil": f + 1 if c - f >= 0.5 else f}.get(
                         nearest, f + 1 if c - f > 0.5 else f)
                a[o, int(min(max(r, 0), n - 1))] = 1
                continue
            for i, w in ((f, 1 - (c - f)), (f + 1, c - f)):
                a[o, int(min(max(i, 0), n - 1))] += w
        return a
    n_h, n_w = x.shape[-2:]
    s = scales or (sizes[0] / n_h, sizes[1] / n_w)
    return (matrix(n_h, sizes[0], s[0]) @ x.astype(np.float64) @
            matrix(n_w, sizes[1], s[1]).T).astype(x.dtype)


def resize_cases():
    """F.interpolate where its semantics are ONNX's (nearest: asymmetric +
    floor; nearest-exact: half_pixel + round_prefer_ceil; bilinear:
    half_pixel or align_corners), resize_ref otherwise."""
    x = rand(2, 3, 4, 5)
    f32 = np.float32
    empty = np.zeros((0,), f32)

    def rs(name, attrs, xs, inits, want, opset=13, ins=("x", "roi", "scales", "sizes"), dyn=()):
        case(name, [n("Resize", list(ins), **attrs)], xs, [("y", want)], inits, opset=opset,
             dyn=dyn)

    def interp(**kw):
        return F.interpolate(t(x), **kw).numpy()

    sc2 = np.array([1, 1, 2, 2], f32)
    rs("resize_nearest_scales", {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                 "nearest_mode": "floor"},
       {"x": x}, {"roi": empty, "scales": sc2}, interp(scale_factor=2.0, mode="nearest"),
       ins=("x", "roi", "scales"))
    rs("resize_linear_sizes", {"mode": "linear"}, {"x": x},
       {"roi": empty, "scales": empty, "sizes": np.array([2, 3, 7, 9], np.int64)},
       interp(size=(7, 9), mode="bilinear", align_corners=False))
    rs("resize_linear_align_corners_op11",
       {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, {"x": x},
       {"roi": empty, "scales": np.array([1, 1, 1.5, 1.5], f32)},
       interp(scale_factor=1.5, mode="bilinear", align_corners=True), opset=11,
       ins=("x", "roi", "scales"))
    rs("resize_nearest_exact", {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, {"x": x},
       {"roi": empty, "scales": empty, "sizes": np.array([2, 3, 7, 9], np.int64)},
       interp(size=(7, 9), mode="nearest-exact"))
    rs("resize_nearest_default_shrink", {}, {"x": x},
       {"roi": empty, "scales": empty, "sizes": np.array([2, 3, 3, 3], np.int64)},
       resize_ref(x, (3, 3), None, "half_pixel", "nearest"))
    rs("resize_linear_pytorch_half_pixel",
       {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, {"x": x},
       {"roi": empty, "scales": empty, "sizes": np.array([2, 3, 1, 7], np.int64)},
       resize_ref(x, (1, 7), None, "pytorch_half_pixel", "linear"))
    rs("resize_op10_nearest", {"mode": "nearest"}, {"x": x}, {"scales": sc2},
       interp(scale_factor=2.0, mode="nearest"), opset=10, ins=("x", "scales"))
    rs("resize_op10_linear", {"mode": "linear"}, {"x": x}, {"scales": sc2},
       resize_ref(x, (8, 10), (2.0, 2.0), "asymmetric", "linear"), opset=10, ins=("x", "scales"))
    # A symbolic batch: sizes from Shape, as exporters build them.
    for b in (2, 3):
        xb = rand(b, 3, 4, 5)
        nodes = [n("Shape", ["x"], ["s"]),
                 n("Slice", ["s", "st", "en"], ["nc"]),
                 n("Concat", ["nc", "hw"], ["sizes"], axis=0),
                 n("Resize", ["x", "roi", "scales", "sizes"], mode="linear")]
        case("resize_dyn_b%d" % b, nodes, {"x": xb},
             [("y", F.interpolate(t(xb), size=(6, 8), mode="bilinear",
                                  align_corners=False).numpy())],
             {"st": np.array([0], np.int64), "en": np.array([2], np.int64),
              "hw": np.array([6, 8], np.int64), "roi": empty, "scales": empty}, dyn=("x",))
    # sizes from the Shape of a tensor whose leading dim merged the batch
    # with the channels ([2N, 1, 4, 5]): its first entry is 2N.
    for b in (2, 3):
        xb = rand(b, 2, 4, 5)
        nodes = [n("Reshape", ["x", "flat"], ["m"]),
                 n("Shape", ["m"], ["s"]),
                 n("Slice", ["s", "st", "en"], ["nc"]),
                 n("Concat", ["nc", "hw"], ["sizes"], axis=0),
                 n("Resize", ["m", "roi", "scales", "sizes"], mode="linear")]
        case("resize_merged_batch_b%d" % b, nodes, {"x": xb},
             [("y", F.interpolate(t(xb.reshape(-1, 1, 4, 5)), size=(6, 8), mode="bilinear",
                                  align_corners=False).numpy())],
             {"flat": np.array([-1, 1, 4, 5], np.int64), "st": np.array([0], np.int64),
              "en": np.array([2], np.int64), "hw": np.array([6, 8], np.int64), "roi": empty,
              "scales": empty}, dyn=("x",))
    # scales given, sizes an empty tensor (not given).
    rs("resize_scales_empty_sizes", {"mode": "nearest", "coordinate_transformation_mode":
                                     "asymmetric", "nearest_mode": "floor"}, {"x": x},
       {"roi": empty, "scales": sc2, "sizes": np.zeros((0,), np.int64)},
       interp(scale_factor=2.0, mode="nearest"))
    # What torch.onnx.export writes for a segmentation head: the output
    # size from the input's Shape (Gather, Unsqueeze, Concat into sizes),
    # here with a symbolic batch, beside a nearest x2 upsampling.
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)

        def forward(self, x):
            z = torch.relu(self.conv(x))
            return (F.interpolate(z, size=x.shape[-2:], mode="bilinear", align_corners=False) +
                    F.interpolate(F.interpolate(z, scale_factor=2.0, mode="nearest"),
                                  size=x.shape[-2:], mode="nearest"))
    head = Head().eval()
    for b in (2, 3):
        name, xb = "resize_torch_head_b%d" % b, rand(b, 3, 8, 10)
        torch.onnx.export(head, t(rand(2, 3, 8, 10)), os.path.join(OUT, name + ".onnx"),
                          opset_version=13, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
        np.save(os.path.join(OUT, name + ".in.x.npy"), xb)
        with torch.no_grad():
            np.save(os.path.join(OUT, name + ".out.0.npy"), head(t(xb)).numpy())
    # Refused: cubic, a channel scale, tf_crop_and_resize, scales and sizes
    # both, sizes not known at import, opset 10 nearest shrinking,
    # exclude_outside.
    roi_sc = {"roi": empty, "scales": sc2}
    bad("bad_resize_cubic", [n("Resize", ["x", "roi", "scales"], mode="cubic")], {"x": x}, roi_sc)
    bad("bad_resize_channels", [n("Resize", ["x", "roi", "scales"])], {"x": x},
        {"roi": empty, "scales": np.array([1, 2, 2, 2], f32)})
    bad("bad_resize_tf_crop", [n("Resize", ["x", "roi", "scales"],
                                 coordinate_transformation_mode="tf_crop_and_resize")],
        {"x": x}, roi_sc)
    bad("bad_resize_both", [n("Resize", ["x", "roi", "scales", "sizes"])], {"x": x},
        {"roi": empty, "scales": sc2, "sizes": np.array([2, 3, 8, 10], np.int64)})
    bad("bad_resize_runtime_sizes", [n("Resize", ["x", "roi", "scales", "sizes"])],
        {"x": x, "sizes": np.array([2, 3, 8, 10], np.int64)}, {"roi": empty, "scales": empty})
    bad("bad_resize_op10_shrink", [n("Resize", ["x", "scales"], mode="nearest")], {"x": x},
        {"scales": np.array([1, 1, 0.5, 0.5], f32)}, opset=10)
    bad("bad_resize_huge_scale", [n("Resize", ["x", "roi", "scales"])], {"x": x},
        {"roi": empty, "scales": np.array([1, 1, 1e30, 1], f32)})
    bad("bad_resize_exclude_outside", [n("Resize", ["x", "roi", "scales"], exclude_outside=1)],
        {"x": x}, roi_sc)


os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)
conv_cases()
convt_cases()
pool_cases()
norm_cases()
gemm_cases()
act_cases()
softmax_cases()
loss_cases()
grad_cases()
einsum_cases()
resize_cases()
