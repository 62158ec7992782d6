/* fused_conv2d and fused_conv2d_add (graph/infer_fused_conv.c; CPU:
 * kernels/cpu/conv.c and conv_dnnl.c): the same bits as conv2d, add and
 * relu (or clip) run one after another, through plans with 2 threads (oneDNN's
 * batch cut into parts, each running the epilogue on its rows, and a
 * batch that is not cut, whose epilogue runs over the threads after the
 * primitive; y and z in C order and in NC16; groups, strides, 1x1, a
 * batch of 1), with NaN and -0.0 in the residual (the relu keeps NaN);
 * values against a double loop written here; the kernel called without
 * plan-time state; shape inference and FLOPs; and bad inputs: a bias of
 * the wrong length, a residual of the wrong shape or dtype, an unknown
 * activation. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

typedef struct cc {
  fg_dtype dt;
  int64_t n, c, h, o, k, stride, pad, groups;
  int bias, add;
  int relu;   /* the activation: 0 none, 1 relu, 2 clip(CLIP_LO, CLIP_HI) */
  int z_conv; /* z is conv2d(x, wz), an intermediate (NC16 when o % 16 == 0); else fed */
  int tail;   /* the result goes into a 1x1 conv2d "out": it is an intermediate too */
} cc;

static const cc CASES[] = {
    {FG_F32, 4, 3, 9, 5, 3, 1, 1, 1, 1, 1, 1, 0, 0},   /* z fed, C order; blocked dst */
    {FG_F32, 4, 16, 8, 16, 3, 1, 1, 1, 1, 1, 1, 1, 1}, /* z and y in NC16: z copied */
    {FG_F32, 3, 4, 10, 6, 3, 2, 1, 2, 0, 0, 1, 0, 0},  /* groups, stride 2, relu only */
    {FG_F32, 1, 8, 6, 8, 1, 1, 0, 1, 0, 1, 0, 0, 0},   /* 1x1, batch 1, add only */
    {FG_F32, 5, 16, 7, 16, 3, 1, 1, 1, 1, 0, 1, 0, 1}, /* batch 5, relu, NC16 output */
    {FG_F32, 6, 16, 5, 32, 3, 1, 1, 1, 1, 1, 0, 1, 1}, /* NC16, add without relu */
    /* Batch 1 with 32 or 64 output channels: cut into parts of output
     * channels (whole 16-channel blocks) on a machine with 2 cores or
     * more, each part's epilogue on its slice; x converted once for all
     * parts (3 channels), or read in C order. */
    {FG_F32, 1, 3, 9, 32, 3, 1, 1, 1, 1, 1, 1, 0, 0},  /* z fed, C order */
    {FG_F32, 1, 16, 8, 64, 3, 2, 1, 1, 1, 1, 1, 1, 1}, /* z and y in NC16, stride 2 */
    {FG_F32, 1, 16, 6, 64, 1, 1, 0, 1, 0, 0, 1, 0, 1}, /* 1x1, relu only, NC16 output */
    /* Parts of unequal size (58 channels: 32 and 26 on 2 cores), and of
     * groups (depthwise: each part reads its own channels of x). */
    {FG_F32, 1, 16, 9, 58, 3, 1, 1, 1, 1, 1, 1, 0, 0},  /* z fed, C order */
    {FG_F32, 1, 58, 9, 58, 3, 1, 1, 58, 1, 1, 1, 0, 0}, /* depthwise, z fed */
    {FG_F32, 1, 64, 8, 64, 3, 1, 1, 64, 0, 0, 1, 0, 1}, /* depthwise, relu, NC16 output */
    {FG_F64, 2, 3, 7, 4, 3, 1, 1, 1, 1, 1, 1, 0, 0},    /* f64: the direct loops */
    {FG_F64, 3, 4, 6, 6, 3, 2, 1, 2, 1, 0, 0, 0, 0},    /* f64, bias only ("none") */
    /* clip (relu6's form) in place of relu: the same cuts and layouts. */
    {FG_F32, 4, 3, 9, 5, 3, 1, 1, 1, 1, 1, 2, 0, 0},   /* z fed (its NaN kept), C order */
    {FG_F32, 5, 16, 7, 16, 3, 1, 1, 1, 1, 0, 2, 0, 1}, /* batch 5, clip only, NC16 output */
    {FG_F32, 1, 16, 8, 64, 3, 2, 1, 1, 1, 1, 2, 1, 1}, /* channel parts, NC16 */
    {FG_F64, 2, 3, 7, 4, 3, 1, 1, 1, 1, 1, 2, 0, 0},   /* f64: the direct loops */
};
#define CLIP_LO (-0.25)
#define CLIP_HI 0.5
#define N_CASES (sizeof CASES / sizeof CASES[0])

