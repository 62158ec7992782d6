/* The shape ops pad, flatten, squeeze, unsqueeze, expand, tile, split and
 * stack through the graph API: values against NumPy (tests/data/
 * shape_ops_ref.h, from tests/gen/gen_shape_ops.py) for every dtype
 * family, shapes and views, the refusals of bad attributes (each message
 * names the node and the value), a .fgb round trip, and the CUDA kernels
 * against the CPU ones (label gpu). Gradient checks are in
 * tests/autodiff/test_grad_shape_ops.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgtest.h"
#include "test_kernels_util.h"
#include "flowgraph/flowgraph.h"
#include "graph/op_table.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct shape_ref {
  const char *name, *op;
  int dtype;
  int rank;
  int64_t dims[4];
  int n_in;
  int n_ints;
  int64_t ints[8]; /* pads, repeats, shape or sizes */
  const char *mode;
  double value; /* pad's value; split's num_outputs when it has no sizes */
  int axis;
  int n_out, out_rank;
  int64_t out_dims[4][4];
  const double *y; /* the outputs one after another, C order */
} shape_ref;

#include "data/shape_ops_ref.h"

/* Element i of input k, as the generator makes it. */
static double ref_value(int64_t i, int k) { return (double)(((i + 100 * k) * 7) % 11 - 5); }

static fg_tensor *ref_tensor(fg_dtype dt, int rank, const int64_t *dims, int k) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  if (!t) return NULL;
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    elem_store(fg_tensor_data(t), dt, i, ref_value(i, k));
  return t;
}

static void tensor_dims(const fg_tensor *t, int64_t *d) {
  memcpy(d, fg_tensor_dims(t), (size_t)fg_tensor_rank(t) * sizeof *d);
}

/* Builds the case's node on placeholders x0..; its outputs in outs. */
static int build_ref(fg_graph *g, const shape_ref *c, fg_output *outs) {
  fg_output xs[8];
  for (int k = 0; k < c->n_in; k++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", k);
    xs[k] = fg_placeholder(g, name, (fg_dtype)c->dtype, c->rank, c->dims);
  }
  if (!strcmp(c->op, "pad")) {
    outs[0] = fg_pad(g, xs[0], c->ints, c->mode, c->value);
  } else if (!strcmp(c->op, "tile")) {
    outs[0] = fg_tile(g, xs[0], c->ints, c->n_ints);
  } else if (!strcmp(c->op, "expand")) {
    outs[0] = fg_expand(g, xs[0], c->n_ints, c->ints);
  } else if (!strcmp(c->op, "split")) {
    return fg_split(g, xs[0], c->axis, c->n_ints ? c->ints : NULL, c->n_out, outs);
  } else {
    outs[0] = fg_stack(g, xs, c->n_in, c->axis);
  }
  return outs[0].node >= 0 ? 0 : -1;
}

/* Runs the fetches with the feeds on a fresh session (device NULL: CPU). */
static int run_graph(fg_graph *g, const char *device, fg_tensor **feeds, int n_feeds,
                     const char **fetch, int n_fetch, fg_tensor **out, fg_status *st) {
  fg_feed f[8];
  char names[8][16];
  for (int k = 0; k < n_feeds; k++) {
    snprintf(names[k], sizeof names[k], "x%d", k);
    f[k] = (fg_feed){names[k], feeds[k]};
  }
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = device;
  fg_session *s = fg_session_new(g, &o, st);
  int rc = s ? fg_session_run(s, f, n_feeds, fetch, n_fetch, out, NULL, 0, st) : -1;
  fg_session_free(s);
  return rc;
}

