"""What bench/compare_torch.py and bench/compare_torch_gpu.py share: the
command line, running the driver and reading its FG lines, timing a step and
the PyTorch MLP. torch is imported inside the functions, so that
compare_torch_gpu.py can still say "skipped: no GPU" where torch is missing.
"""
import argparse
import statistics
import subprocess
import sys
import time


def parse_args(doc, prog, default_driver, cases):
    """--driver, --rounds and --cases (checked against `cases`, returned as a list)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--driver", default=default_driver)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default=",".join(cases))
    args = ap.parse_args()
    args.cases = [c for c in args.cases.split(",") if c]
    for c in args.cases:
        if c not in cases:
            sys.exit("%s: unknown case %r (known: %s)" % (prog, c, ", ".join(cases)))
    return args


def run_driver(prog, driver, case):
    """Runs `driver case` and returns its FG lines as {name: {key: value}}, None
    for a "skipped:" line; exits when the driver fails or prints no line for
    `case`."""
    out = subprocess.run([driver, case], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("%s: %s %s failed (%d):\n%s%s" %
                 (prog, driver, case, out.returncode, out.stdout, out.stderr))
    lines = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "FG" and parts[1] not in lines:
            lines[parts[1]] = (None if "skipped:" in parts else
                               dict(p.split("=", 1) for p in parts[2:] if "=" in p))
    if case not in lines:
        sys.exit("%s: no 'FG %s' line from the driver:\n%s" % (prog, case, out.stdout))
    return lines


def timed(step, warmup, runs, after_warmup=None):
    """The median time of `runs` calls of step() after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    if after_warmup:
        after_warmup()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mlp_model_and_batch(batch, widths):
    """The driver's MLP as a user writes it (nn.Linear layers, ReLU between them,
    seed 0) and a fixed batch: x uniform in +-1 [batch, widths[0]], labels y."""
    import torch
    torch.manual_seed(0)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    x = torch.rand(batch, widths[0]) * 2 - 1
    y = torch.randint(0, widths[-1], (batch,))
    return model, x, y


def keyed_line(prog, cmd, tag, case):
    """Runs cmd and returns the key=value pairs of its first "<tag> <case>"
    line; exits naming prog when there is none."""
    out = subprocess.run(cmd, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts[:2] == [tag, case]:
            return dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    sys.exit("%s: %s failed (%d):\n%s%s" %
             (prog, " ".join(cmd), out.returncode, out.stdout, out.stderr))


def run_torch_case(prog, script, case):
    """The TORCH line of `script --torch case`, run as its own process (so
    its peak RSS is that case's alone)."""
    return keyed_line(prog, [sys.executable, script, "--torch", case], "TORCH", case)


def print_table(columns, rows):
    """A Markdown table after a blank line: the header of `columns`, then `rows`
    (already formatted lines)."""
    print()
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    print("\n".join(rows))


def mib(v, unit):
    """v units (1: bytes, 1024: KiB) in MiB."""
    return float(v) * unit / 2 ** 20
