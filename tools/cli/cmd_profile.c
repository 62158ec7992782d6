/* `flowgraph profile`: run a model warmup + N times with run metadata and
 * print tables in the manner of TFLite's benchmark_model (run order, top
 * nodes by time, a summary by op type) and the init, first-run and
 * per-run timings; optionally a Chrome trace and the memory-plan SVG. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_cli.h"
#include "flowgraph/comm.h"
#include "flowgraph/dist.h"
#include "plan.h"
#include "profile_dist.h"
#include "profile_report.h"
#include "svg.h"
#include "trace.h"

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
  return -1;
}

static size_t slot_key(const fg_node_timing *t) {
  return (size_t)t->node * 3 + (size_t)prof_step_kind(t->op);
}

static int add_run(profile_data *p, const fg_run_metadata *md, fg_status *st) {
  for (int i = 0; i < md->n_nodes; i++) {
    const fg_node_timing *t = &md->nodes[i];
    if (t->node < 0 || t->node >= p->n_graph_nodes) {
      fg_status_set(st, FG_INTERNAL, "run metadata names node %d of a %d-node graph", t->node,
                    p->n_graph_nodes);
      return -1;
    }
    size_t key = slot_key(t);
    int k = p->slot[key];
    while (k >= 0 && p->nodes[k].device != t->device)
      k = p->nodes[k].next;
    if (k < 0) {
      /* Every node of the plan is new in the first measured run; a later
       * run of the same plan adds none, but would still be counted. */
      node_stat *ns = realloc(p->nodes, ((size_t)p->n_nodes + 1) * sizeof *ns);
      if (!ns) return oom(st);
      p->nodes = ns;
      k = p->n_nodes++;
      memset(&ns[k], 0, sizeof ns[k]);
      ns[k].next = p->slot[key];
      p->slot[key] = k;
      ns[k].node = t->node;
      ns[k].device = t->device;
      ns[k].name = t->name ? t->name : "?";
      ns[k].op = t->op ? t->op : "?";
      ns[k].dtype = t->dtype;
      ns[k].rank = t->rank < 0 ? 0 : t->rank > FG_MAX_RANK ? FG_MAX_RANK : t->rank;
      memcpy(ns[k].dims, t->dims, sizeof ns[k].dims);
      ns[k].bytes = t->output_bytes;
      ns[k].in_bytes = t->input_bytes;
      ns[k].arena_bytes = t->arena_bytes;
      ns[k].flops = t->flops;
      if (t->n_inputs > 0 && t->inputs) {
        ns[k].inputs = malloc((size_t)t->n_inputs * sizeof *ns[k].inputs);
        if (!ns[k].inputs) return oom(st);
        memcpy(ns[k].inputs, t->inputs, (size_t)t->n_inputs * sizeof *ns[k].inputs);
        ns[k].n_inputs = t->n_inputs;
      }
    }
    int64_t d = t->end_ns - t->start_ns;
    p->nodes[k].total_ms += d > 0 ? (double)d / 1e6 : 0.0;
    p->nodes[k].calls++;
  }
  return 0;
}

static void free_outputs(fg_tensor **outs, int n) {
  for (int i = 0; i < n; i++) {
    fg_tensor_free(outs[i]);
    outs[i] = NULL;
  }
}

/* Warmup + measured runs, every one with metadata (the first call's plan
 * time is the init's second half). With `mine` (--dist mpi) the measured
 * runs' timings are kept there for rank 0 to merge, not added to p. */
static int run_all(const plan_args *a, plan_model *m, profile_data *p, trace_writer *tw,
                   prof_runs *mine, fg_status *st) {
  fg_tensor **outs = calloc((size_t)m->n_fetch + 1, sizeof *outs);
  if (!outs) return oom(st);
  fg_run_options opts = {1};
  int rc = -1;
  int64_t total = a->warmup + a->runs;
  for (int64_t r = 0; r < total; r++) {
    fg_run_metadata *md = NULL;
    if (fg_session_run_ex(m->session, m->feeds.feeds, m->feeds.n, (const char *const *)m->fetch,
                          m->n_fetch, outs, m->targets, m->n_targets, &opts, &md, st) != 0) {
      fg_run_metadata_free(md);
      goto done;
    }
    free_outputs(outs, m->n_fetch);
    if (!md) {
      fg_status_set(st, FG_INTERNAL, "the session returned no run metadata");
      goto done;
    }
    double ms = (double)md->run_ns / 1e6;
    if (r == 0) {
      p->plan_ms = (double)md->plan_ns / 1e6;
      p->first_run_ms = ms;
    }
    p->threads = md->threads;
    p->arena_bytes = md->arena_bytes;
    if (r < a->warmup) {
      p->warmup_ms += ms;
    } else {
      int64_t j = r - a->warmup;
      p->run_ms[j] = ms;
      p->agree_ms += (double)md->agree_ns / 1e6;
      p->n_runs = j + 1;
      int bad = mine ? prof_runs_add(mine, md, st) != 0
                     : add_run(p, md, st) != 0 || (tw && trace_add_run(tw, md, j, st) != 0);
      if (bad) {
        fg_run_metadata_free(md);
        goto done;
      }
    }
    fg_run_metadata_free(md);
  }
  rc = 0;
done:
  free_outputs(outs, m->n_fetch);
  free(outs);
  return rc;
}

