/* Distributed benchmarks, run under mpirun by bench/dist_bench.sh.
 *
 *   dist_bench busbw [MAX_BYTES]
 *                               all_reduce (f32 sum) of 1 KB .. 256 MB (or
 *                               MAX_BYTES) through the MPI communicator; prints
 *                               algbw and busbw (algbw * 2(n-1)/n, as
 *                               nccl-tests define it) and rank 0's memcpy
 *                               bandwidth for comparison; the buffers lie in
 *                               arenas, as sessions' do
 *   dist_bench dp BUCKET_BYTES [inline|own-lane|independent]
 *                               images/s of mlp_large_train (batch 256, widths
 *                               1024-2048-2048-1000, SGD) data-parallel over
 *                               the ranks, 1 thread per rank; all_reduce
 *                               where the session puts it by default (the
 *                               line says which), with `own-lane` on a lane
 *                               of its own (overlapping the backward pass),
 *                               or with `inline` in line with the compute;
 *                               `independent`: no exchange at all, each rank
 *                               trains its shard alone (the machine's ceiling
 *                               for two processes); FG_BENCH_STEPS=N times N
 *                               steps instead of 8 (noisy machines)
 *   dist_bench pipe M [BATCH]   images/s of a 4-layer MLP split over 2 ranks
 *                               (model parallelism), each step of BATCH rows
 *                               (default 256) in M micro-batches
 *                               (fg_micro_batch): the pipeline;
 *                               FG_BENCH_IN_FLIGHT=K its max_in_flight
 *   dist_bench exchange         only a step's gradient all_reduces (32 MB),
 *                               ms/step: what the exchange costs when
 *                               nothing else runs
 *                               FG_DP_PROFILE=1|nodes: time per op (and
 *                               per node) of one more step; FG_DP_SAVE=PATH
 *                               saves the rewritten graph
 *
 * Lines start with "FG " so a script can grep them. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "flowgraph/autodiff.h"
#include "flowgraph/comm.h"
#include "flowgraph/dist.h"
#include "flowgraph/flowgraph.h"

#include "bench_common.h"

/* What the communicator did so far (its path and counters). */
static fg_comm_stats stats_of(const fg_comm *c) {
  fg_comm_stats s;
  fg_comm_get_stats(c, &s);
  return s;
}

/* The median of n <= 5 values (sorts them). */
static double median5(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  return v[n / 2];
}

static int busbw(fg_comm *c, int64_t max_bytes, fg_status *st) {
  int n = fg_comm_size(c);
  if (fg_comm_rank(c) == 0) {
    size_t bytes = (size_t)256 << 20;
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
      double t0 = now_s();
      memcpy(b, a, bytes);
      double t = now_s() - t0;
      if (t < best) best = t;
    }
    printf("FG memcpy 256 MB: %.2f GB/s\n", (double)bytes / best / 1e9);
    free(a);
    free(b);
  }
  /* Where sessions keep gradients: in arenas the other ranks map, read in
   * place over shared memory (FG_MPI_SHM_ARENA=0: the heap, the copy
   * through the segment's slots). */
  const int shared = stats_of(c).shares_arenas;
  for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    int64_t count = bytes / 4;
    float *buf = shared ? fg_shared_host_alloc((size_t)bytes) : malloc((size_t)bytes);
    if (!buf) return -1;
    /* Zeros stay zeros however many sums run (ones would double each time,
     * past f32's range at 128 runs). */
    memset(buf, 0, (size_t)bytes);
    /* Small sizes take microseconds, where one descheduled rank moves a
     * mean a lot on a shared machine: the median of 5 batches' means. */
    int iters = bytes <= (64 << 10) ? 400 : bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 3;
    int batches = bytes <= (1 << 20) ? 5 : 1;
    double ts[5], tms[5];
    /* One warm-up, then the batches. The warm-up's message bytes: what
     * leaves each process (between hosts, the network's share). */
    uint64_t sent = stats_of(c).message_bytes;
    if (fg_comm_all_reduce(c, buf, count, FG_F32, 0, st) != 0) return -1;
    sent = stats_of(c).message_bytes - sent;
    for (int k = 0; k < batches; k++) {
      double t0 = now_s();
      for (int i = 0; i < iters; i++)
        if (fg_comm_all_reduce(c, buf, count, FG_F32, 0, st) != 0) return -1;
      ts[k] = (now_s() - t0) / iters;
    }
    double t = median5(ts, batches);
    double algbw = (double)bytes / t / 1e9;
    /* Open MPI's own MPI_Allreduce (order not fixed) on the same buffer,
     * for reference, timed the same way. */
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < batches; k++) {
      double t1 = now_s();
      for (int i = 0; i < iters; i++)
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      tms[k] = (now_s() - t1) / iters;
    }
    double tm = median5(tms, batches);
    if (fg_comm_rank(c) == 0)
      printf("FG allreduce_busbw ranks %d size %9lld B  time %10.1f us  algbw %6.3f GB/s  busbw "
             "%6.3f GB/s  (MPI_Allreduce: %10.1f us, busbw %6.3f GB/s)\n",
             n, (long long)bytes, t * 1e6, algbw, algbw * 2.0 * (n - 1) / n, tm * 1e6,
             (double)bytes / tm / 1e9 * 2.0 * (n - 1) / n);
    if (fg_comm_rank(c) == 0 && bytes * 4 > max_bytes) /* the largest size */
      printf("FG allreduce_busbw messages: rank 0 sent %.1f MB of a %lld %s all_reduce as MPI "
             "messages\n",
             (double)sent / 1048576.0, (long long)(bytes >= (1 << 20) ? bytes >> 20 : bytes >> 10),
             bytes >= (1 << 20) ? "MB" : "KB");
    if (shared)
      fg_shared_host_free(buf);
    else
      free(buf);
  }
  if (fg_comm_rank(c) == 0)
    printf("FG allreduce_busbw path: %s%s\n", stats_of(c).reduce_path,
           stats_of(c).in_place_reduces ? " (buffers read in place above 16 KiB in all)" : "");
  return 0;
}

