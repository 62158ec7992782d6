"""Checks an ONNX file written by flowgraph's exporter and evaluates it.

Usage: check_export.py MODEL.onnx PREFIX [--opset N]

1. onnx.checker.check_model(full_check=True) (which runs ONNX's strict
   shape inference too); the ir_version must be 8 and the default domain's
   opset N (17 unless given).
2. Evaluates the graph on PREFIX.in.<input>.npy (one per graph input, by its
   ONNX name) with the reference interpreter below and writes output k to
   PREFIX.out.<k>.npy. The C test compares those with flowgraph's own run
   of the graph it exported.

The interpreter is written from the ONNX operator documentation (opsets
11..17, with the forms that changed at 13: Softmax's axis, the axes and
split inputs), in NumPy, with torch for the convolutions, Erf and Resize (imported only
when a model has one: importing torch takes seconds); nothing in it comes from
flowgraph. An op it does not know fails the check: the exporter must only
write ops listed here. onnx.reference does not exist in onnx 1.12 and
onnxruntime is not installed, hence this interpreter.
"""
import functools
import math
import sys

import numpy as np
import onnx
from onnx import numpy_helper

DTYPES = {
    1: np.float32,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    11: np.float64,
}


def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def s(v):
    return v.decode() if isinstance(v, bytes) else v


def elementwise(fn):
    return lambda ins, a: [fn(*ins)]


def same(x, v):
    return np.asarray(v).astype(x.dtype)


def torch_f():
    """torch and torch.nn.functional, imported on first use."""
    import torch
    import torch.nn.functional as F
    return torch, F


def erf(x):
    torch, _ = torch_f()
    return torch.erf(torch.from_numpy(np.array(x))).numpy().astype(x.dtype)


def softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def reduce(fn, axes_input=False):
    def run(ins, a):
        x = ins[0]
        axes = a.get("axes")
        if axes_input and len(ins) > 1 and ins[1] is not None:
            axes = ins[1].tolist()
        if axes is None or len(axes) == 0:
            axes = list(range(x.ndim))
        keep = bool(a.get("keepdims", 1))
        return [np.asarray(fn(x, axis=tuple(axes), keepdims=keep)).astype(x.dtype)]

    return run


def logsumexp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis)


def arg(fn):
    def run(ins, a):
        axis = a.get("axis", 0)
        r = fn(ins[0], axis=axis)  # NumPy returns the first extreme, as select_last_index=0
        if a.get("keepdims", 1):
            r = np.expand_dims(r, axis)
        return [r.astype(np.int64)]

    return run


def softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


OPSET = [17]


def softmax_op(ins, a, log=False):
    x = ins[0]
    if OPSET[0] >= 13:
        r = softmax(x.astype(np.float64), a.get("axis", -1))
    else:
        # Softmax-11: x as 2-D [prod(dims[:axis]), prod(dims[axis:])], over the second
        axis = a.get("axis", 1) % x.ndim
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
        r = softmax(flat, 1).reshape(x.shape)
    return [(np.log(r) if log else r).astype(x.dtype)]


def axes_of(ins, a):
    return tuple(int(v) for v in (ins[1] if len(ins) > 1 and ins[1] is not None else a["axes"]))


def squeeze(ins, a):
    if len(ins) < 2 and "axes" not in a:
        return [np.squeeze(ins[0])]
    return [np.squeeze(ins[0], axes_of(ins, a))]


def window_out(size, k, s, d, pb, pe, ceil):
    span = (k - 1) * d + 1
    q = (size + pb + pe - span) / s
    return int(math.ceil(q) if ceil else math.floor(q)) + 1


def pool(ins, a, kind):
    x = ins[0].astype(np.float64)
    k = a["kernel_shape"]
    st = a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    dil = a.get("dilations", [1, 1])
    ceil = a.get("ceil_mode", 0)
    cip = a.get("count_include_pad", 0)
    n, c, h, w = x.shape
    oh = window_out(h, k[0], st[0], dil[0], p[0], p[2], ceil)
    ow = window_out(w, k[1], st[1], dil[1], p[1], p[3], ceil)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = [i * st[0] - p[0] + r * dil[0] for r in range(k[0])]
            cols = [j * st[1] - p[1] + q * dil[1] for q in range(k[1])]
            rin = [r for r in rows if 0 <= r < h]
            cin = [q for q in cols if 0 <= q < w]
            block = x[:, :, rin][:, :, :, cin]
            if kind == "max":
                out[:, :, i, j] = block.max(axis=(2, 3))
            else:
                if cip:  # the window clipped to the padded input
                    rp = [r for r in rows if -p[0] <= r < h + p[2]]
                    cp = [q for q in cols if -p[1] <= q < w + p[3]]
                    count = len(rp) * len(cp)
                else:
                    count = len(rin) * len(cin)
                out[:, :, i, j] = block.sum(axis=(2, 3)) / count
    return [out.astype(ins[0].dtype)]