/* --device NAME (cpu:0 or cuda:N): taken out of argv before the common
 * parser sees it (plan and profile share that parser; only profile has the
 * option), then the session plan_model_open made on the CPU is replaced by
 * one on the device. A device that does not exist fails here with one line
 * naming it. GPU nodes are timed with CUDA events; their "thread" is the
 * CUDA stream, so the trace has one track per stream. */
static const char *profile_device;
/* --dist mpi [--dist-timeout S]: taken out of argv the same way. */
static int profile_dist_mpi;
static int64_t profile_dist_timeout;

/* --dist mpi, after every rank's runs: rank 0 receives the others' timings
 * and measures their clocks against its own, then folds every rank's run j
 * into p (node times; the run's time from the first rank's start to the
 * last rank's end, on rank 0's clock) and into the trace (a process per
 * rank, each placed where it started on that clock). */
static int merge_ranks(fg_comm *c, const plan_model *m, prof_runs *all, profile_data *p,
                       trace_writer *tw, fg_status *st) {
  p->n_ranks = fg_comm_size(c);
  p->clock_off = calloc((size_t)fg_comm_size(c), sizeof *p->clock_off);
  p->clock_rtt = calloc((size_t)fg_comm_size(c), sizeof *p->clock_rtt);
  if (!p->clock_off || !p->clock_rtt) return oom(st);
  if (prof_runs_exchange(c, &all[0], all, st) != 0 ||
      prof_clock_offsets(c, CLOCK_ROUNDS, p->clock_off, p->clock_rtt, st) != 0)
    return -1;
  if (fg_comm_rank(c) != 0) return 0;
  const fg_run_metadata **mds = calloc((size_t)fg_comm_size(c), sizeof *mds);
  fg_run_metadata *md = calloc((size_t)fg_comm_size(c), sizeof *md);
  int64_t *shift = calloc((size_t)fg_comm_size(c), sizeof *shift);
  int rc = mds && md && shift ? 0 : oom(st);
  p->threads = 0;
  p->arena_bytes = 0;
  for (int r = 0; r < fg_comm_size(c) && rc == 0; r++) {
    p->threads += all[r].threads;
    p->arena_bytes += (size_t)all[r].arena_bytes;
  }
  for (int64_t j = 0; j < all[0].n_runs && rc == 0; j++) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (int r = 0; r < fg_comm_size(c) && rc == 0; r++) {
      rc = prof_runs_md(&all[r], m->graph, j, &md[r], st) != 0 || add_run(p, &md[r], st) != 0;
      mds[r] = &md[r];
      shift[r] = md[r].start_ns - p->clock_off[r]; /* rank 0's clock */
      if (shift[r] < first) first = shift[r];
      if (shift[r] + md[r].run_ns > last) last = shift[r] + md[r].run_ns;
    }
    for (int r = 0; r < fg_comm_size(c); r++)
      shift[r] -= first;
    p->run_ms[j] = (double)(last - first) / 1e6;
    if (rc == 0 && tw) rc = trace_add_rank_runs(tw, mds, shift, j, st) != 0;
  }
  free(shift);
  free(mds);
  free(md);
  return rc ? -1 : 0;
}

/* What the runs executed: the model's training step (its train_target
 * among the targets), its inference (fetches only) or both kinds. */
static const char *profiled_what(const plan_model *m) {
  const char *train = fg_graph_metadata(m->graph, "train_target");
  if (!train && m->loaded) train = fg_graph_metadata(m->loaded, "train_target");
  for (int i = 0; train && i < m->n_targets; i++)
    if (strcmp(m->targets[i], train) == 0) return "training step";
  return m->n_targets == 0 ? "inference" : "fetches and targets";
}

/* Rows per run: --batch when it sized the random inputs, else the first
 * dimension of the first fed input whose placeholder's is '?'; 0 when no
 * input has a batch dimension. */