/* fg_bench.c's mlp_large_train (bench_common.h) with an unknown batch
 * dimension, so each rank feeds its shard. */
static fg_graph *build_mlp_large(fg_status *st) {
  static const int widths[4] = {1024, 2048, 2048, 1000};
  fg_output train;
  return mlp_graph(FG_DIM_UNKNOWN, 3, widths, &train, st);
}

/* FG_DP_PROFILE set: one more step with timings; every rank prints its
 * time per op ("PROF"), and with FG_DP_PROFILE=nodes every rank also prints
 * each node over 0.1 ms with its thread and interval ("NODE"), which shows
 * what overlaps the collectives. */
static int profile_step(fg_session *s, const fg_feed *feeds, const char *target, int rank,
                        fg_status *st) {
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  if (fg_session_run_ex(s, feeds, 2, NULL, 0, NULL, &target, 1, &ro, &md, st) != 0) return -1;
  int nodes = strcmp(getenv("FG_DP_PROFILE"), "nodes") == 0;
  const char *ops[64];
  double ms[64];
  int n_ops = 0;
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *t = &md->nodes[i];
    double d = (double)(t->end_ns - t->start_ns) / 1e6;
    int k = 0;
    while (k < n_ops && strcmp(ops[k], t->op) != 0)
      k++;
    if (k == n_ops && n_ops < 64) {
      ops[n_ops] = t->op;
      ms[n_ops++] = 0;
    }
    if (k < n_ops) ms[k] += d;
    if (nodes && d > 0.1)
      printf("NODE rank %d %-44s %-12s thread %d %8.2f .. %8.2f ms\n", rank, t->name, t->op,
             t->thread, (double)t->start_ns / 1e6, (double)t->end_ns / 1e6);
  }
  for (int k = 0; k < n_ops; k++)
    printf("PROF rank %d %-24s %8.2f ms\n", rank, ops[k], ms[k]);
  printf("PROF rank %d run %.2f ms\n", rank, (double)md->run_ns / 1e6);
  fg_run_metadata_free(md);
  return 0;
}

/* CPU time of this process (every thread), in seconds. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* `exchange`: only a step's communication, the gradients' all_reduce
 * (each weight alone, the biases fused, as fg_data_parallel's default
 * buckets do), with nothing else running. On a machine whose cores the
 * ranks' compute already fills, this CPU time cannot hide behind the
 * backward pass: ceiling step + this is the step time to expect. */