static void check_ref(const shape_ref *c) {
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  fg_output outs[4];
  if (build_ref(g, c, outs) != 0) {
    fg_graph_status(g, st);
    FG_FAIL_AT("%s: build: %s", c->name, fg_status_message(st));
    goto done;
  }
  const char *fetch[4];
  char names[4][16];
  fg_set_name(g, outs[0], "y");
  for (int k = 0; k < c->n_out; k++) {
    snprintf(names[k], sizeof names[k], "y:%d", k);
    fetch[k] = names[k];
    int64_t d[FG_MAX_RANK];
    /* Inference gives NumPy's shapes at build time. */
    FG_CHECK_INT(fg_output_shape(g, (fg_output){outs[0].node, k}, d), c->out_rank);
    for (int i = 0; i < c->out_rank; i++)
      if (d[i] != c->out_dims[k][i])
        FG_FAIL_AT("%s: output %d dim %d is %lld, NumPy's %lld", c->name, k, i, (long long)d[i],
                   (long long)c->out_dims[k][i]);
  }
  fg_tensor *feeds[8] = {0}, *got[4] = {0};
  for (int k = 0; k < c->n_in; k++)
    feeds[k] = ref_tensor((fg_dtype)c->dtype, c->rank, c->dims, k);
  if (run_graph(g, NULL, feeds, c->n_in, fetch, c->n_out, got, st) != 0) {
    FG_FAIL_AT("%s: run: %s", c->name, fg_status_message(st));
  } else {
    int64_t at = 0;
    for (int k = 0; k < c->n_out; k++) {
      FG_CHECK_INT(fg_tensor_dtype(got[k]), c->dtype);
      for (int64_t i = 0; i < fg_tensor_num_elements(got[k]); i++, at++)
        if (tensor_elem(got[k], i) != c->y[at])
          FG_FAIL_AT("%s: output %d element %lld is %g, NumPy's %g", c->name, k, (long long)i,
                     tensor_elem(got[k], i), c->y[at]);
    }
  }
  for (int k = 0; k < 8; k++)
    fg_tensor_free(feeds[k]);
  for (int k = 0; k < 4; k++)
    fg_tensor_free(got[k]);
done:
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(shape_ops_match_numpy, "") {
  const int n = (int)(sizeof SHAPE_REFS / sizeof SHAPE_REFS[0]);
  FG_CHECK_INT(n, 19);
  for (int i = 0; i < n; i++)
    check_ref(&SHAPE_REFS[i]);
}

/* ---- views: flatten, squeeze, unsqueeze ---------------------------------- */

static void check_dims(fg_graph *g, fg_output o, int rank, const int64_t *want) {
  int64_t d[FG_MAX_RANK];
  int r = fg_output_shape(g, o, d);
  if (r != rank) {
    FG_FAIL_AT("rank %d, expected %d", r, rank);
    return;
  }
  for (int i = 0; i < rank; i++)
    if (d[i] != want[i])
      FG_FAIL_AT("dim %d is %lld, expected %lld", i, (long long)d[i], (long long)want[i]);
}

/* ONNX Flatten: [prod(d[:axis]), prod(d[axis:])], axis in [-r, r]; the
 * bytes are x's (a view), checked by fetching. */
FG_TEST(flatten_squeeze_unsqueeze_shapes, "") {
  fg_graph *g = fg_graph_new();
  const int64_t dims[4] = {2, 1, 3, 1};
  fg_output x = fg_placeholder(g, "x0", FG_I32, 4, dims);
  check_dims(g, fg_flatten(g, x, 0), 2, (int64_t[]){1, 6});
  check_dims(g, fg_flatten(g, x, 1), 2, (int64_t[]){2, 3});
  check_dims(g, fg_flatten(g, x, 4), 2, (int64_t[]){6, 1});
  check_dims(g, fg_flatten(g, x, -1), 2, (int64_t[]){6, 1});
  check_dims(g, fg_flatten(g, x, -4), 2, (int64_t[]){1, 6});
  check_dims(g, fg_squeeze(g, x, NULL, 0), 2, (int64_t[]){2, 3});
  check_dims(g, fg_squeeze(g, x, (int64_t[]){-1}, 1), 3, (int64_t[]){2, 1, 3});
  check_dims(g, fg_squeeze(g, x, (int64_t[]){1, 3}, 2), 2, (int64_t[]){2, 3});
  /* unsqueeze: positions in the output, as ONNX (and expand_dims) */
  check_dims(g, fg_unsqueeze(g, x, (int64_t[]){0, -1}, 2), 6, (int64_t[]){1, 2, 1, 3, 1, 1});
  check_dims(g, fg_unsqueeze(g, x, (int64_t[]){2}, 1), 5, (int64_t[]){2, 1, 1, 3, 1});
  fg_output y = fg_flatten(g, fg_squeeze(g, fg_unsqueeze(g, x, (int64_t[]){0}, 1), NULL, 0), 1);
  fg_set_name(g, y, "y");
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  check_dims(g, y, 2, (int64_t[]){2, 3});
  fg_status *st = fg_status_new();
  fg_tensor *in = ref_tensor(FG_I32, 4, dims, 0), *out = NULL;
  const char *fetch = "y";
  FG_REQUIRE(run_graph(g, NULL, &in, 1, &fetch, 1, &out, st) == 0);
  for (int64_t i = 0; i < 6; i++)
    FG_CHECK(tensor_elem(out, i) == ref_value(i, 0));
  fg_tensor_free(in);
  fg_tensor_free(out);
  fg_status_free(st);
  fg_graph_free(g);
}

/* An unknown batch dim: flatten's first dim and split's parts are unknown
 * at build time and right at run time. */
FG_TEST(shape_ops_unknown_batch, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x0", FG_F32, 3, (int64_t[]){-1, 2, 3});
  fg_output f = fg_flatten(g, x, 1), parts[2];
  FG_REQUIRE(fg_split(g, x, 0, NULL, 2, parts) == 0);
  check_dims(g, f, 2, (int64_t[]){-1, 6});
  check_dims(g, parts[1], 3, (int64_t[]){-1, 2, 3});
  fg_set_name(g, f, "f");
  fg_set_name(g, parts[0], "s");
  fg_status *st = fg_status_new();
  fg_tensor *in = ref_tensor(FG_F32, 3, (int64_t[]){5, 2, 3}, 0), *out[3] = {0};
  const char *fetch[3] = {"f", "s:0", "s:1"};
  FG_REQUIRE(run_graph(g, NULL, &in, 1, fetch, 3, out, st) == 0);
  int64_t d[FG_MAX_RANK];
  FG_CHECK_INT(fg_tensor_rank(out[0]), 2);
  tensor_dims(out[0], d);
  FG_CHECK(d[0] == 5 && d[1] == 6);
  tensor_dims(out[1], d);
  FG_CHECK_INT(d[0], 3); /* ceil(5 / 2) */
  tensor_dims(out[2], d);
  FG_CHECK_INT(d[0], 2);
  for (int64_t i = 0; i < 12; i++)
    FG_CHECK(tensor_elem(out[2], i) == ref_value(18 + i, 0));
  fg_tensor_free(in);
  for (int k = 0; k < 3; k++)
    fg_tensor_free(out[k]);
  fg_status_free(st);
  fg_graph_free(g);
}

/* pad and tile split their rows over the session's threads: 4 threads
 * give 1 thread's bytes, and spot values are reflect's and tile's. */
FG_TEST(pad_tile_threads_agree, "") {
  const int64_t dims[3] = {64, 3, 301};
  fg_tensor *in = ref_tensor(FG_F32, 3, dims, 0), *out[2][2] = {{0}};
  for (int t = 0; t < 2; t++) {
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x0", FG_F32, 3, dims);
    fg_set_name(g, fg_pad(g, x, (int64_t[]){5, 2, 7, 6, 1, 9}, "reflect", 0), "p");
    fg_set_name(g, fg_tile(g, x, (int64_t[]){2, 1, 3}, 3), "t");
    fg_feed f = {"x0", in};
    const char *fetch[2] = {"p", "t"};
    fg_session_options o;
    fg_session_options_init(&o);
    o.num_threads = t ? 4 : 1;
    fg_status *st = fg_status_new();
    fg_session *s = fg_session_new(g, &o, st);
    if (!s || fg_session_run(s, &f, 1, fetch, 2, out[t], NULL, 0, st) != 0)
      FG_FAIL_AT("run: %s", fg_status_message(st));
    fg_session_free(s);
    fg_status_free(st);
    fg_graph_free(g);
  }
  for (int k = 0; k < 2; k++) {
    FG_REQUIRE(out[0][k] && out[1][k]);
    FG_CHECK(fg_tensor_num_bytes(out[0][k]) == fg_tensor_num_bytes(out[1][k]));
    FG_CHECK(!memcmp(fg_tensor_data(out[0][k]), fg_tensor_data(out[1][k]),
                     fg_tensor_num_bytes(out[0][k])));
  }
  /* p is [75, 6, 317]; p[0, 0, 0] is x[5, 2, 7] (mirrored); p[74, 5, 316]
   * is x[64 - 1 - 6, 3 - 1 - 1, 301 - 1 - 9] (mirrored in the end pads) */
  FG_CHECK(tensor_elem(out[0][0], 0) == ref_value((5 * 3 + 2) * 301 + 7, 0));
  FG_CHECK(tensor_elem(out[0][0], 75 * 6 * 317 - 1) == ref_value((57 * 3 + 1) * 301 + 291, 0));
  /* t is [128, 3, 903]; t[100, 1, 700] is x[100 % 64, 1, 700 % 301] = x[36, 1, 98] */
  FG_CHECK(tensor_elem(out[0][1], (100 * 3 + 1) * 903 + 700) ==
           ref_value((36 * 3 + 1) * 301 + 98, 0));
  for (int t = 0; t < 2; t++)
    fg_tensor_free(out[t][0]), fg_tensor_free(out[t][1]);
  fg_tensor_free(in);
}

/* ---- refusals ---------------------------------------------------------------- */

/* The graph's first error: FG_INVALID_GRAPH naming node `node` and
 * containing `what`. */
static void check_refused(fg_graph *g, const char *node, const char *what) {
  fg_status *st = fg_status_new();
  fg_code code = fg_graph_status(g, st);
  if (code != FG_INVALID_GRAPH) FG_FAIL_AT("code %d (%s)", (int)code, fg_status_message(st));
  FG_CHECK_STR_CONTAINS(fg_status_message(st), node);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), what);
  fg_status_free(st);
}