static int64_t run_batch(const plan_model *m) {
  for (int i = 0; i < m->feeds.n; i++)
    if (plan_is_batch_input(m, i)) return fg_tensor_dim(m->feeds.feeds[i].tensor, 0);
  return 0;
}

static int write_report(const plan_args *a, const plan_model *m, profile_data *p,
                        const fg_plan_info *const *infos, int n_ranks, fg_status *st) {
  p->what = profiled_what(m);
  p->batch = run_batch(m);
  p->peak_rss = prof_peak_rss_bytes();
  if (p->n_runs > 0 && prof_latency_of(p->run_ms, p->n_runs, &p->lat) != 0) return oom(st);
  int rc = a->format == PROF_FORMAT_CSV    ? prof_print_csv(a, m, p)
           : a->format == PROF_FORMAT_JSON ? prof_print_json(a, m, p)
                                           : prof_print_text(a, m, p, infos, n_ranks);
  return rc != 0 ? oom(st) : 0;
}

static int open_device_session(const plan_args *a, plan_model *m, fg_status *st) {
  fg_session_options opts;
  plan_session_options(a, &opts);
  opts.device = profile_device;
  fg_session_free(m->session);
  double t0 = plan_now_ms();
  m->session = fg_session_new(m->graph, &opts, st);
  m->session_ms = plan_now_ms() - t0;
  return m->session ? 0 : -1;
}

static int profile_runs(const plan_args *a, plan_model *m, fg_comm *c, int report, double *avg_ms,
                        fg_status *st);
static int profile_data_parallel(const plan_args *a, plan_model *m, fg_status *st);
static int profile_replicas(const plan_args *a, plan_model *m, fg_comm *world, int stages,
                            fg_status *st);

/* A model split over `ranks` processes is profiled on that many, or on a
 * multiple (its replicas, as training runs them); every process sees the
 * same size, so all refuse alike. */
static int check_world(const plan_args *a, const fg_comm *c, int ranks, fg_status *st) {
  if (fg_comm_size(c) % ranks == 0) return 0;
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "--dist mpi: %s places nodes on %d MPI ranks; profile it with mpirun -np %d (or "
                "%d, %d, ... for replicas of it), not %d",
                a->run.model, ranks, ranks, 2 * ranks, 3 * ranks, fg_comm_size(c));
  return -1;
}

static int profile_body(const plan_args *a, plan_model *m, fg_status *st) {
  int ranks = fg_partition_num_ranks(fg_session_partition(m->session));
  if (ranks > 0 && !profile_dist_mpi) {
    /* Timing it needs every rank running. */
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s places nodes on %d MPI ranks (rank:R/ devices): profile it with "
                  "'mpirun -np %d flowgraph profile ... --dist mpi' ('flowgraph plan' prints "
                  "each rank's plan)",
                  a->run.model, ranks, ranks);
    return -1;
  }
  if (ranks > FG_MAX_CPU_DEVICES) {
    /* Refused before any run: the report makes every rank's plan, and
     * plan_rank_infos makes at most FG_MAX_CPU_DEVICES. */
    fg_status_set(st, FG_UNIMPLEMENTED,
                  "%s places nodes on %d MPI ranks; flowgraph profile reports at most %d of them",
                  a->run.model, ranks, FG_MAX_CPU_DEVICES);
    return -1;
  }
  if (profile_dist_mpi && profile_device) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--device and --dist mpi: a model split across processes runs on the devices "
                  "its nodes name, and data parallelism profiles on cpu:0");
    return -1;
  }
  if (ranks == 0 && profile_dist_mpi) return profile_data_parallel(a, m, st);
  if (profile_device && open_device_session(a, m, st) != 0) return -1;
  fg_comm *c = NULL;
  if (profile_dist_mpi) {
    /* Every rank must time the same runs of the same graph. */
    int64_t opts[5] = {a->runs, a->warmup, a->run.batch, a->micro, a->in_flight};
    if (cli_dist_join("profile", a->run.model, opts, sizeof opts, profile_dist_timeout, &c, st) !=
            0 ||
        check_world(a, c, ranks, st) != 0) {
      if (c) fg_comm_free(c);
      return -1;
    }
    if (fg_comm_size(c) > ranks) return profile_replicas(a, m, c, ranks, st);
    if (fg_session_set_comm(m->session, c, st) != 0) {
      fg_comm_free(c);
      return -1;
    }
  }
  int rc = profile_runs(a, m, c, 1, NULL, st);
  if (c) {
    if (rc != 0) fg_comm_abort(c, fg_status_message(st));
    /* The session must let go of the communicator before it is freed. */
    fg_session_set_comm(m->session, NULL, NULL);
    fg_comm_free(c);
    /* After a failed exchange MPI cannot finalize: the caller prints the
     * error and the process exits without MPI_Finalize. */
    if (rc == 0) fg_mpi_shutdown(0);
  }
  return rc;
}

