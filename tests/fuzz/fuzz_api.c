/* libFuzzer harness 2, structure-aware: the fuzz bytes are a stream of
 * decisions that build a graph through the C API. Sources of random dtypes
 * and shapes (unknown batch dimensions included), then ops from the op table
 * through the generic fg_op with random attribute names, types and values
 * (mostly the attribute's own type, sometimes another), inputs wired to any
 * node or to outputs the node lacks, typed builders with random parameters,
 * renames (duplicates) and device placements, then sometimes fg_gradients
 * or fg_minimize, and after fg_minimize sometimes fg_data_parallel and
 * fg_micro_batch (so their refusals, and multi-device runs with all_reduce
 * across cpu:N, meet odd graphs).
 *
 * Checked: a builder that returns no output leaves a sticky error with a
 * message; a graph with a sticky error is refused by fg_session_new; a graph
 * without one saves and loads again, and its session runs cleanly or fails
 * with a status (fuzz_common.h). An exhausted stream reads as zeros, so every
 * input is a complete program.
 */
#include <math.h>

#include "fuzz_common.h"

typedef struct stream {
  const uint8_t *p;
  size_t n, i;
} stream;

static unsigned take(stream *z) { return z->i < z->n ? z->p[z->i++] : 0; }
static unsigned pick(stream *z, unsigned n) { return n ? take(z) % n : 0; }

static int64_t any_int(stream *z) {
  static const int64_t odd[] = {INT64_MAX,    INT64_MIN,       INT32_MAX, INT32_MIN, 1ll << 32,
                                -(1ll << 40), 1000000,         100,       16,        -100,
                                4096,         (1ll << 62) + 1, 9,         8,         65536};
  unsigned b = take(z);
  if (b < 224) return (int64_t)(b % 10) - 2; /* -2 .. 7 */
  return odd[b % (sizeof odd / sizeof odd[0])];
}

static double any_float(stream *z) {
  static const double vals[] = {0.0, 1.0,      -1.0,      0.5,    1e-8,   0.9,  0.999,
                                2.0, -0.0,     1e300,     -1e300, 1e-320, 0.01, 3.5,
                                NAN, INFINITY, -INFINITY, 100.0,  -2.5,   1e-3};
  return vals[pick(z, sizeof vals / sizeof vals[0])];
}

static fg_dtype any_dtype(stream *z) {
  static const int d[] = {FG_F32, FG_F32, FG_F32, FG_F64, FG_I32, FG_I64, FG_BOOL, 0, 9, -1};
  return (fg_dtype)d[pick(z, sizeof d / sizeof d[0])];
}

/* A small shape: rank 0..3, dims 1..4 (sometimes 0). */
static int small_shape(stream *z, int64_t *dims) {
  int r = (int)pick(z, 4);
  for (int d = 0; d < r; d++)
    dims[d] = (int64_t)pick(z, 5) + (take(z) % 16 != 0);
  return r;
}

static fg_tensor *small_tensor(stream *z, fg_dtype dt, fg_status *st) {
  if (fg_dtype_size(dt) == 0) dt = FG_F32;
  int64_t dims[FG_MAX_RANK];
  int r = small_shape(z, dims);
  fg_tensor *t = fg_tensor_new(dt, r, dims, st);
  if (!t) return NULL;
  int64_t n = fg_tensor_num_elements(t);
  void *p = fg_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    int64_t k = (int64_t)pick(z, 5) - 1;
    double f = (double)k * 0.75;
    switch (dt) {
    case FG_F32: ((float *)p)[i] = (float)f; break;
    case FG_F64: ((double *)p)[i] = f; break;
    case FG_I32: ((int32_t *)p)[i] = (int32_t)k; break;
    case FG_I64: ((int64_t *)p)[i] = k; break;
    case FG_BOOL: ((uint8_t *)p)[i] = (uint8_t)(k & 1); break;
    default: break;
    }
  }
  return t;
}

