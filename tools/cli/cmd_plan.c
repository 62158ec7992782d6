/* `flowgraph plan`: print the execution plan a run would use (step order,
 * every tensor's offset, size and lifetime in the arena, and the arena
 * against its lower bound and the naive layout), optionally drawn as SVG.
 * Also the argument parsing and model setup `flowgraph profile` shares
 * (plan.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flowgraph/comm.h"
#include "flowgraph/dist.h"
#include "flowgraph/io.h"
#include "plan.h"
#include "svg.h"
#include "trace.h"

#define MAX_BATCH CLI_MAX_BATCH
#define MAX_RUNS  10000000

double plan_now_ms(void) { return cli_now_s() * 1e3; }

void plan_args_free(plan_args *a) {
  for (int i = 0; i < a->run.n_inputs; i++)
    free(a->run.inputs[i].name);
  free(a->run.inputs);
  free(a->run.fetch);
  free(a->run.targets);
  memset(a, 0, sizeof *a);
}

/* The options only profile takes; 0 when `arg` is none of them. */
static int parse_profile_opt(const cli_command *cmd, int argc, char **argv, int *i, plan_args *a,
                             int *rc) {
  const char *v = NULL;
  int r;
  *rc = CLI_OK;
  if ((r = cli_opt_value(argc, argv, i, NULL, "--runs", &v)) != 0) {
    if (r < 0 || cli_parse_i64(v, 1, MAX_RUNS, &a->runs) != 0)
      *rc = cli_usage(cmd, "--runs needs an integer from 1 to %d", MAX_RUNS);
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--warmup", &v)) != 0) {
    if (r < 0 || cli_parse_i64(v, 0, MAX_RUNS, &a->warmup) != 0)
      *rc = cli_usage(cmd, "--warmup needs an integer from 0 to %d", MAX_RUNS);
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--threads", &v)) != 0) {
    *rc = cli_threads_opt(cmd, r, v, &a->run.threads, &a->run.threads_set);
  } else if (strcmp(argv[*i], "--train") == 0) {
    a->train = 1;
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--format", &v)) != 0) {
    const char *names[3] = {"text", "csv", "json"};
    int k = 0;
    while (r > 0 && k < 3 && strcmp(v, names[k]) != 0)
      k++;
    if (r < 0 || k == 3)
      *rc = cli_usage(cmd, "--format needs text, csv or json%s%s%s", r > 0 ? " (got '" : "",
                      r > 0 ? v : "", r > 0 ? "')" : "");
    else
      a->format = k; /* PROF_FORMAT_TEXT, _CSV, _JSON */
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--trace", &v)) != 0) {
    if (r < 0 || !*v)
      *rc = cli_usage(cmd, "--trace needs a path OUT.json");
    else if (a->trace)
      *rc = cli_usage(cmd, "--trace given twice");
    else
      a->trace = v;
  } else {
    return 0;
  }
  return 1;
}