/* One rank's shards of the batch inputs (placeholders whose first
 * dimension is '?'), as fg_shard_rows splits them; views into the fed
 * tensors. names[] lists the split ones for the rewrite. */
typedef struct dp_shards {
  fg_feed *feeds;
  fg_tensor **views;
  const char **names;
  int n, n_split;
} dp_shards;

static void dp_shards_free(dp_shards *d) {
  for (int i = 0; d->views && i < d->n; i++)
    fg_tensor_free(d->views[i]);
  free(d->views);
  free(d->feeds);
  free(d->names);
}

static int dp_shards_make(const plan_model *m, int count, int index, int64_t micro, dp_shards *d,
                          fg_status *st) {
  const run_feeds *f = &m->feeds;
  d->n = f->n;
  d->feeds = calloc((size_t)f->n + 1, sizeof *d->feeds);
  d->views = calloc((size_t)f->n + 1, sizeof *d->views);
  d->names = calloc((size_t)f->n + 1, sizeof *d->names);
  if (!d->feeds || !d->views || !d->names) return oom(st);
  for (int i = 0; i < f->n; i++) {
    const fg_tensor *t = f->feeds[i].tensor;
    d->feeds[i] = f->feeds[i];
    if (!plan_is_batch_input(m, i)) continue; /* fed whole to every rank */
    int64_t rows = fg_tensor_dim(t, 0), first = 0;
    int64_t mine = fg_shard_rows(rows, count, index, &first);
    if (rows < count) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--dist mpi with %d replicas: input '%s' has %lld rows, which leaves a "
                    "replica without rows; feed at least %d (--batch with --random-inputs)",
                    count, f->feeds[i].name, (long long)rows, count);
      return -1;
    }
    if (mine < micro) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "--micro-batches %" PRId64 " with %d replicas: replica %d's shard of '%s' "
                    "has %" PRId64 " of its %" PRId64
                    " rows, fewer than the micro-batches; feed more rows or use fewer "
                    "micro-batches",
                    micro, count, index, f->feeds[i].name, mine, rows);
      return -1;
    }
    int64_t vd[FG_MAX_RANK];
    for (int k = 0; k < fg_tensor_rank(t); k++)
      vd[k] = fg_tensor_dim(t, k);
    vd[0] = mine;
    size_t row = rows ? fg_tensor_num_bytes(t) / (size_t)rows : 0;
    d->views[i] =
        fg_tensor_wrap(fg_tensor_dtype(t), fg_tensor_rank(t), vd,
                       (char *)fg_tensor_data(t) + (size_t)first * row, (size_t)mine * row, st);
    if (!d->views[i]) return -1;
    d->feeds[i].tensor = d->views[i];
    d->names[d->n_split++] = f->feeds[i].name;
  }
  return 0;
}

/* --dist mpi on a model that names no rank: data parallelism, one replica
 * per process as `flowgraph train --dist mpi` runs it. */
static int profile_data_parallel(const plan_args *a, plan_model *m, fg_status *st) {
  int64_t opts[5] = {a->runs, a->warmup, a->run.batch, a->micro, a->in_flight};
  fg_comm *c = NULL;
  if (cli_dist_join("profile", a->run.model, opts, sizeof opts, profile_dist_timeout, &c, st) !=
      0) {
    if (c) fg_comm_free(c);
    return -1;
  }
  return profile_replicas(a, m, c, 0, st);
}

/* Replicas over the processes of `world` (freed here): with stages 0 each
 * process is a replica of a model that names no rank; with S stages (a
 * model split over S ranks) process w is stage w % S of replica w / S, as
 * `flowgraph train --dist mpi` runs it. Every replica feeds its shard of
 * the inputs whose first dimension is '?' to the model rewritten with
 * fg_data_parallel (bucketed all_reduce on the gradients; a model without
 * any runs as it is) and times its runs; replica 0 reports (with stages,
 * its processes together, as a split model's profile does), so its
 * all_reduce rows are the collectives as its processes waited for them.
 * Then rank 0 prints every process's average run time. */