enum { NAT_INT, NAT_INTS, NAT_FLOAT, NAT_TENSOR, NAT_STRING };
static const struct {
  const char *name;
  int natural;
} attr_names[] = {
    {"dtype", NAT_INT},          {"shape", NAT_INTS},      {"value", NAT_FLOAT},
    {"transpose_a", NAT_INT},    {"transpose_b", NAT_INT}, {"perm", NAT_INTS},
    {"axis", NAT_INT},           {"begin", NAT_INTS},      {"size", NAT_INTS},
    {"depth", NAT_INT},          {"alpha", NAT_FLOAT},     {"axes", NAT_INTS},
    {"keepdims", NAT_INT},       {"momentum", NAT_FLOAT},  {"nesterov", NAT_INT},
    {"beta1", NAT_FLOAT},        {"beta2", NAT_FLOAT},     {"epsilon", NAT_FLOAT},
    {"weight_decay", NAT_FLOAT}, {"value", NAT_TENSOR},    {"bogus", NAT_STRING},
    {"l2", NAT_FLOAT},
};
#define N_ATTR_NAMES ((unsigned)(sizeof attr_names / sizeof attr_names[0]))

static void random_attr(stream *z, fg_attrs *a, fg_status *st) {
  unsigned k = pick(z, N_ATTR_NAMES);
  const char *name = attr_names[k].name;
  int type = attr_names[k].natural;
  if (take(z) % 8 == 0) type = (int)pick(z, 5); /* the wrong type, sometimes */
  switch (type) {
  case NAT_INT: {
    int64_t v = any_int(z);
    if (strcmp(name, "dtype") == 0 && take(z) % 4 != 0) v = (int64_t)any_dtype(z);
    fg_attrs_set_int(a, name, v);
    break;
  }
  case NAT_INTS: {
    int64_t v[FG_MAX_RANK + 2];
    int n = (int)pick(z, 5);
    if (take(z) % 32 == 0) n = FG_MAX_RANK + 2;
    for (int i = 0; i < n; i++)
      v[i] = any_int(z);
    fg_attrs_set_ints(a, name, v, n);
    break;
  }
  case NAT_FLOAT: {
    if (take(z) % 8 == 0) {
      double v[3] = {any_float(z), any_float(z), any_float(z)};
      fg_attrs_set_floats(a, name, v, (int)pick(z, 4));
    } else {
      fg_attrs_set_float(a, name, any_float(z));
    }
    break;
  }
  case NAT_TENSOR: {
    fg_tensor *t = small_tensor(z, any_dtype(z), st);
    if (t) fg_attrs_set_tensor(a, name, t);
    fg_tensor_free(t);
    break;
  }
  default: fg_attrs_set_string(a, name, take(z) % 2 ? "f32" : ""); break;
  }
}

static fg_output any_output(stream *z, const fg_graph *g) {
  int n = fg_graph_num_nodes(g);
  fg_output o = {n > 0 ? (int)pick(z, (unsigned)n) : 0, 0};
  unsigned b = take(z);
  if (b % 32 == 0) o.index = 1;               /* an output the node may lack */
  if (b % 64 == 1) o.node = n + (int)(b % 3); /* a node that does not exist */
  if (b % 64 == 3) o.node = -1;
  /* Prefer recent nodes: deeper graphs. */
  if (n > 0 && b % 2 == 0) o.node = n - 1 - (int)pick(z, (unsigned)(n < 3 ? n : 3));
  return o;
}

