/* reduce_min, reduce_prod, argmin, logsumexp, cumsum and topk through the
 * graph API (builder, inference, parameters, CPU kernel) against PyTorch
 * (tests/data/reduce_ops_ref.h), their gradients by finite differences
 * in f64 and, for reduce_prod at zeros, against torch.autograd; the
 * refusals of bad attributes; a .fgb round trip; and, where a GPU is lent,
 * a cuda:0 session against the CPU's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../autodiff/grad_check.h"
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "kernels/kernel.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct red_case {
  const char *name, *op;
  fg_dtype dt;
  int rank;
  int64_t dims[4];
  int n_axes;
  int64_t axes[4];
  int keepdims, axis, exclusive, reverse;
  int64_t k;
  int largest;
  int y_rank;
  int64_t y_dims[4];
  const double *x, *y; /* y: unused for argmin */
  const int64_t *idx;  /* argmin's output, topk's indices */
} red_case;

#include "data/reduce_ops_ref.h"

#define FG_CHECK_M(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) FG_FAIL_AT(__VA_ARGS__);                                                          \
  } while (0)

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return n;
}

static void put(void *data, fg_dtype dt, int64_t i, double v) {
  switch (dt) {
  case FG_F32: ((float *)data)[i] = (float)v; break;
  case FG_F64: ((double *)data)[i] = v; break;
  case FG_I32: ((int32_t *)data)[i] = (int32_t)v; break;
  default: ((int64_t *)data)[i] = (int64_t)v; break;
  }
}

static double get(const void *data, fg_dtype dt, int64_t i) {
  switch (dt) {
  case FG_F32: return ((const float *)data)[i];
  case FG_F64: return ((const double *)data)[i];
  case FG_I32: return ((const int32_t *)data)[i];
  default: return (double)((const int64_t *)data)[i];
  }
}

static fg_tensor *tensor_of(fg_dtype dt, int rank, const int64_t *dims, const double *v) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  if (t)
    for (int64_t i = 0; i < numel(rank, dims); i++)
      put(fg_tensor_data(t), dt, i, v[i]);
  return t;
}

/* The case's op on x through its public builder. */
static fg_output build_case(fg_graph *g, const red_case *c, fg_output x) {
  const int64_t *axes = c->n_axes ? c->axes : NULL;
  if (!strcmp(c->op, "reduce_min")) return fg_reduce_min(g, x, axes, c->n_axes, c->keepdims);
  if (!strcmp(c->op, "reduce_prod")) return fg_reduce_prod(g, x, axes, c->n_axes, c->keepdims);
  if (!strcmp(c->op, "logsumexp")) return fg_logsumexp(g, x, axes, c->n_axes, c->keepdims);
  if (!strcmp(c->op, "argmin")) return fg_argmin(g, x, c->axis);
  if (!strcmp(c->op, "cumsum")) return fg_cumsum(g, x, c->axis, c->exclusive, c->reverse);
  return fg_topk(g, x, c->k, c->axis, c->largest, 1);
}

/* NaN stays NaN, infinities and zeros match exactly, others within rel. */
static void check_value(const char *name, int64_t i, double got, double want, double rel) {
  if (isnan(want))
    FG_CHECK_M(isnan(got), "%s [%lld]: got %.17g, want NaN", name, (long long)i, got);
  else if (isinf(want) || want == 0)
    FG_CHECK_M(got == want, "%s [%lld]: got %.17g, want %.17g", name, (long long)i, got, want);
  else
    FG_CHECK_M(fabs(got - want) <= rel * fabs(want), "%s [%lld]: got %.17g, want %.17g", name,
               (long long)i, got, want);
}

static void check_shape(const char *name, const fg_tensor *t, int rank, const int64_t *dims) {
  FG_CHECK_M(fg_tensor_rank(t) == rank, "%s: rank %d, want %d", name, fg_tensor_rank(t), rank);
  for (int d = 0; d < rank && d < fg_tensor_rank(t); d++)
    FG_CHECK_M(fg_tensor_dim(t, d) == dims[d], "%s: dim %d is %lld, want %lld", name, d,
               (long long)fg_tensor_dim(t, d), (long long)dims[d]);
}

/* Runs `fetches` of g in a new session on `device` (NULL: the CPU) with
 * n_feeds feeds; st (may be NULL) receives the error. */