static int profile_replicas(const plan_args *a, plan_model *m, fg_comm *world, int stages,
                            fg_status *st) {
  fg_comm *c = world, *group = NULL, *data = NULL;
  int w = fg_comm_rank(world), n = fg_comm_size(world);
  int replicas = stages ? n / stages : n, replica = stages ? w / stages : w;
  int rc = 0;
  /* stages > 0 here means K > 1 replicas (K = 1 is a split model's own
   * profile): group is then the replica's processes, else NULL. */
  if (stages) {
    group = fg_comm_mpi_split(world, replica, w % stages, st);
    data = group ? fg_comm_mpi_split(world, w % stages, replica, st) : NULL;
    rc = group && data ? 0 : -1;
  }
  dp_shards d = {0};
  fg_graph *dg = NULL;
  fg_session *s = NULL;
  if (rc == 0) rc = dp_shards_make(m, replicas, replica, a->micro, &d, st);
  if (rc == 0 && d.n_split == 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "--dist mpi: no fed input of %s has an unknown first dimension, so there is "
                  "no batch to split over the ranks",
                  a->run.model);
    rc = -1;
  }
  if (rc == 0) {
    /* A model without gradients has nothing to all-reduce: profiled as it
     * is, on shards. */
    fg_session_options so;
    plan_session_options(a, &so);
    fg_data_parallel_options o;
    cli_dist_dp_options(so.device, &o); /* as train --dist mpi rewrites it */
    fg_status *ignored = fg_status_new();
    dg = fg_data_parallel(m->graph, 1, d.names, d.n_split, &o, ignored);
    fg_status_free(ignored);
    double t0 = plan_now_ms();
    s = fg_session_new(dg ? dg : m->graph, &so, st);
    if (s) m->session_ms = plan_now_ms() - t0;
    /* The replica's own group carries a split model's transfers; its
     * stage's group the all_reduce (fg_session_set_data_comm). */
    rc = s && fg_session_set_comm(s, group ? group : world, st) == 0 ? 0 : -1;
    if (rc == 0 && data) rc = fg_session_set_data_comm(s, data, st);
  }
  /* Every rank learns whether all could start (a rank refused here must
   * not leave the others in the first run's exchanges). */
  uint64_t *all = calloc((size_t)fg_comm_size(c), sizeof *all);
  fg_status *gst = fg_status_new();
  int grc = all && gst ? fg_comm_all_gather_u64(c, rc != 0, all, gst) : -1;
  if (rc == 0 && grc != 0) {
    fg_status_set(st, gst ? fg_status_code(gst) : FG_RESOURCE_EXHAUSTED, "--dist mpi: %s",
                  gst ? fg_status_message(gst) : "out of memory");
    rc = -1;
  }
  for (int r = 0; rc == 0 && r < fg_comm_size(c); r++)
    if (all[r]) {
      fg_status_set(st, FG_ABORTED, "--dist mpi: rank %d could not start (its error says why)", r);
      rc = -1;
    }
  int started = grc == 0;
  double avg = 0;
  if (rc == 0) {
    plan_model dm = *m;
    if (dg) dm.graph = dg;
    dm.session = s;
    dm.feeds.feeds = d.feeds;
    rc = profile_runs(a, &dm, group, replica == 0, &avg, st);
  }
  /* Every rank's average, also after a failed run, so that no rank waits
   * for another in this last exchange (a failed run aborted the group:
   * then it ends at once). */
  uint64_t mine = rc == 0 ? (uint64_t)(avg * 1e6) : UINT64_MAX;
  if (started) grc = fg_comm_all_gather_u64(c, mine, all, gst);
  if (rc == 0 && started && grc == 0 && fg_comm_rank(c) == 0) {
    if (stages)
      printf("\n%d replicas of the %d-rank model (fg_data_parallel, %s); run avg per process "
             "(rank = replica x %d + stage):",
             replicas, stages, dg ? "all_reduce on the gradients" : "no gradients to reduce",
             stages);
    else
      printf("\ndata parallelism over %d ranks (fg_data_parallel, %s); run avg per rank:", n,
             dg ? "all_reduce on the gradients" : "no gradients to reduce");
    for (int r = 0; r < fg_comm_size(c); r++)
      if (all[r] == UINT64_MAX)
        printf("%s rank %d failed", r ? "," : "", r);
      else
        printf("%s rank %d %.3f ms", r ? "," : "", r, (double)all[r] / 1e6);
    printf("\n");
    /* Where the all_reduce time above went: one shared segment, or MPI
     * messages (fg_comm_stats, flowgraph/comm.h). */
    if (dg) cli_print_reduce_path("", data ? data : world);
  }
  free(all);
  fg_status_free(gst);
  if (rc != 0) fg_comm_abort(c, fg_status_message(st));
  if (rc != 0 && data) fg_comm_abort(data, fg_status_message(st));
  fg_session_free(s);
  fg_graph_free(dg);
  dp_shards_free(&d);
  /* The groups split from the world first. */
  if (data) fg_comm_free(data);
  if (group) fg_comm_free(group);
  fg_comm_free(c);
  if (rc == 0) fg_mpi_shutdown(0);
  return rc;
}

