/* Sessions: argument checks, feed/fetch resolution, variable storage, the
 * plan cache and graph-change detection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "executor/dist/exec.h"
#include "dist/comm/shm_arena.h"
#include "executor/cuda_backend.h"
#include "executor/passes/passes.h"
#include "executor/plan.h"
#include "executor/session_internal.h"
#include "executor/var_init.h"
#include "flowgraph/io.h"
#include "graph/fused_program.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"
#include "kernels/share.h"

#define FG_MAX_THREADS 1024

void fg_session_options_init(fg_session_options *opts) {
  if (opts) memset(opts, 0, sizeof *opts);
}

static fg_tensor *var_lookup(void *ctx, int node) {
  fg_session *s = ctx;
  return node < s->n_vars_cap ? s->vars[node] : NULL;
}

/* 1 when the request needs some but not all of a multi-tensor update's
 * member updates (on the source graph, where each is its own node), 0
 * when none or all, -1 when out of memory. */
static int needs_part_of_a_group(const fg_session *s, const fg_plan_request *req) {
  const int *of = s->opt->multi_of, n = s->g->n_nodes;
  if (!of) return 0;
  char *needed = calloc((size_t)n + 1, 1);
  /* Per group (by its first member's id): members needed, and not. */
  int *in = calloc((size_t)n + 1, sizeof *in), *out = calloc((size_t)n + 1, sizeof *out), rc = -1;
  if (needed && in && out && fg_plan_mark_needed(s->g, req, needed) == 0) {
    for (int id = 0; id < n; id++)
      if (of[id] >= 0) (needed[id] ? in : out)[of[id]]++;
    rc = 0;
    for (int id = 0; id < n && !rc; id++)
      rc = in[id] > 0 && out[id] > 0;
  }
  free(needed);
  free(in);
  free(out);
  return rc;
}

const fg_graph *fg_session_plan_graph(const fg_session *s, const fg_plan_request *req) {
  if (!s->opt) return s->g;
  for (int i = 0; i < req->n_fetches; i++)
    if (req->fetches[i].index >= s->opt->g.nodes[req->fetches[i].node].n_outputs) return s->g;
  const int part = needs_part_of_a_group(s, req);
  return part < 0 ? NULL : part ? s->g : &s->opt->g;
}

const char *fg_session_op_label(const fg_graph *g, int id) {
  const fg_node *n = &g->nodes[id];
  if (n->op != FG_OP_FUSED_ELEMENTWISE) return fg_op_table[n->op].name;
  const fg_attr *a = fg_attrs_find(&n->attrs, "program");
  return fg_fused_label(a && a->type == FG_ATTR_STRING ? a->s : NULL, n->n_inputs);
}

/* The passes a session runs: its list, or the default pipeline; with
 * check_numerics the default without fuse, so that the node named for a
 * NaN or an infinity is the node that made it, not a fused node holding it. */
static const char *pass_list(const fg_session *s, char *buf, size_t size) {
  if (s->passes || !s->opts.check_numerics) return s->passes;
  buf[0] = '\0';
  for (int i = 0; i < fg_pass_count(); i++)
    if (fg_pass_default_on(i) && strcmp(fg_pass_name(i), "fuse") != 0)
      snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", buf[0] ? "," : "", fg_pass_name(i));
  return buf;
}

/* The optimized copy for the graph's current version and placement. */
static int run_passes(fg_session *s, fg_status *st) {
  fg_pass_graph_free(s->opt);
  const fg_dist_exec *dx = fg_dist_session_exec(s->dist);
  char list[256];
  fg_pass_options po = {s->opts.no_passes, pass_list(s, list, sizeof list)};
  s->opt = fg_passes_for_session(s->g, &po, dx ? dx->node_dev : NULL,
                                 fg_dist_session_host_nodes(s->dist), s->cuda != NULL, st);
  return s->opt || fg_status_code(st) == FG_OK ? 0 : -1;
}

static void drop_plans(fg_session *s) {
  while (s->plans) {
    fg_plan *next = s->plans->next;
    fg_plan_free(s->plans);
    s->plans = next;
  }
}

/* The max_nodes limit, at creation and whenever the graph changed, before
 * anything is sized by the node count. */
static int check_max_nodes(const fg_graph *g, int64_t max_nodes, fg_status *st) {
  if (max_nodes <= 0 || g->n_nodes <= max_nodes) return 0;
  fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                "session: the graph has %d nodes, over the limit of %lld (max_nodes)", g->n_nodes,
                (long long)max_nodes);
  return -1;
}

/* CUDA hooks (executor/cuda_backend.h; stubs without CUDA). cuda_open
 * checks the device options and, for "cuda:N", creates the GPU state;
 * cuda_graph_changed re-checks placements and forgets device copies of
 * constants after a graph edit. */
static int cuda_open(fg_session *s, fg_status *st) {
  int index = -1;
  if (fg_session_cuda_check(s->g, &s->opts, &index, st) != 0) return -1;
  if (index >= 0 && !(s->cuda = fg_cuda_ctx_new(index, &s->opts, st))) return -1;
  return 0;
}