int plan_parse_args(const cli_command *cmd, int profile, int argc, char **argv, plan_args *a,
                    int *help) {
  run_args *ra = &a->run;
  size_t cap = (size_t)argc + 1;
  ra->inputs = calloc(cap, sizeof *ra->inputs);
  ra->fetch = calloc(cap, sizeof *ra->fetch);
  ra->targets = calloc(cap, sizeof *ra->targets);
  if (!ra->inputs || !ra->fetch || !ra->targets)
    return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  ra->batch = 1;
  ra->repeat = 1;
  a->micro = 1;
  a->runs = 10;
  a->warmup = 1;
  a->profile = profile;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *v = NULL;
    int r, rc;
    if (cli_is_help(arg)) {
      *help = 1;
      return CLI_OK;
    }
    if (profile && parse_profile_opt(cmd, argc, argv, &i, a, &rc)) {
      if (rc != CLI_OK) return rc;
    } else if (cli_session_opt(cmd, argc, argv, &i, profile, &rc)) {
      if (rc != CLI_OK) return rc;
    } else if ((r = cli_opt_value(argc, argv, &i, "-i", "--input", &v)) != 0) {
      rc = cli_pair_opt(cmd, arg, r, v, "input", "NAME=FILE.npy", &ra->inputs[ra->n_inputs]);
      if (rc != CLI_OK) return rc;
      ra->n_inputs++;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--fetch", &v)) != 0) {
      if (r < 0 || !*v) return cli_usage(cmd, "--fetch needs a node name");
      ra->fetch[ra->n_fetch++] = v;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--target", &v)) != 0) {
      if (r < 0 || !*v) return cli_usage(cmd, "--target needs a node name");
      ra->targets[ra->n_targets++] = v;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--seed", &v)) != 0) {
      int64_t x;
      if (r < 0 || cli_parse_i64(v, 0, INT64_MAX, &x) != 0)
        return cli_usage(cmd, "--seed needs a non-negative integer");
      ra->seed = (uint64_t)x;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--batch", &v)) != 0) {
      if (r < 0 || cli_parse_i64(v, 1, MAX_BATCH, &ra->batch) != 0)
        return cli_usage(cmd, "--batch needs an integer from 1 to %d", MAX_BATCH);
      a->batch_set = 1;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--memory-svg", &v)) != 0) {
      if (r < 0 || !*v) return cli_usage(cmd, "--memory-svg needs a path OUT.svg");
      if (a->memory_svg) return cli_usage(cmd, "--memory-svg given twice");
      a->memory_svg = v;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--micro-batches", &v)) != 0) {
      rc = cli_int_opt(cmd, "--micro-batches", r, v, 1, FG_MAX_MICRO_BATCHES, &a->micro);
      if (rc != CLI_OK) return rc;
    } else if ((r = cli_opt_value(argc, argv, &i, NULL, "--in-flight", &v)) != 0) {
      rc = cli_in_flight_opt(cmd, r, v, &a->in_flight);
      if (rc != CLI_OK) return rc;
    } else if (strcmp(arg, "--random-inputs") == 0) {
      ra->random_inputs = 1;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return cli_unknown_option(cmd, arg);
    } else if (ra->model) {
      return cli_usage(cmd, "unexpected argument '%s' (one MODEL.fgb only)", arg);
    } else {
      ra->model = arg;
    }
  }
  if (!ra->model) return cli_usage(cmd, "missing MODEL.fgb");
  if (a->in_flight && a->micro < 2) return cli_usage(cmd, "--in-flight needs --micro-batches");
  if (a->trace && a->memory_svg && strcmp(a->trace, a->memory_svg) == 0)
    return cli_usage(cmd, "--trace and --memory-svg name the same file '%s'", a->trace);
  return CLI_OK;
}

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
  return -1;
}

/* Fetches: --fetch; else, when neither --fetch nor --target is given and the
 * model records a training step (metadata "train_target", written by
 * fg_minimize), no fetch and that target, so a training graph is planned
 * whole (profile: only when the model marks no outputs, or with --train,
 * which adds that target to any); else the graph's outputs; else its last
 * node. */
static int resolve(const plan_args *a, plan_model *m, fg_status *st) {
  const run_args *ra = &a->run;
  const fg_graph *g = m->graph;
  const char *train = fg_graph_metadata(g, "train_target");
  m->targets = calloc((size_t)ra->n_targets + 2, sizeof *m->targets);
  if (!m->targets) return oom(st);
  for (int i = 0; i < ra->n_targets; i++)
    m->targets[i] = ra->targets[i];
  m->n_targets = ra->n_targets;
  int count = ra->n_fetch;
  /* profile: a model with marked outputs is profiled as `run` runs it,
   * its inference; --train asks for the training step. */
  int inference = a->profile && !a->train && fg_graph_num_outputs(g) > 0;
  if (a->train) {
    if (!train || !*train) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--train: %s records no training step (no 'train_target' metadata, which "
                    "fg_minimize writes); profile it without --train",
                    ra->model);
      return -1;
    }
    int k = 0;
    while (k < m->n_targets && strcmp(m->targets[k], train) != 0)
      k++;
    if (k == m->n_targets) m->targets[m->n_targets++] = train;
  } else if (count == 0 && ra->n_targets == 0 && train && *train && !inference) {
    m->targets[0] = train;
    m->n_targets = 1;
  } else if (count == 0) {
    count = fg_graph_num_outputs(g);
    if (count == 0 && fg_graph_num_nodes(g) > 0) count = 1;
  }
  if (count == 0 && m->n_targets == 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s has no nodes to plan", ra->model);
    return -1;
  }
  m->fetch = calloc((size_t)count + 1, sizeof *m->fetch);
  if (!m->fetch) return oom(st);
  m->n_fetch = count;
  for (int i = 0; i < count; i++) {
    char buf[1024];
    if (ra->n_fetch > 0) {
      snprintf(buf, sizeof buf, "%s", ra->fetch[i]);
    } else {
      fg_output o = fg_graph_num_outputs(g) > 0 ? fg_graph_output(g, i)
                                                : (fg_output){fg_graph_num_nodes(g) - 1, 0};
      const char *nm = fg_node_name(g, o.node);
      if (!nm) {
        fg_status_set(st, FG_INVALID_GRAPH, "%s: graph output %d refers to no node", ra->model, i);
        return -1;
      }
      if (o.index == 0)
        snprintf(buf, sizeof buf, "%s", nm);
      else
        snprintf(buf, sizeof buf, "%s:%d", nm, o.index);
    }
    m->fetch[i] = strdup(buf);
    if (!m->fetch[i]) return oom(st);
    if (fg_graph_find_output(g, m->fetch[i]).node < 0)
      return cli_fail_missing_output(st, g, "fetch", m->fetch[i], ra->model);
  }
  for (int i = 0; i < m->n_targets; i++)
    if (fg_graph_find(g, m->targets[i]) < 0) {
      fg_status_set(st, FG_NOT_FOUND, "target '%s': %s has no node of that name", m->targets[i],
                    ra->model);
      return -1;
    }
  return 0;
}