static fg_output add_source(stream *z, fg_graph *g, int idx, fg_status *st) {
  char name[32];
  snprintf(name, sizeof name, "%c%d", "pcvf"[idx % 4], idx);
  int64_t dims[FG_MAX_RANK];
  switch (pick(z, 5)) {
  case 0:
  case 1: {
    int r = small_shape(z, dims);
    if (r > 0 && take(z) % 2) dims[0] = FG_DIM_UNKNOWN;
    if (r > 1 && take(z) % 16 == 0) dims[1] = FG_DIM_UNKNOWN; /* not allowed there */
    snprintf(name, sizeof name, "x%d", idx);
    return fg_placeholder(g, name, any_dtype(z), r, dims);
  }
  case 2: {
    fg_tensor *t = small_tensor(z, any_dtype(z), st);
    fg_output o = t ? fg_constant(g, NULL, t) : FG_NO_OUTPUT;
    fg_tensor_free(t);
    return o;
  }
  case 3: {
    fg_tensor *t = small_tensor(z, take(z) % 4 ? FG_F32 : any_dtype(z), st);
    snprintf(name, sizeof name, "v%d", idx);
    fg_output o = t ? fg_variable(g, name, t) : FG_NO_OUTPUT;
    fg_tensor_free(t);
    return o;
  }
  default: {
    if (take(z) % 2) return fg_scalar(g, any_dtype(z), any_float(z));
    int r = (int)pick(z, 4);
    for (int d = 0; d < r; d++)
      dims[d] = take(z) % 8 ? (int64_t)pick(z, 4) + 1 : any_int(z);
    return fg_fill(g, any_dtype(z), r, dims, any_float(z));
  }
  }
}

static fg_output typed_builder(stream *z, fg_graph *g) {
  fg_output a = any_output(z, g), b = any_output(z, g);
  int64_t v[FG_MAX_RANK], w[FG_MAX_RANK];
  int n = (int)pick(z, 5);
  for (int i = 0; i < n; i++) {
    v[i] = any_int(z);
    w[i] = any_int(z);
  }
  switch (pick(z, 14)) {
  case 0: return fg_matmul(g, a, b, (int)pick(z, 2), (int)pick(z, 2));
  case 1: return fg_reshape(g, a, n, v);
  case 2: return fg_transpose(g, a, n, v);
  case 3: {
    fg_output xs[3] = {a, b, any_output(z, g)};
    return fg_concat(g, xs, 1 + (int)pick(z, 3), (int)any_int(z));
  }
  case 4: return fg_slice(g, a, n, v, w);
  case 5: return fg_gather(g, a, b);
  case 6: return fg_one_hot(g, a, any_int(z), any_dtype(z));
  case 7: return fg_cast(g, a, any_dtype(z));
  case 8: return fg_reduce_sum(g, a, v, n, (int)pick(z, 2));
  case 9: return fg_reduce_max(g, a, v, n, (int)pick(z, 2));
  case 10: return fg_softmax_cross_entropy(g, a, b);
  case 11: return fg_log_softmax(g, a, (int)any_int(z));
  case 12: return fg_argmax(g, a, (int)any_int(z));
  default: return fg_select(g, any_output(z, g), a, b);
  }
}

/* Returns the new output, or FG_NO_OUTPUT for calls that make none. */
static fg_output one_step(stream *z, fg_graph *g, fg_status *st) {
  unsigned mode = pick(z, 10);
  if (mode <= 5) {
    int nops = fg_num_ops();
    const char *op = take(z) % 64 == 0 ? "no_such_op" : fg_op_name((int)pick(z, (unsigned)nops));
    fg_output in[8];
    int n_in = (int)pick(z, 4);
    if (op && strncmp(op, "apply_", 6) == 0) n_in = 3 + (int)pick(z, 5);
    for (int i = 0; i < n_in; i++)
      in[i] = any_output(z, g);
    fg_attrs *a = fg_attrs_new();
    int n_attrs = (int)pick(z, 4);
    for (int i = 0; i < n_attrs; i++)
      random_attr(z, a, st);
    fg_output o = fg_op(g, op, NULL, in, n_in, a);
    fg_attrs_free(a);
    return o;
  }
  if (mode <= 7) return typed_builder(z, g);
  fg_output o = any_output(z, g);
  if (mode == 8) {
    static const char *names[] = {"x0", "v1", "a", "b:0", "", "loss", "gradients/x"};
    return fg_set_name(g, o, names[pick(z, 7)]);
  }
  static const char *devs[] = {"cpu:0", "cpu:1", "cuda:0", "gpu", "cpu:-1", ""};
  return fg_set_device(g, o, devs[pick(z, 6)]);
}