static int cuda_graph_changed(fg_session *s, fg_status *st) {
  int index = -1;
  if (fg_session_cuda_check(s->g, &s->opts, &index, st) != 0) return -1;
  fg_cuda_graph_changed(s->cuda);
  return 0;
}

/* Brings the session up to date with its graph: validates it and creates
 * storage for variables added since; existing variables keep their values. */
int fg_session_sync(fg_session *s, fg_status *st) {
  if (fg_graph_status(s->g, st) != FG_OK) return -1;
  if (s->vars && s->version == fg_graph_version(s->g)) return 0;
  if (check_max_nodes(s->g, s->opts.max_nodes, st) != 0) return -1;
  drop_plans(s);
  if (cuda_graph_changed(s, st) != 0) return -1;
  /* Placement and device checks (a device that does not exist is refused
   * at placement) for every graph version. */
  if (fg_dist_session_sync(s->g, &s->dist, &s->opts, st) != 0) return -1;
  int n = s->g->n_nodes;
  if (n > s->n_vars_cap || !s->vars) {
    fg_tensor **vars = realloc(s->vars, ((size_t)n + 1) * sizeof *vars);
    if (!vars) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory");
      return -1;
    }
    for (int i = s->n_vars_cap; i <= n; i++)
      vars[i] = NULL;
    s->vars = vars;
    s->n_vars_cap = n;
  }
  for (int id = 0; id < n; id++) {
    const fg_node *node = &s->g->nodes[id];
    if (node->op != FG_OP_VARIABLE || s->vars[id]) continue;
    const fg_attr *v = fg_attrs_find(&node->attrs, "value");
    /* No value: the initialiser's draw (fg_variable_init), made once. */
    s->vars[id] = v && v->t                                   ? fg_tensor_clone(v->t, st)
                  : fg_attrs_find(&node->attrs, "init") && !v ? fg_var_init_tensor(node, st)
                                                              : NULL;
    s->vars_homed = 0;
    if (!s->vars[id]) {
      if (fg_status_code(st) == FG_OK)
        fg_status_set(st, FG_INVALID_GRAPH, "node '%s' (variable): no initial value", node->name);
      return -1;
    }
  }
  if (run_passes(s, st) != 0) return -1;
  s->version = fg_graph_version(s->g);
  return 0;
}

fg_session *fg_session_new(fg_graph *g, const fg_session_options *opts, fg_status *st) {
  if (!g) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_new: graph is NULL");
    return NULL;
  }
  fg_session_options o;
  fg_session_options_init(&o);
  if (opts) o = *opts;
  if (o.num_threads < 0 || o.num_threads > FG_MAX_THREADS) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_new: num_threads = %d; must be 0 (all cores) to %d", o.num_threads,
                  FG_MAX_THREADS);
    return NULL;
  }
  if (o.max_memory_bytes < 0 || o.max_nodes < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_new: %s = %lld; must be 0 (no limit) or positive",
                  o.max_memory_bytes < 0 ? "max_memory_bytes" : "max_nodes",
                  (long long)(o.max_memory_bytes < 0 ? o.max_memory_bytes : o.max_nodes));
    return NULL;
  }
  if (o.collective_lanes < -1 || o.collective_lanes > 1) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_new: collective_lanes = %d; must be 0 (own lanes where a core is "
                  "free for them), 1 (own lanes) or -1 (in line)",
                  o.collective_lanes);
    return NULL;
  }
  if (!(o.dist_timeout_s >= 0 && o.dist_timeout_s <= 86400)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_new: dist_timeout_s = %g; must be 0 (the default, 60 s) to 86400",
                  o.dist_timeout_s);
    return NULL;
  }
  if (check_max_nodes(g, o.max_nodes, st) != 0) return NULL;
  if (o.passes && fg_pass_list_check(o.passes, st) != 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_new: passes: %s", msg);
    return NULL;
  }
  if (o.num_threads == 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o.num_threads = cores > 0 && cores <= FG_MAX_THREADS ? (int)cores : 1;
  }
  fg_session *s = calloc(1, sizeof *s);
  if (!s) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_new: out of memory");
    return NULL;
  }
  s->g = g;
  s->opts = o;
  s->passes = o.passes ? fg_strdup(o.passes) : NULL;
  fg_cpu_kernels_start();
  s->pool = fg_pool_new(o.num_threads);
  if (!s->pool || (o.passes && !s->passes)) {
    fg_pool_free(s->pool);
    free(s->passes);
    free(s);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_new: cannot start %d threads",
                  o.num_threads);
    return NULL;
  }
  s->host_par = (fg_kparallel){s->pool, fg_pool_parallel_for_fn};
  atomic_flag_clear(&s->busy);
  /* Without it each plan keeps its own converted weights. */
  s->share = fgk_share_new();
  if (cuda_open(s, st) != 0 || fg_session_sync(s, st) != 0) {
    fg_session_free(s);
    return NULL;
  }
  /* A saved session's training steps: masks continue where it stopped. */
  const char *steps = fg_graph_metadata(g, TRAIN_STEPS_KEY);
  if (steps) s->train_steps = strtoull(steps, NULL, 10);
  fg_status_clear(st);
  return s;
}