static int run_feeds(fg_graph *g, const char *device, const fg_feed *feeds, int n_feeds,
                     const char **fetches, int n, fg_tensor **out, fg_status *st) {
  fg_status *own = st ? NULL : fg_status_new();
  if (!st) st = own;
  fg_session_options o;
  fg_session_options_init(&o);
  if (device) o.device = device;
  fg_session *s = fg_session_new(g, &o, st);
  int rc = s ? fg_session_run(s, feeds, n_feeds, fetches, n, out, NULL, 0, st) : -1;
  if (rc != 0 && own) fprintf(stderr, "run: %s\n", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(own);
  return rc;
}

static int run_graph(fg_graph *g, const char *device, const char **fetches, int n,
                     fg_tensor **out) {
  return run_feeds(g, device, NULL, 0, fetches, n, out, NULL);
}

/* An i64 output equals want[0..n), element for element. */
static void check_indices(const char *name, const fg_tensor *t, const int64_t *want, int64_t n) {
  FG_CHECK_INT(fg_tensor_dtype(t), FG_I64);
  const int64_t *got = fg_tensor_data(t);
  for (int64_t i = 0; i < n; i++)
    FG_CHECK_M(got[i] == want[i], "%s [%lld]: index %lld, want %lld", name, (long long)i,
               (long long)got[i], (long long)want[i]);
}

static void run_case(const red_case *c) {
  fg_graph *g = fg_graph_new();
  fg_tensor *xt = tensor_of(c->dt, c->rank, c->dims, c->x);
  FG_REQUIRE(xt);
  fg_output y = build_case(g, c, fg_constant(g, "x", xt));
  fg_tensor_free(xt);
  fg_set_name(g, y, "y");
  fg_status *st = fg_status_new();
  if (fg_graph_status(g, st) != FG_OK) FG_FAIL_AT("%s: %s", c->name, fg_status_message(st));
  fg_status_free(st);
  const int is_topk = !strcmp(c->op, "topk"), is_argmin = !strcmp(c->op, "argmin");
  const char *fetch[2] = {"y", "y:1"};
  fg_tensor *out[2] = {NULL, NULL};
  FG_REQUIRE(run_graph(g, NULL, fetch, is_topk ? 2 : 1, out) == 0);
  const int64_t n = numel(c->y_rank, c->y_dims);
  const double rel = c->dt == FG_F32 ? 1e-6 : 1e-13;
  check_shape(c->name, out[0], c->y_rank, c->y_dims);
  if (is_argmin) {
    check_indices(c->name, out[0], c->idx, n);
  } else {
    FG_CHECK_INT(fg_tensor_dtype(out[0]), c->dt);
    for (int64_t i = 0; i < n; i++)
      check_value(c->name, i, get(fg_tensor_data(out[0]), c->dt, i), c->y[i], rel);
  }
  if (is_topk) {
    check_shape(c->name, out[1], c->y_rank, c->y_dims);
    check_indices(c->name, out[1], c->idx, n);
  }
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  fg_graph_free(g);
}

static void run_op(const char *op) {
  int seen = 0;
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    if (!strcmp(CASES[i].op, op)) {
      run_case(&CASES[i]);
      seen++;
    }
  FG_CHECK_M(seen >= 5, "%d cases for %s", seen, op);
}

FG_TEST(reduce_min_vs_torch, "") { run_op("reduce_min"); }
FG_TEST(reduce_prod_vs_torch, "") { run_op("reduce_prod"); }
FG_TEST(argmin_vs_torch, "") { run_op("argmin"); }
FG_TEST(logsumexp_vs_torch, "") { run_op("logsumexp"); }
FG_TEST(cumsum_vs_torch, "") { run_op("cumsum"); }
FG_TEST(topk_vs_torch, "") { run_op("topk"); }

/* By hand: the min of nothing is +inf (the type's maximum for integers),
 * the product of nothing 1, the logsumexp of nothing -inf; topk with k = 0
 * gives empty outputs. */
FG_TEST(reduce_ops_empty_sets, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {3, 0};
  fg_tensor *e = fg_tensor_new(FG_F64, 2, d, NULL), *ei = fg_tensor_new(FG_I32, 2, d, NULL);
  FG_REQUIRE(e && ei);
  fg_output x = fg_constant(g, "x", e), xi = fg_constant(g, "xi", ei);
  const int64_t ax[1] = {1};
  fg_set_name(g, fg_reduce_min(g, x, ax, 1, 0), "mn");
  fg_set_name(g, fg_reduce_min(g, xi, ax, 1, 0), "mni");
  fg_set_name(g, fg_reduce_prod(g, x, ax, 1, 0), "pr");
  fg_set_name(g, fg_logsumexp(g, x, ax, 1, 0), "lse");
  fg_set_name(g, fg_topk(g, x, 0, 1, 1, 1), "tk");
  fg_set_name(g, fg_cumsum(g, x, 1, 1, 0), "cs");
  const char *f[6] = {"mn", "mni", "pr", "lse", "tk", "cs"};
  fg_tensor *o[6] = {0};
  FG_REQUIRE(run_graph(g, NULL, f, 6, o) == 0);
  for (int i = 0; i < 3; i++) {
    FG_CHECK(((double *)fg_tensor_data(o[0]))[i] == INFINITY);
    FG_CHECK_INT(((int32_t *)fg_tensor_data(o[1]))[i], INT32_MAX);
    FG_CHECK(((double *)fg_tensor_data(o[2]))[i] == 1.0);
    FG_CHECK(((double *)fg_tensor_data(o[3]))[i] == -INFINITY);
  }
  FG_CHECK_INT(fg_tensor_num_elements(o[4]), 0);
  FG_CHECK_INT(fg_tensor_num_elements(o[5]), 0);
  for (int i = 0; i < 6; i++)
    fg_tensor_free(o[i]);
  fg_tensor_free(e);
  fg_tensor_free(ei);
  fg_graph_free(g);
}

/* Integer overflow wraps as in two's complement (torch's int64
 * accumulation, truncated): 65536 * 65536 is 2^32, 0 in i32; 2^31 - 1 + 1
 * running sums to INT32_MIN. */
FG_TEST(reduce_ops_integer_wrap, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {2};
  const double p[2] = {65536, 65536}, s[2] = {2147483647.0, 1};
  fg_tensor *pt = tensor_of(FG_I32, 1, d, p), *stt = tensor_of(FG_I32, 1, d, s);
  fg_set_name(g, fg_reduce_prod(g, fg_constant(g, "p", pt), NULL, 0, 0), "pr");
  fg_set_name(g, fg_cumsum(g, fg_constant(g, "s", stt), 0, 0, 0), "cs");
  const char *f[2] = {"pr", "cs"};
  fg_tensor *o[2] = {0};
  FG_REQUIRE(run_graph(g, NULL, f, 2, o) == 0);
  FG_CHECK_INT(((int32_t *)fg_tensor_data(o[0]))[0], 0);
  FG_CHECK_INT(((int32_t *)fg_tensor_data(o[1]))[0], INT32_MAX);
  FG_CHECK_INT(((int32_t *)fg_tensor_data(o[1]))[1], INT32_MIN);
  fg_tensor_free(o[0]);
  fg_tensor_free(o[1]);
  fg_tensor_free(pt);
  fg_tensor_free(stt);
  fg_graph_free(g);
}

/* Shapes past the kernels' column chunks (300 > 256 columns) and long rows
 * (topk's heap with k = 37 of 1000), against plain loops and a sort:
 * integer-valued data, so every sum is exact whatever the order. */
static int by_value_desc(const void *a, const void *b) {
  const double *x = a, *y = b; /* [value, index]: larger first, then lower index */
  if (x[0] != y[0]) return x[0] < y[0] ? 1 : -1;
  return x[1] < y[1] ? -1 : 1;
}

FG_TEST(cumsum_topk_large_shapes_vs_loops, "") {
  enum { R = 2, A = 3, C = 300, L = 1000, K = 37 };
  static double x[R * A * C], w[3 * L], want[R * A * C], pairs[L][2];
  uint64_t seed = 99;
  for (int i = 0; i < R * A * C; i++)
    x[i] = floor(fgt_uniform(&seed) * 200) - 100;
  for (int i = 0; i < 3 * L; i++)
    w[i] = floor(fgt_uniform(&seed) * 50); /* many ties */
  const int64_t dx[3] = {R, A, C}, dw[2] = {3, L};
  fg_graph *g = fg_graph_new();
  fg_tensor *xt = tensor_of(FG_F64, 3, dx, x), *wt = tensor_of(FG_F64, 2, dw, w);
  fg_set_name(g, fg_cumsum(g, fg_constant(g, "x", xt), 1, 1, 1), "cs");
  fg_set_name(g, fg_topk(g, fg_constant(g, "w", wt), K, 1, 1, 1), "tk");
  const char *f[3] = {"cs", "tk", "tk:1"};
  fg_tensor *o[3] = {0};
  FG_REQUIRE(run_graph(g, NULL, f, 3, o) == 0);
  for (int r = 0; r < R; r++) /* exclusive, reverse, along axis 1 */
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int a = A - 1; a >= 0; a--) {
        want[(r * A + a) * C + c] = acc;
        acc += x[(r * A + a) * C + c];
      }
    }
  for (int i = 0; i < R * A * C; i++)
    FG_CHECK_M(((double *)fg_tensor_data(o[0]))[i] == want[i], "cs[%d]", i);
  for (int r = 0; r < 3; r++) {
    for (int i = 0; i < L; i++)
      pairs[i][0] = w[r * L + i], pairs[i][1] = i;
    qsort(pairs, L, sizeof pairs[0], by_value_desc);
    for (int j = 0; j < K; j++) {
      FG_CHECK_M(((double *)fg_tensor_data(o[1]))[r * K + j] == pairs[j][0], "tk[%d][%d]", r, j);
      FG_CHECK_M(((int64_t *)fg_tensor_data(o[2]))[r * K + j] == (int64_t)pairs[j][1],
                 "tk:1[%d][%d]", r, j);
    }
  }
  for (int i = 0; i < 3; i++)
    fg_tensor_free(o[i]);
  fg_tensor_free(xt);
  fg_tensor_free(wt);
  fg_graph_free(g);
}

