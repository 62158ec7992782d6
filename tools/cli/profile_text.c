/* The text report of `flowgraph profile`, in the manner of TFLite's
 * benchmark_model: run order, top nodes by time, a summary by op type, the
 * run timings, the latency distribution, throughput and peak memory.
 * Node times are in microseconds, which keep small ops readable. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile_report.h"

#define TOP_N      10
#define NAME_W_MAX 48

static double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

double prof_node_total_ms(const profile_data *p) {
  double runs = p->n_runs > 0 ? (double)p->n_runs : 1.0, total = 0;
  for (int i = 0; i < p->n_nodes; i++)
    total += p->nodes[i].total_ms / runs;
  return total;
}

double prof_gflops(const node_stat *n) {
  double ns = n->total_ms * 1e6;
  if (n->flops < 0 || ns <= 0) return -1;
  return (double)n->flops * (double)n->calls / ns; /* FLOPs per ns = GFLOP/s */
}

double prof_gbps(const node_stat *n) {
  double ns = n->total_ms * 1e6;
  if (ns <= 0) return -1;
  return (double)(n->in_bytes + n->bytes) * (double)n->calls / ns; /* bytes per ns = GB/s */
}

double prof_runs_per_s(const profile_data *p) {
  double ms = 0;
  for (int64_t i = 0; i < p->n_runs; i++)
    ms += p->run_ms[i];
  return ms > 0 ? (double)p->n_runs / (ms / 1e3) : 0;
}

static int op_by_time_desc(const void *x, const void *y) {
  const op_stat *a = x, *b = y;
  if (a->ms != b->ms) return a->ms > b->ms ? -1 : 1;
  return strcmp(a->op, b->op);
}

op_stat *prof_by_op(const profile_data *p, int *n_ops) {
  double runs = p->n_runs > 0 ? (double)p->n_runs : 1.0;
  op_stat *ops = calloc((size_t)p->n_nodes + 1, sizeof *ops);
  if (!ops) return NULL;
  int n = 0;
  for (int i = 0; i < p->n_nodes; i++) {
    const node_stat *s = &p->nodes[i];
    int k = 0;
    while (k < n && strcmp(ops[k].op, s->op) != 0)
      k++;
    if (k == n) ops[n++].op = s->op;
    ops[k].count++;
    ops[k].ms += s->total_ms / runs;
    ops[k].bytes += s->bytes;
    /* Unknown FLOPs of one node make the op's sum unknown. */
    if (ops[k].flops >= 0)
      ops[k].flops =
          s->flops < 0 ? -1 : ops[k].flops + (int64_t)((double)s->flops * s->calls / runs);
  }
  qsort(ops, (size_t)n, sizeof *ops, op_by_time_desc);
  *n_ops = n;
  return ops;
}

static int name_width(const profile_data *p) {
  int w = 4;
  for (int i = 0; i < p->n_nodes; i++) {
    int n = (int)strlen(p->nodes[i].name);
    if (n > w) w = n;
  }
  return w > NAME_W_MAX ? NAME_W_MAX : w;
}

static int op_width(const profile_data *p) {
  int w = 7;
  for (int i = 0; i < p->n_nodes; i++) {
    int n = (int)strlen(p->nodes[i].op);
    if (n > w) w = n;
  }
  return w;
}

static void banner(const char *title) { printf("\n============ %s ============\n", title); }

/* A header cell holding "µs" right-aligned in w columns: the µ takes two
 * bytes for one column. */
static void us_header(int w, const char *label) { printf("%*s", w + 1, label); }

/* A rate, or "-" when not measurable. */
static void rate(int w, double v) {
  if (v < 0)
    printf("%*s", w, "-");
  else
    printf("%*.3f", w, v);
}

static int by_time_desc(const void *x, const void *y) {
  const node_stat *a = *(const node_stat *const *)x, *b = *(const node_stat *const *)y;
  if (a->total_ms != b->total_ms) return a->total_ms > b->total_ms ? -1 : 1;
  return a < b ? -1 : a > b; /* plan order breaks ties */
}

/* "f32 [2,4], f32 [4,3]" ("-" for none) into buf. */
static void inputs_str(const node_stat *n, char *buf, size_t size) {
  size_t used = 0;
  snprintf(buf, size, "-");
  for (int i = 0; i < n->n_inputs && used + 1 < size; i++) {
    char shape[256];
    cli_shape_str(n->inputs[i].rank, n->inputs[i].dims, shape, sizeof shape);
    used += (size_t)snprintf(buf + used, size - used, "%s%s %s", i ? ", " : "",
                             fg_dtype_name(n->inputs[i].dtype), shape);
  }
}