/* x: f32 [3, 4] placeholder "x0" in a fresh graph. */
static fg_graph *graph_x(fg_output *x) {
  fg_graph *g = fg_graph_new();
  *x = fg_placeholder(g, "x0", FG_F32, 2, (int64_t[]){3, 4});
  return g;
}

FG_TEST(pad_refusals, "badinput") {
  fg_output x;
  fg_graph *g = graph_x(&x);
  fg_pad(g, x, (int64_t[]){0, 1, -2, 0}, "constant", 0);
  check_refused(g, "'pad_", "pads[2] = -2 is negative");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_pad(g, x, (int64_t[]){3, 0, 0, 0}, "reflect", 0);
  check_refused(g, "'pad_", "reflect pads of dim 0 are 3 and 0, but each must be below the dim, 3");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_pad(g, x, (int64_t[]){0, 0, 0, 4}, "reflect", 0);
  check_refused(g, "'pad_", "reflect pads of dim 1 are 0 and 4");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_pad(g, x, (int64_t[]){0, 0, 0, 0}, "wrap", 0);
  check_refused(g, "'pad_", "mode 'wrap' is not one of constant, reflect, edge");
  fg_graph_free(g);
  /* pads of the wrong length, through fg_op */
  g = graph_x(&x);
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_ints(a, "pads", (int64_t[]){1, 1}, 2);
  fg_op(g, "pad", "p", &x, 1, a);
  fg_attrs_free(a);
  check_refused(g, "'p' (pad)",
                "pads [1,1] has 2 entries, but input 0 shape [3,4] needs 2 * rank = 4");
  fg_graph_free(g);
  /* edge with nothing to repeat */
  g = fg_graph_new();
  x = fg_placeholder(g, "x0", FG_F32, 2, (int64_t[]){0, 4});
  fg_pad(g, x, (int64_t[]){1, 0, 0, 0}, "edge", 0);
  check_refused(g, "'pad_", "edge pads of dim 0 are 1 and 0, but the dim is empty");
  fg_graph_free(g);
}