void fg_session_free(fg_session *s) {
  if (!s) return;
  drop_plans(s);
  fgk_share_free(s->share); /* after the plans, whose kernels hold its entries */
  fg_cuda_ctx_free(s->cuda);
  fg_dist_session_free(s->dist);
  fg_pool_free(s->pool);
  for (int i = 0; i < s->n_vars_cap; i++)
    fg_tensor_free(s->vars[i]);
  free(s->vars);
  fg_shm_arena_free(s->var_arena);
  fg_pass_graph_free(s->opt);
  free(s->passes);
  free(s);
}

static const char *dims_str(const fg_tensor *t, char *buf, size_t n) {
  return fg_shape_str(t->rank, t->dims, buf, n);
}

/* A feed's dtype, rank and every known dimension must match the placeholder. */
static int check_feed(const fg_node *ph, const fg_tensor *t, fg_status *st) {
  const fg_tinfo *want = &ph->outputs[0];
  char a[FG_SHAPE_STR_MAX], b[FG_SHAPE_STR_MAX];
  int ok = t->dtype == want->dtype && t->rank == want->rank;
  for (int d = 0; ok && d < t->rank; d++)
    ok = want->dims[d] == FG_DIM_UNKNOWN || want->dims[d] == t->dims[d];
  if (ok) return 0;
  fg_status_set(st, FG_INVALID_ARGUMENT, "feed '%s': expected %s %s, given %s %s", ph->name,
                fg_dtype_name(want->dtype), fg_shape_str(want->rank, want->dims, a, sizeof a),
                fg_dtype_name(t->dtype), dims_str(t, b, sizeof b));
  return -1;
}

/* Resolves names and checks arguments into a plan request. */
/* A feed of the training flag (fg_training) is no placeholder feed: it
 * sets the run's mode (*training), a bool scalar. */
int fg_session_resolve(fg_session *s, const fg_feed *feeds, int n_feeds, const char *const *fetches,
                       int n_fetches, const char *const *targets, int n_targets,
                       fg_plan_request *req, int *feed_nodes, fg_output *fetch_outs,
                       int *target_nodes, const fg_tensor **feed_tensors,
                       const fg_tensor **training, fg_status *st) {
  const fg_graph *g = s->g;
  int nf = 0; /* placeholder feeds */
  *training = NULL;
  for (int i = 0; i < n_feeds; i++) {
    if (!feeds[i].name) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "feed %d: name is NULL", i);
      return -1;
    }
    int id = fg_graph_find(g, feeds[i].name);
    if (id < 0) {
      char hint[600];
      fg_graph_output_hint(g, feeds[i].name, hint, sizeof hint);
      fg_status_set(st, FG_NOT_FOUND, "feed '%s': no node of that name%s%s", feeds[i].name,
                    hint[0] ? "; " : "", hint);
      return -1;
    }
    if (g->nodes[id].op == FG_OP_TRAINING_FLAG) {
      const fg_tensor *t = feeds[i].tensor;
      if (*training) {
        fg_status_set(st, FG_INVALID_ARGUMENT, "feed '%s' is given twice", feeds[i].name);
        return -1;
      }
      if (!t || t->dtype != FG_BOOL || t->rank != 0) {
        char b[FG_SHAPE_STR_MAX];
        fg_status_set(st, FG_INVALID_ARGUMENT,
                      "feed '%s' (training_flag): expected bool [], given %s %s", feeds[i].name,
                      t ? fg_dtype_name(t->dtype) : "NULL",
                      t ? dims_str(t, b, sizeof b) : "tensor");
        return -1;
      }
      *training = t;
      continue;
    }
    if (g->nodes[id].op != FG_OP_PLACEHOLDER) {
      fg_status_set(st, FG_NOT_FOUND, "feed '%s': node '%s' is a %s, not a placeholder",
                    feeds[i].name, feeds[i].name, fg_op_table[g->nodes[id].op].name);
      return -1;
    }
    for (int j = 0; j < nf; j++)
      if (feed_nodes[j] == id) {
        fg_status_set(st, FG_INVALID_ARGUMENT, "feed '%s' is given twice", feeds[i].name);
        return -1;
      }
    feed_nodes[nf] = id;
    feed_tensors[nf++] = feeds[i].tensor;
  }
  n_feeds = nf;
  for (int i = 0; i < n_fetches; i++) {
    if (!fetches[i]) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "fetch %d: name is NULL", i);
      return -1;
    }
    fetch_outs[i] = fg_graph_find_output(g, fetches[i]);
    if (fetch_outs[i].node < 0) {
      char hint[600];
      fg_graph_output_hint(g, fetches[i], hint, sizeof hint);
      fg_status_set(st, FG_NOT_FOUND, "fetch '%s': no such node or output%s%s", fetches[i],
                    hint[0] ? "; " : "", hint);
      return -1;
    }
  }
  for (int i = 0; i < n_targets; i++) {
    target_nodes[i] = targets[i] ? fg_graph_find(g, targets[i]) : -1;
    if (target_nodes[i] < 0) {
      fg_status_set(st, targets[i] ? FG_NOT_FOUND : FG_INVALID_ARGUMENT,
                    "target '%s': no node of that name", targets[i] ? targets[i] : "(null)");
      return -1;
    }
  }
  *req = (fg_plan_request){feed_nodes,
                           feed_tensors,
                           n_feeds,
                           fetch_outs,
                           fetches,
                           n_fetches,
                           target_nodes,
                           n_targets,
                           fg_pool_threads(s->pool),
                           s->opts.check_numerics != 0,
                           s->opts.max_memory_bytes,
                           s->cuda != NULL,
                           fg_dist_session_exec(s->dist),
                           fg_dist_session_host_nodes(s->dist),
                           &s->host_par,
                           s->cuda ? NULL : s->share};
  return 0;
}