/* The runs and the report; with a communicator (--dist mpi) every rank
 * runs and rank 0 alone writes and prints, for all ranks. */
static int profile_runs(const plan_args *a, plan_model *m, fg_comm *c, int report, double *avg_ms,
                        fg_status *st) {
  int root = report && (!c || fg_comm_rank(c) == 0);
  profile_data p;
  memset(&p, 0, sizeof p);
  int rc = -1, svg_written = 0, trace_written = 0;
  trace_writer *tw = NULL;
  fg_plan_info *infos[FG_MAX_CPU_DEVICES] = {0};
  int n_ranks = 0;
  prof_runs *all = c ? calloc((size_t)fg_comm_size(c), sizeof *all) : NULL;
  if (c && !all) {
    oom(st);
    return -1;
  }
  p.n_graph_nodes = fg_graph_num_nodes(m->graph);
  p.slot = malloc(((size_t)p.n_graph_nodes * 3 + 1) * sizeof *p.slot);
  p.run_ms = calloc((size_t)a->runs, sizeof *p.run_ms);
  if (!p.slot || !p.run_ms) {
    oom(st);
    goto done;
  }
  for (int i = 0; i < p.n_graph_nodes * 3; i++)
    p.slot[i] = -1;
  p.session_ms = m->session_ms;
  if (root && a->trace && !(tw = trace_open(a->trace, a->run.model, st))) goto done;
  if (tw && c && trace_use_ranks(tw, fg_session_partition(m->session), st) != 0) goto done;
  if (tw && !c) trace_use_devices(tw, fg_session_partition(m->session));
  if (run_all(a, m, &p, tw, c ? &all[0] : NULL, st) != 0) goto done;
  if (avg_ms) {
    *avg_ms = 0;
    for (int64_t j = 0; j < a->runs; j++)
      *avg_ms += p.run_ms[j] / (double)a->runs;
  }
  if (c && merge_ranks(c, m, all, &p, tw, st) != 0) goto done;
  if (!root) {
    rc = 0;
    goto done;
  }
  if (tw) {
    /* Before the plans below: the trace names tracks after the session's
     * partition, which attaching other communicators rebuilds. */
    int r = trace_finish(tw, st);
    tw = NULL;
    if (r != 0) goto done;
    trace_written = 1;
  }
  n_ranks = c ? fg_partition_num_ranks(fg_session_partition(m->session)) : 0;
  if (a->memory_svg || fg_partition_num_devices(fg_session_partition(m->session)) > 1) {
    /* After the runs: the plan is cached, so this only reads it. Across
     * processes rank 0 makes each rank's plan as that rank did (which
     * leaves the session without its communicator: the runs are over). */
    if (n_ranks > 0) {
      if (plan_rank_infos(a->run.model, m, n_ranks, infos, st) != 0) goto done;
    } else if (!(infos[0] = fg_session_plan_info(m->session, m->feeds.feeds, m->feeds.n,
                                                 (const char *const *)m->fetch, m->n_fetch,
                                                 m->targets, m->n_targets, st))) {
      goto done;
    }
  }
  if (a->memory_svg) {
    if (svg_write_memory_plan(a->memory_svg, (const fg_plan_info *const *)infos,
                              n_ranks > 0 ? n_ranks : 1, fg_session_partition(m->session),
                              a->run.model, st) != 0)
      goto done;
    svg_written = 1;
  }
  if (write_report(a, m, &p, (const fg_plan_info *const *)infos, n_ranks, st) != 0) goto done;
  if (a->trace && a->format == PROF_FORMAT_TEXT) printf("wrote %s\n", a->trace);
  if (a->memory_svg && a->format == PROF_FORMAT_TEXT) printf("wrote %s\n", a->memory_svg);
  rc = 0;
done:
  /* An output renamed into place before a later step failed: a failed
   * command leaves no output file (a device written in place stays). */
  if (rc != 0 && svg_written) out_remove(a->memory_svg);
  if (rc != 0 && trace_written) out_remove(a->trace);
  trace_abort(tw);
  for (int r = 0; r < FG_MAX_CPU_DEVICES; r++)
    fg_plan_info_free(infos[r]);
  for (int r = 0; all && r < fg_comm_size(c); r++)
    prof_runs_free(&all[r]);
  free(all);
  for (int i = 0; i < p.n_nodes; i++)
    free(p.nodes[i].inputs);
  free(p.nodes);
  free(p.clock_off);
  free(p.clock_rtt);
  free(p.slot);
  free(p.run_ms);
  return rc;
}

