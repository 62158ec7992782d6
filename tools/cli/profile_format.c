/* `flowgraph profile --format csv|json`: the report for scripts. CSV is
 * two tables separated by one blank line: the nodes in run order (one row
 * each), then "metric,value,unit" rows for the whole run. JSON is one
 * object holding both, the per-op summary and every measured run's time.
 * Unknown figures are empty CSV fields and JSON nulls; times are in µs. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile_report.h"
#include "trace.h"

/* ---- CSV ------------------------------------------------------------------------ */

/* A field quoted as RFC 4180 asks when it holds a comma, quote or line
 * break (shapes do: "[2,3]"). */
static void csv_field(const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, stdout);
    return;
  }
  putchar('"');
  for (; *s; s++) {
    if (*s == '"') putchar('"');
    putchar(*s);
  }
  putchar('"');
}

static void csv_num(double v) {
  if (v >= 0 && isfinite(v)) printf("%.6g", v);
}

static void device_name(const plan_model *m, const node_stat *n, char *buf, size_t size) {
  const fg_partition *part = fg_session_partition(m->session);
  if (part && n->device >= 0 && n->device < fg_partition_num_devices(part))
    fg_device_str(fg_partition_device(part, n->device), buf, size);
  else
    snprintf(buf, size, "cpu:0");
}

/* "f32 [2,4]; f32 [4,3]" */
static void inputs_joined(const node_stat *n, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n->n_inputs && used + 1 < size; i++) {
    char shape[256];
    cli_shape_str(n->inputs[i].rank, n->inputs[i].dims, shape, sizeof shape);
    used += (size_t)snprintf(buf + used, size - used, "%s%s %s", i ? "; " : "",
                             fg_dtype_name(n->inputs[i].dtype), shape);
  }
}

/* Counts print as integers, times and rates with 3 decimals; an unknown
 * value is an empty field. */
static void csv_metric(const char *name, double v, const char *unit) {
  printf("%s,", name);
  if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
    printf("%.0f", v);
  else if (isfinite(v))
    printf("%.3f", v);
  printf(",%s\n", unit);
}

int prof_print_csv(const plan_args *a, const plan_model *m, const profile_data *p) {
  double runs = p->n_runs > 0 ? (double)p->n_runs : 1.0, total = prof_node_total_ms(p);
  printf("step,node,op,device,calls,avg_us,percent,flops,gflops_per_s,bytes_read,bytes_written,"
         "gb_per_s,arena_bytes,dtype,output_shape,input_shapes\n");
  for (int i = 0; i < p->n_nodes; i++) {
    const node_stat *n = &p->nodes[i];
    char dev[48], shape[256], ins[2048];
    device_name(m, n, dev, sizeof dev);
    cli_shape_str(n->rank, n->dims, shape, sizeof shape);
    inputs_joined(n, ins, sizeof ins);
    double avg = n->total_ms / runs;
    printf("%d,", i);
    csv_field(n->name);
    putchar(',');
    csv_field(n->op);
    printf(",%s,%" PRId64 ",%.3f,%.3f,", dev, n->calls, avg * 1e3,
           total > 0 ? 100.0 * avg / total : 0.0);
    if (n->flops >= 0) printf("%" PRId64, n->flops);
    putchar(',');
    csv_num(prof_gflops(n));
    printf(",%zu,%zu,", n->in_bytes, n->bytes);
    csv_num(prof_gbps(n));
    printf(",%zu,%s,", n->arena_bytes, fg_dtype_name(n->dtype));
    csv_field(shape);
    putchar(',');
    csv_field(ins);
    putchar('\n');
  }
  const prof_latency *l = &p->lat;
  printf("\nmetric,value,unit\n");
  printf("model,");
  csv_field(a->run.model);
  printf(",\nprofiled,%s,\n", p->what);
  csv_metric("runs", (double)p->n_runs, "runs");
  csv_metric("warmup", (double)a->warmup, "runs");
  csv_metric("threads", p->threads, "threads");
  csv_metric("arena_bytes", (double)p->arena_bytes, "bytes");
  csv_metric("batch", p->batch > 0 ? (double)p->batch : NAN, "rows");
  csv_metric("init", (p->session_ms + p->plan_ms) * 1e3, "us");
  csv_metric("first_run", p->first_run_ms * 1e3, "us");
  csv_metric("latency_min", l->min * 1e3, "us");
  csv_metric("latency_p50", l->p50 * 1e3, "us");
  csv_metric("latency_p90", l->p90 * 1e3, "us");
  csv_metric("latency_p99", l->p99 * 1e3, "us");
  csv_metric("latency_max", l->max * 1e3, "us");
  csv_metric("latency_mean", l->mean * 1e3, "us");
  csv_metric("latency_std", l->std * 1e3, "us");
  csv_metric("node_time", total * 1e3, "us");
  double rps = prof_runs_per_s(p);
  csv_metric("runs_per_s", rps, "1/s");
  csv_metric("samples_per_s", p->batch > 0 ? rps * (double)p->batch : NAN, "1/s");
  csv_metric("peak_rss", p->peak_rss >= 0 ? (double)p->peak_rss : NAN, "bytes");
  return ferror(stdout) ? -1 : 0;
}

/* ---- JSON ----------------------------------------------------------------------- */

