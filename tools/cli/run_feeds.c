/* Feeds for `flowgraph run`: .npy files checked against their placeholders,
 * and seeded random data for --random-inputs. The checks repeat the
 * session's (unknown feeds, wrong dtypes and shapes, missing feeds) so that the message can name
 * the .npy file too. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "run.h"

/* Random feeds above this size are refused rather than allocated. */
#define MAX_RANDOM_BYTES ((uint64_t)1 << 32)

static int is_placeholder(const fg_graph *g, int id) {
  const char *op = fg_node_op(g, id);
  return op && strcmp(op, "placeholder") == 0;
}

static int mark_needed(const fg_graph *g, const run_args *a, const char *const *fetch, int n_fetch,
                       run_feeds *f, fg_status *st) {
  int n = f->n_nodes;
  int *stack = malloc(((size_t)n + 1) * sizeof *stack);
  if (!stack) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  int top = 0;
  for (int i = 0; i < n_fetch + a->n_targets; i++) {
    int id = i < n_fetch ? fg_graph_find_output(g, fetch[i]).node
                         : fg_graph_find(g, a->targets[i - n_fetch]);
    if (id >= 0 && id < n && !f->needed[id]) {
      f->needed[id] = 1;
      stack[top++] = id;
    }
  }
  while (top > 0) {
    int id = stack[--top];
    int ni = fg_node_num_inputs(g, id);
    for (int k = 0; k < ni; k++) {
      int src = fg_node_input(g, id, k).node;
      if (src >= 0 && src < n && !f->needed[src]) {
        f->needed[src] = 1;
        stack[top++] = src;
      }
    }
  }
  free(stack);
  return 0;
}

int run_feeds_prepare(const fg_graph *g, const run_args *a, const char *const *fetch, int n_fetch,
                      run_feeds *f, fg_status *st) {
  int n = fg_graph_num_nodes(g);
  f->n_nodes = n;
  f->needed = calloc((size_t)n + 1, 1);
  f->node_of_input = calloc((size_t)a->n_inputs + 1, sizeof *f->node_of_input);
  /* At most one feed per placeholder plus the -i ones. */
  f->feeds = calloc((size_t)n + (size_t)a->n_inputs + 1, sizeof *f->feeds);
  f->tensors = calloc((size_t)n + (size_t)a->n_inputs + 1, sizeof *f->tensors);
  if (!f->needed || !f->node_of_input || !f->feeds || !f->tensors) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  for (int i = 0; i < a->n_inputs; i++) {
    const char *name = a->inputs[i].name;
    int id = fg_graph_find(g, name);
    if (id < 0) {
      char hint[600];
      fg_graph_output_hint(g, name, hint, sizeof hint);
      fg_status_set(st, FG_NOT_FOUND, "feed '%s': %s has no node of that name%s%s", name, a->model,
                    hint[0] ? "; " : "", hint);
      return -1;
    }
    /* The training flag (fg_training) may be fed too: -i training=t.npy
     * with a bool scalar runs the graph in training mode. */
    const char *op = fg_node_op(g, id);
    if (!is_placeholder(g, id) && !(op && strcmp(op, "training_flag") == 0)) {
      fg_status_set(st, FG_NOT_FOUND, "feed '%s': node '%s' is a %s, not a placeholder", name, name,
                    fg_node_op(g, id) ? fg_node_op(g, id) : "?");
      return -1;
    }
    for (int j = 0; j < i; j++)
      if (f->node_of_input[j] == id) {
        fg_status_set(st, FG_INVALID_ARGUMENT, "feed '%s' is given twice", name);
        return -1;
      }
    f->node_of_input[i] = id;
  }
  if (mark_needed(g, a, fetch, n_fetch, f, st) != 0) return -1;
  if (a->random_inputs) return 0;
  int id = run_feeds_next_unfed(g, f, a->n_inputs, 0);
  if (id >= 0) {
    char desc[300];
    const char *name = fg_node_name(g, id);
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "placeholder '%s' (%s) is not fed: pass -i %s=FILE.npy or --random-inputs", name,
                  cli_describe_output(g, (fg_output){id, 0}, desc, sizeof desc), name);
    return -1;
  }
  return 0;
}

