#!/usr/bin/python3
"""Runs the CNN benchmark driver and the same networks in PyTorch, alternating.

    /usr/bin/python3 bench/compare_torch_cnn.py [--driver build/bench/fg_bench_cnn]
                                               [--rounds 3] [--cases a,b,...]

Each round runs, per case, the flowgraph driver and then this script with
--torch CASE, each as its own process, so that each prints the peak resident
memory of a process that ran only that case (VmHWM). Alternating spreads
any drift in the machine's load over both frameworks; each framework's time
is the median over the rounds of its per-round medians.

PyTorch's side is what a PyTorch user writes: eager float32 on the CPU with
one thread per core, as flowgraph (oneDNN convolutions), torchvision's resnet18
(weights=None; the CIFAR form replaces conv1 with a 3x3/1 convolution and
the max pool with nn.Identity()), zero_grad(set_to_none=True), backward and
optimizer.step(); inference under torch.no_grad() in eval mode.

Prints per case

    RATIO <case> <torch_time / flowgraph_time>  [target >= T: met|missed]

then the memory of both (flowgraph's arena against its lower bound, and both
processes' peak RSS), and a Markdown table for docs/performance.md.
"""
import os
import statistics
import sys

import torch_common
from torch_common import mib

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DRIVER = os.path.join(os.path.dirname(HERE), "build", "bench", "fg_bench_cnn")

TARGETS = {
    "cnn_small_train": 1.5,
    "resnet18_cifar_train": 1.0,
    "resnet18_infer_b1": 1.3,
    "resnet18_infer_b8": 1.3,
}
CASES = list(TARGETS)
# (batch, warm-up, timed runs), matching the driver's defaults.
RUNS = {
    "cnn_small_train": (64, 20, 200),
    "resnet18_cifar_train": (32, 2, 8),
    "resnet18_infer_b1": (1, 3, 20),
    "resnet18_infer_b8": (8, 2, 6),
}


# ---- PyTorch versions of the cases -------------------------------------------

def lenet():
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(256, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def resnet18(cifar, classes):
    import torch.nn as nn
    import torchvision
    m = torchvision.models.resnet18(weights=None, num_classes=classes)
    if cifar:
        m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
    return m


def torch_step(case):
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    # PyTorch here starts with one thread; flowgraph uses one per core.
    torch.set_num_threads(os.cpu_count())
    batch = RUNS[case][0]
    if case == "cnn_small_train":
        model, x = lenet(), torch.rand(batch, 1, 28, 28) * 2 - 1
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    elif case == "resnet18_cifar_train":
        model, x = resnet18(True, 10), torch.rand(batch, 3, 32, 32) * 2 - 1
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        model, x = resnet18(False, 1000).eval(), torch.rand(batch, 3, 224, 224) * 2 - 1

        def infer():
            with torch.no_grad():
                model(x)
        return infer
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def torch_main(case):
    _, warmup, runs = RUNS[case]
    t = torch_common.timed(torch_step(case), warmup, runs)
    rss = torch_common.peak_rss_kb()
    print("TORCH %s median_s=%.6g maxrss_kb=%d" % (case, t, rss))


# ---- the comparison ----------------------------------------------------------

def run_torch(case):
    return torch_common.run_torch_case("compare_torch_cnn", os.path.abspath(__file__), case)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch":
        return torch_main(sys.argv[2])
    args = torch_common.parse_args(__doc__, "compare_torch_cnn", DEFAULT_DRIVER, CASES)
    fg = {c: [] for c in args.cases}
    off = {c: [] for c in args.cases}  # the driver with the graph passes off
    th = {c: [] for c in args.cases}
    for r in range(args.rounds):
        for c in args.cases:
            trio = [lambda: fg[c].append(torch_common.run_driver("compare_torch_cnn",
                                                                  args.driver, c)[c]),
                    lambda: off[c].append(torch_common.run_driver("compare_torch_cnn",
                                                                   args.driver, c, False)[c]),
                    lambda: th[c].append(run_torch(c))]
            for f in (trio if r % 2 == 0 else trio[::-1]):
                f()
    rows, passes_rows = [], []
    for c in args.cases:
        tf = statistics.median(float(d["median_s"]) for d in fg[c])
        tt = statistics.median(float(d["median_s"]) for d in th[c])
        last, lt = fg[c][-1], th[c][-1]
        ratio = tt / tf
        met = "met" if ratio >= TARGETS[c] else "missed"
        print("RATIO %s %.3f  [target >= %.1f: %s]  flowgraph %.4g s, torch %.4g s, "
              "%s GFLOP/s" % (c, ratio, TARGETS[c], met, tf, tt, last["gflops"]))
        arena = mib(last["arena_bytes"], 1)
        bound = mib(last["lower_bound_bytes"], 1)
        print("MEMORY %s arena %.1f MiB, lower bound %.1f MiB (%.3fx), weights %.1f MiB, "
              "peak RSS flowgraph %.0f MiB, torch %.0f MiB" %
              (c, arena, bound, arena / bound if bound else 0, mib(last["weights_bytes"], 1),
               mib(last["maxrss_kb"], 1024), mib(lt["maxrss_kb"], 1024)))
        rows.append("| %s | %.4g | %.4g | %.2fx (>= %.1f) | %s | %.1f / %.1f MiB | %.0f / %.0f MiB |"
                    % (c, tf * 1e3, tt * 1e3, ratio, TARGETS[c], last["gflops"], arena, bound,
                       mib(last["maxrss_kb"], 1024), mib(lt["maxrss_kb"], 1024)))
        torch_common.passes_figures(c, fg[c], off[c], passes_rows)
    torch_common.print_table(["case", "flowgraph ms", "PyTorch ms", "speed-up (target)",
                              "GFLOP/s", "arena / bound", "peak RSS fg / torch"], rows)
    torch_common.print_table(torch_common.PASSES_COLUMNS, passes_rows)


if __name__ == "__main__":
    main()
