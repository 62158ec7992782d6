#!/usr/bin/python3
"""Runs flowgraph's benchmark driver and the same models in PyTorch, alternating.

    /usr/bin/python3 bench/compare_torch.py [--driver build/bench/fg_bench]
                                           [--rounds 5] [--cases a,b,...]

Each round runs, per case: the flowgraph driver as a subprocess (it warms up
and prints the median of its runs), then PyTorch in this process once with
its default thread count and once with torch.set_num_threads(os.cpu_count()),
in alternating order. Alternating spreads any drift in the machine's load
over both frameworks. For each framework the result is the median over the
rounds; PyTorch's is the faster of its two settings (on a small machine
PyTorch's own threads compete with OpenBLAS's, so more threads can be
slower).

Prints one line per case:

    RATIO <case> <torch_time / flowgraph_time>  [target >= T: target met|missed] ...

and for mlp_large_infer_b1 (the large MLP's forward at batch 1) flowgraph's
time over the time of a plain read of its weights, at 1 and at 2 threads
(target <= 1.25: at batch 1 the forward is bound by reading the weights
once), and PyTorch's time over flowgraph's at each thread count (PyTorch
run with torch.set_num_threads(1) and (2), eager, under torch.no_grad()).
For mlp_large_train the achieved GFLOP/s of the training step as a
fraction of a plain 2048^3 cblas_sgemm on all cores (measured by the driver
in the same process; FLOPs are those of the matmuls both frameworks run,
see bench/fg_bench.c), and for wide_graph flowgraph's 1-thread time over its
2-thread time (PyTorch's numbers printed for reference). A Markdown table of
the same figures follows, for docs/performance.md.

PyTorch's training step is what a PyTorch user writes: eager float32,
nn.Linear layers (uniform +-1/sqrt(fan_in), as the driver), ReLU,
F.cross_entropy, then optimizer.zero_grad(set_to_none=True) (the faster
form), loss.backward(), optimizer.step() with torch.optim.SGD(lr=0.01).
"""
import os
import platform
import statistics
import sys
import time

import torch_common

# Imported in main, after torch_common.parse_args has given this process
# flowgraph's OpenBLAS kernels.
torch = F = None

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DRIVER = os.path.join(os.path.dirname(HERE), "build", "bench", "fg_bench")

# The targets: torch_time / flowgraph_time, or for wide_graph
# flowgraph's 1-thread time / 2-thread time.
TARGETS = {
    "op_overhead": 10.0,
    "mlp_small_train": 6.0,
    "mlp_medium_train": 1.3,
    "mlp_large_train": 1.15,
    "wide_graph": 1.8,
    "mlp_large_infer_b1": 3.0,
}
# mlp_large_infer_b1: the forward's time / a plain read of its weights.
READ_TARGET = 1.25
INFER = "mlp_large_infer_b1"
INFER_THREADS = (1, 2)
GFLOPS_FRACTION_TARGET = 0.95
CASES = list(TARGETS)

MLPS = {
    "mlp_small_train": (32, [64, 128, 128, 10]),
    "mlp_medium_train": (128, [784, 512, 512, 10]),
    "mlp_large_train": (256, [1024, 2048, 2048, 1000]),
    INFER: (1, [1024, 2048, 2048, 1000]),
}
# Torch (warm-up, timed runs) per round; the driver has matching defaults.
TORCH_RUNS = {
    "op_overhead": (5, 60),
    "mlp_small_train": (40, 400),
    "mlp_medium_train": (6, 60),
    "mlp_large_train": (2, 8),
    "wide_graph": (3, 30),
    INFER: (20, 200),
}
WIDE = (8, 256, 512, 512)  # branches, M, K, N


timed = torch_common.timed


# ---- PyTorch versions of the cases -------------------------------------------

def torch_op_overhead():
    x = torch.rand(16) * 2 - 1
    c = torch.rand(16) * 2 - 1

    def step():
        y = x
        for _ in range(1000):
            y = y + c
        return y

    return step


def torch_mlp(case):
    model, x, y = torch_common.mlp_model_and_batch(*MLPS[case])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step