static void name_of(const fg_graph *g, fg_output o, char *buf, size_t size) {
  const char *nm = fg_node_name(g, o.node);
  snprintf(buf, size, "%s:%d", nm ? nm : "?", o.index);
}

/* Sometimes a training graph goes through the dist rewrites: data
 * parallelism over replicas on cpu:N, micro-batches, or both, with batch
 * inputs picked among the placeholders (now and then a name that is none),
 * and now and then an odd count, bucket size or loss form. NULL when not
 * rewritten (a refusal must come with a message). */
static fg_graph *dist_rewrite(stream *z, const fg_graph *g, fg_status *st) {
  unsigned how = take(z) % 8;
  if (how >= 3) return NULL;
  static const char *const odd[] = {"nope", "v1", ""};
  const char *names[3];
  int nb = 0;
  for (int i = 0; i < fg_graph_num_nodes(g) && nb < 2; i++) {
    const char *op = fg_node_op(g, i);
    if (op && strcmp(op, "placeholder") == 0 && take(z) % 4 != 0) names[nb++] = fg_node_name(g, i);
  }
  if (take(z) % 8 == 0) names[nb++] = odd[pick(z, 3)];
  fg_graph *out = NULL;
  if (how >= 1) {
    /* Up to 8: beyond 2 per stage the micro-batches in flight are bounded. */
    int m = take(z) % 16 == 0 ? (int)any_int(z) : 1 + (int)pick(z, 8);
    int loss = take(z) % 8 == 0 ? (int)any_int(z) : (int)pick(z, 2);
    /* Mostly the default bound; now and then 1, 2, none, or any value. */
    fg_micro_batch_options mo;
    fg_micro_batch_options_init(&mo);
    mo.loss_reduction = loss;
    static const int in_flight[3] = {1, 2, FG_MICRO_BATCH_UNBOUNDED};
    unsigned f = take(z) % 8;
    mo.max_in_flight = f < 4 ? 0 : f < 7 ? in_flight[f - 4] : (int)any_int(z);
    out = fg_micro_batch_ex(g, m, names, nb, &mo, st);
    if (!out) {
      fgfuzz_expect_error(st, "fg_micro_batch");
      return NULL;
    }
  }
  if (how != 1) {
    fg_data_parallel_options o;
    fg_data_parallel_options_init(&o);
    static const int64_t buckets[] = {0, 1, 64, 4096};
    o.bucket_bytes = take(z) % 8 == 0 ? any_int(z) : buckets[pick(z, 4)];
    o.loss_reduction = take(z) % 8 == 0 ? (int)any_int(z) : (int)pick(z, 2);
    int replicas = take(z) % 16 == 0 ? (int)any_int(z) : 1 + (int)pick(z, 3);
    fg_graph *dp =
        fg_data_parallel(out ? out : g, replicas, names, nb, take(z) % 4 ? &o : NULL, st);
    if (!dp) fgfuzz_expect_error(st, "fg_data_parallel");
    fg_graph_free(out);
    out = dp;
  }
  return out;
}