static int64_t out_side(const cc *c) { return (c->h + 2 * c->pad - c->k) / c->stride + 1; }

static fg_conv2d_opts opts_of(const cc *c) {
  fg_conv2d_opts o = {
      {c->stride, c->stride}, {c->pad, c->pad, c->pad, c->pad}, {1, 1}, c->groups, 0, {0, 0}};
  return o;
}

/* The case as the chain (conv2d "y0", add "s", relu "y") or as the fused
 * node "y"; with a tail, "out" = conv2d(y, 1x1). The node to fetch. */
static fg_graph *build(const cc *c, int fused, const char **fetch) {
  fg_graph *g = fg_graph_new();
  const int64_t side = out_side(c);
  const int64_t xd[4] = {c->n, c->c, c->h, c->h}, wd[4] = {c->o, c->c / c->groups, c->k, c->k};
  const int64_t zd[4] = {c->n, c->o, side, side}, bd[1] = {c->o}, td[4] = {16, c->o, 1, 1};
  fg_output x = fg_placeholder(g, "x", c->dt, 4, xd);
  fg_output w = rand_constant(g, "w", c->dt, 4, wd, 11);
  fg_output b = c->bias ? rand_constant(g, "b", c->dt, 1, bd, 12) : FG_NO_OUTPUT;
  fg_conv2d_opts o = opts_of(c);
  fg_output z = FG_NO_OUTPUT;
  if (c->add)
    z = c->z_conv
            ? fg_set_name(
                  g, fg_conv2d(g, x, rand_constant(g, "wz", c->dt, 4, wd, 13), FG_NO_OUTPUT, &o),
                  "z")
            : fg_placeholder(g, "z", c->dt, 4, zd);
  fg_output y;
  if (fused) {
    fg_output in[4] = {x, w};
    int n = 2;
    if (c->add) in[n++] = z;
    if (c->bias) in[n++] = b;
    fg_attrs *at = fg_attrs_new();
    const int64_t st[2] = {c->stride, c->stride}, pd[4] = {c->pad, c->pad, c->pad, c->pad};
    fg_attrs_set_ints(at, "strides", st, 2);
    fg_attrs_set_ints(at, "pads", pd, 4);
    fg_attrs_set_int(at, "groups", c->groups);
    fg_attrs_set_string(at, "activation", c->relu == 2 ? "clip" : c->relu ? "relu" : "none");
    if (c->relu == 2)
      fg_attrs_set_float(at, "min", CLIP_LO), fg_attrs_set_float(at, "max", CLIP_HI);
    y = fg_op(g, c->add ? "fused_conv2d_add" : "fused_conv2d", "y", in, n, at);
    fg_attrs_free(at);
  } else {
    y = fg_set_name(g, fg_conv2d(g, x, w, b, &o), c->add || c->relu ? "y0" : "y");
    if (c->add) y = fg_set_name(g, fg_add(g, y, z), c->relu ? "s" : "y");
    if (c->relu)
      y = fg_set_name(g, c->relu == 2 ? fg_clip(g, y, CLIP_LO, CLIP_HI) : fg_relu(g, y), "y");
  }
  *fetch = "y";
  if (c->tail) {
    fg_conv2d_opts one = {{1, 1}, {0, 0, 0, 0}, {1, 1}, 1, 0, {0, 0}};
    fg_set_name(g, fg_conv2d(g, y, rand_constant(g, "wt", c->dt, 4, td, 14), FG_NO_OUTPUT, &one),
                "out");
    *fetch = "out";
  }
  return g;
}

/* x, and z with a NaN, -0.0 and values that cancel the convolution's. */
static void feeds_of(const cc *c, fg_tensor **x, fg_tensor **z) {
  const int64_t side = out_side(c);
  const int64_t xd[4] = {c->n, c->c, c->h, c->h}, zd[4] = {c->n, c->o, side, side};
  *x = rand_tensor(c->dt, 4, xd, 21);
  *z = c->add && !c->z_conv ? rand_tensor(c->dt, 4, zd, 22) : NULL;
  if (*z) {
    elem_store(fg_tensor_data(*z), c->dt, 3, NAN);
    elem_store(fg_tensor_data(*z), c->dt, 8, -0.0);
  }
}