static int64_t clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* With a communicator whose collectives read other processes' arenas
 * (dist/comm/shm_arena.h), the variables move into one arena of their own, so
 * a fused update (all_reduce_apply_sgd) writes every rank's copy
 * where it lies (dist/comm/shm_reduce.h), instead of all-reducing the gradient
 * into every rank's buffer and updating each copy from it, which moves
 * about twice the bytes. Values are
 * kept; plans, which hold the old addresses, are dropped first. Where no
 * arena can be had the variables stay, and fused updates take the
 * slower way. One arena for all: a process keeps at most 64. */
static void home_vars(fg_session *s) {
  const fg_dist_exec *dx = s->dist ? fg_dist_session_exec(s->dist) : NULL;
  if (s->vars_homed || s->cuda || !dx || !dx->shared_arenas) return;
  s->vars_homed = 1;
  size_t total = 0;
  for (int id = 0; id < s->n_vars_cap; id++)
    if (s->vars[id]) total += (fg_tensor_num_bytes(s->vars[id]) + 63) & ~(size_t)63;
  unsigned char *arena = total ? fg_shm_arena_alloc(total) : NULL;
  if (!arena) return;
  fg_tensor **moved = calloc((size_t)s->n_vars_cap + 1, sizeof *moved);
  size_t off = 0;
  int ok = moved != NULL;
  for (int id = 0; ok && id < s->n_vars_cap; id++) {
    const fg_tensor *v = s->vars[id];
    if (!v) continue;
    size_t bytes = fg_tensor_num_bytes(v);
    moved[id] = fg_tensor_wrap(v->dtype, v->rank, v->dims, arena + off, bytes, NULL);
    if (!(ok = moved[id] != NULL)) break;
    if (bytes) memcpy(arena + off, v->data, bytes);
    off += (bytes + 63) & ~(size_t)63;
  }
  if (!ok) {
    for (int id = 0; moved && id < s->n_vars_cap; id++)
      fg_tensor_free(moved[id]);
    free(moved);
    fg_shm_arena_free(arena);
    return;
  }
  drop_plans(s);
  for (int id = 0; id < s->n_vars_cap; id++)
    if (moved[id]) {
      fg_tensor_free(s->vars[id]);
      s->vars[id] = moved[id];
    }
  free(moved);
  fg_shm_arena_free(s->var_arena);
  s->var_arena = arena;
}

/* Finds or builds the plan for a resolved request. */
fg_plan *fg_session_plan_for(fg_session *s, const fg_plan_request *req, int64_t *plan_ns,
                             fg_status *st) {
  fg_plan *plan = s->plans;
  while (plan && !fg_plan_matches(plan, plan->built_on, req))
    plan = plan->next;
  if (plan) return plan;
  const fg_graph *g = fg_session_plan_graph(s, req);
  if (!g) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory (plan graph)");
    return NULL;
  }
  int64_t t0 = clock_ns();
  home_vars(s);
  /* The optimized copy's appended constants (folded weights) on the
   * devices of the nodes they serve. */
  int failed = 0;
  int *nd = req->dist && s->opt && g == &s->opt->g
                ? fg_passes_node_devices(s->opt, req->dist->node_dev, &failed)
                : NULL;
  fg_dist_exec ex;
  fg_plan_request with_nd;
  if (nd) {
    ex = *req->dist, ex.node_dev = nd;
    with_nd = *req, with_nd.dist = &ex;
  }
  /* The kernels' prepare hooks run on the session's device (the fused
   * kernels compile for its architecture), not the thread's current one. */
  int prev = -1;
  if (!failed && s->cuda && fg_cuda_ctx_enter(s->cuda, &prev, st) != 0) {
    free(nd);
    return NULL;
  }
  plan = failed ? NULL : fg_plan_build(g, nd ? &with_nd : req, var_lookup, s, st);
  if (s->cuda) fg_cuda_ctx_leave(prev);
  free(nd);
  if (failed) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory (plan placement)");
  if (!plan) return NULL;
  plan->built_on = g;
  plan->run_rounds = fg_dist_run_key(s->dist, g, req, plan->run_key, st);
  if (plan->run_rounds < 0) {
    fg_plan_free(plan);
    return NULL;
  }
  if (s->cuda && fg_cuda_plan_prepare(s->cuda, g, plan, s->vars, s->n_vars_cap, st) != 0) {
    fg_plan_free(plan);
    return NULL;
  }
  fg_plan_mark_run_modes(plan, g);
  if (plan_ns) *plan_ns = clock_ns() - t0;
  plan->next = s->plans;
  s->plans = plan;
  return plan;
}

/* Step si's device as the partition numbers them: a multi-device plan's
 * own, a GPU session's host step's cpu:N (the rest its cuda:N), else 0. */