static int profile_main(int argc, char **argv) {
  char **rest = malloc(((size_t)argc + 1) * sizeof *rest);
  if (!rest) return cli_fail(FG_RESOURCE_EXHAUSTED, "out of memory");
  int n = 0;
  for (int i = 0; i < argc; i++) {
    int rc = CLI_OK;
    if (i > 0 && cli_dist_opt(&cli_profile_command, argc, argv, &i, &profile_dist_mpi,
                              &profile_dist_timeout, &rc)) {
      if (rc != CLI_OK) {
        free(rest);
        return rc;
      }
      continue;
    }
    if (i > 0 && strcmp(argv[i], "--device") == 0) {
      if (i + 1 >= argc || !argv[i + 1][0]) {
        free(rest);
        return cli_usage(&cli_profile_command, "--device needs a device name (cpu:0 or cuda:N)");
      }
      if (profile_device) {
        free(rest);
        return cli_usage(&cli_profile_command, "--device given twice");
      }
      profile_device = argv[++i];
      continue;
    }
    rest[n++] = argv[i];
  }
  rest[n] = NULL;
  if (!profile_dist_mpi && profile_dist_timeout) {
    free(rest);
    return cli_usage(&cli_profile_command, "--dist-timeout needs --dist mpi");
  }
  int rc = plan_command_main(&cli_profile_command, 1, n, rest, profile_body);
  free(rest);
  return rc;
}