static int exchange(fg_comm *c, fg_status *st) {
  static const int widths[4] = {1024, 2048, 2048, 1000};
  const int steps = 8, warmup = 2;
  int64_t count[4] = {0};
  for (int l = 0; l < 3; l++) {
    count[l] = (int64_t)widths[l] * widths[l + 1];
    count[3] += widths[l + 1];
  }
  /* In one arena, as a session's plan puts them: memory the other ranks
   * can map (FG_MPI_SHM_ARENA=0: ordinary memory, the copy through
   * slots). */
  float *buf[4];
  int shared = stats_of(c).shares_arenas;
  size_t total = 0;
  for (int k = 0; k < 4; k++)
    total += (size_t)count[k] * sizeof(float);
  float *all = shared ? fg_shared_host_alloc(total) : malloc(total);
  if (!all) return -1;
  memset(all, 0, total);
  for (int k = 0, at = 0; k < 4; at += (int)count[k], k++)
    buf[k] = all + at;
  double t0 = 0, cpu0 = 0;
  int rc = 0;
  for (int i = 0; i < warmup + steps && rc == 0; i++) {
    if (i == warmup) t0 = now_s(), cpu0 = cpu_s();
    for (int k = 3; k >= 0 && rc == 0; k--) /* backward order: last layer first */
      rc = fg_comm_all_reduce(c, buf[k], count[k], FG_F32, 1, st);
  }
  double t = now_s() - t0, cpu = cpu_s() - cpu0;
  if (rc == 0 && fg_comm_rank(c) == 0)
    printf("FG dp_scaling mlp_large_train ranks %d exchange only (%.1f MB of gradients): %.1f "
           "ms/step (rank 0's CPU time %.1f ms/step) over %s%s\n",
           fg_comm_size(c), (double)(count[0] + count[1] + count[2] + count[3]) * 4 / 1048576,
           t / steps * 1e3, cpu / steps * 1e3, stats_of(c).reduce_path,
           stats_of(c).in_place_reduces > 0 ? ", buffers read in place" : "");
  if (shared)
    fg_shared_host_free(all);
  else
    free(all);
  return rc;
}

/* Runs warmup + steps training steps of g (its metadata's train_target) in
 * s on `rows` random rows x [rows, 1024] and labels y (drawn from `seed`),
 * and returns the seconds the last `steps` took, or -1. With FG_DP_PROFILE
 * set, one more step is profiled (profile_step). */
static double timed_steps(fg_session *s, const fg_graph *g, int rows, int seed, int warmup,
                          int steps, int rank, uint64_t *arena, fg_status *st) {
  int64_t xd[2] = {rows, 1024}, yd[1] = {rows};
  uint64_t rng = 7 + (uint64_t)seed;
  fg_tensor *x = random_f32(2, xd, 1.0, &rng, st), *y = fg_tensor_new(FG_I32, 1, yd, st);
  if (!x || !y) {
    fg_tensor_free(x);
    fg_tensor_free(y);
    return -1;
  }
  for (int i = 0; i < rows; i++)
    ((int32_t *)fg_tensor_data(y))[i] = (i * 37 + seed) % 1000;
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = fg_graph_metadata(g, "train_target");
  double t0 = 0, t = -1;
  int rc = 0;
  for (int i = 0; i < warmup + steps && rc == 0; i++) {
    if (i == warmup) t0 = now_s();
    rc = fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st);
  }
  if (rc == 0) t = now_s() - t0;
  if (rc == 0 && arena) {
    /* This rank's arenas, from the plan the runs used (cached). */
    fg_plan_info *pi = fg_session_plan_info(s, feeds, 2, NULL, 0, &target, 1, st);
    *arena = pi ? (uint64_t)pi->arena_bytes : 0;
    if (!pi) t = -1;
    fg_plan_info_free(pi);
  }
  if (t >= 0 && getenv("FG_DP_PROFILE") && profile_step(s, feeds, target, rank, st) != 0) t = -1;
  fg_tensor_free(x);
  fg_tensor_free(y);
  return t;
}

/* `pipe M`: a 4-layer MLP (1024-2048-2048-2048-1000, SGD) split
 * over 2 ranks, layers 1-2 on rank 0 and 3-4 with the loss on rank 1 (6.3
 * and 6.25 M multiply-adds per row: balanced stages), 1 thread per rank,
 * its step cut into M micro-batches (fg_micro_batch; M = 1: the plain
 * model-parallel step, where one rank waits while the other computes). */