/* ---- gradients ------------------------------------------------------------- */

typedef struct gcase {
  const char *op;
  int n_axes;
  int64_t axes[3];
  int keepdims, axis, exclusive, reverse;
  int64_t k;
  int largest;
} gcase;

static fg_output build_grad(fg_graph *g, const fg_output *xs, void *ctx) {
  const gcase *c = (const gcase *)ctx;
  red_case r;
  memset(&r, 0, sizeof r);
  r.op = c->op;
  r.n_axes = c->n_axes;
  memcpy(r.axes, c->axes, sizeof c->axes);
  r.keepdims = c->keepdims;
  r.axis = c->axis;
  r.exclusive = c->exclusive;
  r.reverse = c->reverse;
  r.k = c->k;
  r.largest = c->largest;
  return build_case(g, &r, xs[0]);
}

static double grad_err(gcase c, int rank, const int64_t *dims, double lo, double hi,
                       uint64_t seed) {
  fgt_input in = {FG_F64, rank, {0}, NULL, lo, hi};
  memcpy(in.dims, dims, (size_t)rank * sizeof *dims);
  return fgt_grad_check(build_grad, &c, &in, 1, seed);
}

/* dy/dx of a scalar y, run on the CPU (x a constant); NULL on error. */
static fg_tensor *grad_value(fg_graph *g, fg_output y, fg_output x) {
  fg_status *st = fg_status_new();
  fg_output dx;
  fg_tensor *o = NULL;
  const char *f = "dx";
  if (fg_gradients(g, &y, 1, &x, 1, NULL, &dx, st) == 0) {
    fg_set_name(g, dx, "dx");
    if (run_graph(g, NULL, &f, 1, &o) != 0) o = NULL;
  } else {
    fprintf(stderr, "fg_gradients: %s\n", fg_status_message(st));
  }
  fg_status_free(st);
  return o;
}

