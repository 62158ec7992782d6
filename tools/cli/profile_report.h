/* What `flowgraph profile` measured (cmd_profile.c collects it) and the
 * reports written from it: the text tables (profile_text.c) and the CSV
 * and JSON forms for scripts (profile_format.c). */
#ifndef FG_CLI_PROFILE_REPORT_H
#define FG_CLI_PROFILE_REPORT_H

#include <stdint.h>

#include "flowgraph/dist.h"
#include "flowgraph/profile.h"
#include "plan.h"
#include "profile_stats.h"

/* --format */
enum { PROF_FORMAT_TEXT, PROF_FORMAT_CSV, PROF_FORMAT_JSON };

typedef struct node_stat {
  int node;
  int device, next; /* next: the row after this one with the same slot key */
  const char *name, *op;
  double total_ms; /* over the measured runs */
  int64_t calls;   /* times it ran over the measured runs */
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK];
  size_t bytes;                 /* output bytes (written) */
  size_t in_bytes, arena_bytes; /* read; of the output, placed in the arena */
  int64_t flops;                /* per call, the op table's estimate */
  int n_inputs;
  fg_tensor_shape *inputs; /* malloc'ed copy */
} node_stat;

typedef struct op_stat {
  const char *op;
  int count;
  double ms; /* avg per run, summed over the op's nodes */
  size_t bytes;
  int64_t flops; /* per run, summed */
} op_stat;

typedef struct profile_data {
  node_stat *nodes; /* in plan order of the first measured run */
  int n_nodes;
  /* Per graph node and step kind (compute, recv, send; see slot_key): the
   * first row of that key, or -1. A node computed on one device may also be
   * sent from it and received on others: each is a row of its own. */
  int *slot;
  int n_graph_nodes;
  double *run_ms;
  int64_t n_runs;
  double session_ms, plan_ms, first_run_ms, warmup_ms;
  /* --dist: the timed runs' agreement to start (fg_run_metadata agree_ns) */
  double agree_ms;
  int threads;
  size_t arena_bytes;
  /* --dist mpi: each rank's clock minus rank 0's, and the round trip that
   * bounds the error (prof_clock_offsets). */
  int n_ranks;
  int64_t *clock_off, *clock_rtt;
  /* Filled before the report: what was profiled ("inference", "training
   * step" or "fetches and targets"), the rows per run (0: no input has a
   * batch dimension), the latency distribution and the peak memory. */
  const char *what;
  int64_t batch;
  prof_latency lat;
  int64_t peak_rss;
} profile_data;

/* Ping-pongs per rank for its clock offset: the shortest of 16 round trips
 * is a few microseconds on one host. */
#define CLOCK_ROUNDS 16

/* Node time per run summed over the rows (ms), and the per-op summary
 * (malloc'ed, *n_ops rows, slowest first); NULL when out of memory. */
double prof_node_total_ms(const profile_data *p);
op_stat *prof_by_op(const profile_data *p, int *n_ops);
/* GFLOP/s and GB/s (bytes read plus written) of a row: its per-call
 * figures times its calls over its measured time; -1 when not measurable
 * (no time recorded, or unknown FLOPs). */
double prof_gflops(const node_stat *n);
double prof_gbps(const node_stat *n);
/* Runs per second over the measured runs' wall time. */
double prof_runs_per_s(const profile_data *p);

/* The text report (banners and tables). 0, or -1 when out of memory. */
int prof_print_text(const plan_args *a, const plan_model *m, const profile_data *p,
                    const fg_plan_info *const *infos, int n_ranks);
/* The CSV (node table, a blank line, a metric,value,unit table) or JSON
 * report on stdout. 0, or -1 when out of memory. */
int prof_print_csv(const plan_args *a, const plan_model *m, const profile_data *p);
int prof_print_json(const plan_args *a, const plan_model *m, const profile_data *p);

#endif