static void print_flops(int64_t f) {
  if (f < 0)
    printf("  %12s", "-");
  else
    printf("  %12" PRId64, f);
}

/* With several devices a "device" column follows "op": a node's compute,
 * send and receive rows differ by op, and receives of one tensor on
 * several devices by device. */
static void print_run_order(const profile_data *p, const fg_partition *part, double runs,
                            double total) {
  int wn = name_width(p), wo = op_width(p), nd = part ? fg_partition_num_devices(part) : 1;
  int wd = 0;
  char dev[48];
  for (int i = 0; nd > 1 && i < p->n_nodes; i++) {
    int l =
        (int)strlen(fg_device_str(fg_partition_device(part, p->nodes[i].device), dev, sizeof dev));
    if (l > wd) wd = l;
  }
  if (nd > 1 && wd < 6) wd = 6;
  banner("Run order");
  printf("  %5s  %-*s  %-*s  ", "step", wn, "node", wo, "op");
  if (nd > 1) printf("%-*s  ", wd, "device");
  us_header(10, "avg µs");
  printf("  %7s  %6s  %12s  %9s  %10s  %10s  %8s  %10s  %s  <-  %s\n", "%", "calls", "flops",
         "GFLOP/s", "read B", "written B", "GB/s", "arena B", "output", "inputs");
  for (int i = 0; i < p->n_nodes; i++) {
    const node_stat *n = &p->nodes[i];
    char shape[256], ins[1024];
    cli_shape_str(n->rank, n->dims, shape, sizeof shape);
    inputs_str(n, ins, sizeof ins);
    double avg = n->total_ms / runs;
    printf("  %5d  %-*s  %-*s  ", i, wn, n->name, wo, n->op);
    if (nd > 1)
      printf("%-*s  ", wd, fg_device_str(fg_partition_device(part, n->device), dev, sizeof dev));
    printf("%10.2f  %6.2f%%  %6" PRId64, avg * 1e3, pct(avg, total), n->calls);
    print_flops(n->flops);
    printf("  ");
    rate(9, prof_gflops(n));
    printf("  %10zu  %10zu  ", n->in_bytes, n->bytes);
    rate(8, prof_gbps(n));
    printf("  %10zu  %s %s  <-  %s\n", n->arena_bytes, fg_dtype_name(n->dtype), shape, ins);
  }
}

static int print_top(const profile_data *p, double runs, double total) {
  const node_stat **order = malloc(((size_t)p->n_nodes + 1) * sizeof *order);
  if (!order) return -1;
  for (int i = 0; i < p->n_nodes; i++)
    order[i] = &p->nodes[i];
  qsort(order, (size_t)p->n_nodes, sizeof *order, by_time_desc);
  int wn = name_width(p), wo = op_width(p);
  banner("Top by time");
  printf("  %4s  %-*s  %-*s  ", "rank", wn, "node", wo, "op");
  us_header(10, "avg µs");
  printf("  %7s  %7s  %9s\n", "%", "cdf %", "GFLOP/s");
  double cdf = 0;
  for (int i = 0; i < p->n_nodes && i < TOP_N; i++) {
    double avg = order[i]->total_ms / runs;
    cdf += pct(avg, total);
    printf("  %4d  %-*s  %-*s  %10.2f  %6.2f%%  %6.2f%%  ", i + 1, wn, order[i]->name, wo,
           order[i]->op, avg * 1e3, pct(avg, total), cdf);
    rate(9, prof_gflops(order[i]));
    printf("\n");
  }
  free(order);
  return 0;
}

static int print_by_op(const profile_data *p, double total) {
  int n_ops = 0;
  op_stat *ops = prof_by_op(p, &n_ops);
  if (!ops) return -1;
  int wo = op_width(p);
  banner("Summary by op type");
  printf("  %-*s  %5s  ", wo, "op", "count");
  us_header(10, "avg µs");
  printf("  %7s  %7s  %12s  %12s  %9s\n", "%", "cdf %", "mem KB", "flops", "GFLOP/s");
  double cdf = 0;
  for (int k = 0; k < n_ops; k++) {
    cdf += pct(ops[k].ms, total);
    printf("  %-*s  %5d  %10.2f  %6.2f%%  %6.2f%%  %12.3f", wo, ops[k].op, ops[k].count,
           ops[k].ms * 1e3, pct(ops[k].ms, total), cdf, (double)ops[k].bytes / 1024.0);
    print_flops(ops[k].flops);
    printf("  ");
    rate(9, ops[k].flops < 0 || ops[k].ms <= 0 ? -1 : (double)ops[k].flops / (ops[k].ms * 1e6));
    printf("\n");
  }
  free(ops);
  return 0;
}