/* Random inputs are distinct with probability 1, so no ties. */
FG_TEST(grad_reduce_min_fd, "") {
  const int64_t d[3] = {3, 4, 5};
  FG_CHECK_GRAD(grad_err((gcase){"reduce_min", 1, {1}, 0, 0, 0, 0, 0, 0}, 3, d, 0, 0, 1));
  FG_CHECK_GRAD(grad_err((gcase){"reduce_min", 2, {0, 2}, 1, 0, 0, 0, 0, 0}, 3, d, 0, 0, 2));
  FG_CHECK_GRAD(grad_err((gcase){"reduce_min", 0, {0}, 0, 0, 0, 0, 0, 0}, 3, d, 0, 0, 3));
}

/* Ties share the gradient equally, as reduce_max's: min of {2, 1, 1} gives
 * dx = {0, 0.5, 0.5} dy. */
FG_TEST(grad_reduce_min_ties_split, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {3};
  const double v[3] = {2, 1, 1};
  fg_tensor *xt = tensor_of(FG_F64, 1, d, v);
  fg_output x = fg_constant(g, "x", xt);
  fg_output y = fg_mul(g, fg_reduce_min(g, x, NULL, 0, 0), fg_scalar(g, FG_F64, 3));
  fg_tensor *o = grad_value(g, y, x);
  FG_REQUIRE(o);
  const double *gx = fg_tensor_data(o);
  FG_CHECK(gx[0] == 0 && gx[1] == 1.5 && gx[2] == 1.5);
  fg_tensor_free(o);
  fg_tensor_free(xt);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Inputs in [0.5, 1.5]: away from zero, where prod / x is the gradient. */
FG_TEST(grad_reduce_prod_fd, "") {
  const int64_t d[3] = {3, 4, 2};
  FG_CHECK_GRAD(grad_err((gcase){"reduce_prod", 1, {1}, 0, 0, 0, 0, 0, 0}, 3, d, 0.5, 1.5, 4));
  FG_CHECK_GRAD(grad_err((gcase){"reduce_prod", 2, {0, 2}, 1, 0, 0, 0, 0, 0}, 3, d, -1.5, -0.5, 5));
  FG_CHECK_GRAD(grad_err((gcase){"reduce_prod", 0, {0}, 0, 0, 0, 0, 0, 0}, 3, d, 0.5, 1.5, 6));
}

/* At exact zeros the gradient is torch's (tests/data/reduce_ops_ref.h): one zero in a
 * row gets the product of the others, two zeros give 0 everywhere. */
FG_TEST(grad_reduce_prod_zeros_vs_torch, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {3, 4}, dw[1] = {3}, ax[1] = {1};
  fg_tensor *xt = tensor_of(FG_F64, 2, d, PROD_GRAD_X), *wt = tensor_of(FG_F64, 1, dw, PROD_GRAD_W);
  fg_output x = fg_constant(g, "x", xt);
  fg_output y = fg_reduce_sum(g, fg_mul(g, fg_reduce_prod(g, x, ax, 1, 0), fg_constant(g, "w", wt)),
                              NULL, 0, 0);
  fg_tensor *o = grad_value(g, y, x);
  FG_REQUIRE(o);
  for (int i = 0; i < 12; i++)
    check_value("prod grad", i, ((double *)fg_tensor_data(o))[i], PROD_GRAD_DX[i], 1e-14);
  fg_tensor_free(o);
  fg_tensor_free(xt);
  fg_tensor_free(wt);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(grad_logsumexp_fd, "") {
  const int64_t d[3] = {3, 4, 5};
  FG_CHECK_GRAD(grad_err((gcase){"logsumexp", 1, {1}, 0, 0, 0, 0, 0, 0}, 3, d, -3, 3, 7));
  FG_CHECK_GRAD(grad_err((gcase){"logsumexp", 2, {0, 2}, 1, 0, 0, 0, 0, 0}, 3, d, -3, 3, 8));
  FG_CHECK_GRAD(grad_err((gcase){"logsumexp", 2, {-1, 0}, 0, 0, 0, 0, 0, 0}, 3, d, -3, 3, 9));
  FG_CHECK_GRAD(grad_err((gcase){"logsumexp", 0, {0}, 0, 0, 0, 0, 0, 0}, 3, d, 20, 30, 10));
}

FG_TEST(grad_cumsum_fd, "") {
  const int64_t d[3] = {3, 5, 2};
  for (int ex = 0; ex < 2; ex++)
    for (int rv = 0; rv < 2; rv++) {
      FG_CHECK_GRAD(grad_err((gcase){"cumsum", 0, {0}, 0, 1, ex, rv, 0, 0}, 3, d, 0, 0, 11));
      FG_CHECK_GRAD(grad_err((gcase){"cumsum", 0, {0}, 0, -1, ex, rv, 0, 0}, 3, d, 0, 0, 12));
    }
}

FG_TEST(grad_topk_fd, "") {
  const int64_t d[3] = {4, 6, 3};
  FG_CHECK_GRAD(grad_err((gcase){"topk", 0, {0}, 0, 1, 0, 0, 3, 1}, 3, d, 0, 0, 13));
  FG_CHECK_GRAD(grad_err((gcase){"topk", 0, {0}, 0, 0, 0, 0, 2, 0}, 3, d, 0, 0, 14));
  FG_CHECK_GRAD(grad_err((gcase){"topk", 0, {0}, 0, -1, 0, 0, 3, 1}, 3, d, 0, 0, 15));
}

/* topk's indices carry no gradient: with L = sum(values) + sum(indices),
 * dL/dx is 1 at the two largest of each row and 0 elsewhere. A second
 * derivative through topk is refused by name, not silently zero. */
FG_TEST(grad_topk_indices_and_second_order, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {2, 5};
  const double v[10] = {0.5, 3, -1, 2, 2.5, 9, 8, 7, -6, 10};
  fg_tensor *xt = tensor_of(FG_F64, 2, d, v);
  fg_output x = fg_constant(g, "x", xt);
  fg_output t = fg_topk(g, x, 2, 1, 1, 1);
  fg_output both = fg_add(g, fg_reduce_sum(g, t, NULL, 0, 0),
                          fg_cast(g, fg_reduce_sum(g, fg_output_at(t, 1), NULL, 0, 0), FG_F64));
  fg_tensor *o = grad_value(g, both, x);
  FG_REQUIRE(o);
  const double want[10] = {0, 1, 0, 0, 1, 1, 0, 0, 0, 1};
  for (int i = 0; i < 10; i++)
    FG_CHECK_M(((double *)fg_tensor_data(o))[i] == want[i], "dx[%d] = %g", i,
               ((double *)fg_tensor_data(o))[i]);
  fg_tensor_free(o);
  /* L2 = sum(values^2): dL2/dx = topk_grad(2 values), whose gradient in
   * its dy is not available. */
  fg_output sq = fg_reduce_sum(g, fg_mul(g, t, t), NULL, 0, 0), d1, d2;
  FG_REQUIRE(fg_gradients(g, &sq, 1, &x, 1, NULL, &d1, st) == 0);
  fg_output s2 = fg_reduce_sum(g, fg_mul(g, d1, d1), NULL, 0, 0);
  FG_CHECK(fg_gradients(g, &s2, 1, &x, 1, NULL, &d2, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "(topk_grad): no gradient");
  fg_tensor_free(xt);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- refusals ---------------------------------------------------------------- */

/* fg_op(op, "bad", x, attrs) fails with FG_INVALID_GRAPH and exactly `want`. */
static void refused(fg_dtype dt, int rank, const int64_t *dims, const char *op, fg_attrs *at,
                    const char *want) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", dt, rank, dims);
  FG_CHECK_M(fg_op(g, op, "bad", &x, 1, at).node == -1, "%s was built", want);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st), want);
  fg_attrs_free(at);
  fg_graph_free(g);
  fg_status_free(st);
}

static fg_attrs *ints2(const char *a, int64_t va, const char *b, int64_t vb) {
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_int(at, a, va);
  if (b) fg_attrs_set_int(at, b, vb);
  return at;
}

FG_TEST(topk_bad_attributes_refused, "badinput") {
  const int64_t d[2] = {3, 7};
  refused(FG_F32, 2, d, "topk", ints2("k", 8, NULL, 0),
          "node 'bad' (topk): k = 8 is larger than input 0's dim 1 (7) of shape [3,7]; it has "
          "only 7 values to choose from");
  refused(FG_F32, 2, d, "topk", ints2("k", 4, "axis", 0),
          "node 'bad' (topk): k = 4 is larger than input 0's dim 0 (3) of shape [3,7]; it has "
          "only 3 values to choose from");
  refused(FG_F32, 2, d, "topk", ints2("k", -1, NULL, 0), "node 'bad' (topk): k = -1 is negative");
  refused(FG_F64, 2, d, "topk", ints2("k", 1, "axis", 2),
          "node 'bad' (topk): axis 2 is out of range [-2, 2) for input 0 shape [3,7]");
  refused(FG_F64, 2, d, "topk", ints2("k", 1, "largest", 2),
          "node 'bad' (topk): attribute 'largest' = 2 must be 0 or 1");
  refused(FG_F64, 0, d, "topk", ints2("k", 1, NULL, 0),
          "node 'bad' (topk): input 0 is a scalar; topk needs an axis to choose along");
  refused(FG_BOOL, 2, d, "topk", ints2("k", 1, NULL, 0),
          "node 'bad' (topk): input 0 dtype bool is not allowed; topk needs f32, f64, i32 or i64");
  refused(FG_F64, 2, d, "topk", NULL, "node 'bad' (topk): missing attribute 'k' (int)");
  /* The builder refuses too. */
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  FG_CHECK_INT(fg_topk(g, x, 9, -1, 1, 1).node, -1);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "(topk): k = 9 is larger than input 0's dim 1 (7)");
  fg_status_free(st);
  fg_graph_free(g);
}