int run_feeds_next_unfed(const fg_graph *g, const run_feeds *f, int n_inputs, int from) {
  for (int id = from < 0 ? 0 : from; id < f->n_nodes; id++) {
    if (!f->needed[id] || !is_placeholder(g, id)) continue;
    int fed = 0;
    for (int i = 0; i < n_inputs; i++)
      fed |= f->node_of_input[i] == id;
    if (!fed) return id;
  }
  return -1;
}

static int check_feed(const fg_graph *g, int id, const char *name, const char *path,
                      const fg_tensor *t, int batched, fg_status *st) {
  fg_output o = {id, 0};
  int64_t dims[FG_MAX_RANK];
  int rank = fg_output_shape(g, o, dims);
  fg_dtype want = fg_output_dtype(g, o);
  char desc[300], given[256];
  cli_describe_output(g, o, desc, sizeof desc);
  cli_shape_str(fg_tensor_rank(t), fg_tensor_dims(t), given, sizeof given);
  if (fg_tensor_dtype(t) != want) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "feed '%s' (%s): dtype %s %s does not match placeholder '%s' (%s)", name, path,
                  fg_dtype_name(fg_tensor_dtype(t)), given, name, desc);
    return -1;
  }
  int ok = rank == fg_tensor_rank(t);
  for (int k = batched ? 1 : 0; ok && k < rank; k++)
    ok = dims[k] < 0 || dims[k] == fg_tensor_dim(t, k);
  if (!ok) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "feed '%s' (%s): shape %s does not match placeholder '%s' (%s)", name, path,
                  given, name, desc);
    return -1;
  }
  return 0;
}

/* Random integers are drawn from [0, 10) unless a consumer accepts fewer
 * values: an index must lie below one_hot's depth, below the rows of the
 * table gather reads (and gather_grad's like), and a label below the
 * classes of softmax_cross_entropy (its logits' last dim). Values reach
 * those consumers through ops that keep them (cast, reshape, ...). */
#define RANDOM_INT_RANGE 10
#define BOUND_DEPTH      8 /* pass-through ops followed from a placeholder */

