#!/usr/bin/python3
"""What each graph pass buys: flowgraph's benchmark drivers with the passes
added one at a time.

    /usr/bin/python3 bench/passes_ablation.py [--build build] [--rounds 3]
                                              [--cases a,b,...]

Each configuration is a pass list given to the drivers through FG_PASSES
(flowgraph/passes.h): "off" (no pass); the clean-up passes (simplify, fold,
fold_inference, cse, dce); then the default pipeline's other passes added
one at a time in its order, as `flowgraph optimize --help` lists them from
the library's table, so a pass added later joins the table by itself. Each round
runs every configuration once per case, the order reversed every other
round; a configuration's figure is the median over rounds of the driver's
median. Prints one line per case and configuration, then a Markdown table:
per case the time of each configuration and the arena bytes of the full
pipeline against none.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

import torch_common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# case: (driver, extra arguments); ONNX cases need the exported model
# (bench/compare_torch_onnx.py writes it into build/bench/onnx/).
CASES = {
    "mlp_small_train": ("fg_bench", []),
    "mlp_medium_train": ("fg_bench", []),
    "mlp_large_train": ("fg_bench", []),
    "mlp_large_infer_b1": ("fg_bench", []),
    "cnn_small_train": ("fg_bench_cnn", []),
    "resnet18_infer_b1": ("fg_bench_cnn", []),
    "onnx_resnet18_b1": ("fg_bench_onnx", ["onnx/resnet18.onnx", "--batch", "1"]),
    "onnx_transformer_b8": ("fg_bench_onnx", ["onnx/transformer.onnx", "--batch", "8"]),
    "onnx_gpt_mlp_op14_b8": ("fg_bench_onnx", ["onnx/gpt_mlp_op14.onnx", "--batch", "8"]),
}


def pipeline(build):
    """The default pipeline's pass names, in order, as the CLI's help lists
    them (from the library's pass table)."""
    out = subprocess.run([os.path.join(build, "flowgraph"), "optimize", "--help"],
                         capture_output=True, text=True)
    lines = out.stdout.split("Graph optimization passes (--passes), in default order:\n")[-1]
    entries = re.split(r"^(?=  \S)", lines, flags=re.M)
    names = [e.split()[0] for e in entries if e.startswith("  ") and "(off by default)" not in e]
    if out.returncode != 0 or not names:
        sys.exit("passes_ablation: `flowgraph optimize --help` lists no pass:\n%s%s"
                 % (out.stdout, out.stderr))
    return names


# The passes that only remove work (no new op); they form the first step.
CLEANUP = ("simplify", "fold", "fold_inference", "cse", "dce")


def configs(names):
    """(label, FG_PASSES value): none; the clean-up passes; then each other
    pass added in pipeline order (the list kept in that order)."""
    on = [n for n in names if n in CLEANUP]
    out = [("none", "off"), ("clean-up", ",".join(on))]
    for n in names:
        if n not in CLEANUP:
            on.append(n)
            out.append(("+" + n, ",".join(x for x in names if x in on)))
    return out


def run(build, case, value):
    driver, extra = CASES[case]
    bench = os.path.join(build, "bench")
    args = [os.path.join(bench, driver), case] + [os.path.join(bench, a) if a.endswith(".onnx")
                                                    else a for a in extra]
    env = dict(os.environ, FG_PASSES=value)
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts[:2] == ["FG", case] and "skipped:" not in parts:
            return dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    sys.exit("passes_ablation: %s failed (%d) with FG_PASSES=%s:\n%s%s"
             % (" ".join(args), out.returncode, value, out.stdout, out.stderr))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            sys.exit("passes_ablation: unknown case %r (known: %s)" % (c, ", ".join(CASES)))
    cfgs = configs(pipeline(args.build))
    rows = []
    for case in cases:
        if CASES[case][0] == "fg_bench_onnx" and not os.path.exists(
                os.path.join(args.build, "bench", CASES[case][1][0])):
            print("SKIP %s: run bench/compare_torch_onnx.py first (it exports the model)" % case)
            continue
        got = {label: [] for label, _ in cfgs}
        for r in range(args.rounds):
            for label, value in (cfgs if r % 2 == 0 else cfgs[::-1]):
                got[label].append(run(args.build, case, value))
        med = {label: statistics.median(float(d["median_s"]) for d in got[label])
               for label, _ in cfgs}
        for label, _ in cfgs:
            print("ABLATION %s %-16s %.4g ms  (none / this %.3f)"
                  % (case, label, med[label] * 1e3, med["none"] / med[label]))
        arena = ["%.2f MiB" % torch_common.mib(got[label][-1].get("arena_bytes", 0), 1)
                 for label in ("none", cfgs[-1][0])]
        rows.append("| %s | %s | %s / %s |" % (
            case, " | ".join("%.4g" % (med[label] * 1e3) for label, _ in cfgs), arena[0],
            arena[1]))
        sys.stdout.flush()
    torch_common.print_table(["case (ms)"] + [label for label, _ in cfgs] +
                             ["arena none / all"], rows)


if __name__ == "__main__":
    main()