int fg_session_step_device(const fg_session *s, const fg_plan *plan, int si) {
  return plan->step_dev ? plan->step_dev[si]
                        : fg_dist_session_step_device(s->dist, plan->steps[si].node);
}

static size_t kbuf_bytes(const fg_kbuf *b) {
  size_t bytes = fg_dtype_size(b->dtype);
  for (int d = 0; d < b->rank; d++)
    bytes *= (size_t)b->dims[d];
  return bytes;
}

/* Inputs a node reads: all but its control inputs, which only order it.
 * The op table names them last ("x, ctrl..."); where optional or counted
 * inputs come before them ("[rows, sums,]", "var[n]") they are all
 * counted. */
static int data_inputs(const fg_graph *g, const fg_step *step) {
  const char *names = fg_op_table[g->nodes[step->node].op].inputs;
  const char *ctrl = names ? strstr(names, "ctrl") : NULL;
  if (step->xfer || !ctrl || strchr(names, '[')) return step->n_in;
  int n = 0;
  for (const char *p = names; p < ctrl; p++)
    n += *p == ',';
  return n < step->n_in ? n : step->n_in;
}

/* Step si's inputs (their shapes into `shapes`, the bytes of those it
 * reads) and the bytes its outputs add to the arena, for the profile. */
static void step_traffic(const fg_graph *g, const fg_plan *plan, int si, fg_node_timing *t,
                         fg_tensor_shape *shapes) {
  const fg_step *step = &plan->steps[si];
  int reads = data_inputs(g, step);
  t->flops = step->xfer ? 0 : step->flops;
  t->input_bytes = 0;
  t->arena_bytes = 0;
  t->n_inputs = step->n_in;
  t->inputs = step->n_in > 0 ? shapes : NULL;
  for (int i = 0; i < step->n_in; i++) {
    const fg_kbuf *b = &plan->slots[step->in_slots[i]];
    shapes[i].dtype = b->dtype;
    shapes[i].rank = b->rank;
    for (int d = 0; d < FG_MAX_RANK; d++)
      shapes[i].dims[d] = d < b->rank ? b->dims[d] : 0;
    if (i < reads) t->input_bytes += kbuf_bytes(b);
  }
  for (int o = 0; o < step->n_out; o++) {
    int slot = step->out_slots[o];
    if (plan->slot_kind[slot] == FG_SLOT_ARENA && plan->slot_shared[slot] < 0)
      t->arena_bytes += kbuf_bytes(&plan->slots[slot]);
  }
}

static fg_run_metadata *make_metadata(const fg_session *s, const fg_graph *g, const fg_plan *plan,
                                      int64_t run_ns, int64_t plan_ns) {
  fg_run_metadata *md = calloc(1, sizeof *md);
  if (!md) return NULL;
  size_t n_in = 0;
  for (int si = 0; si < plan->n_steps; si++)
    n_in += (size_t)plan->steps[si].n_in;
  md->nodes = calloc((size_t)plan->n_steps + 1, sizeof *md->nodes);
  md->input_shapes = calloc(n_in + 1, sizeof *md->input_shapes);
  if (!md->nodes || !md->input_shapes) {
    free(md->nodes);
    free(md->input_shapes);
    free(md);
    return NULL;
  }
  size_t used = 0;
  md->run_ns = run_ns;
  md->plan_ns = plan_ns;
  md->threads = fg_pool_threads(s->pool);
  md->arena_bytes = plan->arena_bytes;
  md->n_nodes = 0;
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    const fg_node *n = &g->nodes[step->node];
    fg_node_timing *t = &md->nodes[md->n_nodes++];
    *t = plan->timings[si];
    t->node = step->node;
    t->name = n->name;
    t->op = fg_step_is_recv(step)        ? "recv"
            : step->xfer == FG_XFER_SEND ? "send"
                                         : fg_session_op_label(g, step->node);
    t->device = fg_session_step_device(s, plan, si);
    const fg_kbuf *b = &plan->slots[step->out_slots[0]];
    t->dtype = b->dtype;
    t->rank = b->rank;
    for (int d = 0; d < FG_MAX_RANK; d++)
      t->dims[d] = d < b->rank ? b->dims[d] : 0;
    t->output_bytes = 0;
    for (int o = 0; o < step->n_out; o++)
      t->output_bytes += kbuf_bytes(&plan->slots[step->out_slots[o]]);
    step_traffic(g, plan, si, t, md->input_shapes + used);
    used += (size_t)step->n_in;
  }
  return md;
}

void fg_run_metadata_free(fg_run_metadata *md) {
  if (!md) return;
  free(md->input_shapes);
  free(md->nodes);
  free(md);
}