void plan_session_options(const plan_args *a, fg_session_options *opts) {
  fg_session_options_init(opts);
  if (a->run.threads_set) opts->num_threads = a->run.threads;
  opts->check_numerics = cli_session_limits.check_numerics;
  opts->max_memory_bytes = cli_session_limits.max_memory_bytes;
  opts->no_passes = cli_session_limits.no_passes;
  opts->passes = cli_session_limits.passes;
}

/* --batch N sizes the placeholders' unknown dimensions: a model without
 * any has its batch fixed by its shapes, and the option would do nothing. */
int cli_check_batch_dim(const fg_graph *g, const char *model, int64_t batch, fg_status *st) {
  for (int id = 0; id < fg_graph_num_nodes(g); id++) {
    int64_t dims[FG_MAX_RANK];
    if (strcmp(fg_node_op(g, id), "placeholder") != 0) continue;
    int rank = fg_output_shape(g, (fg_output){id, 0}, dims);
    for (int d = 0; d < rank; d++)
      if (dims[d] == FG_DIM_UNKNOWN) return 0;
  }
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "--batch %" PRId64 ": no placeholder of %s has an unknown dimension ('?'), so "
                "its shapes fix the batch; leave --batch out",
                batch, model);
  return -1;
}

int plan_model_open(const plan_args *a, plan_model *m, fg_status *st, int *load_failed) {
  memset(m, 0, sizeof *m);
  const char *model = a->run.model;
  m->graph = cli_load_model(model, st);
  if (!m->graph) {
    *load_failed = 1;
    return -1;
  }
  if (a->batch_set && cli_check_batch_dim(m->graph, model, a->run.batch, st) != 0) return -1;
  if (resolve(a, m, st) != 0) return -1;
  run_args ra = a->run;
  ra.targets = m->targets;
  ra.n_targets = m->n_targets;
  if (run_feeds_prepare(m->graph, &ra, (const char *const *)m->fetch, m->n_fetch, &m->feeds, st) !=
      0)
    return -1;
  /* Before any long work: a bad output path fails fast and leaves nothing. */
  if (a->trace && cli_check_writable(a->trace, "--trace", st) != 0) return -1;
  if (a->memory_svg && cli_check_writable(a->memory_svg, "--memory-svg", st) != 0) return -1;
  if (run_feeds_load(m->graph, &ra, &m->feeds, st) != 0) return -1;
  fg_session_options opts;
  plan_session_options(a, &opts);
  double t0 = plan_now_ms();
  m->session = fg_session_new(m->graph, &opts, st);
  m->session_ms = plan_now_ms() - t0;
  return m->session ? 0 : -1;
}

void plan_model_close(plan_model *m) {
  fg_session_free(m->session);
  run_feeds_free(&m->feeds);
  if (m->fetch)
    for (int i = 0; i < m->n_fetch; i++)
      free(m->fetch[i]);
  free(m->fetch);
  free(m->targets);
  fg_graph_free(m->graph);
  memset(m, 0, sizeof *m);
}

/* A fed input whose placeholder's first dimension is '?': a batch input,
 * which data parallelism shards and micro-batches cut. */
int plan_is_batch_input(const plan_model *m, int i) {
  int node = fg_graph_find(m->graph, m->feeds.feeds[i].name);
  int64_t dims[FG_MAX_RANK];
  int rank = node >= 0 ? fg_output_shape(m->graph, (fg_output){node, 0}, dims) : -1;
  return rank >= 1 && dims[0] == FG_DIM_UNKNOWN;
}

/* --micro-batches M: m->graph becomes fg_micro_batch's rewrite over the
 * batch inputs (a loss averaged over rows, as train's default; the form
 * changes the arithmetic, not the work, nor the memory), with a session on
 * it. m->loaded keeps the loaded graph, which the fetch and target names
 * may point into; micro_restore puts it back. Every batch input must have
 * M rows. */