/* A batch dim unknown when the graph is built is checked against k when
 * the graph runs with the fed shape: refused naming the node and values. */
FG_TEST(topk_k_above_fed_dim_refused, "badinput") {
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {-1, 4}, fd[2] = {2, 4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_set_name(g, fg_topk(g, x, 3, 0, 1, 1), "tk");
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  const double v[8] = {0};
  fg_tensor *xt = tensor_of(FG_F32, 2, fd, v);
  fg_feed f = {"x", xt};
  const char *fetch = "tk";
  fg_tensor *o = NULL;
  FG_CHECK(run_feeds(g, NULL, &f, 1, &fetch, 1, &o, st) != 0);
  FG_CHECK(o == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'tk' (topk): k = 3 is larger than input 0's "
                                               "dim 0 (2) of shape [2,4]");
  fg_tensor_free(xt);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(cumsum_bad_attributes_refused, "badinput") {
  const int64_t d[2] = {3, 7};
  refused(FG_F32, 2, d, "cumsum", ints2("axis", 2, NULL, 0),
          "node 'bad' (cumsum): axis 2 is out of range [-2, 2) for input 0 shape [3,7]");
  refused(FG_F32, 2, d, "cumsum", ints2("axis", -3, NULL, 0),
          "node 'bad' (cumsum): axis -3 is out of range [-2, 2) for input 0 shape [3,7]");
  refused(FG_F32, 2, d, "cumsum", ints2("axis", 0, "exclusive", 3),
          "node 'bad' (cumsum): attribute 'exclusive' = 3 must be 0 or 1");
  refused(FG_F32, 2, d, "cumsum", ints2("axis", 0, "reverse", -1),
          "node 'bad' (cumsum): attribute 'reverse' = -1 must be 0 or 1");
  refused(FG_F32, 0, d, "cumsum", ints2("axis", 0, NULL, 0),
          "node 'bad' (cumsum): input 0 is a scalar; cumsum needs an axis to run along");
  refused(FG_BOOL, 2, d, "cumsum", ints2("axis", 0, NULL, 0),
          "node 'bad' (cumsum): input 0 dtype bool is not allowed; cumsum needs f32, f64, i32 or "
          "i64");
  refused(FG_F32, 2, d, "cumsum", NULL, "node 'bad' (cumsum): missing attribute 'axis' (int)");
}

static fg_attrs *axes_attr(int n, const int64_t *axes) {
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_ints(at, "axes", axes, n);
  return at;
}

FG_TEST(reduce_ops_bad_attributes_refused, "badinput") {
  const int64_t d[3] = {2, 3, 4}, out_of_range[1] = {3}, twice[2] = {1, -2};
  refused(FG_F32, 3, d, "reduce_min", axes_attr(1, out_of_range),
          "node 'bad' (reduce_min): axes[0] = 3 is out of range [-3, 3) for input 0 shape "
          "[2,3,4]");
  refused(FG_F64, 3, d, "reduce_prod", axes_attr(2, twice),
          "node 'bad' (reduce_prod): axes [1,-2] name dim 1 twice");
  refused(FG_BOOL, 3, d, "reduce_prod", NULL,
          "node 'bad' (reduce_prod): input 0 dtype bool is not allowed; reduce_prod needs f32, "
          "f64, i32 or i64");
  refused(FG_I32, 3, d, "logsumexp", NULL,
          "node 'bad' (logsumexp): input 0 dtype i32 is not allowed; logsumexp needs f32 or f64");
  refused(FG_F32, 3, d, "logsumexp", axes_attr(1, out_of_range),
          "node 'bad' (logsumexp): axes[0] = 3 is out of range [-3, 3) for input 0 shape "
          "[2,3,4]");
  fg_attrs *k2 = axes_attr(1, twice);
  fg_attrs_set_int(k2, "keepdims", 2);
  refused(FG_F32, 3, d, "reduce_min", k2,
          "node 'bad' (reduce_min): attribute 'keepdims' = 2 must be 0 or 1");
  refused(FG_F32, 3, d, "argmin", ints2("axis", 3, NULL, 0),
          "node 'bad' (argmin): axis 3 is out of range [-3, 3) for input 0 shape [2,3,4]");
  refused(FG_BOOL, 3, d, "argmin", ints2("axis", 0, NULL, 0),
          "node 'bad' (argmin): input 0 dtype bool is not allowed; argmin needs f32, f64, i32 or "
          "i64");
}

/* topk_grad refuses mismatched shapes when built, and its kernel an index
 * outside [0, like's dim) (indices not from a topk), naming it. */
FG_TEST(topk_grad_bad_inputs_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dd[2] = {2, 3}, di[2] = {2, 4}, dl[2] = {2, 5};
  fg_output in[3] = {fg_placeholder(g, "dy", FG_F32, 2, dd), fg_placeholder(g, "i", FG_I64, 2, di),
                     fg_placeholder(g, "like", FG_F32, 2, dl)};
  fg_attrs *at = ints2("axis", 1, NULL, 0);
  FG_CHECK_INT(fg_op(g, "topk_grad", "tg", in, 3, at).node, -1);
  fg_attrs_free(at);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st),
               "node 'tg' (topk_grad): dy [2,3] and indices [2,4] must match like [2,5] except "
               "along axis 1, where they may be shorter");
  fg_graph_free(g);
  float dy[2] = {1, 2}, out[5];
  int64_t idx[2] = {0, 7};
  fg_kbuf b[3], o;
  memset(b, 0, sizeof b);
  memset(&o, 0, sizeof o);
  b[0] = (fg_kbuf){FG_F32, 1, {2}, dy, 0};
  b[1] = (fg_kbuf){FG_I64, 1, {2}, idx, 0};
  b[2] = (fg_kbuf){FG_F32, 1, {5}, out, 0};
  o = (fg_kbuf){FG_F32, 1, {5}, out, 0};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  char err[200] = "";
  fg_kctx ctx = {b,    3,    &o, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,  0, 0,  0,   0,          0,    NULL};
  FG_CHECK_INT(fg_cpu_kernel("topk_grad", FG_F32)(&ctx), -1);
  FG_CHECK_STR(err, "indices[1] = 7 is out of range [0, 5)");
  idx[1] = 3;
  FG_CHECK_INT(fg_cpu_kernel("topk_grad", FG_F32)(&ctx), 0);
  const float want[5] = {1, 0, 0, 2, 0};
  for (int i = 0; i < 5; i++)
    FG_CHECK(out[i] == want[i]);
  fg_status_free(st);
}

