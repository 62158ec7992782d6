#!/usr/bin/python3
"""PyTorch peer for dist_bench's dp_scaling (bench/dist_bench.sh).

The model of bench_common.h's mlp_graph as mlp_large_train uses it: dense
1024-2048-2048-1000 (matmul + bias, ReLU between), mean softmax
cross-entropy on int labels, plain SGD (lr 0.01), f32, batch 256, 1 thread
per process. Timed as dist_bench.c's dp(): warm-up steps, then timed steps,
wall time on rank 0 (after a barrier).

  torch_ddp.py [--steps 8] [--warmup 2] [--buckets 1,4,25]

Runs 1 process (plain model, no DDP), then 2 processes (spawned, gloo over
loopback, 128 rows each): independent (no exchange: the machine's ceiling),
and DDP per bucket size with gradient_as_bucket_view False and True.
Lines start with "TORCH "; exits 0 with a "skipped" line without torch/gloo.
"""
import argparse
import os
import socket
import sys
import time

# 1 thread per rank, as dist_bench; OpenBLAS (Debian's torch BLAS) reads its
# own variable at load, torch.set_num_threads does not reach it.
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[v] = "1"
# Gloo picks its interface from the hostname otherwise; keep it on loopback.
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    print(f"TORCH peer skipped: cannot import torch ({e})")
    sys.exit(0)
if not dist.is_available() or not dist.is_gloo_available():
    print("TORCH peer skipped: torch.distributed with gloo not available")
    sys.exit(0)

BATCH = 256
WIDTHS = (1024, 2048, 2048, 1000)
LR = 0.01


def one_thread():
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable before any parallel work
        pass


def model():
    layers = []
    for i in range(len(WIDTHS) - 1):
        layers.append(torch.nn.Linear(WIDTHS[i], WIDTHS[i + 1]))
        if i + 2 < len(WIDTHS):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def data(rows, rank):
    g = torch.Generator().manual_seed(7 + rank)
    x = torch.rand(rows, WIDTHS[0], generator=g) * 2 - 1
    y = torch.tensor([(i * 37 + rank) % WIDTHS[-1] for i in range(rows)], dtype=torch.int64)
    return x, y


def timed(net, x, y, warmup, steps, barrier):
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=0)
    t0 = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            barrier()
            t0 = time.perf_counter()
        # set_to_none: no memset and no accumulate (torch 2.0's default).
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return time.perf_counter() - t0


def report(what, t, steps):
    print(f"TORCH dp_scaling {what}: {BATCH * steps / t:.1f} images/s ({t / steps * 1e3:.1f} ms/step)",
          flush=True)


def worker(rank, world, port, args):
    one_thread()
    import datetime

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(42)
    x, y = data(BATCH // world, rank)
    # The machine's ceiling: each rank trains its shard, no exchange.
    t = timed(model(), x, y, args.warmup, args.steps, dist.barrier)
    if rank == 0:
        report(f"ranks {world} independent (no communication)", t, args.steps)
    for mb in args.buckets:
        for view in (False, True):
            net = DDP(model(), bucket_cap_mb=mb, gradient_as_bucket_view=view)
            t = timed(net, x, y, args.warmup, args.steps, dist.barrier)
            if rank == 0:
                report(f"ranks {world} bucket {mb} MB gradient_as_bucket_view={view}", t, args.steps)
            del net
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--buckets", default="1,4,25", help="bucket_cap_mb values, comma-separated")
    args = ap.parse_args()
    args.buckets = [int(b) for b in args.buckets.split(",") if b]
    one_thread()
    print(f"TORCH torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"interop {torch.get_num_interop_threads()}", flush=True)
    torch.manual_seed(42)
    x, y = data(BATCH, 0)
    t = timed(model(), x, y, args.warmup, args.steps, lambda: None)
    report("ranks 1 (no DDP)", t, args.steps)
    mp.spawn(worker, args=(2, free_port(), args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