static int micro_rewrite(const plan_args *a, plan_model *m, fg_status *st) {
  const char **names = calloc((size_t)m->feeds.n + 1, sizeof *names);
  if (!names) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  int n = 0, rc = 0;
  size_t used = 0;
  for (int i = 0; i < m->feeds.n && rc == 0; i++) {
    if (!plan_is_batch_input(m, i)) continue;
    const char *name = m->feeds.feeds[i].name;
    int64_t rows = fg_tensor_dim(m->feeds.feeds[i].tensor, 0);
    if (rows < a->micro) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--micro-batches %" PRId64 ": input '%s' has %" PRId64
                    " rows, fewer than the micro-batches; feed more rows (--batch with "
                    "--random-inputs) or use fewer micro-batches",
                    a->micro, name, rows);
      rc = -1;
    }
    names[n++] = name;
    if (used < sizeof m->micro_inputs)
      used += (size_t)snprintf(m->micro_inputs + used, sizeof m->micro_inputs - used, "%s%s",
                               used ? ", " : "", name);
  }
  if (rc == 0 && n == 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--micro-batches: no fed input of %s has an unknown first dimension, so there "
                  "is no batch to cut",
                  a->run.model);
    rc = -1;
  }
  fg_graph *g =
      rc == 0 ? cli_micro_batch(m->graph, a->micro, a->in_flight, names, n, FG_DP_LOSS_MEAN, st)
              : NULL;
  free(names);
  if (!g) return -1;
  fg_session_options so;
  plan_session_options(a, &so);
  double t0 = plan_now_ms();
  fg_session *s = fg_session_new(g, &so, st);
  if (!s) {
    fg_graph_free(g);
    return -1;
  }
  m->session_ms = plan_now_ms() - t0;
  fg_session_free(m->session);
  m->loaded = m->graph;
  m->graph = g;
  m->session = s;
  return 0;
}

/* Frees the rewrite and its session; plan_model_close frees the rest. */
static void micro_restore(plan_model *m) {
  if (!m->loaded) return;
  fg_session_free(m->session);
  m->session = NULL;
  fg_graph_free(m->graph);
  m->graph = m->loaded;
  m->loaded = NULL;
}

void plan_print_micro(const plan_args *a, const plan_model *m) {
  if (a->micro <= 1) return;
  printf("micro-batches: %" PRId64 " per run (fg_micro_batch; batch inputs: %s", a->micro,
         m->micro_inputs);
  if (a->in_flight == FG_MICRO_BATCH_UNBOUNDED)
    printf("; all in flight");
  else if (a->in_flight > 0)
    printf("; at most %" PRId64 " in flight per device", a->in_flight);
  printf(")\n");
}

int plan_command_main(const cli_command *cmd, int profile, int argc, char **argv,
                      int (*body)(const plan_args *a, plan_model *m, fg_status *st)) {
  plan_args a;
  memset(&a, 0, sizeof a);
  int help = 0;
  int rc = plan_parse_args(cmd, profile, argc, argv, &a, &help);
  if (rc == CLI_OK && help) cli_print_help(cmd);
  if (rc != CLI_OK || help) {
    plan_args_free(&a);
    return rc;
  }
  fg_status *st = fg_status_new();
  if (!st) {
    plan_args_free(&a);
    return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  }
  plan_model m;
  int load_failed = 0;
  if (plan_model_open(&a, &m, st, &load_failed) == 0 &&
      (a.micro <= 1 || micro_rewrite(&a, &m, st) == 0) && body(&a, &m, st) == 0)
    rc = CLI_OK;
  else
    rc = load_failed ? cli_fail_load(st, a.run.model) : cli_fail_status(st);
  micro_restore(&m);
  plan_model_close(&m);
  fg_status_free(st);
  plan_args_free(&a);
  return rc;
}

/* ---- printing the plan ---------------------------------------------------- */

static void tensor_label(const fg_plan_tensor *t, char *buf, size_t size) {
  snprintf(buf, size, "%s:%d", t->name ? t->name : "?", t->output);
}

/* Another rank's tensor in a cross-process plan (its bytes live there). */
static int is_remote(const fg_plan_tensor *t) { return t->kind && !strcmp(t->kind, "remote"); }

static void step_str(int step, char *buf, size_t size) {
  if (step < 0)
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%d", step);
}