/* A reflect pad on an unknown dim is checked when the shape is fed. */
FG_TEST(pad_reflect_checked_at_run_time, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x0", FG_F32, 2, (int64_t[]){-1, 4});
  fg_set_name(g, fg_pad(g, x, (int64_t[]){2, 0, 0, 0}, "reflect", 0), "padded");
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  fg_status *st = fg_status_new();
  fg_tensor *in = ref_tensor(FG_F32, 2, (int64_t[]){2, 4}, 0), *out = NULL;
  const char *fetch = "padded";
  FG_CHECK(run_graph(g, NULL, &in, 1, &fetch, 1, &out, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'padded'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "reflect pads of dim 0 are 2 and 0");
  fg_tensor_free(in);
  fg_tensor_free(out);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(flatten_squeeze_refusals, "badinput") {
  fg_output x;
  fg_graph *g = graph_x(&x);
  fg_flatten(g, x, 3);
  check_refused(g, "'flatten_", "axis 3 is out of range [-2, 2] for input 0 shape [3,4]");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_squeeze(g, x, (int64_t[]){1}, 1);
  check_refused(g, "'squeeze_",
                "axes[0] = 1 names dim 1 of input 0 shape [3,4], which is 4, not 1");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_squeeze(g, x, (int64_t[]){-3}, 1);
  check_refused(g, "'squeeze_", "axes[0] = -3 is out of range [-2, 2)");
  fg_graph_free(g);
  g = fg_graph_new();
  x = fg_placeholder(g, "x0", FG_F32, 3, (int64_t[]){1, 2, 1});
  fg_squeeze(g, x, (int64_t[]){0, -3}, 2);
  check_refused(g, "'squeeze_", "name dim 0 twice");
  fg_graph_free(g);
  g = fg_graph_new();
  x = fg_placeholder(g, "x0", FG_F32, 2, (int64_t[]){-1, 1});
  fg_squeeze(g, x, NULL, 0);
  check_refused(g, "'squeeze_", "dim 0 of input 0 shape [?,1] is unknown until run time");
  fg_graph_free(g);
}

FG_TEST(expand_tile_refusals, "badinput") {
  fg_output x;
  fg_graph *g = graph_x(&x);
  fg_expand(g, x, 2, (int64_t[]){3, 5});
  check_refused(g, "'expand_", "input 0 shape [3,4] does not broadcast with shape [3,5]");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_expand(g, x, 2, (int64_t[]){-1, 4});
  check_refused(g, "'expand_", "shape[0] = -1 is negative");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_tile(g, x, (int64_t[]){2}, 1);
  check_refused(g, "'tile_", "repeats [2] has 1 entries, but input 0 shape [3,4] has rank 2");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_tile(g, x, (int64_t[]){2, -1}, 2);
  check_refused(g, "'tile_", "repeats[1] = -1 is negative");
  fg_graph_free(g);
}

FG_TEST(split_stack_refusals, "badinput") {
  fg_output x, outs[4];
  fg_graph *g = graph_x(&x);
  FG_CHECK_INT(fg_split(g, x, 1, (int64_t[]){1, 2}, 2, outs), -1);
  FG_CHECK(outs[0].node < 0 && outs[1].node < 0);
  check_refused(g, "'split_", "sizes [1,2] add up to 3, but dim 1 of input 0 shape [3,4] is 4");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_split(g, x, 1, (int64_t[]){5, -1}, 2, outs);
  check_refused(g, "'split_", "sizes[1] = -1 is negative");
  fg_graph_free(g);
  g = fg_graph_new();
  x = fg_placeholder(g, "x0", FG_F32, 1, (int64_t[]){5});
  fg_split(g, x, 0, NULL, 4, outs); /* 2, 2, 2 leave -1 */
  check_refused(g, "'split_", "num_outputs 4 cannot split dim 0 of input 0 shape [5] (5)");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_split(g, x, 2, NULL, 2, outs);
  check_refused(g, "'split_", "axis");
  fg_graph_free(g);
  /* through fg_op: neither attribute, both, and a count of 0 */
  const char *why[3] = {"needs sizes (ints) or num_outputs (int)",
                        "give either sizes or num_outputs, not both",
                        "num_outputs gives 0 outputs; expected 1 to 65536"};
  for (int c = 0; c < 3; c++) {
    g = graph_x(&x);
    fg_attrs *a = fg_attrs_new();
    if (c == 1) fg_attrs_set_ints(a, "sizes", (int64_t[]){4}, 1);
    if (c >= 1) fg_attrs_set_int(a, "num_outputs", c == 1 ? 1 : 0);
    fg_op(g, "split", "sp", &x, 1, a);
    fg_attrs_free(a);
    check_refused(g, "'sp' (split)", why[c]);
    fg_graph_free(g);
  }
  g = graph_x(&x);
  fg_output y = fg_placeholder(g, "x1", FG_F32, 2, (int64_t[]){3, 5});
  fg_stack(g, (fg_output[]){x, y}, 2, 0);
  check_refused(g, "'stack_", "input 1 shape [3,5] differs from input 0 shape [3,4]");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_stack(g, &x, 1, 3);
  check_refused(g, "'stack_", "axis 3 is out of range [-3, 2]");
  fg_graph_free(g);
}

/* pad_grad and tile_grad (made by fg_gradients, or through fg_op) check dy
 * against like; pads that overflow a dim and a stack of two dtypes are
 * refused too. */
FG_TEST(gradient_ops_and_overflow_refusals, "badinput") {
  const char *ops[2] = {"pad_grad", "tile_grad"};
  const char *want[2] = {"input 0 (dy) shape [3,5] is not the pad of input 1 (like) shape [3,4] "
                         "at dim 1",
                         "input 0 (dy) shape [3,5] is not the tile of input 1 (like) shape [3,4] "
                         "at dim 1"};
  for (int k = 0; k < 2; k++) {
    fg_output x;
    fg_graph *g = graph_x(&x);
    fg_output dy = fg_placeholder(g, "dy", FG_F32, 2, (int64_t[]){3, 5});
    fg_attrs *a = fg_attrs_new();
    if (k)
      fg_attrs_set_ints(a, "repeats", (int64_t[]){1, 1}, 2);
    else
      fg_attrs_set_ints(a, "pads", (int64_t[]){0, 0, 0, 0}, 4);
    fg_op(g, ops[k], "gr", (fg_output[]){dy, x}, 2, a);
    fg_attrs_free(a);
    check_refused(g, "'gr'", want[k]);
    fg_graph_free(g);
  }
  fg_output x;
  fg_graph *g = graph_x(&x);
  fg_pad(g, x, (int64_t[]){0, INT64_MAX - 2, 0, 0}, "constant", 0);
  check_refused(g, "'pad_", "dim 1 (4) plus pads 9223372036854775805 and 0 overflows");
  fg_graph_free(g);
  g = graph_x(&x);
  fg_output y = fg_placeholder(g, "x1", FG_F64, 2, (int64_t[]){3, 4});
  fg_stack(g, (fg_output[]){x, y}, 2, 0);
  check_refused(g, "'stack_", "input 1 dtype f64 does not match input 0 dtype f32");
  fg_graph_free(g);
}

/* ---- .fgb ----------------------------------------------------------------- */

/* A graph with every new op (split's three outputs all used) saved and
 * loaded gives the same values; the loader refuses a file whose split
 * declares another output count than its attributes give. */
static fg_graph *all_ops_graph(void) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x0", FG_F32, 3, (int64_t[]){2, 3, 4}), p[3];
  fg_output a = fg_pad(g, x, (int64_t[]){0, 1, 2, 1, 0, 1}, "reflect", 0);
  fg_output b = fg_pad(g, x, (int64_t[]){1, 0, 0, 0, 2, 3}, "constant", -0.5);
  fg_output c =
      fg_tile(g, fg_pad(g, x, (int64_t[]){0, 0, 1, 0, 0, 1}, "edge", 0), (int64_t[]){1, 2, 1}, 3);
  fg_split(g, x, 2, (int64_t[]){1, 0, 3}, 3, p);
  fg_output s = fg_stack(g, (fg_output[]){fg_expand(g, p[0], 2, (int64_t[]){1, 3}), p[2]}, 2, -1);
  fg_output f =
      fg_flatten(g, fg_squeeze(g, fg_unsqueeze(g, p[1], (int64_t[]){1}, 1), (int64_t[]){1}, 1), 2);
  fg_set_name(g, a, "a");
  fg_set_name(g, b, "b");
  fg_set_name(g, c, "c");
  fg_set_name(g, s, "s");
  fg_set_name(g, f, "f");
  return g;
}

FG_TEST(shape_ops_fgb_round_trip, "") {
  fg_graph *g = all_ops_graph();
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  fg_status *st = fg_status_new();
  void *bytes = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &bytes, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(bytes, size, st);
  if (!h) FG_FAIL_AT("load: %s", fg_status_message(st));
  FG_REQUIRE(h != NULL);
  const char *fetch[5] = {"a", "b", "c", "s", "f"};
  fg_tensor *in = ref_tensor(FG_F32, 3, (int64_t[]){2, 3, 4}, 0), *y0[5] = {0}, *y1[5] = {0};
  FG_REQUIRE(run_graph(g, NULL, &in, 1, fetch, 5, y0, st) == 0);
  FG_REQUIRE(run_graph(h, NULL, &in, 1, fetch, 5, y1, st) == 0);
  for (int k = 0; k < 5; k++) {
    FG_CHECK(fg_tensor_num_bytes(y0[k]) == fg_tensor_num_bytes(y1[k]));
    FG_CHECK(memcmp(fg_tensor_data(y0[k]), fg_tensor_data(y1[k]), fg_tensor_num_bytes(y0[k])) == 0);
  }
  /* b's corner is the fill; a's first row reflects x's second along dim 1 */
  FG_CHECK(tensor_elem(y0[1], 0) == -0.5);
  FG_CHECK(tensor_elem(y0[0], 0) == ref_value(4 + 2, 0));
  int64_t d[FG_MAX_RANK];
  FG_CHECK_INT(fg_tensor_rank(y0[3]), 4);
  tensor_dims(y0[3], d);
  FG_CHECK(d[0] == 2 && d[1] == 3 && d[2] == 3 && d[3] == 2);
  tensor_dims(y0[4], d);
  FG_CHECK(d[0] == 6 && d[1] == 0);
  for (int k = 0; k < 5; k++)
    fg_tensor_free(y0[k]), fg_tensor_free(y1[k]);
  fg_tensor_free(in);
  fg_graph_free(h);
  free(bytes);
  fg_status_free(st);
  fg_graph_free(g);
}

/* The JSON form goes through the binary loader: the same graph comes back,
 * and a split whose attributes give another output count than the file
 * declares is refused, naming the node and both counts. */
FG_TEST(shape_ops_json_round_trip, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x0", FG_F32, 1, (int64_t[]){6}), p[3];
  FG_REQUIRE(fg_split(g, x, 0, NULL, 3, p) == 0);
  fg_set_name(g, p[0], "sp");
  fg_status *st = fg_status_new();
  char path[64];
  snprintf(path, sizeof path, "/tmp/fg_test_shape_ops_%d.json", (int)getpid());
  FG_REQUIRE(fg_graph_save_json(g, path, st) == 0);
  fg_graph *h = fg_graph_load_json(path, st);
  if (!h) FG_FAIL_AT("load: %s", fg_status_message(st));
  FG_REQUIRE(h != NULL);
  int64_t d[FG_MAX_RANK];
  FG_CHECK_INT(fg_output_shape(h, fg_graph_find_output(h, "sp:2"), d), 1);
  FG_CHECK_INT(d[0], 2);
  fg_graph_free(h);
  /* num_outputs 3 -> 2 in the text; the file still declares 3 outputs */
  FILE *f = fopen(path, "rb");
  FG_REQUIRE(f != NULL);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char *at = strstr(text, "\"num_outputs\"");
  at = at ? strstr(at, "\"v\": 3") : NULL;
  FG_REQUIRE(at != NULL);
  at[5] = '2';
  f = fopen(path, "wb");
  FG_REQUIRE(f != NULL);
  fwrite(text, 1, n, f);
  fclose(f);
  h = fg_graph_load_json(path, st);
  FG_CHECK(h == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'sp'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "declares 3 output(s), the node has 2");
  fg_graph_free(h);
  remove(path);
  fg_status_free(st);
  fg_graph_free(g);
}

/* ---- CUDA against the CPU --------------------------------------------------- */

/* Every op on a cuda:0 session against a CPU session on the same inputs:
 * the copies are exact and the gradients (pad_grad, tile_grad) add in
 * the CPU's order, so every output matches bit for bit. */
FG_TEST(cuda_shape_ops_match_cpu, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  fg_graph *g = all_ops_graph();
  fg_output x = fg_graph_find_output(g, "x0");
  fg_output ys[5], dx;
  const char *names[5] = {"a", "b", "c", "s", "f"};
  fg_output sum = FG_NO_OUTPUT;
  for (int k = 0; k < 5; k++) {
    ys[k] = fg_graph_find_output(g, names[k]);
    fg_output r = fg_reduce_sum(g, fg_mul(g, ys[k], ys[k]), NULL, 0, 0);
    sum = k ? fg_add(g, sum, r) : r;
  }
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_gradients(g, &sum, 1, &x, 1, NULL, &dx, st) == 0);
  fg_set_name(g, dx, "dx");
  const char *fetch[6] = {"a", "b", "c", "s", "f", "dx"};
  uint64_t rng = 7;
  fg_tensor *in = fg_tensor_new(FG_F32, 3, (int64_t[]){2, 3, 4}, NULL);
  for (int64_t i = 0; i < 24; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    ((float *)fg_tensor_data(in))[i] = (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
  }
  fg_tensor *cpu[6] = {0}, *gpu[6] = {0};
  FG_REQUIRE(run_graph(g, NULL, &in, 1, fetch, 6, cpu, st) == 0);
  if (run_graph(g, "cuda:0", &in, 1, fetch, 6, gpu, st) != 0)
    FG_FAIL_AT("cuda session: %s", fg_status_message(st));
  for (int k = 0; k < 6; k++) {
    FG_REQUIRE(cpu[k] && gpu[k]);
    FG_CHECK(fg_tensor_num_bytes(cpu[k]) == fg_tensor_num_bytes(gpu[k]));
    if (memcmp(fg_tensor_data(cpu[k]), fg_tensor_data(gpu[k]), fg_tensor_num_bytes(cpu[k])))
      FG_FAIL_AT("%s differs between CPU and GPU", fetch[k]);
    fg_tensor_free(cpu[k]), fg_tensor_free(gpu[k]);
  }
  fg_tensor_free(in);
  fg_status_free(st);
  fg_graph_free(g);
#endif
}