def conv(ins, a, transpose=False):
    torch, F = torch_f()
    x = torch.from_numpy(np.array(ins[0]))
    w = torch.from_numpy(np.array(ins[1]))
    b = torch.from_numpy(np.array(ins[2])) if len(ins) > 2 else None
    st = a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    dil = a.get("dilations", [1, 1])
    g = a.get("group", 1)
    assert s(a.get("auto_pad", "NOTSET")) == "NOTSET"
    if transpose:
        assert p[0] == p[2] and p[1] == p[3], "asymmetric ConvTranspose pads"
        y = F.conv_transpose2d(x, w, b, stride=st, padding=(p[0], p[1]),
                               output_padding=a.get("output_padding", [0, 0]), groups=g,
                               dilation=dil)
    else:
        # [x1_begin, x2_begin, x1_end, x2_end] -> F.pad's (left, right, top, bottom)
        x = F.pad(x, (p[1], p[3], p[0], p[2]))
        y = F.conv2d(x, w, b, stride=st, dilation=dil, groups=g)
    return [y.numpy()]


def batch_norm(ins, a):
    x, sc, b, m, v = ins
    eps = a.get("epsilon", 1e-5)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    r = (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + np.float32(eps))
    return [(r * sc.reshape(shape) + b.reshape(shape)).astype(x.dtype)]