/* The plan holding device d's steps: the one plan, or its rank's. */
static const fg_plan_info *info_of(const fg_partition *p, int d, const fg_plan_info *const *infos,
                                   int n_ranks) {
  if (!infos) return NULL;
  if (n_ranks == 0) return infos[0];
  int r = fg_partition_device(p, d).rank;
  return r >= 0 && r < n_ranks ? infos[r] : NULL;
}

void plan_print_partition(const plan_model *m, const fg_plan_info *const *infos, int n_ranks) {
  const fg_partition *p = fg_session_partition(m->session);
  int nd = fg_partition_num_devices(p), nt = fg_partition_num_transfers(p);
  if (nd <= 1) return;
  char dev[48], dev2[48];
  printf("partitions: %d devices, %d send/recv transfers in the graph\n", nd, nt);
  for (int d = 0; d < nd; d++) {
    const fg_plan_info *info = info_of(p, d, infos, n_ranks);
    int steps = 0, recv = 0;
    for (int s = 0; info && s < info->n_steps; s++) {
      steps += info->step_devices[s] == d;
      recv += info->step_devices[s] == d && info->step_recv[s];
    }
    printf("  %s: %d nodes%s", fg_device_str(fg_partition_device(p, d), dev, sizeof dev),
           fg_partition_num_nodes(p, d), info ? "" : "\n");
    if (info)
      printf(", %d steps (%d recv), arena %zu bytes\n", steps, recv,
             d < info->n_devices ? info->device_arena_bytes[d] : (size_t)0);
  }
  int64_t total = 0;
  int n_used = 0;
  for (int i = 0; i < nt; i++) {
    const fg_transfer *t = fg_partition_transfer(p, i);
    const fg_plan_info *info = info_of(p, t->dst_device, infos, n_ranks);
    /* With a plan: only the transfers its steps use (a step on the
     * receiving device reads the sent tensor, or a recv step there copies
     * it: the plan's node may read it where the user's graph does not, a
     * fused node in place of the op it absorbed). */
    int used = !info;
    for (int k = 0; info && !used && k < info->n_steps; k++) {
      int node = info->step_nodes[k];
      if (info->step_devices[k] != t->dst_device) continue;
      if (info->step_recv[k]) {
        used = node == t->src.node;
        continue;
      }
      for (int j = 0; j < fg_node_num_inputs(m->graph, node) && !used; j++) {
        fg_output in = fg_node_input(m->graph, node, j);
        used = in.node == t->src.node && in.index == t->src.index;
      }
    }
    if (!used) continue;
    n_used++;
    int64_t bytes = t->bytes;
    /* The plan knows the fed shapes: take its size of the sent tensor
     * (control edges stay at 0). */
    for (int k = 0; info && bytes != 0 && k < info->n_tensors; k++)
      if (info->tensors[k].node == t->src.node && info->tensors[k].output == t->src.index)
        bytes = (int64_t)info->tensors[k].bytes;
    if (bytes > 0) total += bytes;
    char b[32] = "?";
    if (bytes >= 0) snprintf(b, sizeof b, "%" PRId64, bytes);
    printf("  transfer %s: %s -> %s, %s bytes\n", t->key,
           fg_device_str(fg_partition_device(p, t->src_device), dev, sizeof dev),
           fg_device_str(fg_partition_device(p, t->dst_device), dev2, sizeof dev2), b);
  }
  printf("  transfer bytes per run: %" PRId64 " (%d of the graph's %d transfers)\n", total, n_used,
         nt);
}

static void print_request(const plan_model *m) {
  printf("fetches:");
  for (int i = 0; i < m->n_fetch; i++)
    printf(" %s", m->fetch[i]);
  printf("%s\ntargets:", m->n_fetch ? "" : " (none)");
  for (int i = 0; i < m->n_targets; i++)
    printf(" %s", m->targets[i]);
  printf("%s\n", m->n_targets ? "" : " (none)");
}

/* The steps and tensors tables of one plan. Another rank's tensors (kind
 * "remote") are in that rank's tables, not here. */
/* "f32 [2,3]", with the layout after it when it is not C order. */
static void tensor_type(const fg_plan_tensor *t, const char *shape, char *out, size_t n) {
  const int plain = !t->layout || !strcmp(t->layout, "nchw");
  snprintf(out, n, "%s %s%s%s", fg_dtype_name(t->dtype), shape, plain ? "" : " ",
           plain ? "" : t->layout);
}