def torch_wide():
    branches, m, k, n = WIDE
    x = torch.rand(m, k) * 2 - 1
    ws = [(torch.rand(k, n) * 2 - 1) / k ** 0.5 for _ in range(branches)]

    def step():
        level = [x @ w for w in ws]
        while len(level) > 1:
            level = [level[2 * i] + level[2 * i + 1] for i in range(len(level) // 2)]
        return level[0]

    return step


def torch_infer():
    model, x, _ = torch_common.mlp_model_and_batch(*MLPS[INFER])

    def step():
        with torch.no_grad():
            return model(x)

    return step


def torch_case(case):
    if case == INFER:
        return torch_infer()
    if case == "op_overhead":
        return torch_op_overhead()
    if case == "wide_graph":
        return torch_wide()
    return torch_mlp(case)


# ---- the flowgraph driver ----------------------------------------------------

def run_driver(driver, case, passes=True):
    # PyTorch's and OpenBLAS's worker threads in this process spin for a
    # moment after their last job; let them go to sleep before the driver runs.
    time.sleep(0.25)
    return torch_common.run_driver("compare_torch", driver, case, passes)


def med(values):
    return statistics.median(values)


def verdict(value, target):
    return "target met" if value >= target else "target missed"


def fmt_time(seconds):
    if seconds < 0:
        return "-" + fmt_time(-seconds)
    if seconds < 1e-6:
        return "%.0f ns" % (seconds * 1e9)
    if seconds < 1e-3:
        return "%.1f us" % (seconds * 1e6)
    if seconds < 1:
        return "%.2f ms" % (seconds * 1e3)
    return "%.3f s" % seconds


def main():
    args = torch_common.parse_args(__doc__, "compare_torch", DEFAULT_DRIVER, CASES)
    global torch, F
    import torch
    import torch.nn.functional as F
    cases = args.cases
    if not os.access(args.driver, os.X_OK):
        sys.exit("compare_torch: driver %s not found; run `make bench`" % args.driver)

    cores = os.cpu_count() or 1
    torch_default = torch.get_num_threads()
    settings = sorted({torch_default, cores})
    print("machine: %s, %d cores; python %s; torch %s (default threads %d)" %
          (platform.processor() or platform.machine(), cores, platform.python_version(),
           torch.__version__, torch_default))
    print("rounds: %d, alternating flowgraph driver / torch per case; load average %.2f"
          % (args.rounds, os.getloadavg()[0]))
    if os.getloadavg()[0] > 0.5:
        print("warning: the machine is busy (load average above 0.5); figures will be noisy")
    sys.stdout.flush()

    results = {}
    t_start = time.perf_counter()
    for case in cases:
        fg_rounds, off_rounds = [], []
        case_settings = list(INFER_THREADS) if case == INFER else settings
        torch_rounds = {t: [] for t in case_settings}
        steps = {}
        for t in case_settings:
            torch.set_num_threads(t)
            steps[t] = torch_case(case)
        warmup, runs = TORCH_RUNS[case]
        for r in range(args.rounds):
            # The driver with the graph passes on and off, in alternating order.
            pair = [lambda: fg_rounds.append(run_driver(args.driver, case)),
                    lambda: off_rounds.append(run_driver(args.driver, case, False))]
            for run in (pair if r % 2 == 0 else pair[::-1]):
                run()
            order = case_settings if r % 2 == 0 else case_settings[::-1]
            for t in order:
                torch.set_num_threads(t)
                torch_rounds[t].append(timed(steps[t], warmup, runs))
        torch.set_num_threads(torch_default)
        results[case] = (fg_rounds, torch_rounds, off_rounds)
        report(case, fg_rounds, torch_rounds, case_settings)
        report_passes_off(case, fg_rounds, off_rounds)
    print("total time: %.0f s; load average %.2f" % (time.perf_counter() - t_start,
                                                     os.getloadavg()[0]))
    markdown(results, settings)
    markdown_passes(results)


def markdown_passes(results):
    """The graph passes' effect: flowgraph with them on and off, per case."""
    rows = []
    for case, (fg_rounds, _, off_rounds) in results.items():
        key = off_key(case)
        on = med([float(r[case][key]) for r in fg_rounds])
        off = med([float(r[case][key]) for r in off_rounds])
        arena = ["", ""]
        if "arena_bytes" in fg_rounds[0][case]:
            arena = ["%.2f MiB" % (float(rs[0][case]["arena_bytes"]) / 2 ** 20)
                     for rs in (fg_rounds, off_rounds)]
        label = {"wide_graph": "wide_graph, 2 threads", INFER: INFER + ", 1 thread"}.get(case, case)
        rows.append("| %s | %s | %s | %.2f | %s | %s |" % (label, fmt_time(on), fmt_time(off),
                                                          off / on, arena[0], arena[1]))
    torch_common.print_table(["case", "passes on", "passes off", "off / on", "arena on",
                              "arena off"], rows)


def infer_figures(fg_rounds, torch_rounds):
    """Per thread count: (flowgraph, plain read, torch) medians over the rounds."""
    out = {}
    for t in INFER_THREADS:
        fg_s = med([float(r[INFER]["t%d_s" % t]) for r in fg_rounds])
        read_s = med([float(r[INFER]["read%d_s" % t]) for r in fg_rounds])
        out[t] = (fg_s, read_s, med(torch_rounds[t]))
    return out


def report_infer(fg_rounds, torch_rounds):
    for t, (fg_s, read_s, torch_s) in infer_figures(fg_rounds, torch_rounds).items():
        over = fg_s / read_s
        print("READ_RATIO %s threads=%d %.3f  [target <= %g: %s]  flowgraph %s, plain read of "
              "the weights %s"
              % (INFER, t, over, READ_TARGET, "target met" if over <= READ_TARGET else
                 "target missed", fmt_time(fg_s), fmt_time(read_s)))
        ratio = torch_s / fg_s
        print("RATIO %s threads=%d %.3f  [target >= %g: %s]  flowgraph %s, torch %s"
              % (INFER, t, ratio, TARGETS[INFER], verdict(ratio, TARGETS[INFER]), fmt_time(fg_s),
                 fmt_time(torch_s)))


def off_key(case):
    """The FG line field a passes-off comparison reads for `case`."""
    return {"wide_graph": "t2_median_s", INFER: "t1_s"}.get(case, "median_s")


def report_passes_off(case, fg_rounds, off_rounds):
    """flowgraph with the graph passes off next to on (same driver, same rounds)."""
    key = off_key(case)
    on = med([float(r[case][key]) for r in fg_rounds])
    off = med([float(r[case][key]) for r in off_rounds])
    arena = ""
    if "arena_bytes" in fg_rounds[0][case]:
        arena = "; arena %.2f MiB on, %.2f MiB off" % (
            float(fg_rounds[0][case]["arena_bytes"]) / 2 ** 20,
            float(off_rounds[0][case]["arena_bytes"]) / 2 ** 20)
    print("PASSES %s on %s, off %s, off/on %.3f%s"
          % (case, fmt_time(on), fmt_time(off), off / on, arena))
    sys.stdout.flush()


def report(case, fg_rounds, torch_rounds, settings):
    if case == INFER:
        report_infer(fg_rounds, torch_rounds)
        sys.stdout.flush()
        return
    torch_med = {t: med(v) for t, v in torch_rounds.items()}
    best_t = min(settings, key=lambda t: torch_med[t])
    torch_s = torch_med[best_t]
    torch_txt = ", ".join("%d thread%s %s" % (t, "" if t == 1 else "s", fmt_time(torch_med[t]))
                          for t in settings)
    target = TARGETS[case]
    if case == "wide_graph":
        t1 = med([float(r[case]["t1_median_s"]) for r in fg_rounds])
        t2 = med([float(r[case]["t2_median_s"]) for r in fg_rounds])
        ratio = t1 / t2
        print("RATIO wide_graph %.3f  [target >= %g: %s]  flowgraph 1 thread %s, 2 threads %s"
              % (ratio, target, verdict(ratio, target), fmt_time(t1), fmt_time(t2)))
        lo, hi = settings[0], settings[-1]
        print("  torch wide_graph (reference): %s; speedup %d vs %d threads %.3f; "
              "torch_best / flowgraph_2_threads %.3f"
              % (torch_txt, hi, lo, torch_med[lo] / torch_med[hi], torch_s / t2))
    else:
        fg_s = med([float(r[case]["median_s"]) for r in fg_rounds])
        ratio = torch_s / fg_s
        extra = ""
        if case == "op_overhead":
            extra = "  (per node: flowgraph %s, torch %s)" % (fmt_time(fg_s / 1000),
                                                         fmt_time(torch_s / 1000))
        print("RATIO %s %.3f  [target >= %g: %s]  flowgraph %s, torch %s (%s)%s"
              % (case, ratio, target, verdict(ratio, target), fmt_time(fg_s), fmt_time(torch_s),
                 torch_txt, extra))
        if "blas_only_s" in fg_rounds[0][case]:
            blas = med([float(r[case]["blas_only_s"]) for r in fg_rounds])
            print("  the step's matmuls alone as cblas_sgemm calls on all cores: %s; beyond them "
                  "flowgraph's step spends %s, torch's %s"
                  % (fmt_time(blas), fmt_time(fg_s - blas), fmt_time(torch_s - blas)))
        if case == "mlp_large_train":
            flops = float(fg_rounds[0][case]["flops"])
            sgemm = med([float(r["sgemm_2048"]["gflops"]) for r in fg_rounds])
            flops_3x = float(fg_rounds[0][case]["flops_3x"])
            frac = flops / fg_s / 1e9 / sgemm
            print("GFLOPS_FRACTION mlp_large_train %.3f  [target >= %g: %s]  step %.1f GFLOP/s "
                  "(%.2f GFLOP of matmuls per step), sgemm 2048^3 %.1f GFLOP/s, torch step "
                  "%.1f GFLOP/s, torch fraction %.3f"
                  % (frac, GFLOPS_FRACTION_TARGET, verdict(frac, GFLOPS_FRACTION_TARGET),
                     flops / fg_s / 1e9, flops / 1e9, sgemm, flops / torch_s / 1e9,
                     flops / torch_s / 1e9 / sgemm))
            if "blas_only_s" in fg_rounds[0][case]:
                blas = med([float(r[case]["blas_only_s"]) for r in fg_rounds])
                print("  the matmuls alone reach %.1f GFLOP/s, a fraction of %.3f"
                      % (flops / blas / 1e9, flops / blas / 1e9 / sgemm))
            print("  (counting 3 x 2MNK per layer, i.e. also the first layer's dX that neither "
                  "framework computes: %.2f GFLOP, fraction %.3f)"
                  % (flops_3x / 1e9, flops_3x / fg_s / 1e9 / sgemm))
    sys.stdout.flush()


def markdown(results, settings):
    print()
    print("| case | flowgraph | PyTorch (best of %s threads) | ratio | target | |" %
          "/".join(str(t) for t in settings))
    print("| --- | --- | --- | --- | --- | --- |")
    for case, (fg_rounds, torch_rounds, off_rounds) in results.items():
        if case == INFER:
            for t, (fg_s, read_s, torch_s) in infer_figures(fg_rounds, torch_rounds).items():
                ratio, over = torch_s / fg_s, fg_s / read_s
                print("| %s, %d thread%s | %s | %s (%d thread%s) | %.2f | >= %g | %s |"
                      % (case, t, "" if t == 1 else "s", fmt_time(fg_s), fmt_time(torch_s), t,
                         "" if t == 1 else "s", ratio, TARGETS[case],
                         "met" if ratio >= TARGETS[case] else "missed"))
                print("| %s, %d thread%s / plain read | %s | %s (read) | %.2f | <= %g | %s |"
                      % (case, t, "" if t == 1 else "s", fmt_time(fg_s), fmt_time(read_s), over,
                         READ_TARGET, "met" if over <= READ_TARGET else "missed"))
            continue
        torch_s = min(med(v) for v in torch_rounds.values())
        target = TARGETS[case]
        if case == "wide_graph":
            t1 = med([float(r[case]["t1_median_s"]) for r in fg_rounds])
            t2 = med([float(r[case]["t2_median_s"]) for r in fg_rounds])
            print("| wide_graph (1 vs 2 threads) | %s / %s | %s | %.2f | >= %g | %s |"
                  % (fmt_time(t1), fmt_time(t2), fmt_time(torch_s), t1 / t2, target,
                     "met" if t1 / t2 >= target else "missed"))
            continue
        fg_s = med([float(r[case]["median_s"]) for r in fg_rounds])
        ratio = torch_s / fg_s
        print("| %s | %s | %s | %.2f | >= %g | %s |"
              % (case, fmt_time(fg_s), fmt_time(torch_s), ratio, target,
                 "met" if ratio >= target else "missed"))
        if case == "mlp_large_train":
            flops = float(fg_rounds[0][case]["flops"])
            sgemm = med([float(r["sgemm_2048"]["gflops"]) for r in fg_rounds])
            frac = flops / fg_s / 1e9 / sgemm
            print("| mlp_large_train GFLOP/s / sgemm | %.1f | %.1f (sgemm) | %.2f | >= %g | %s |"
                  % (flops / fg_s / 1e9, sgemm, frac, GFLOPS_FRACTION_TARGET,
                     "met" if frac >= GFLOPS_FRACTION_TARGET else "missed"))


if __name__ == "__main__":
    main()