int fgfuzz_api(const uint8_t *data, size_t size) {
  stream z = {data, size, 0};
  fgfuzz_count_input();
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  if (!st || !g) goto done;

  int n_src = 1 + (int)pick(&z, 3);
  for (int i = 0; i < n_src; i++)
    add_source(&z, g, i, st);
  int n_steps = 1 + (int)pick(&z, 16);
  for (int i = 0; i < n_steps && fg_graph_status(g, st) == FG_OK; i++) {
    fg_output o = one_step(&z, g, st);
    if (o.node < 0 && fg_graph_status(g, st) == FG_OK)
      fgfuzz_fail("a builder returned no output without a sticky error", st);
  }

  if (fg_graph_status(g, st) == FG_OK && fg_graph_num_nodes(g) > 0) {
    unsigned b = take(&z);
    if (b % 4 == 1) {
      fg_output ys[1] = {any_output(&z, g)};
      fg_output xs[2] = {any_output(&z, g), any_output(&z, g)}, dxs[2];
      int nx = 1 + (int)pick(&z, 2);
      fg_gradients_options go;
      fg_gradients_options_init(&go);
      go.zeros_for_unconnected = (int)pick(&z, 2);
      if (fg_gradients_ex(g, ys, 1, xs, nx, NULL, dxs, &go, st) != 0) {
        fgfuzz_expect_error(st, "fg_gradients");
      } else {
        for (int i = 0; i < nx; i++)
          if (dxs[i].node >= 0) fg_graph_add_output(g, dxs[i]);
      }
    } else if (b % 4 == 2) {
      fg_optimizer_config cfg;
      fg_optimizer_config_init(&cfg, (fg_optimizer_kind)(1 + pick(&z, 4)));
      if (take(&z) % 4 == 0) cfg.learning_rate = any_float(&z);
      if (take(&z) % 4 == 0) cfg.clip_global_norm = any_float(&z);
      fg_output t = fg_minimize(g, any_output(&z, g), NULL, 0, &cfg, st);
      if (t.node < 0) {
        fgfuzz_expect_error(st, "fg_minimize");
      } else {
        fg_graph *r = dist_rewrite(&z, g, st);
        if (r) {
          fg_graph_free(g);
          g = r;
        }
      }
    }
  }

  fg_status_clear(st);
  if (fg_graph_status(g, st) != FG_OK) {
    fgfuzz_expect_error(st, "fg_graph_status");
    fg_status *st2 = fg_status_new();
    fg_session *s = fg_session_new(g, NULL, st2);
    if (s) fgfuzz_fail("fg_session_new accepted a graph with a sticky error", st);
    fgfuzz_expect_error(st2, "fg_session_new on a failed graph");
    fg_status_free(st2);
    goto done;
  }

  /* A graph the API accepted must survive its own file format. */
  void *buf = NULL;
  size_t buf_size = 0;
  if (fg_graph_save_memory(g, &buf, &buf_size, st) != 0) {
    fgfuzz_fail("fg_graph_save_memory failed on a valid graph", st);
  } else {
    fg_graph *g2 = fg_graph_load_memory(buf, buf_size, st);
    if (!g2) fgfuzz_fail("a saved valid graph does not load", st);
    fg_graph_free(g2);
  }
  free(buf);

  int n = fg_graph_num_nodes(g);
  char names[FGFUZZ_MAX_FETCH][512];
  const char *fetches[FGFUZZ_MAX_FETCH], *targets[FGFUZZ_MAX_FETCH];
  int n_fetches = 0, n_targets = 0;
  for (int i = 0; i < fg_graph_num_outputs(g) && n_fetches < 3; i++) {
    name_of(g, fg_graph_output(g, i), names[n_fetches], sizeof names[0]);
    fetches[n_fetches] = names[n_fetches];
    n_fetches++;
  }
  for (int i = n - 1; i >= 0 && i >= n - 3 && n_fetches < FGFUZZ_MAX_FETCH; i--) {
    name_of(g, (fg_output){i, 0}, names[n_fetches], sizeof names[0]);
    fetches[n_fetches] = names[n_fetches];
    n_fetches++;
  }
  for (int i = 0; i < n && n_targets < FGFUZZ_MAX_FETCH; i++) {
    const char *op = fg_node_op(g, i);
    if (op &&
        (strcmp(op, "assign") == 0 || strncmp(op, "apply_", 6) == 0 || strcmp(op, "group") == 0))
      targets[n_targets++] = fg_node_name(g, i);
  }
  fgfuzz_session_run(g, fetches, n_fetches, targets, n_targets, fgfuzz_hash(data, size));

done:
  fg_graph_free(g);
  fg_status_free(st);
  return 0;
}

#ifndef FGFUZZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fgfuzz_api(data, size); }
#endif