static void print_tables(const plan_model *m, const fg_plan_info *info) {
  const fg_graph *g = m->graph;
  printf("\nsteps:\n");
  int wn = 4, wo = 2;
  for (int s = 0; s < info->n_steps; s++) {
    const char *nm = fg_node_name(g, info->step_nodes[s]), *op = info->step_ops[s];
    if (nm && (int)strlen(nm) > wn) wn = (int)strlen(nm);
    if (op && (int)strlen(op) > wo) wo = (int)strlen(op);
  }
  printf("  %5s  %-*s  %s\n", "step", wn, "node", "op");
  for (int s = 0; s < info->n_steps; s++) {
    /* A transfer step carries its producer's tensor: name the transfer. */
    const char *nm = fg_node_name(g, info->step_nodes[s]), *op = info->step_recv[s] ? "recv"
                                                                 : info->step_send[s]
                                                                     ? "send"
                                                                     : info->step_ops[s];
    printf("  %5d  %-*s  %s\n", s, wn, nm ? nm : "?", op ? op : "?");
  }

  /* Column widths first so the table lines up for any name length. */
  int w[5] = {(int)strlen("tensor"), (int)strlen("kind"), (int)strlen("type"),
              (int)strlen("lifetime"), (int)strlen("shared-with")};
  char label[1100], type[300], shape[256], first[16], last[16], life[40], shared[1100];
  for (int i = 0; i < info->n_tensors; i++) {
    const fg_plan_tensor *t = &info->tensors[i];
    if (is_remote(t)) continue;
    tensor_label(t, label, sizeof label);
    cli_shape_str(t->rank, t->dims, shape, sizeof shape);
    tensor_type(t, shape, type, sizeof type);
    int lens[3] = {(int)strlen(label), (int)strlen(t->kind ? t->kind : "?"), (int)strlen(type)};
    for (int c = 0; c < 3; c++)
      if (lens[c] > w[c]) w[c] = lens[c];
  }
  printf("\ntensors:\n  %-*s  %-*s  %-*s  %12s  %12s  %-12s  %s\n", w[0], "tensor", w[1], "kind",
         w[2], "type", "offset", "size", "lifetime", "shared-with");
  for (int i = 0; i < info->n_tensors; i++) {
    const fg_plan_tensor *t = &info->tensors[i];
    if (is_remote(t)) continue;
    tensor_label(t, label, sizeof label);
    cli_shape_str(t->rank, t->dims, shape, sizeof shape);
    tensor_type(t, shape, type, sizeof type);
    step_str(t->first_step, first, sizeof first);
    step_str(t->last_step, last, sizeof last);
    snprintf(life, sizeof life, "%s..%s", first, last);
    if (t->shared_with >= 0 && t->shared_with < info->n_tensors)
      tensor_label(&info->tensors[t->shared_with], shared, sizeof shared);
    else
      snprintf(shared, sizeof shared, "-");
    char off[32];
    if (t->offset < 0)
      snprintf(off, sizeof off, "-");
    else
      snprintf(off, sizeof off, "%" PRId64, t->offset);
    printf("  %-*s  %-*s  %-*s  %12s  %12zu  %-12s  %s\n", w[0], label, w[1],
           t->kind ? t->kind : "?", w[2], type, off, t->bytes, life, shared);
  }
}

static void print_summary(const char *prefix, size_t arena, size_t lower, size_t naive) {
  printf("%sarena_bytes: %zu\n%slower_bound_bytes: %zu\n%snaive_bytes: %zu\n", prefix, arena,
         prefix, lower, prefix, naive);
}

static int print_plan(const plan_args *a, const plan_model *m, const fg_plan_info *info) {
  printf("plan for %s: %d steps, %d tensors\n", a->run.model, info->n_steps, info->n_tensors);
  print_request(m);
  plan_print_partition(m, &info, 0);
  /* Before the tables: the three summary lines stay the last lines. */
  if (a->memory_svg) printf("memory svg: %s\n", a->memory_svg);
  print_tables(m, info);
  printf("\nkernel_bytes: %zu\nkernel_shared_bytes: %zu\n", info->kernel_bytes,
         info->kernel_shared_bytes);
  print_summary("", info->arena_bytes, info->lower_bound_bytes, info->naive_bytes);
  return 0;
}

/* A cross-process model (nodes on rank:R/ devices): every process plans
 * only its rank's nodes, so there is one plan per rank. Each is made here
 * as its rank would make it, with an in-process communicator standing for
 * the ranks (planning sends nothing). The summary lines add the ranks up;
 * each rank's own follow its tables. */