static void print_timings(const plan_args *a, const profile_data *p) {
  const prof_latency *l = &p->lat;
  banner("Timings (ms)");
  printf("init: %.4f (session %.4f + first plan %.4f)\n", p->session_ms + p->plan_ms, p->session_ms,
         p->plan_ms);
  printf("first run: %.4f\n", p->first_run_ms);
  if (a->warmup > 0)
    printf("warmup: %" PRId64 " runs, avg %.4f\n", a->warmup, p->warmup_ms / (double)a->warmup);
  printf("runs: %" PRId64 ", min %.4f, avg %.4f, max %.4f, std %.4f\n", p->n_runs, l->min, l->mean,
         l->max, l->std);
  if (p->agree_ms > 0)
    printf("agreement to start a run: avg %.4f (the ranks' exchange before each run, waiting for "
           "the slowest; not in the runs' times)\n",
           p->agree_ms / (double)(p->n_runs ? p->n_runs : 1));
  banner("Latency over runs (µs; nearest-rank percentiles)");
  printf("  %6s  %12s  %12s  %12s  %12s  %12s  %12s  %12s\n", "runs", "min", "p50", "p90", "p99",
         "max", "mean", "std");
  printf("  %6" PRId64 "  %12.2f  %12.2f  %12.2f  %12.2f  %12.2f  %12.2f  %12.2f\n", l->n,
         l->min * 1e3, l->p50 * 1e3, l->p90 * 1e3, l->p99 * 1e3, l->max * 1e3, l->mean * 1e3,
         l->std * 1e3);
  banner("Throughput and memory");
  double rps = prof_runs_per_s(p);
  printf("runs/s: %.2f\n", rps);
  if (p->batch > 0)
    printf("samples/s: %.2f (batch %" PRId64 ")\n", rps * (double)p->batch, p->batch);
  else
    printf("samples/s: - (no fed input has a batch dimension)\n");
  if (p->peak_rss >= 0)
    printf("peak resident memory: %" PRId64 " bytes (%.1f MiB)\n", p->peak_rss,
           (double)p->peak_rss / (1024.0 * 1024.0));
}

static void print_names(const char *label, const char *const *names, int n) {
  printf("%s:", label);
  for (int i = 0; i < n; i++)
    printf(" %s", names[i]);
  printf("%s\n", n ? "" : " (none)");
}

/* infos: the plan (infos[0]), or with n_ranks > 0 each rank's; only read
 * when the partition has several devices. */
int prof_print_text(const plan_args *a, const plan_model *m, const profile_data *p,
                    const fg_plan_info *const *infos, int n_ranks) {
  double runs = p->n_runs > 0 ? (double)p->n_runs : 1.0, total = prof_node_total_ms(p);
  printf("profile of %s: %" PRId64 " runs after %" PRId64 " warmup, %d threads, arena %zu bytes\n",
         a->run.model, p->n_runs, a->warmup, p->threads, p->arena_bytes);
  printf("profiled: %s%s\n", p->what,
         strcmp(p->what, "inference") == 0 && fg_graph_metadata(m->graph, "train_target")
             ? " (--train profiles the training step)"
             : "");
  print_names("fetches", (const char *const *)m->fetch, m->n_fetch);
  print_names("targets", m->targets, m->n_targets);
  plan_print_micro(a, m);
  /* Several devices: their partitions and transfers; in the trace each
   * device is one track, and its collectives another (a node's thread is its
   * lane). */
  if (fg_partition_num_devices(fg_session_partition(m->session)) > 1)
    plan_print_partition(m, infos, n_ranks);
  for (int r = 1; r < p->n_ranks; r++)
    printf("clock of rank %d: %+.3f ms from rank 0's (within %.3f ms: half the shortest of %d "
           "round trips)\n",
           r, (double)p->clock_off[r] / 1e6, (double)p->clock_rtt[r] / 2e6, CLOCK_ROUNDS);
  print_run_order(p, fg_session_partition(m->session), runs, total);
  if (print_top(p, runs, total) != 0 || print_by_op(p, total) != 0) return -1;
  printf("\nnode time per run: %.2f µs over %d nodes\n", total * 1e3, p->n_nodes);
  print_timings(a, p);
  return 0;
}