/* ---- a graph of all six, saved and loaded, and on the GPU ------------------- */

/* y = the six ops on x [4, 6] (placeholder "x") plus topk's and the others'
 * gradients of one loss: the fetch names in *names. */
static int build_all(fg_graph *g, fg_dtype dt, const char **names) {
  const int64_t d[2] = {4, 6}, a1[1] = {1}, a0[1] = {0};
  fg_output x = fg_placeholder(g, "x", dt, 2, d);
  fg_output o[9];
  o[0] = fg_reduce_min(g, x, a1, 1, 0);
  o[1] = fg_reduce_prod(g, x, a0, 1, 1);
  o[2] = fg_argmin(g, x, -1);
  o[3] = fg_logsumexp(g, x, a1, 1, 1);
  o[4] = fg_cumsum(g, x, 1, 1, 1);
  o[5] = fg_topk(g, x, 3, 1, 0, 1);
  fg_output loss = fg_add(
      g,
      fg_add(g, fg_reduce_sum(g, fg_mul(g, o[5], o[5]), NULL, 0, 0),
             fg_reduce_sum(g, fg_mul(g, o[4], o[4]), NULL, 0, 0)),
      fg_add(g, fg_add(g, fg_reduce_sum(g, o[0], NULL, 0, 0), fg_reduce_sum(g, o[1], NULL, 0, 0)),
             fg_reduce_sum(g, fg_mul(g, o[3], o[3]), NULL, 0, 0)));
  fg_output dx;
  fg_status *st = fg_status_new();
  int rc = fg_gradients(g, &loss, 1, &x, 1, NULL, &dx, st);
  fg_status_free(st);
  if (rc != 0) return -1;
  o[6] = dx;
  static const char *const nm[8] = {"mn", "pr", "am", "lse", "cs", "tk", "dx", "tk:1"};
  for (int i = 0; i < 7; i++) {
    fg_set_name(g, o[i], nm[i]);
    names[i] = nm[i];
  }
  names[7] = nm[7];
  return fg_graph_status(g, NULL) == FG_OK ? 0 : -1;
}

