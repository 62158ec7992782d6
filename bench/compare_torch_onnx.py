#!/usr/bin/python3
"""Times imported ONNX models in flowgraph against the same models in PyTorch.

    /usr/bin/python3 bench/compare_torch_onnx.py [--driver build/bench/fg_bench_onnx]
                                                [--rounds 3] [--cases a,b,...]

The models are exported once by PyTorch 1.13 (torch.onnx.export, opset 17, a
dynamic batch axis) into build/bench/onnx/: torchvision's resnet18,
mobilenet_v2 and shufflenet_v2_x1_0 (weights=None, seed 0, eval mode; the
last with 58-, 116- and 232-channel and depthwise convolutions, which one
image cuts into parts of output channels or groups), the segmentation model
lraspp_mobilenet_v3_large (its "out" map, 21 classes at 224x224, upsampled
by two bilinear Resize nodes), a TransformerEncoder (2
layers, d_model 64, 4 heads, GELU, batch_first, sequence 128) and GPT-2's
MLP block (gpt_mlp: x + Linear(1024, 256)(GELU tanh(Linear(256, 1024)(
LayerNorm(x))))) on sequences of 128, whose tanh GELU PyTorch exports as
nine nodes (the activations pass makes them gelu_tanh); gpt_mlp_op14 is the
same block exported at opset 14, PyTorch 1.13's default, where LayerNorm
becomes nine nodes too (the layer_norm pass makes them one). The exporter
folds each eval-mode BatchNorm into its Conv itself; resnet18_bn is resnet18
exported with them kept (TrainingMode.PRESERVE, no constant folding, the
running statistics and affine parameters drawn from seed 0 as a trained
model's, not 0 and 1), so that flowgraph folds them (the fold_inference
pass; compare the PASSES line, the passes off). Each round
runs, per case, the flowgraph driver on the file and then this script with
--torch CASE, each as its own process, alternating which goes first.
PyTorch's side rebuilds the same model from the same seed (so the same
weights) and times inference under torch.no_grad() twice: eager, and
torch.jit.trace + torch.jit.freeze. Each framework's time is the median
over the rounds of its per-round medians.

Prints per case

    RATIO <case> eager <torch_eager / flowgraph>  jit <torch_jit / flowgraph>  [target >= 1.0]

the import time, the arena against its lower bound and both processes'
peak RSS, the resident memory the import added at its peak and held after
it against the model file's size, and a Markdown table for
docs/performance.md.
"""
import os
import statistics
import sys

import torch_common
from torch_common import mib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_DRIVER = os.path.join(ROOT, "build", "bench", "fg_bench_onnx")
MODEL_DIR = os.path.join(ROOT, "build", "bench", "onnx")

# case: (model, batch, warm-up, timed runs)
CASES = {
    "onnx_resnet18_b1": ("resnet18", 1, 3, 20),
    "onnx_resnet18_b8": ("resnet18", 8, 2, 8),
    "onnx_resnet18_bn_b1": ("resnet18_bn", 1, 3, 20),
    "onnx_resnet18_bn_b8": ("resnet18_bn", 8, 2, 8),
    "onnx_mobilenet_v2_b1": ("mobilenet_v2", 1, 3, 20),
    "onnx_mobilenet_v2_b8": ("mobilenet_v2", 8, 2, 8),
    "onnx_shufflenet_v2_b1": ("shufflenet_v2_x1_0", 1, 3, 20),
    "onnx_lraspp_b1": ("lraspp_mobilenet_v3_large", 1, 3, 20),
    "onnx_transformer_b8": ("transformer", 8, 3, 20),
    "onnx_gpt_mlp_b8": ("gpt_mlp", 8, 3, 20),
    "onnx_gpt_mlp_op14_b8": ("gpt_mlp_op14", 8, 3, 20),
}
TARGET = 1.0
SEQ, D_MODEL, D_GPT = 128, 64, 256


