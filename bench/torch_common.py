"""What bench/compare_torch.py and bench/compare_torch_gpu.py share: the
command line, running the driver and reading its FG lines, timing a step and
the PyTorch MLP. torch is imported inside the functions, so that
compare_torch_gpu.py can still say "skipped: no GPU" where torch is missing.
"""
import argparse
import os
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
    same_blas_kernels(prog, args.driver)
    return args


def same_blas_kernels(prog, driver):
    """Gives this process (PyTorch) the OpenBLAS kernels flowgraph runs, before
    torch is imported: where OpenBLAS falls back to kernels without AVX2 on a
    CPU it does not know, flowgraph chooses better ones (kernels/cpu/blas_core.c)
    and PyTorch, which calls the same OpenBLAS, would be timed on the
    fallback. fg_bench, beside `driver`, says which; a user's own
    OPENBLAS_CORETYPE stays."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    fg_bench = os.path.join(os.path.dirname(driver), "fg_bench")
    if not os.path.exists(fg_bench):
        return
    out = subprocess.run([fg_bench, "blas_core"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts[:2] == ["FG", "blas_core"] and len(parts) > 2 and parts[2].startswith("core="):
            os.environ["OPENBLAS_CORETYPE"] = parts[2][len("core="):]
            print("%s: OpenBLAS kernels %s, flowgraph's, for both" % (prog, parts[2][5:]))


def passes_env(passes):
    """This process's environment with flowgraph's graph passes on (the
    default) or off (FG_PASSES=off)."""
    env = dict(os.environ)
    env.pop("FG_PASSES", None)
    if not passes:
        env["FG_PASSES"] = "off"
    return env


def run_driver(prog, driver, case, passes=True):
    """Runs `driver case` and returns its FG lines as {name: {key: value}}, None
    for a "skipped:" line; exits when the driver fails or prints no line for
    `case`. passes=False runs it with the graph passes off (FG_PASSES=off)."""
    out = subprocess.run([driver, case], capture_output=True, text=True, env=passes_env(passes))
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


def keyed_line(prog, cmd, tag, case, passes=True):
    """Runs cmd (flowgraph's graph passes on or off) and returns the
    key=value pairs of its first "<tag> <case>" line; exits naming prog when
    there is none."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=passes_env(passes))
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


def peak_rss_kb():
    """This process's peak resident memory in KiB: VmHWM of /proc/self/status,
    not resource's ru_maxrss, which Linux carries across fork and exec from
    the parent (a child reported the comparison script's size)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def mib(v, unit):
    """v units (1: bytes, 1024: KiB) in MiB."""
    return float(v) * unit / 2 ** 20


def passes_figures(case, on, off, rows):
    """Prints the PASSES line of `case` from the driver's FG fields with the
    graph passes on and off (lists over the rounds; median_s, arena_bytes)
    and adds its row of the passes table to `rows`; returns (on_s, off_s)."""
    t_on = statistics.median(float(d["median_s"]) for d in on)
    t_off = statistics.median(float(d["median_s"]) for d in off)
    a_on, a_off = mib(on[-1]["arena_bytes"], 1), mib(off[-1]["arena_bytes"], 1)
    print("PASSES %s on %.4g s, off %.4g s, off/on %.3f; arena %.1f MiB on, %.1f MiB off"
          % (case, t_on, t_off, t_off / t_on, a_on, a_off))
    rows.append("| %s | %.4g | %.4g | %.2f | %.1f MiB | %.1f MiB |"
                % (case, t_on * 1e3, t_off * 1e3, t_off / t_on, a_on, a_off))
    return t_on, t_off


PASSES_COLUMNS = ["case", "passes on ms", "passes off ms", "off / on", "arena on", "arena off"]