static int run_locked(fg_session *s, const fg_feed *feeds, int n_feeds, const char *const *fetches,
                      int n_fetches, fg_tensor **outputs, const char *const *targets, int n_targets,
                      fg_run_metadata **md, fg_status *st) {
  if (fg_session_sync(s, st) != 0) return -1;
  /* Small requests (the common case) resolve into stack arrays, so running
   * a cached plan allocates nothing but the fetched tensors. */
  enum { SMALL = 16 };
  int feed_nodes_s[SMALL], target_nodes_s[SMALL];
  const fg_tensor *feed_tensors_s[SMALL];
  fg_output fetch_outs_s[SMALL];
  int *feed_nodes = n_feeds <= SMALL ? feed_nodes_s : malloc((size_t)n_feeds * sizeof *feed_nodes);
  const fg_tensor **feed_tensors =
      n_feeds <= SMALL ? feed_tensors_s : malloc((size_t)n_feeds * sizeof *feed_tensors);
  fg_output *fetch_outs =
      n_fetches <= SMALL ? fetch_outs_s : malloc((size_t)n_fetches * sizeof *fetch_outs);
  int *target_nodes =
      n_targets <= SMALL ? target_nodes_s : malloc((size_t)n_targets * sizeof *target_nodes);
  int rc = -1;
  fg_plan_request req;
  if (!feed_nodes || !feed_tensors || !fetch_outs || !target_nodes) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_run: out of memory");
    goto done;
  }
  const fg_tensor *training = NULL;
  if (fg_session_resolve(s, feeds, n_feeds, fetches, n_fetches, targets, n_targets, &req,
                         feed_nodes, fetch_outs, target_nodes, feed_tensors, &training, st) != 0)
    goto done;
  /* From here a refusal may be this rank's alone (its feeds' values, its
   * plan): it still takes part in the ranks' agreement to start the run,
   * so its peers stop at once (fg_dist_run_agree). */
  int refused = 0;
  for (int i = 0; i < req.n_feeds && !refused; i++) {
    refused = !feed_tensors[i];
    if (refused)
      fg_status_set(st, FG_INVALID_ARGUMENT, "feed %d ('%s'): tensor is NULL", i,
                    s->g->nodes[feed_nodes[i]].name);
    else
      refused = check_feed(&s->g->nodes[feed_nodes[i]], feed_tensors[i], st) != 0;
  }

  /* The graph-hash check: before the first collective with newly attached communicators
   * (a GPU session's variables may have moved on the device). Every rank
   * takes part, refused or not. */
  if (!fg_dist_session_agreed(s->dist)) {
    char own[1024];
    fg_code own_code = fg_status_code(st);
    if (refused) snprintf(own, sizeof own, "%s", fg_status_message(st));
    if ((s->cuda && fg_cuda_vars_to_host(s->cuda, s->vars, s->n_vars_cap, -1, st) != 0) ||
        fg_dist_session_agree(s->dist, s->g, s->vars, s->n_vars_cap, st) != 0)
      goto done;
    if (refused) fg_status_set(st, own_code, "%s", own);
  }
  int64_t plan_ns = 0;
  fg_plan *plan = refused ? NULL : fg_session_plan_for(s, &req, &plan_ns, st);
  const fg_graph *pg = plan ? plan->built_on : fg_session_plan_graph(s, &req);
  if (!pg) pg = s->g; /* out of memory: the run is refused, the key from the source */
  refused = refused || !plan || (req.check_numerics && fg_plan_check_feeds(pg, plan, &req, st));
  int rounds = plan ? plan->run_rounds : 0;
  uint64_t key[2] = {plan ? plan->run_key[0] : 0, plan ? plan->run_key[1] : 0};
  /* Refused before it had a plan: the walk gives the key (st, which
   * holds why, is only written when the walk runs out of memory). */
  if (!plan && (rounds = fg_dist_run_key(s->dist, pg, &req, key, st)) < 0) goto done;
  int64_t agree_ns = md && rounds ? clock_ns() : 0;
  if (fg_dist_run_agree(s->dist, rounds, key, refused, st) != 0) goto done;
  int64_t t0 = md ? clock_ns() : 0;
  if (agree_ns) agree_ns = t0 - agree_ns;
  plan->timings_t0 = 0;
  /* The run's mode: fed, or whether it applies an update; its step. */
  fg_comm *replicas = fg_dist_session_replica_comm(s->dist);
  plan->run_training = training ? *(const uint8_t *)training->data != 0 : plan->train_step;
  plan->rng_step = s->train_steps;
  plan->var_version = s->var_version;
  plan->rng_replica = replicas ? (uint32_t)replicas->rank : 0;
  fg_dist_session_before_run(s->dist);
  int run_rc = s->cuda ? fg_cuda_plan_run(s->cuda, pg, plan, &req, md != NULL, st)
                       : fg_plan_run(pg, plan, &req, s->pool, md != NULL, st);
  if (md) {
    *md = make_metadata(s, pg, plan, clock_ns() - t0, plan_ns);
    if (*md) (*md)->start_ns = plan->timings_t0 ? plan->timings_t0 : t0;
    if (*md) (*md)->agree_ns = agree_ns;
    if (!*md && run_rc == 0) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_session_run_ex: out of memory (metadata)");
      goto done;
    }
  }
  if (plan->writes_vars) s->var_version++; /* also after a failure: it may have written some */
  if (run_rc != 0) goto done;
  if (plan->run_training) s->train_steps++;

  for (int i = 0; i < n_fetches; i++) {
    const fg_kbuf *b = &plan->slots[plan->fetch_slots[i]];
    size_t bytes = fg_dtype_size(b->dtype);
    for (int d = 0; d < b->rank; d++)
      bytes *= (size_t)b->dims[d];                                     /* checked at plan time */
    const void *src = s->cuda ? fg_cuda_plan_fetch(plan, i) : b->data; /* GPU: host copy */
    outputs[i] = fg_tensor_from_data(b->dtype, b->rank, b->dims, src, bytes, st);
    if (!outputs[i]) {
      for (int j = 0; j < i; j++)
        fg_tensor_free(outputs[j]), outputs[j] = NULL;
      goto done;
    }
  }
  rc = 0;
  fg_status_clear(st);