const cli_command cli_profile_command = {
    "profile", "Time a model's nodes over repeated runs.",
    "flowgraph profile MODEL.fgb [-i NAME=FILE.npy ...] [--random-inputs] [--batch N] "
    "[--seed N] [--runs N] [--warmup N] [--threads N] [--fetch NAME ...] [--target NAME ...] "
    "[--train] [--format text|csv|json] "
    "[--trace OUT.json] [--memory-svg OUT.svg] [--check-numerics] [--max-memory BYTES] "
    "[--passes LIST|--no-passes] "
    "[--device NAME] [--dist mpi [--dist-timeout SECONDS]] [--micro-batches M [--in-flight K|all]]",
    "options:\n"
    "  -i, --input NAME=FILE.npy   feed placeholder NAME from a .npy file\n"
    "  --random-inputs             feed every needed placeholder not given by -i with\n"
    "                              seeded random data (as in 'flowgraph run')\n"
    "  --batch N                   size of the placeholders' unknown dimensions ('?')\n"
    "                              for random inputs (1..1000000, default 1); a model\n"
    "                              without any refuses it\n"
    "  --seed N                    random seed (default 0)\n"
    "  --runs N                    measured runs (default 10)\n"
    "  --warmup N                  runs before measuring (default 1)\n"
    "  --threads N                 worker threads (default: the session's, 0 = cores)\n"
    "  --fetch NAME                fetch NAME (\"node\" or \"node:index\")\n"
    "  --target NAME               also run node NAME for its effect\n"
    "  --train                     profile the model's training step (its metadata\n"
    "                              'train_target', which fg_minimize writes), besides\n"
    "                              any --fetch; a model without one is refused\n"
    "  --format text|csv|json      the report's form (default text). csv: the Run\n"
    "                              order table (one row per node, a header row), one\n"
    "                              blank line, then metric,value,unit rows (latency,\n"
    "                              throughput, memory); json: one object with both,\n"
    "                              the summary by op and every run's time (run_us).\n"
    "                              Unknown figures are empty fields / null\n"
    "  --trace OUT.json            write a Chrome trace (open in Perfetto or\n"
    "                              chrome://tracing): one event per node per measured\n"
    "                              run (category op) with thread, op, output shape,\n"
    "                              dtype and bytes, and one 'run N' event per run\n"
    "                              (category run) enclosing them; runs one after\n"
    "                              another\n"
    "  --memory-svg OUT.svg        draw the memory plan (see 'flowgraph plan')\n"
    "  --check-numerics            after every node, fail on the first NaN or Inf,\n"
    "                              naming the node, its op and the count\n"
    "  --max-memory BYTES          refuse a plan needing more bytes (arena plus\n"
    "                              fetched outputs; suffix K, M or G; default: the\n"
    "                              machine's memory)\n"
    "  --passes LIST               the graph optimization passes to run, comma-separated,\n"
    "                              in that order (default: all of those listed below)\n"
    "                              (the same bits as without them)\n"
    "  --no-passes                 run no optimization pass (FG_PASSES=off does so for\n"
    "                              every command)\n"
    "  --device NAME               profile on NAME: cpu:0 (default) or cuda:N; GPU\n"
    "                              nodes are timed with CUDA events, one trace track\n"
    "                              per CUDA stream\n"
    "  --dist mpi                  a model whose nodes name MPI ranks (devices\n"
    "                              rank:R/cpu:N): start it with mpirun -np R; every\n"
    "                              rank times its own steps, rank 0 measures each\n"
    "                              rank's clock against its own (printed with its\n"
    "                              error bound), prints them all (a run's time is\n"
    "                              from the first rank's start to the last rank's\n"
    "                              end; threads and arena are summed over the ranks)\n"
    "                              and writes the trace, one process per rank, every\n"
    "                              rank's runs where they happened on rank 0's clock.\n"
    "                              With -np K*R (or a model that names no rank, R =\n"
    "                              1) it profiles K replicas as 'train --dist mpi'\n"
    "                              runs them: each feeds its shard of the inputs\n"
    "                              whose first dimension is '?' to the model\n"
    "                              rewritten with fg_data_parallel (all_reduce on\n"
    "                              the gradients); replica 0 reports as above, then\n"
    "                              rank 0 prints every process's average run time\n"
    "  --dist-timeout SECONDS      a peer silent this long fails the run with\n"
    "                              DEADLINE_EXCEEDED (default 60)\n"
    "  --micro-batches M           profile the training step as 'train\n"
    "                              --micro-batches M' runs it (1..1024): every fed\n"
    "                              input whose first dimension is '?' is cut into M\n"
    "                              micro-batches (fg_micro_batch), so a model split\n"
    "                              over devices or ranks shows its pipeline; each\n"
    "                              input (each replica's shard) needs M rows\n"
    "  --in-flight K|all           with --micro-batches: at most K micro-batches\n"
    "                              in flight on a device (1..1024; default 2 per\n"
    "                              stage; the number of stages: least memory that\n"
    "                              keeps the pipeline full), or all (no bound)\n\n"
    "Fetches and targets: a model with marked outputs is profiled as 'flowgraph\n"
    "run' runs it, fetching them (its inference); --train adds its training step.\n"
    "A model without outputs defaults as in 'flowgraph plan' (a training model runs\n"
    "its training step, so its variables change from run to run, as in training).\n"
    "The report's second line says what was profiled: inference, training step, or\n"
    "fetches and targets.\n\n"
    "Tables, like TFLite's benchmark_model: 'Run order' (each node in plan order:\n"
    "avg µs per run, % of the node time, calls (times it ran over the measured\n"
    "runs), flops per call (the op table's count at the run's shapes, as 'inspect'\n"
    "prints: 2*M*N*K for a matmul), GFLOP/s (flops x calls / time), bytes read\n"
    "(its inputs, control inputs left out) and written (its outputs), GB/s\n"
    "((read + written) x calls / time), arena B (output bytes placed in the\n"
    "arena: none for a fetched output, a variable, or an output written in place\n"
    "over an input), output dtype and shape, and '<-' the inputs' dtypes and\n"
    "shapes; with several devices also the device, and a node's sends and\n"
    "receives are rows of their own, op send or recv), 'Top by time' (the 10 slowest nodes with "
    "cdf % and GFLOP/s),\n"
    "'Summary by op type' (node count, avg µs, %, cdf %, mem KB: the bytes the\n"
    "op's nodes output, in KiB, flops per run and GFLOP/s); '-' where a figure\n"
    "is unknown.\n"
    "Then, in ms: init (session creation + building the first plan), the first run\n"
    "(plan excluded), the warmup average, and min/avg/max/std over the measured\n"
    "runs. 'Latency over runs' gives min, p50, p90, p99, max, mean and std in µs:\n"
    "percentiles by the nearest-rank method (the p-th is the measured time at\n"
    "rank ceil(p/100 x runs) in ascending order, so p99 of fewer than 100 runs is\n"
    "the maximum), std the population standard deviation. 'Throughput and memory':\n"
    "runs/s (runs over their summed wall time), samples/s (runs/s x the rows a\n"
    "run feeds, the first dimension of the first fed input whose placeholder's is\n"
    "'?'; '-' when none) and the process's peak resident memory (VmHWM).\n"
    "Node times are measured by the executor around each kernel; with several\n"
    "threads they overlap, so their sum can exceed the run time.\n"
    "Output files are written to temporary names and renamed, so a failure leaves\n"
    "none.\n",
    profile_main};