def layer_norm(ins, a):
    x, sc = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else 0
    axis = a.get("axis", -1)
    axes = tuple(range(axis % x.ndim, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    return [((x - m) / np.sqrt(v + a.get("epsilon", 1e-5)) * sc + b).astype(x.dtype)]


def instance_norm(ins, a):
    x, sc, b = ins
    axes = tuple(range(2, x.ndim))
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - m) / np.sqrt(v + a.get("epsilon", 1e-5)) * sc.reshape(shape) + b.reshape(shape)
    return [y.astype(x.dtype)]


def reshape(ins, a):
    x, shape = ins[0], [int(d) for d in ins[1]]
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


def slice_op(ins, a):
    x, starts, ends = ins[0], ins[1], ins[2]
    axes = ins[3] if len(ins) > 3 else range(len(starts))
    steps = ins[4] if len(ins) > 4 else [1] * len(starts)
    idx = [slice(None)] * x.ndim
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        dim = x.shape[ax]
        st, en = int(st), int(en)
        st = max(0, min(dim, st + dim if st < 0 else st))
        en = max(0, min(dim, en + dim if en < 0 else en))
        idx[int(ax)] = slice(st, en, int(sp))
    return [x[tuple(idx)]]


def pad(ins, a):
    x, pads = ins[0], [int(p) for p in ins[1]]
    value = ins[2].item() if len(ins) > 2 and ins[2] is not None else 0
    r = x.ndim
    width = [(pads[d], pads[d + r]) for d in range(r)]
    mode = s(a.get("mode", "constant"))
    if mode == "constant":
        return [np.pad(x, width, mode="constant", constant_values=value)]
    return [np.pad(x, width, mode={"reflect": "reflect", "edge": "edge"}[mode])]


def split(ins, a):
    axis = a.get("axis", 0)
    sizes = np.cumsum(ins[1] if len(ins) > 1 else a["split"])[:-1]
    return list(np.split(ins[0], sizes, axis=axis))


def one_hot(ins, a):
    idx, depth, values = ins
    depth = int(depth.reshape(-1)[0])
    idx = np.where(idx < 0, idx + depth, idx)
    axis = a.get("axis", -1)
    eye = (np.arange(depth) == idx[..., None])
    out = np.where(eye, values[1], values[0]).astype(values.dtype)
    return [np.moveaxis(out, -1, axis)]


def sce(ins, a):
    logits, labels = ins[0], ins[1]
    lp = logits - np.max(logits, axis=1, keepdims=True)
    lp = lp - np.log(np.sum(np.exp(lp), axis=1, keepdims=True))
    picked = -lp[np.arange(len(labels)), labels.astype(np.int64)]
    assert s(a.get("reduction", "mean")) == "mean"
    return [np.asarray(picked.mean()).astype(logits.dtype)]


def cumsum(ins, a):
    x, axis = ins[0], int(ins[1].reshape(-1)[0])
    if a.get("reverse", 0):
        x = np.flip(x, axis)
    r = np.cumsum(x, axis=axis).astype(x.dtype)
    if a.get("exclusive", 0):
        r = r - x
    if a.get("reverse", 0):
        r = np.flip(r, axis)
    return [np.ascontiguousarray(r)]


def topk(ins, a):
    x, k = ins[0], int(ins[1].reshape(-1)[0])
    axis = a.get("axis", -1)
    largest = a.get("largest", 1)
    # stable sort: equal values keep the lower index first
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def resize(ins, a):
    """Resize by F.interpolate, for the (mode, coordinate mode, nearest
    mode) triples whose semantics it shares; the output size from sizes,
    or from scales as floor(in * scale) with the scales driving the
    coordinates."""
    x, scales = ins[0], ins[2] if len(ins) > 2 else None
    sizes = ins[3] if len(ins) > 3 else None
    mode = s(a.get("mode", b"nearest"))
    coord = s(a.get("coordinate_transformation_mode", b"half_pixel"))
    key = (mode, coord, s(a.get("nearest_mode", b"round_prefer_floor")) if mode == "nearest" else "")
    kw = {("nearest", "asymmetric", "floor"): dict(mode="nearest"),
          ("nearest", "half_pixel", "round_prefer_ceil"): dict(mode="nearest-exact"),
          ("linear", "half_pixel", ""): dict(mode="bilinear", align_corners=False),
          ("linear", "align_corners", ""): dict(mode="bilinear", align_corners=True)}.get(key)
    if kw is None or x.ndim != 4:
        raise SystemExit("check_export: no reference for Resize %s on rank %d" % (key, x.ndim))
    if sizes is not None and sizes.size:
        kw["size"] = [int(v) for v in sizes[2:]]
    else:
        assert list(scales[:2]) == [1, 1], scales
        kw.update(scale_factor=[float(v) for v in scales[2:]], recompute_scale_factor=False)
    torch, F = torch_f()
    return [F.interpolate(torch.from_numpy(x), **kw).numpy()]


OPS = {
    "Add": elementwise(lambda a, b: a + b),
    "Sub": elementwise(lambda a, b: a - b),
    "Mul": elementwise(lambda a, b: a * b),
    "Div": elementwise(lambda a, b: a / b),
    "Pow": elementwise(lambda a, b: np.power(a, b).astype(a.dtype)),
    "Max": lambda ins, a: [functools.reduce(np.maximum, ins)],
    "Min": lambda ins, a: [functools.reduce(np.minimum, ins)],
    "Equal": elementwise(lambda a, b: a == b),
    "Greater": elementwise(lambda a, b: a > b),
    "Less": elementwise(lambda a, b: a < b),
    "Where": elementwise(np.where),
    "Not": elementwise(np.logical_not),
    "And": elementwise(np.logical_and),
    "Or": elementwise(np.logical_or),
    "MatMul": elementwise(np.matmul),
    "Neg": elementwise(np.negative),
    "Exp": elementwise(np.exp),
    "Log": elementwise(np.log),
    "Sqrt": elementwise(np.sqrt),
    "Abs": elementwise(np.abs),
    "Tanh": elementwise(np.tanh),
    "Sigmoid": elementwise(lambda x: same(x, 1 / (1 + np.exp(-x.astype(np.float64))))),
    "Relu": elementwise(lambda x: np.maximum(x, same(x, 0))),
    "LeakyRelu": lambda ins, a: [np.where(ins[0] > 0, ins[0], ins[0] * same(ins[0], a.get("alpha", 0.01)))],
    "Elu": lambda ins, a: [np.where(ins[0] > 0, ins[0], same(ins[0], a.get("alpha", 1.0)) * np.expm1(ins[0]))],
    "Selu": lambda ins, a: [same(ins[0], a["gamma"] * np.where(ins[0] > 0, ins[0], a["alpha"] * np.expm1(ins[0].astype(np.float64))))],
    "Softplus": elementwise(lambda x: same(x, softplus(x.astype(np.float64)))),
    "HardSigmoid": lambda ins, a: [same(ins[0], np.clip(a.get("alpha", 0.2) * ins[0].astype(np.float64) + a.get("beta", 0.5), 0, 1))],
    "HardSwish": elementwise(lambda x: same(x, x * np.clip(x.astype(np.float64) / 6 + 0.5, 0, 1))),
    "Sign": elementwise(np.sign),
    "Reciprocal": elementwise(lambda x: same(x, 1) / x),
    "Floor": elementwise(np.floor),
    "Ceil": elementwise(np.ceil),
    "Round": elementwise(np.round),  # halves to even, as ONNX Round
    "Erf": elementwise(erf),
    "Identity": elementwise(lambda x: x),
    "Clip": lambda ins, a: [np.minimum(np.maximum(ins[0], ins[1]), ins[2])],
    "Cast": lambda ins, a: [ins[0].astype(DTYPES[a["to"]])],
    "Shape": lambda ins, a: [np.array(ins[0].shape, dtype=np.int64)],
    "Size": lambda ins, a: [np.array(ins[0].size, dtype=np.int64)],
    "ConstantOfShape": lambda ins, a: [np.full([int(d) for d in ins[0]], numpy_helper.to_array(a["value"])[0])],
    "Transpose": lambda ins, a: [np.transpose(ins[0], a.get("perm"))],
    "Reshape": reshape,
    "Flatten": lambda ins, a: [ins[0].reshape(int(np.prod(ins[0].shape[:a.get("axis", 1) % (ins[0].ndim + 1)])), -1)],
    "Expand": lambda ins, a: [ins[0] * np.ones([int(d) for d in ins[1]], dtype=ins[0].dtype)],
    "Tile": lambda ins, a: [np.tile(ins[0], [int(r) for r in ins[1]])],
    "Unsqueeze": lambda ins, a: [np.expand_dims(ins[0], axes_of(ins, a))],
    "Squeeze": squeeze,
    "Concat": lambda ins, a: [np.concatenate(ins, axis=a["axis"])],
    "Slice": slice_op,
    "Gather": lambda ins, a: [np.take(ins[0], ins[1], axis=a.get("axis", 0))],
    "OneHot": one_hot,
    "Pad": pad,
    "Split": split,
    "ReduceSum": reduce(np.sum, axes_input=True),
    "ReduceMean": reduce(np.mean),
    "ReduceMax": reduce(np.max),
    "ReduceMin": reduce(np.min),
    "ReduceProd": reduce(np.prod),
    "ReduceLogSumExp": reduce(logsumexp),
    "ArgMax": arg(np.argmax),
    "ArgMin": arg(np.argmin),
    "Softmax": softmax_op,
    "LogSoftmax": lambda ins, a: softmax_op(ins, a, log=True),
    "SoftmaxCrossEntropyLoss": sce,
    "CumSum": cumsum,
    "TopK": topk,
    "MaxPool": lambda ins, a: pool(ins, a, "max"),
    "AveragePool": lambda ins, a: pool(ins, a, "avg"),
    "GlobalAveragePool": lambda ins, a: [ins[0].mean(axis=(2, 3), keepdims=True)],
    "GlobalMaxPool": lambda ins, a: [ins[0].max(axis=(2, 3), keepdims=True)],
    "Conv": conv,
    "ConvTranspose": lambda ins, a: conv(ins, a, transpose=True),
    "BatchNormalization": batch_norm,
    "LayerNormalization": layer_norm,
    "InstanceNormalization": instance_norm,
    "Resize": resize,
}


def run(model, feeds):
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env.update(feeds)
    for node in model.graph.node:
        assert node.domain in ("", "ai.onnx"), node.domain
        if node.op_type not in OPS:
            raise SystemExit("check_export: no reference for op %s (node %s)" % (node.op_type, node.name))
        ins = [env[i] if i else None for i in node.input]
        outs = OPS[node.op_type](ins, attrs_of(node))
        for name, v in zip(node.output, outs):
            env[name] = np.asarray(v)
    return [env[o.name] for o in model.graph.output]


def main():
    path, prefix = sys.argv[1], sys.argv[2]
    opset = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--opset" else 17
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8, model.ir_version
    versions = {o.domain: o.version for o in model.opset_import}
    assert versions.get("", versions.get("ai.onnx")) == opset, versions
    OPSET[0] = opset
    feeds = {}
    for i in model.graph.input:
        feeds[i.name] = np.load("%s.in.%s.npy" % (prefix, i.name.replace("/", "_")))
    outs = run(model, feeds)
    for k, v in enumerate(outs):
        want = DTYPES[model.graph.output[k].type.tensor_type.elem_type]
        assert v.dtype == want, (model.graph.output[k].name, v.dtype, want)
        np.save("%s.out.%d.npy" % (prefix, k), v)


if __name__ == "__main__":
    main()