done:
  if (feed_nodes != feed_nodes_s) free(feed_nodes);
  if (feed_tensors != feed_tensors_s) free(feed_tensors);
  if (fetch_outs != fetch_outs_s) free(fetch_outs);
  if (target_nodes != target_nodes_s) free(target_nodes);
  return rc;
}

int fg_session_run(fg_session *s, const fg_feed *feeds, int n_feeds, const char *const *fetches,
                   int n_fetches, fg_tensor **outputs, const char *const *targets, int n_targets,
                   fg_status *st) {
  return fg_session_run_ex(s, feeds, n_feeds, fetches, n_fetches, outputs, targets, n_targets, NULL,
                           NULL, st);
}

int fg_session_run_ex(fg_session *s, const fg_feed *feeds, int n_feeds, const char *const *fetches,
                      int n_fetches, fg_tensor **outputs, const char *const *targets, int n_targets,
                      const fg_run_options *ro, fg_run_metadata **metadata, fg_status *st) {
  if (metadata) *metadata = NULL;
  fg_run_metadata **md = (ro && ro->collect_metadata) ? metadata : NULL;
  if (outputs && n_fetches > 0)
    for (int i = 0; i < n_fetches; i++)
      outputs[i] = NULL;
  if (!s) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_run: session is NULL");
    return -1;
  }
  if (n_feeds < 0 || n_fetches < 0 || n_targets < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_run: negative count (feeds %d, fetches %d, targets %d)", n_feeds,
                  n_fetches, n_targets);
    return -1;
  }
  if ((n_feeds && !feeds) || (n_fetches && (!fetches || !outputs)) || (n_targets && !targets)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_run: %s is NULL but its count is non-zero",
                  (n_feeds && !feeds)       ? "feeds"
                  : (n_fetches && !fetches) ? "fetches"
                  : (n_fetches && !outputs) ? "outputs"
                                            : "targets");
    return -1;
  }
  if (n_fetches == 0 && n_targets == 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_run: nothing to fetch or run");
    return -1;
  }
  if (atomic_flag_test_and_set(&s->busy)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_run: session is busy (another thread is running it)");
    return -1;
  }
  int rc = run_locked(s, feeds, n_feeds, fetches, n_fetches, outputs, targets, n_targets, md, st);
  atomic_flag_clear(&s->busy);
  return rc;
}

fg_tensor *fg_session_variable(fg_session *s, const char *name, fg_status *st) {
  if (!s || !name) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_variable: %s is NULL",
                  s ? "name" : "session");
    return NULL;
  }
  /* Like a run: a read overlapping a run (which writes the variables) or a
   * graph sync is refused, never torn. */
  if (atomic_flag_test_and_set(&s->busy)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_session_variable: session is busy");
    return NULL;
  }
  fg_tensor *t = NULL;
  int id = -1;
  if (fg_session_sync(s, st) == 0) {
    id = fg_graph_find(s->g, name);
    if (id < 0 || s->g->nodes[id].op != FG_OP_VARIABLE) {
      fg_status_set(st, FG_NOT_FOUND, "variable '%s': no variable of that name", name);
    } else if (!s->cuda || fg_cuda_vars_to_host(s->cuda, s->vars, s->n_vars_cap, id, st) == 0) {
      t = fg_tensor_clone(s->vars[id], st);
    }
  }
  atomic_flag_clear(&s->busy);
  return t;
}

/* The opening of the calls that change or exchange the session's state
 * across processes: a NULL session is refused, and so is one in use by
 * another thread; otherwise the session is held (the caller clears busy). */
static int claim(fg_session *s, const char *fn, fg_status *st) {
  if (!s) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: session is NULL", fn);
    return -1;
  }
  if (atomic_flag_test_and_set(&s->busy)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: session is busy", fn);
    return -1;
  }
  return 0;
}