int plan_rank_infos(const char *model, plan_model *m, int ranks, fg_plan_info **infos,
                    fg_status *st) {
  /* infos holds FG_MAX_CPU_DEVICES entries: checked before it is written. */
  if (ranks > FG_MAX_CPU_DEVICES) {
    fg_status_set(st, FG_UNIMPLEMENTED,
                  "%s places nodes on %d MPI ranks; flowgraph plans at most %d of them here", model,
                  ranks, FG_MAX_CPU_DEVICES);
    return -1;
  }
  for (int r = 0; r < ranks; r++)
    infos[r] = NULL;
  fg_comm *h[FG_MAX_CPU_DEVICES];
  if (fg_comm_inproc_group(ranks, 1, h, st) != 0) return -1;
  int rc = 0;
  for (int r = 0; r < ranks && rc == 0; r++) {
    if (fg_session_set_comm(m->session, h[r], st) != 0) rc = -1;
    if (rc == 0)
      infos[r] = fg_session_plan_info(m->session, m->feeds.feeds, m->feeds.n,
                                      (const char *const *)m->fetch, m->n_fetch, m->targets,
                                      m->n_targets, st);
    if (!infos[r]) rc = -1;
  }
  fg_status *st2 = fg_status_new();
  fg_session_set_comm(m->session, NULL, st2);
  fg_status_free(st2);
  for (int r = 0; r < ranks; r++)
    fg_comm_free(h[r]);
  if (rc != 0)
    for (int r = 0; r < ranks; r++) {
      fg_plan_info_free(infos[r]);
      infos[r] = NULL;
    }
  return rc;
}

static int plan_ranks(const plan_args *a, plan_model *m, int ranks, fg_status *st) {
  fg_plan_info *infos[FG_MAX_CPU_DEVICES] = {0};
  int rc = plan_rank_infos(a->run.model, m, ranks, infos, st);
  if (rc == 0 && a->memory_svg)
    rc = svg_write_memory_plan(a->memory_svg, (const fg_plan_info *const *)infos, ranks,
                               fg_session_partition(m->session), a->run.model, st);
  if (rc == 0) {
    size_t sum[3] = {0, 0, 0};
    printf("plan for %s: %d MPI ranks (rank:R/ devices), one plan each\n", a->run.model, ranks);
    print_request(m);
    plan_print_partition(m, (const fg_plan_info *const *)infos, ranks);
    for (int r = 0; r < ranks; r++) {
      int n_tensors = 0;
      for (int k = 0; k < infos[r]->n_tensors; k++)
        n_tensors += !is_remote(&infos[r]->tensors[k]);
      printf("\nrank %d: %d steps, %d tensors\n", r, infos[r]->n_steps, n_tensors);
      print_tables(m, infos[r]);
      char prefix[32];
      snprintf(prefix, sizeof prefix, "rank %d ", r);
      print_summary(prefix, infos[r]->arena_bytes, infos[r]->lower_bound_bytes,
                    infos[r]->naive_bytes);
      sum[0] += infos[r]->arena_bytes;
      sum[1] += infos[r]->lower_bound_bytes;
      sum[2] += infos[r]->naive_bytes;
    }
    printf("\nall ranks:\n");
    print_summary("", sum[0], sum[1], sum[2]);
    if (a->memory_svg) printf("memory svg: %s\n", a->memory_svg);
  }
  for (int r = 0; r < ranks && r < FG_MAX_CPU_DEVICES; r++)
    fg_plan_info_free(infos[r]);
  return rc;
}

/* plan --passes: what the passes do for this plan's fetches and targets. */
static int print_passes(const plan_model *m, fg_status *st) {
  const char **names = calloc((size_t)(m->n_fetch + m->n_targets) + 1, sizeof *names);
  if (!names) return oom(st);
  for (int i = 0; i < m->n_fetch; i++)
    names[i] = m->fetch[i];
  for (int i = 0; i < m->n_targets; i++)
    names[m->n_fetch + i] = m->targets[i];
  int rc = cli_pass_report(m->graph, names, m->n_fetch + m->n_targets, st);
  free(names);
  return rc;
}

static int plan_body(const plan_args *a, plan_model *m, fg_status *st) {
  if (cli_session_limits.show_passes && print_passes(m, st) != 0) return -1;
  int ranks = fg_partition_num_ranks(fg_session_partition(m->session));
  if (ranks > 0) return plan_ranks(a, m, ranks, st);
  fg_plan_info *info =
      fg_session_plan_info(m->session, m->feeds.feeds, m->feeds.n, (const char *const *)m->fetch,
                           m->n_fetch, m->targets, m->n_targets, st);
  if (!info) return -1;
  int rc = 0;
  if (a->memory_svg)
    rc = svg_write_memory_plan(a->memory_svg, (const fg_plan_info *const *)&info, 1,
                               fg_session_partition(m->session), a->run.model, st);
  if (rc == 0) {
    plan_print_micro(a, m);
    print_plan(a, m, info);
  }
  fg_plan_info_free(info);
  return rc;
}