static void jstr(const char *key, const char *v, int comma) {
  printf("%s\"%s\":\"", comma ? "," : "", key);
  json_write_escaped(stdout, v);
  putchar('"');
}

/* A number, or null when not finite or (with unknown_below_0) negative. */
static void jnum(const char *key, double v, int unknown_below_0) {
  printf(",\"%s\":", key);
  if (!isfinite(v) || (unknown_below_0 && v < 0))
    fputs("null", stdout);
  else
    printf("%.9g", v);
}

static void jdims(int rank, const int64_t *dims) {
  putchar('[');
  for (int d = 0; d < rank; d++)
    printf("%s%" PRId64, d ? "," : "", dims[d]);
  putchar(']');
}

static void json_node(const plan_model *m, const node_stat *n, int step, double runs,
                      double total) {
  char dev[48];
  device_name(m, n, dev, sizeof dev);
  double avg = n->total_ms / runs;
  printf("%s\n{\"step\":%d", step ? "," : "", step);
  jstr("name", n->name, 1);
  jstr("op", n->op, 1);
  jstr("device", dev, 1);
  printf(",\"calls\":%" PRId64, n->calls);
  jnum("avg_us", avg * 1e3, 0);
  jnum("percent", total > 0 ? 100.0 * avg / total : 0.0, 0);
  jnum("flops", (double)n->flops, 1);
  jnum("gflops_per_s", prof_gflops(n), 1);
  printf(",\"bytes_read\":%zu,\"bytes_written\":%zu", n->in_bytes, n->bytes);
  jnum("gb_per_s", prof_gbps(n), 1);
  printf(",\"arena_bytes\":%zu", n->arena_bytes);
  jstr("dtype", fg_dtype_name(n->dtype), 1);
  printf(",\"shape\":");
  jdims(n->rank, n->dims);
  printf(",\"inputs\":[");
  for (int i = 0; i < n->n_inputs; i++) {
    printf("%s{\"dtype\":\"%s\",\"shape\":", i ? "," : "", fg_dtype_name(n->inputs[i].dtype));
    jdims(n->inputs[i].rank, n->inputs[i].dims);
    putchar('}');
  }
  printf("]}");
}

static void json_names(const char *key, const char *const *names, int n) {
  printf(",\"%s\":[", key);
  for (int i = 0; i < n; i++) {
    printf("%s\"", i ? "," : "");
    json_write_escaped(stdout, names[i]);
    putchar('"');
  }
  putchar(']');
}

int prof_print_json(const plan_args *a, const plan_model *m, const profile_data *p) {
  double runs = p->n_runs > 0 ? (double)p->n_runs : 1.0, total = prof_node_total_ms(p);
  int n_ops = 0;
  op_stat *ops = prof_by_op(p, &n_ops);
  if (!ops) return -1;
  const prof_latency *l = &p->lat;
  putchar('{');
  jstr("model", a->run.model, 0);
  jstr("profiled", p->what, 1);
  json_names("fetches", (const char *const *)m->fetch, m->n_fetch);
  json_names("targets", m->targets, m->n_targets);
  printf(",\"runs\":%" PRId64 ",\"warmup\":%" PRId64 ",\"threads\":%d,\"arena_bytes\":%zu",
         p->n_runs, a->warmup, p->threads, p->arena_bytes);
  jnum("batch", p->batch > 0 ? (double)p->batch : -1, 1);
  jnum("init_us", (p->session_ms + p->plan_ms) * 1e3, 0);
  jnum("first_run_us", p->first_run_ms * 1e3, 0);
  printf(",\"latency_us\":{\"method\":\"nearest-rank\"");
  jnum("min", l->min * 1e3, 0);
  jnum("p50", l->p50 * 1e3, 0);
  jnum("p90", l->p90 * 1e3, 0);
  jnum("p99", l->p99 * 1e3, 0);
  jnum("max", l->max * 1e3, 0);
  jnum("mean", l->mean * 1e3, 0);
  jnum("std", l->std * 1e3, 0);
  printf("},\"run_us\":[");
  for (int64_t i = 0; i < p->n_runs; i++)
    printf("%s%.9g", i ? "," : "", p->run_ms[i] * 1e3);
  putchar(']');
  double rps = prof_runs_per_s(p);
  jnum("runs_per_s", rps, 0);
  jnum("samples_per_s", p->batch > 0 ? rps * (double)p->batch : -1, 1);
  jnum("peak_rss_bytes", (double)p->peak_rss, 1);
  jnum("node_time_us", total * 1e3, 0);
  printf(",\"nodes\":[");
  for (int i = 0; i < p->n_nodes; i++)
    json_node(m, &p->nodes[i], i, runs, total);
  printf("],\"by_op\":[");
  for (int k = 0; k < n_ops; k++) {
    printf("%s\n{", k ? "," : "");
    jstr("op", ops[k].op, 0);
    printf(",\"count\":%d", ops[k].count);
    jnum("avg_us", ops[k].ms * 1e3, 0);
    printf(",\"bytes\":%zu", ops[k].bytes);
    jnum("flops", (double)ops[k].flops, 1);
    putchar('}');
  }
  printf("]}\n");
  free(ops);
  return ferror(stdout) ? -1 : 0;
}