static int set_comm(fg_session *s, fg_comm *comm, int data, const char *fn, fg_status *st) {
  if (claim(s, fn, st) != 0) return -1;
  int rc = fg_session_sync(s, st);
  if (rc == 0) rc = fg_dist_session_set_comm(s->g, &s->dist, comm, data, &s->opts, st);
  /* Plans depend on the communicator: its rank decides which nodes are
   * this process's steps, its size the fetches' transfers, and whether one
   * is attached the lanes the steps run on. */
  if (rc == 0) drop_plans(s);
  if (rc == 0) rc = run_passes(s, st); /* the placement may have changed */
  atomic_flag_clear(&s->busy);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

int fg_session_set_comm(fg_session *s, fg_comm *comm, fg_status *st) {
  return set_comm(s, comm, 0, "fg_session_set_comm", st);
}

int fg_session_set_data_comm(fg_session *s, fg_comm *comm, fg_status *st) {
  return set_comm(s, comm, 1, "fg_session_set_data_comm", st);
}

/* Tags above every transfer's (plan_xfer.c numbers those from 0). */
#define GATHER_TAG_BASE (1 << 28)

int fg_session_gather_variables(fg_session *s, int root, fg_status *st) {
  if (claim(s, "fg_session_gather_variables", st) != 0) return -1;
  int rc = fg_session_sync(s, st);
  const fg_dist_exec *dx = rc == 0 ? fg_dist_session_exec(s->dist) : NULL;
  if (rc == 0 && dx && dx->my_rank == -2) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_gather_variables: the graph is cross-process but the session has "
                  "no process communicator (fg_session_set_comm)");
    rc = -1;
  } else if (rc == 0 && dx && dx->my_rank >= 0 && (root < 0 || root >= dx->p2p->size)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_gather_variables: root %d is not a rank (0 to %d)", root,
                  dx->p2p->size - 1);
    rc = -1;
  }
  /* Node order on every rank: the root receives in the order each owner
   * sends, and owners wait for nothing else, so this cannot deadlock. */
  for (int id = 0; rc == 0 && dx && dx->my_rank >= 0 && id < s->n_vars_cap; id++) {
    fg_tensor *v = s->vars[id];
    if (!v) continue;
    int owner = dx->dev_rank[dx->node_dev[id]];
    if (owner == root || (dx->my_rank != owner && dx->my_rank != root)) continue;
    int64_t bytes = (int64_t)fg_tensor_num_bytes(v);
    fg_comm *c = dx->p2p;
    rc = dx->my_rank == owner ? c->ops->send(c, v->data, bytes, root, GATHER_TAG_BASE + id, st)
                              : c->ops->recv(c, v->data, bytes, owner, GATHER_TAG_BASE + id, st);
    if (rc != 0) {
      char msg[768];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, fg_status_code(st),
                    "fg_session_gather_variables: variable '%s' (rank %d -> %d): %s",
                    s->g->nodes[id].name, owner, root, msg);
    }
  }
  atomic_flag_clear(&s->busy);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

/* The graph-hash check before a broadcast: every rank must hold the same graph with the same
 * variables (ids and sizes) and name the same root, since each broadcast
 * pairs with the peers' broadcast of the same turn: a mismatch would pair
 * buffers of different sizes (a truncation MPI may not survive) or another
 * call altogether. The same verdict on every rank. */
static int broadcast_agree(fg_session *s, fg_comm *c, int root, fg_status *st) {
  uint64_t h = fg_graph_structure_hash(s->g),
           v = fg_dist_session_vars_hash(s->dist, s->vars, s->n_vars_cap, 0);
  h = fg_hash64(h, &v, sizeof v);
  if (fg_comm_check_same(c, h, "graph and variable sizes",
                         "fg_session_broadcast_variables needs the same graph on every rank", st))
    return -1;
  return fg_comm_check_same(c, (uint64_t)root, "broadcast root",
                            "every rank must pass the same root", st);
}

int fg_session_broadcast_variables(fg_session *s, int root, fg_status *st) {
  if (claim(s, "fg_session_broadcast_variables", st) != 0) return -1;
  int rc = fg_session_sync(s, st);
  fg_comm *c = rc == 0 ? fg_dist_session_replica_comm(s->dist) : NULL;
  if (c && (root < 0 || root >= c->size)) {
    /* The same on every rank that passes this root; a rank whose root
     * differs meets the check below, or the others' deadline. */
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_session_broadcast_variables: root %d is not a replica (0 to %d)", root,
                  c->size - 1);
    rc = -1;
  } else if (c && fg_comm_gpu(c) >= 0) {
    fg_status_set(st, FG_UNIMPLEMENTED,
                  "fg_session_broadcast_variables: the communicator is NCCL's; attach the MPI "
                  "communicator, broadcast, then attach NCCL's");
    rc = -1;
  } else if (c && broadcast_agree(s, c, root, st) != 0) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, fg_status_code(st), "fg_session_broadcast_variables: %s", msg);
    rc = -1;
  }
  if (rc == 0 && c && s->cuda) rc = fg_cuda_vars_to_host(s->cuda, s->vars, s->n_vars_cap, -1, st);
  /* Node order on every rank: the same sequence of broadcasts. */
  for (int id = 0; rc == 0 && c && id < s->n_vars_cap; id++) {
    fg_tensor *v = s->vars[id];
    if (!v || !fg_dist_session_owns_var(s->dist, id)) continue;
    rc = c->ops->broadcast(c, v->data, (int64_t)fg_tensor_num_bytes(v), root, st);
    if (rc != 0) {
      char msg[768];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, fg_status_code(st),
                    "fg_session_broadcast_variables: variable '%s' from replica %d: %s",
                    s->g->nodes[id].name, root, msg);
    }
  }
  if (rc == 0 && c && s->cuda) rc = fg_cuda_vars_to_device(s->cuda, s->vars, s->n_vars_cap, st);
  atomic_flag_clear(&s->busy);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

const fg_partition *fg_session_partition(fg_session *s) {
  return s ? fg_dist_session_partition(s->dist) : NULL;
}