static fg_graph *build_mlp_pipe(fg_status *st) {
  static const int widths[5] = {1024, 2048, 2048, 2048, 1000};
  static const char *const devices[4] = {"rank:0/cpu:0", "rank:0/cpu:0", "rank:1/cpu:0",
                                         "rank:1/cpu:0"};
  fg_output train;
  return mlp_graph_on(FG_DIM_UNKNOWN, 4, widths, devices, &train, st);
}

/* FG_DP_SAVE=PATH: rank 0 saves the benchmarked graph, for `flowgraph plan`
 * or `inspect`. */
static int save_if_asked(const fg_graph *g, int rank, fg_status *st) {
  const char *path = getenv("FG_DP_SAVE");
  return path && rank == 0 ? fg_graph_save(g, path, st) : 0;
}

static int pipe_bench(fg_comm *c, int micro, int batch, fg_status *st) {
  const int steps = 4, warmup = 1;
  if (fg_comm_size(c) != 2) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "pipe: run it on 2 ranks, not %d", fg_comm_size(c));
    return -1;
  }
  fg_graph *g = build_mlp_pipe(st);
  if (!g) return -1;
  const char *bi[] = {"x", "y"};
  /* FG_BENCH_IN_FLIGHT=K: fg_micro_batch_options.max_in_flight (-1: no
   * bound), to weigh memory against speed. */
  fg_micro_batch_options mo;
  fg_micro_batch_options_init(&mo);
  if (getenv("FG_BENCH_IN_FLIGHT")) mo.max_in_flight = atoi(getenv("FG_BENCH_IN_FLIGHT"));
  fg_graph *mg = micro > 1 ? fg_micro_batch_ex(g, micro, bi, 2, &mo, st) : g;
  if (mg != g) fg_graph_free(g);
  if (!mg) return -1;
  if (save_if_asked(mg, fg_comm_rank(c), st) != 0) return -1;
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  fg_session *s = fg_session_new(mg, &so, st);
  if (!s || fg_session_set_comm(s, c, st) != 0) return -1;
  uint64_t arena = 0, arenas[2];
  double t = timed_steps(s, mg, batch, 0, warmup, steps, fg_comm_rank(c), &arena, st);
  if (t < 0 || fg_comm_all_gather_u64(c, arena, arenas, st) != 0) return -1;
  /* The arenas show the memory side of micro-batching: all M in flight,
   * or at most 2 per stage (fg_micro_batch's bound beyond that). */
  if (fg_comm_rank(c) == 0)
    printf("FG pipeline mlp4_train ranks 2 threads 1 batch %d micro-batches %d: %.1f images/s "
           "(%.1f ms/step), arena rank 0 %.1f MB, rank 1 %.1f MB\n",
           batch, micro, batch * steps / t, t / steps * 1e3, (double)arenas[0] / 1e6,
           (double)arenas[1] / 1e6);
  fg_session_free(s);
  fg_graph_free(mg);
  return 0;
}

/* Threads of this process named "fg-lane" (executor/dist/runner.c): with one
 * device, 1 when its collectives have a lane of their own, else 0. */
static int lane_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], name[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    n += fgets(name, sizeof name, f) && strncmp(name, "fg-lane", 7) == 0;
    fclose(f);
  }
  closedir(d);
  return n;
}

/* mode: 0 the session's default, 1 in line, 2 no exchange (independent
 * ranks), 3 an own lane, 4 the default with fused updates (fused_update). */
/* `dp BUCKET small`: a step so small (a 1024-16-1000 MLP, 32 rows) that
 * what every data-parallel step pays besides its compute shows: the
 * ranks' agreement to start the run (executor/dist/run_agree.c), the all_reduce's
 * latency, the lanes' hand-offs. Printed in microseconds per step. */
static fg_graph *build_mlp_small(fg_status *st) {
  static const int widths[3] = {1024, 16, 1000};
  fg_output train;
  return mlp_graph(FG_DIM_UNKNOWN, 2, widths, &train, st);
}