static int plan_main(int argc, char **argv) {
  return plan_command_main(&cli_plan_command, 0, argc, argv, plan_body);
}

const cli_command cli_plan_command = {
    "plan", "Print a model's execution and memory plan.",
    "flowgraph plan MODEL.fgb [-i NAME=FILE.npy ...] [--random-inputs] [--batch N] [--seed N] "
    "[--fetch NAME ...] [--target NAME ...] [--memory-svg OUT.svg] [--max-memory BYTES] "
    "[--passes [LIST]|--no-passes] "
    "[--micro-batches M [--in-flight K|all]]",
    "options:\n"
    "  -i, --input NAME=FILE.npy   feed placeholder NAME from a .npy file\n"
    "  --random-inputs             feed every needed placeholder not given by -i with\n"
    "                              seeded random data (as in 'flowgraph run')\n"
    "  --batch N                   size of the placeholders' unknown dimensions ('?')\n"
    "                              for random inputs (1..1000000, default 1); a model\n"
    "                              without any refuses it\n"
    "  --seed N                    random seed (default 0)\n"
    "  --fetch NAME                plan for fetching NAME (\"node\" or \"node:index\")\n"
    "  --target NAME               plan for running node NAME for its effect\n"
    "  --memory-svg OUT.svg        draw the memory plan: steps across, arena offset down,\n"
    "                              one rectangle per arena tensor; one plot per\n"
    "                              device (each has its own arena)\n"
    "  --max-memory BYTES          refuse a plan needing more bytes (arena plus\n"
    "                              fetched outputs; suffix K, M or G; default: the\n"
    "                              machine's memory)\n"
    "  --passes [LIST]             print what the optimization passes do for this plan\n"
    "                              (per pass: counts, then one line per removed, merged,\n"
    "                              simplified or folded node), before the plan; with LIST\n"
    "                              (comma-separated: simplify, fold, fold_inference,\n"
    "                              cse, epilogue, dce) run those\n"
    "  --no-passes                 plan without optimization passes (FG_PASSES=off\n"
    "                              does so for every command)\n"
    "  --micro-batches M           plan the training step as 'train --micro-batches M'\n"
    "                              runs it (1..1024): every fed input whose first\n"
    "                              dimension is '?' cut into M micro-batches\n"
    "                              (fg_micro_batch); with more than 2 per stage, at\n"
    "                              most 2 per stage are in flight on a device, which\n"
    "                              its arena shows\n"
    "  --in-flight K|all           with --micro-batches: at most K micro-batches\n"
    "                              in flight on a device (1..1024; default 2 per\n"
    "                              stage; the number of stages: least memory that\n"
    "                              keeps the pipeline full), or all (no bound)\n\n"
    "Fetches default to the graph's outputs (or its last node). A training model\n"
    "(metadata 'train_target', written by fg_minimize) is planned, when neither\n"
    "--fetch nor --target is given, for that target with no fetch: the whole step.\n"
    "Shapes come from the feeds, so every needed placeholder must be fed (or\n"
    "--random-inputs given); nothing is run.\n\n"
    "Output: the steps in plan order (index, node, op; a transfer step names the\n"
    "producer of what it carries, op recv or send); one line per tensor the plan\n"
    "touches: name:output, kind (arena, feed, constant, variable, fetch, recv), dtype and\n"
    "shape, offset in the arena ('-' outside it), size in bytes, lifetime as\n"
    "first..last step ('-' before the first step, or never read) and the tensor\n"
    "whose bytes it reuses in place; then two lines on the kernels' own buffers\n"
    "(outside the arena):\n"
    "  kernel_bytes: N         oneDNN's converted tensors and scratchpads, this plan's\n"
    "  kernel_shared_bytes: N  converted constants (a conv's constant weight in\n"
    "                          oneDNN's layout) the session's plans share, made by\n"
    "                          the first run\n"
    "then exactly three lines:\n"
    "  arena_bytes: N         the arena the plan allocates\n"
    "  lower_bound_bytes: N   the peak of live intermediate bytes over the schedule\n"
    "  naive_bytes: N         one 64-byte aligned buffer per arena tensor\n"
    "A model placing nodes on MPI ranks (rank:R/ devices) has one plan per rank,\n"
    "each holding that rank's steps only; they are printed in turn as 'rank R:'\n"
    "sections with their own 'rank R arena_bytes: N' lines (no mpirun needed), and\n"
    "the last three lines add the ranks up. --memory-svg draws every rank's devices.\n"
    "The SVG is written to a temporary name and renamed, so a failure leaves none.\n",
    plan_main};