/* `fetch` of g with 2 threads and no passes; NULL on failure. */
static fg_tensor *run(fg_graph *g, const char *fetch, const fg_tensor *x, const fg_tensor *z) {
  fg_status *st = fg_status_new();
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 2;
  so.no_passes = 1;
  fg_session *s = fg_session_new(g, &so, st);
  fg_feed feeds[2] = {{"x", x}, {"z", z}};
  fg_tensor *out = NULL;
  if (s && fg_session_run(s, feeds, z ? 2 : 1, &fetch, 1, &out, NULL, 0, st) != 0) out = NULL;
  if (!out) fprintf(stderr, "run %s: %s\n", fetch, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return out;
}

/* Same bytes, any two NaNs equal (their payloads are the hardware's). */
static int same_bits(const fg_tensor *a, const fg_tensor *b) {
  if (!a || !b || fg_tensor_num_bytes(a) != fg_tensor_num_bytes(b)) return 0;
  const fg_dtype dt = fg_tensor_dtype(a);
  for (int64_t i = 0; i < fg_tensor_num_elements(a); i++) {
    double u = tensor_elem(a, i), v = tensor_elem(b, i);
    if (isnan(u) && isnan(v)) continue;
    if (dt == FG_F32 ? memcmp((const float *)fg_tensor_data(a) + i,
                              (const float *)fg_tensor_data(b) + i, 4) != 0
                     : memcmp(&u, &v, 8) != 0)
      return 0;
  }
  return 1;
}

FG_TEST(fused_conv_bits_equal_conv_add_relu, "") {
  for (size_t k = 0; k < N_CASES; k++) {
    const cc *c = &CASES[k];
    const char *fa = NULL, *fb = NULL;
    fg_graph *chain = build(c, 0, &fa), *fused = build(c, 1, &fb);
    FG_REQUIRE(chain && fused && !fg_graph_failed(fused));
    fg_tensor *x, *z;
    feeds_of(c, &x, &z);
    fg_tensor *want = run(chain, fa, x, z), *got = run(fused, fb, x, z);
    if (!same_bits(want, got)) FG_FAIL_AT("case %zu: the fused result differs from the chain", k);
    /* The NaN in z survives the relu (oneDNN's eltwise relu would zero it). */
    if (got && z && !c->tail) FG_CHECK(isnan(tensor_elem(got, 3)));
    fg_tensor_free(want), fg_tensor_free(got), fg_tensor_free(x), fg_tensor_free(z);
    fg_graph_free(chain), fg_graph_free(fused);
  }
}

/* act(conv(x, w) + b + z) by a double loop over the case's data. */
static double ref_at(const cc *c, const fg_tensor *x, const fg_tensor *w, const fg_tensor *b,
                     const fg_tensor *z, int64_t i, double *mag) {
  const int64_t side = out_side(c), cg = c->c / c->groups, og = c->o / c->groups;
  const int64_t ow = i % side, oh = i / side % side, oc = i / (side * side) % c->o,
                n = i / (side * side * c->o);
  double acc = 0;
  *mag = 0;
  for (int64_t ci = 0; ci < cg; ci++)
    for (int64_t kh = 0; kh < c->k; kh++)
      for (int64_t kw = 0; kw < c->k; kw++) {
        int64_t ih = oh * c->stride - c->pad + kh, iw = ow * c->stride - c->pad + kw;
        if (ih < 0 || iw < 0 || ih >= c->h || iw >= c->h) continue;
        int64_t ch = oc / og * cg + ci;
        double t = tensor_elem(x, ((n * c->c + ch) * c->h + ih) * c->h + iw) *
                   tensor_elem(w, ((oc * cg + ci) * c->k + kh) * c->k + kw);
        acc += t, *mag += fabs(t);
      }
  if (b) acc += tensor_elem(b, oc), *mag += fabs(tensor_elem(b, oc));
  if (z) acc += tensor_elem(z, i), *mag += fabs(tensor_elem(z, i));
  if (c->relu == 2) return acc < CLIP_LO ? CLIP_LO : acc > CLIP_HI ? CLIP_HI : acc;
  return c->relu && acc < 0 ? 0 : acc;
}

/* The fused result against the double loop: f64 to 1e-13 and f32 to
 * 1e-6 of the magnitudes summed (rounding of the sums' terms). */
FG_TEST(fused_conv_values_vs_double_loop, "") {
  for (size_t k = 0; k < N_CASES; k++) {
    const cc *c = &CASES[k];
    if (c->tail || c->z_conv) continue;
    const char *f = NULL;
    fg_graph *g = build(c, 1, &f);
    fg_tensor *x, *z;
    feeds_of(c, &x, &z);
    const int64_t wd[4] = {c->o, c->c / c->groups, c->k, c->k}, bd[1] = {c->o};
    fg_tensor *w = rand_tensor(c->dt, 4, wd, 11), *b = c->bias ? rand_tensor(c->dt, 1, bd, 12) : 0;
    fg_tensor *got = run(g, f, x, z);
    FG_REQUIRE(got);
    const double tol = c->dt == FG_F64 ? 1e-13 : 1e-6;
    int bad = 0;
    for (int64_t i = 0; i < fg_tensor_num_elements(got); i++) {
      double mag, want = ref_at(c, x, w, b, z, i, &mag), v = tensor_elem(got, i);
      if (isnan(want) ? !isnan(v) : fabs(v - want) > tol * (1 + mag)) bad++;
    }
    if (bad) FG_FAIL_AT("case %zu: %d values off the double loop", k, bad);
    fg_tensor_free(got), fg_tensor_free(w), fg_tensor_free(b);
    fg_tensor_free(x), fg_tensor_free(z);
    fg_graph_free(g);
  }
}

/* Called without plan-time state (constant folding does so): the same
 * bits as through a plan. */
FG_TEST(fused_conv_kernel_without_state, "") {
  const cc *c = &CASES[0];
  const char *f = NULL;
  fg_graph *g = build(c, 1, &f);
  fg_tensor *x, *z;
  feeds_of(c, &x, &z);
  fg_tensor *want = run(g, f, x, z);
  FG_REQUIRE(want);
  const int64_t side = out_side(c);
  const int64_t wd[4] = {c->o, c->c, c->k, c->k}, bd[1] = {c->o}, yd[4] = {c->n, c->o, side, side};
  fg_tensor *w = rand_tensor(c->dt, 4, wd, 11), *b = rand_tensor(c->dt, 1, bd, 12);
  fg_tensor *y = fg_tensor_new(c->dt, 4, yd, NULL);
  const fg_tensor *ts[4] = {x, w, z, b};
  fg_kbuf in[4], out = {.dtype = c->dt, .rank = 4, .data = fg_tensor_data(y)};
  memcpy(out.dims, yd, sizeof yd);
  for (int i = 0; i < 4; i++) {
    in[i] = (fg_kbuf){.dtype = c->dt, .rank = fg_tensor_rank(ts[i]), .data = fg_tensor_data(ts[i])};
    memcpy(in[i].dims, fg_tensor_dims(ts[i]), (size_t)in[i].rank * sizeof(int64_t));
  }
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.fused_conv.conv = (fg_conv_params){{1, 1}, {1, 1}, {1, 1, 1, 1}, 1, {0, 0}};
  p.fused_conv.activation = FG_ACTIVATION_RELU;
  char err[256] = "";
  fg_kctx ctx = {in,   4,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
  FG_CHECK_INT(fg_cpu_kernel("fused_conv2d_add", c->dt)(&ctx), 0);
  FG_CHECK(same_bits(want, y));
  fg_tensor_free(want), fg_tensor_free(w), fg_tensor_free(b), fg_tensor_free(y);
  fg_tensor_free(x), fg_tensor_free(z);
  fg_graph_free(g);
}

/* Output shape, FLOPs (conv2d's 2 N O OH OW C/g kH kW and one per output
 * element for each of the bias, the residual and the relu) and the parsed
 * parameters. */
FG_TEST(fused_conv_shapes_flops_params, "") {
  const cc *c = &CASES[0];
  const char *f = NULL;
  fg_graph *g = build(c, 1, &f);
  FG_REQUIRE(!fg_graph_failed(g));
  const int y = fg_graph_find(g, "y");
  const fg_node *n = &g->nodes[y];
  FG_CHECK_INT(n->outputs[0].rank, 4);
  const int64_t want[4] = {4, 5, 9, 9};
  FG_CHECK(memcmp(n->outputs[0].dims, want, sizeof want) == 0);
  fg_tinfo t[4];
  for (int i = 0; i < 4; i++)
    t[i] = g->nodes[n->inputs[i].node].outputs[n->inputs[i].index];
  const int64_t e = 4 * 5 * 9 * 9;
  FG_CHECK_INT(fg_op_table[FG_OP_FUSED_CONV2D_ADD].flops(n, t, n->outputs),
               2 * e * 3 * 3 * 3 + 3 * e);
  fg_op_params p;
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_op_parse_params(n, t, &p, st), 0);
  FG_CHECK_INT(p.fused_conv.activation, FG_ACTIVATION_RELU);
  FG_CHECK_INT(p.fused_conv.conv.pad[3], 1);
  FG_CHECK_INT(p.fused_conv.conv.stride[0], 1);
  fg_status_free(st);
  fg_graph_free(g);
}

/* Refusals name the node, the input and the values. */
FG_TEST(fused_conv_graph_bad_inputs, "badinput") {
  struct {
    const char *op, *act;
    int bias_len, z_w, z_f64;
    int bounds; /* clip's attributes: 0 none, 1 max = 6 only, 2 min = 6 and max = 0 */
    const char *want;
  } cases[] = {
      {"fused_conv2d_add", "relu", 7, 9, 0, 0,
       "node 'fc' (fused_conv2d_add): input 3 (b) has 7 entries, expected the 5 output channels"},
      {"fused_conv2d", "none", 4, 9, 0, 0,
       "node 'fc' (fused_conv2d): input 2 (b) has 4 entries, expected the 5 output channels"},
      {"fused_conv2d_add", "relu", 5, 8, 0, 0,
       "node 'fc' (fused_conv2d_add): input 2 (z) shape [4,5,9,8] must be the convolution's "
       "output shape [4,5,9,9]"},
      {"fused_conv2d_add", "none", 5, 9, 1, 0,
       "node 'fc' (fused_conv2d_add): input 2 (z) dtype f64 differs from the convolution's f32"},
      {"fused_conv2d_add", "gelu", 5, 9, 0, 0,
       "node 'fc' (fused_conv2d_add): attribute 'activation' = 'gelu' is not an activation"},
      {"fused_conv2d", "clip", 5, 9, 0, 1,
       "node 'fc' (fused_conv2d): attribute 'min' is missing; clip needs both min and max"},
      {"fused_conv2d", "clip", 5, 9, 0, 0,
       "node 'fc' (fused_conv2d): attribute 'min' is missing; clip needs both min and max"},
      {"fused_conv2d_add", "clip", 5, 9, 0, 2,
       "node 'fc' (fused_conv2d_add): min = 6 is greater than max = 0"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fg_graph *g = fg_graph_new();
    const int64_t xd[4] = {4, 3, 9, 9}, wd[4] = {5, 3, 3, 3}, bd[1] = {cases[k].bias_len};
    const int64_t zd[4] = {4, 5, 9, cases[k].z_w}, pads[4] = {1, 1, 1, 1};
    fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd), w = fg_placeholder(g, "w", FG_F32, 4, wd);
    fg_output z = fg_placeholder(g, "z", cases[k].z_f64 ? FG_F64 : FG_F32, 4, zd);
    fg_output b = fg_placeholder(g, "b", FG_F32, 1, bd);
    const int add = strcmp(cases[k].op, "fused_conv2d_add") == 0;
    fg_output in[4] = {x, w, add ? z : b, b};
    fg_attrs *at = fg_attrs_new();
    fg_attrs_set_ints(at, "pads", pads, 4);
    fg_attrs_set_string(at, "activation", cases[k].act);
    if (cases[k].bounds) fg_attrs_set_float(at, "max", cases[k].bounds == 1 ? 6 : 0);
    if (cases[k].bounds == 2) fg_attrs_set_float(at, "min", 6);
    fg_output y = fg_op(g, cases[k].op, "fc", in, add ? 4 : 3, at);
    fg_attrs_free(at);
    FG_CHECK(y.node < 0);
    fg_status *st = fg_status_new();
    FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), cases[k].want);
    fg_status_free(st);
    fg_graph_free(g);
  }
}