def gpt_mlp():
    """GPT-2's MLP block with its pre-norm and residual, width D_GPT."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(D_GPT)
            self.fc = torch.nn.Linear(D_GPT, 4 * D_GPT)
            self.proj = torch.nn.Linear(4 * D_GPT, D_GPT)

        def forward(self, x):
            h = torch.nn.functional.gelu(self.fc(self.ln(x)), approximate="tanh")
            return x + self.proj(h)

    return Block()


def build(model):
    """The model (eval mode) and an input shape with batch 1, from seed 0."""
    import torch
    import torchvision
    torch.manual_seed(0)
    if model in ("gpt_mlp", "gpt_mlp_op14"):
        return gpt_mlp().eval(), (1, SEQ, D_GPT)
    if model == "transformer":
        layer = torch.nn.TransformerEncoderLayer(D_MODEL, 4, dim_feedforward=128,
                                                 activation="gelu", batch_first=True)
        return torch.nn.TransformerEncoder(layer, 2).eval(), (1, SEQ, D_MODEL)
    if model == "lraspp_mobilenet_v3_large":
        seg = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
            weights=None, weights_backbone=None)

        class Out(torch.nn.Module):  # the "out" entry of its dict
            def __init__(self):
                super().__init__()
                self.m = seg

            def forward(self, x):
                return self.m(x)["out"]
        return Out().eval(), (1, 3, 224, 224)
    kept = model.endswith("_bn")
    m = getattr(torchvision.models, model[:-3] if kept else model)(weights=None)
    with torch.no_grad():
        for mod in m.modules():
            if kept and isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.3, 0.3)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.3, 0.3)
    return m.eval(), (1, 3, 224, 224)


def export(model):
    """build/bench/onnx/<model>.onnx, exported once."""
    import torch
    path = os.path.join(MODEL_DIR, model + ".onnx")
    if os.path.exists(path):
        return path
    os.makedirs(MODEL_DIR, exist_ok=True)
    m, shape = build(model)
    x = torch.rand(*shape) * 2 - 1
    tmp = path + ".tmp"
    kept = {"training": torch.onnx.TrainingMode.PRESERVE, "do_constant_folding": False}
    torch.onnx.export(m, (x,), tmp, opset_version=14 if model.endswith("_op14") else 17,
                      input_names=["input"],
                      output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                      **(kept if model.endswith("_bn") else {}))
    os.replace(tmp, path)
    return path


def torch_main(case):
    import torch
    torch.set_num_threads(os.cpu_count())
    model, batch, warmup, runs = CASES[case]
    m, shape = build(model)
    x = torch.rand(batch, *shape[1:]) * 2 - 1
    with torch.no_grad():
        eager = torch_common.timed(lambda: m(x), warmup, runs)
        try:
            frozen = torch.jit.freeze(torch.jit.trace(m, (x,)))
            jit = torch_common.timed(lambda: frozen(x), warmup, runs)
        except Exception as e:  # some models do not trace; say so, do not fail
            print("TORCH_JIT_FAILED %s %s" % (case, str(e).splitlines()[0]), file=sys.stderr)
            jit = float("nan")
    rss = torch_common.peak_rss_kb()
    print("TORCH %s eager_s=%.6g jit_s=%.6g maxrss_kb=%d" % (case, eager, jit, rss))


def run_torch(case):
    return torch_common.run_torch_case("compare_torch_onnx", os.path.abspath(__file__), case)


def run_fg(driver, case, passes=True):
    model, batch, warmup, runs = CASES[case]
    cmd = [driver, case, export(model), "--batch", str(batch), "--warmup", str(warmup),
           "--runs", str(runs)]
    return torch_common.keyed_line("compare_torch_onnx", cmd, "FG", case, passes)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch":
        return torch_main(sys.argv[2])
    args = torch_common.parse_args(__doc__, "compare_torch_onnx", DEFAULT_DRIVER, list(CASES))
    for c in args.cases:
        export(CASES[c][0])
    fg = {c: [] for c in args.cases}
    off = {c: [] for c in args.cases}  # the driver with the graph passes off
    th = {c: [] for c in args.cases}
    for r in range(args.rounds):
        for c in args.cases:
            trio = [lambda: fg[c].append(run_fg(args.driver, c)),
                    lambda: off[c].append(run_fg(args.driver, c, False)),
                    lambda: th[c].append(run_torch(c))]
            for f in (trio if r % 2 == 0 else trio[::-1]):
                f()
    rows, passes_rows = [], []
    for c in args.cases:
        tf = statistics.median(float(d["median_s"]) for d in fg[c])
        te = statistics.median(float(d["eager_s"]) for d in th[c])
        tj = statistics.median(float(d["jit_s"]) for d in th[c])
        last, lt = fg[c][-1], th[c][-1]
        re_, rj = te / tf, tj / tf
        met = "met" if re_ >= TARGET and not (rj < TARGET) else "missed"
        print("RATIO %s eager %.3f jit %.3f  [target >= %.1f: %s]  flowgraph %.4g s, "
              "torch eager %.4g s, jit %.4g s" % (c, re_, rj, TARGET, met, tf, te, tj))
        arena, bound = mib(last["arena_bytes"], 1), mib(last["lower_bound_bytes"], 1)
        fbytes = float(last["file_bytes"])
        ipeak, iheld = mib(last["import_peak_kb"], 1024), mib(last["import_held_kb"], 1024)
        print("MEMORY %s import %.3f s, arena %.1f MiB, lower bound %.1f MiB (%.3fx), "
              "peak RSS flowgraph %.0f MiB, torch %.0f MiB" %
              (c, float(last["import_s"]), arena, bound, arena / bound if bound else 0,
               mib(last["maxrss_kb"], 1024), mib(lt["maxrss_kb"], 1024)))
        print("IMPORT %s file %.1f MiB, resident memory added at the import's peak %.1f MiB "
              "(%.2fx the file), held after it %.1f MiB (%.2fx)" %
              (c, fbytes / 2**20, ipeak, ipeak * 2**20 / fbytes if fbytes > 0 else 0, iheld,
               iheld * 2**20 / fbytes if fbytes > 0 else 0))
        rows.append("| %s | %.4g | %.4g | %.4g | %.2fx | %.2fx | %.3f | %.1f / %.1f MiB |"
                    " %.0f / %.0f MiB |" %
                    (c, tf * 1e3, te * 1e3, tj * 1e3, re_, rj, float(last["import_s"]),
                     arena, bound, mib(last["maxrss_kb"], 1024), mib(lt["maxrss_kb"], 1024)))
        torch_common.passes_figures(c, fg[c], off[c], passes_rows)
    torch_common.print_table(["case", "flowgraph ms", "eager ms", "jit ms", "vs eager", "vs jit",
                              "import s", "arena / bound", "peak RSS fg / torch"], rows)
    torch_common.print_table(torch_common.PASSES_COLUMNS, passes_rows)


if __name__ == "__main__":
    main()