static int keeps_values(const char *op) {
  static const char *const ops[] = {"cast",    "reshape", "identity",      "flatten",
                                    "squeeze", "expand",  "stop_gradient", "reshape_like"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (strcmp(op, ops[i]) == 0) return 1;
  return 0;
}

/* dim d (negative: from the end) of output o, or -1 when unknown. */
static int64_t known_dim(const fg_graph *g, fg_output o, int d) {
  int64_t dims[FG_MAX_RANK];
  int rank = fg_output_shape(g, o, dims);
  if (rank <= 0) return -1;
  if (d < 0) d += rank;
  return d >= 0 && d < rank ? dims[d] : -1;
}

/* The values input k of node c accepts, [0, bound): the bound, or -1 when
 * the op puts no bound on that input. */
static int64_t consumer_bound(const fg_graph *g, int c, int k) {
  const char *op = fg_node_op(g, c);
  int64_t v = -1;
  if (strcmp(op, "one_hot") == 0 && k == 0 && fg_node_attr_int(g, c, "depth", &v) == 0) return v;
  if (strcmp(op, "gather") == 0 && k == 1) return known_dim(g, fg_node_input(g, c, 0), 0);
  if (strcmp(op, "gather_grad") == 0 && k == 1) return known_dim(g, fg_node_input(g, c, 2), 0);
  if (strncmp(op, "softmax_cross_entropy", strlen("softmax_cross_entropy")) == 0 && k == 1)
    return known_dim(g, fg_node_input(g, c, 0), -1);
  return -1;
}

/* The smallest bound the readers of node id's output put on its values
 * (through pass-through ops), at most `bound`. */
static int64_t readers_bound(const fg_graph *g, int id, int depth, int64_t bound) {
  for (int c = id + 1; c < fg_graph_num_nodes(g); c++)
    for (int k = 0; k < fg_node_num_inputs(g, c); k++) {
      if (fg_node_input(g, c, k).node != id) continue;
      int64_t b = consumer_bound(g, c, k);
      if (b > 0 && b < bound) bound = b;
      if (depth < BOUND_DEPTH && keeps_values(fg_node_op(g, c)))
        bound = readers_bound(g, c, depth + 1, bound);
    }
  return bound;
}

static fg_tensor *random_feed(const fg_graph *g, int id, int64_t batch, uint64_t *rng,
                              fg_status *st) {
  fg_output o = {id, 0};
  int64_t dims[FG_MAX_RANK];
  int rank = fg_output_shape(g, o, dims);
  fg_dtype dt = fg_output_dtype(g, o);
  const char *name = fg_node_name(g, id);
  if (rank < 0 || fg_dtype_size(dt) == 0) {
    fg_status_set(st, FG_INVALID_GRAPH, "placeholder '%s' has no usable dtype or shape", name);
    return NULL;
  }
  uint64_t bytes = fg_dtype_size(dt);
  for (int k = 0; k < rank; k++) {
    if (dims[k] < 0) dims[k] = batch;
    if (dims[k] != 0 && bytes > MAX_RANDOM_BYTES / (uint64_t)dims[k]) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                    "placeholder '%s': a random feed would exceed %" PRIu64 " bytes", name,
                    MAX_RANDOM_BYTES);
      return NULL;
    }
    bytes *= (uint64_t)dims[k];
  }
  fg_tensor *t = fg_tensor_new(dt, rank, dims, st);
  if (!t) return NULL;
  int64_t n = fg_tensor_num_elements(t);
  void *d = fg_tensor_data(t);
  const uint64_t range =
      dt == FG_I32 || dt == FG_I64 ? (uint64_t)readers_bound(g, id, 0, RANDOM_INT_RANGE) : 10;
  for (int64_t i = 0; i < n && d; i++) {
    uint64_t r = cli_splitmix64(rng);
    switch (dt) {
    /* 24 (53) random bits so that the top of the range stays below 1. */
    case FG_F32: ((float *)d)[i] = (float)((double)(r >> 40) * 0x1p-23 - 1.0); break;
    case FG_F64: ((double *)d)[i] = (double)(r >> 11) * 0x1p-52 - 1.0; break;
    case FG_I32: ((int32_t *)d)[i] = (int32_t)(r % range); break;
    case FG_I64: ((int64_t *)d)[i] = (int64_t)(r % range); break;
    case FG_BOOL: ((unsigned char *)d)[i] = (unsigned char)(r & 1); break;
    default: break;
    }
  }
  return t;
}

int run_feeds_load(const fg_graph *g, const run_args *a, run_feeds *f, fg_status *st) {
  for (int i = 0; i < a->n_inputs; i++) {
    const char *name = a->inputs[i].name, *path = a->inputs[i].path;
    fg_tensor *t = fg_npy_read(path, st);
    if (!t) {
      /* A malformed feed is a bad argument; missing or unreadable
       * files keep their own codes. */
      fg_code c = fg_status_code(st);
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, c == FG_FORMAT_ERROR ? FG_INVALID_ARGUMENT : c, "feed '%s': %s", name, msg);
      return -1;
    }
    f->tensors[f->n] = t;
    f->feeds[f->n] = (fg_feed){fg_node_name(g, f->node_of_input[i]), t};
    f->n++;
    if (check_feed(g, f->node_of_input[i], name, path, t, a->batched, st) != 0) return -1;
  }
  if (!a->random_inputs) return 0;
  uint64_t rng = a->seed;
  for (int id = run_feeds_next_unfed(g, f, a->n_inputs, 0); id >= 0;
       id = run_feeds_next_unfed(g, f, a->n_inputs, id + 1)) {
    fg_tensor *t = random_feed(g, id, a->batch, &rng, st);
    if (!t) return -1;
    f->tensors[f->n] = t;
    f->feeds[f->n] = (fg_feed){fg_node_name(g, id), t};
    f->n++;
  }
  return 0;
}

void run_feeds_free(run_feeds *f) {
  if (f->tensors)
    for (int i = 0; i < f->n; i++)
      fg_tensor_free(f->tensors[i]);
  free(f->tensors);
  free(f->feeds);
  free(f->node_of_input);
  free(f->needed);
  memset(f, 0, sizeof *f);
}