static fg_tensor *random_x(fg_dtype dt, uint64_t seed) {
  const int64_t d[2] = {4, 6};
  double v[24];
  for (int i = 0; i < 24; i++)
    v[i] = 0.25 + 1.5 * fgt_uniform(&seed); /* away from zero, no ties */
  return tensor_of(dt, 2, d, v);
}

static void check_same(const fg_tensor *a, const fg_tensor *b, double rel, const char *what) {
  FG_REQUIRE(a && b);
  FG_CHECK_M(fg_tensor_dtype(a) == fg_tensor_dtype(b) &&
                 fg_tensor_num_elements(a) == fg_tensor_num_elements(b),
             "%s: dtype or size differs", what);
  for (int64_t i = 0; i < fg_tensor_num_elements(a); i++) {
    const double x = get(fg_tensor_data(a), fg_tensor_dtype(a), i),
                 y = get(fg_tensor_data(b), fg_tensor_dtype(b), i);
    FG_CHECK_M(fabs(x - y) <= rel * fmax(fabs(x), 1e-30), "%s [%lld]: %.17g vs %.17g", what,
               (long long)i, x, y);
  }
}

/* Saved to .fgb and loaded back, the graph computes the same bits. */
FG_TEST(reduce_ops_fgb_round_trip, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const char *names[8];
  FG_REQUIRE(build_all(g, FG_F64, names) == 0);
  void *buf = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &buf, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(buf, size, st);
  free(buf);
  FG_REQUIRE(h);
  fg_tensor *xt = random_x(FG_F64, 5);
  fg_feed f = {"x", xt};
  fg_tensor *a[8] = {0}, *b[8] = {0};
  FG_REQUIRE(run_feeds(g, NULL, &f, 1, names, 8, a, NULL) == 0);
  FG_REQUIRE(run_feeds(h, NULL, &f, 1, names, 8, b, NULL) == 0);
  for (int i = 0; i < 8; i++) {
    check_same(a[i], b[i], 0, names[i]);
    fg_tensor_free(a[i]);
    fg_tensor_free(b[i]);
  }
  fg_tensor_free(xt);
  fg_graph_free(h);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A cuda:0 session (every op, gradients included, on the GPU kernels)
 * fetches what a CPU session does, on random inputs. */
FG_TEST(cuda_reduce_ops_vs_cpu, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  const fg_dtype dts[2] = {FG_F32, FG_F64};
  for (int t = 0; t < 2; t++) {
    fg_graph *g = fg_graph_new();
    const char *names[8];
    FG_REQUIRE(build_all(g, dts[t], names) == 0);
    fg_tensor *xt = random_x(dts[t], 17 + (uint64_t)t);
    fg_feed f = {"x", xt};
    fg_tensor *a[8] = {0}, *b[8] = {0};
    FG_REQUIRE(run_feeds(g, NULL, &f, 1, names, 8, a, NULL) == 0);
    FG_REQUIRE(run_feeds(g, "cuda:0", &f, 1, names, 8, b, NULL) == 0);
    for (int i = 0; i < 8; i++) {
      check_same(a[i], b[i], dts[t] == FG_F32 ? 1e-5 : 1e-12, names[i]);
      fg_tensor_free(a[i]);
      fg_tensor_free(b[i]);
    }
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
#endif
}