static int dp(fg_comm *c, int64_t bucket, int mode, fg_status *st) {
  const int small = mode == 5;
  const int batch = small ? 32 : 256, warmup = small ? 50 : 2;
  const char *steps_env = getenv("FG_BENCH_STEPS");
  const int steps = steps_env ? atoi(steps_env) : small ? 2000 : 8;
  int shard = batch / fg_comm_size(c);
  fg_graph *g = small ? build_mlp_small(st) : build_mlp_large(st);
  if (!g) return -1;
  const char *bi[] = {"x", "y"};
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = bucket;
  o.fused_update = mode == 4;
  /* mode 2: every rank trains its shard alone, without any exchange: the
   * ceiling this machine allows two processes. */
  fg_graph *dg = mode == 2 ? g : fg_data_parallel(g, 1, bi, 2, &o, st);
  if (mode != 2) fg_graph_free(g);
  if (!dg) return -1;
  if (save_if_asked(dg, fg_comm_rank(c), st) != 0) return -1;
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  so.collective_lanes = mode == 1 ? -1 : mode == 3 ? 1 : 0;
  fg_session *s = fg_session_new(dg, &so, st);
  if (!s || (mode != 2 && fg_session_set_comm(s, c, st) != 0)) return -1;
  const char *how = mode == 2   ? "none (independent ranks)"
                    : mode == 1 ? "inline"
                    : mode == 3 ? "own-lane"
                    : mode == 4 ? (lane_threads() > 0 ? "fused (own lane)" : "fused (in line)")
                    : lane_threads() > 0 ? "default (own lane)"
                                         : "default (in line)";
  double t = timed_steps(s, dg, shard, fg_comm_rank(c), warmup, steps, fg_comm_rank(c), NULL, st);
  if (t < 0) return -1;
  if (fg_comm_rank(c) == 0 && small)
    printf("FG dp_small_step mlp 1024-16-1000 batch %d ranks %d threads 1: %.1f us/step\n", batch,
           fg_comm_size(c), t / steps * 1e6);
  else if (fg_comm_rank(c) == 0)
    printf("FG dp_scaling mlp_large_train ranks %d threads 1 bucket %lld B collectives %s: %.1f "
           "images/s (%.1f ms/step)\n",
           fg_comm_size(c), (long long)bucket, how, batch * steps / t, t / steps * 1e3);
  fg_session_free(s);
  fg_graph_free(dg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: dist_bench busbw [MAX_BYTES] | exchange | dp BUCKET_BYTES "
                    "[inline|own-lane|independent|fused|small] | "
                    "pipe MICRO_BATCHES [BATCH]\n");
    return 2;
  }
  fg_status *st = fg_status_new();
  fg_comm *c = fg_comm_mpi_new(120, st);
  int rc = c ? 0 : -1;
  if (c && strcmp(argv[1], "busbw") == 0) {
    long long max = argc > 2 ? atoll(argv[2]) : 256LL << 20;
    if (max < 1024 || max > (256LL << 20)) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "busbw MAX_BYTES %s: not in [1024, 268435456]",
                    argv[2]);
      rc = -1;
    } else {
      rc = busbw(c, max, st);
    }
  }
  if (c && strcmp(argv[1], "exchange") == 0) rc = exchange(c, st);
  if (c && strcmp(argv[1], "pipe") == 0)
    rc = pipe_bench(c, argc > 2 ? atoi(argv[2]) : 1, argc > 3 ? atoi(argv[3]) : 256, st);
  if (c && strcmp(argv[1], "dp") == 0)
    rc = dp(c, argc > 2 ? atoll(argv[2]) : 0,
            argc < 4                              ? 0
            : strcmp(argv[3], "inline") == 0      ? 1
            : strcmp(argv[3], "independent") == 0 ? 2
            : strcmp(argv[3], "own-lane") == 0    ? 3
            : strcmp(argv[3], "fused") == 0       ? 4
            : strcmp(argv[3], "small") == 0       ? 5
                                                  : 0,
            st);
  if (rc != 0)
    fprintf(stderr, "dist_bench: %s: %s\n", fg_code_name(fg_status_code(st)),
            fg_status_message(st));
  if (c) fg_comm_free(c);
  fg_status_free(st);
  fg_mpi_shutdown(rc == 0 ? 0 : 1);
  return rc == 0 ? 0 : 1;
}
