/* Finite-difference checks (f64) of the gradients in autodiff/grad_shape.c:
 * matmul, reshape, transpose, concat, slice, gather, the softmax family and
 * the support ops gradients are built from. The "_2nd" cases differentiate
 * a gradient graph again (a Hessian-vector product), which exercises the
 * gradients of slice_grad, gather_grad, sum_to, broadcast_like and
 * reshape_like as they occur inside backward graphs. */
#include <flowgraph/autodiff.h>
#include <flowgraph/flowgraph.h>

#include "fgtest.h"
#include "grad_check.h"
#include "graph/builders_internal.h"

#define IN(r, ...)                                                                                 \
  {                                                                                                \
    .dtype = FG_F64, .rank = (r), .dims = { __VA_ARGS__ }                                          \
  }

/* ---- matmul ------------------------------------------------------------- */

typedef struct mm_ctx {
  int ta, tb;
} mm_ctx;

static fg_output build_matmul(fg_graph *g, const fg_output *x, void *ctx) {
  const mm_ctx *c = ctx;
  return fg_matmul(g, x[0], x[1], c->ta, c->tb);
}

/* a [3,4] (or [4,3] transposed), b [4,5] (or [5,4]); C is [3,5]. */
static double check_matmul_2d(int ta, int tb, uint64_t seed) {
  mm_ctx c = {ta, tb};
  fgt_input in[2] = {IN(2, 3, 4), IN(2, 4, 5)};
  if (ta) in[0].dims[0] = 4, in[0].dims[1] = 3;
  if (tb) in[1].dims[0] = 5, in[1].dims[1] = 4;
  return fgt_grad_check(build_matmul, &c, in, 2, seed);
}

FG_TEST(grad_matmul_nn, "") { FG_CHECK_GRAD(check_matmul_2d(0, 0, 1)); }
FG_TEST(grad_matmul_nt, "") { FG_CHECK_GRAD(check_matmul_2d(0, 1, 2)); }
FG_TEST(grad_matmul_tn, "") { FG_CHECK_GRAD(check_matmul_2d(1, 0, 3)); }
FG_TEST(grad_matmul_tt, "") { FG_CHECK_GRAD(check_matmul_2d(1, 1, 4)); }

FG_TEST(grad_matmul_batched, "") {
  mm_ctx c = {0, 0};
  fgt_input in[2] = {IN(3, 2, 3, 4), IN(3, 2, 4, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_matmul, &c, in, 2, 5));
}

/* b is 2-D and broadcasts over a's batch: db sums over it. */
FG_TEST(grad_matmul_broadcast_2d_b, "") {
  mm_ctx c = {0, 0};
  fgt_input in[2] = {IN(3, 2, 3, 4), IN(2, 4, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_matmul, &c, in, 2, 6));
}

FG_TEST(grad_matmul_broadcast_2d_a, "") {
  mm_ctx c = {0, 0};
  fgt_input in[2] = {IN(2, 3, 4), IN(3, 2, 4, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_matmul, &c, in, 2, 7));
}

/* Both operands broadcast: [2,1,3,4] x [1,2,4,5] -> [2,2,3,5]. */
FG_TEST(grad_matmul_broadcast_both, "") {
  mm_ctx c = {0, 0};
  fgt_input in[2] = {IN(4, 2, 1, 3, 4), IN(4, 1, 2, 4, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_matmul, &c, in, 2, 8));
}

FG_TEST(grad_matmul_broadcast_transposed, "") {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      mm_ctx c = {ta, tb};
      fgt_input in[2] = {IN(4, 2, 1, 3, 4), IN(3, 2, 4, 5)};
      if (ta) in[0].dims[2] = 4, in[0].dims[3] = 3;
      if (tb) in[1].dims[1] = 5, in[1].dims[2] = 4;
      FG_CHECK_GRAD(fgt_grad_check(build_matmul, &c, in, 2, 9 + (uint64_t)(2 * ta + tb)));
    }
}

/* ---- reshape, transpose -------------------------------------------------- */

static fg_output build_reshape(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t shape[2] = {4, -1};
  return fg_reshape(g, x[0], 2, shape);
}

FG_TEST(grad_reshape, "") {
  fgt_input in[1] = {IN(3, 2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(build_reshape, NULL, in, 1, 20));
}

static fg_output build_transpose(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t perm[3] = {2, 0, 1}; /* not its own inverse */
  return fg_transpose(g, x[0], 3, perm);
}

FG_TEST(grad_transpose_3d, "") {
  fgt_input in[1] = {IN(3, 2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(build_transpose, NULL, in, 1, 21));
}

/* ---- concat, slice, gather ---------------------------------------------- */

static fg_output build_concat(fg_graph *g, const fg_output *x, void *ctx) {
  return fg_concat(g, x, 3, *(const int *)ctx);
}

FG_TEST(grad_concat_axis0, "") {
  int axis = 0;
  fgt_input in[3] = {IN(2, 1, 3), IN(2, 2, 3), IN(2, 4, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_concat, &axis, in, 3, 30));
}

FG_TEST(grad_concat_axis1, "") {
  int axis = 1;
  fgt_input in[3] = {IN(3, 2, 1, 2), IN(3, 2, 3, 2), IN(3, 2, 2, 2)};
  FG_CHECK_GRAD(fgt_grad_check(build_concat, &axis, in, 3, 31));
}

FG_TEST(grad_concat_negative_axis, "") {
  int axis = -1;
  fgt_input in[3] = {IN(2, 2, 1), IN(2, 2, 3), IN(2, 2, 2)};
  FG_CHECK_GRAD(fgt_grad_check(build_concat, &axis, in, 3, 32));
}

/* The same tensor twice: both slices add up at x. */
static fg_output build_concat_same(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  fg_output in[3] = {x[0], x[1], x[0]};
  return fg_concat(g, in, 3, 0);
}

FG_TEST(grad_concat_repeated_input, "") {
  fgt_input in[2] = {IN(2, 2, 3), IN(2, 1, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_concat_same, NULL, in, 2, 33));
}

static fg_output build_slice(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t begin[3] = {1, 0, 1}, size[3] = {2, -1, -1};
  return fg_slice(g, x[0], 3, begin, size);
}

FG_TEST(grad_slice_to_end, "") {
  fgt_input in[1] = {IN(3, 4, 5, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_slice, NULL, in, 1, 40));
}

static fg_output build_gather(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  return fg_gather(g, x[0], x[1]);
}

FG_TEST(grad_gather_repeated_indices, "") {
  static const int64_t idx[6] = {4, 0, 4, 2, 4, 0}; /* row 4 thrice, 0 twice, 1 and 3 never */
  fgt_input in[2] = {IN(2, 5, 3), {.dtype = FG_I64, .rank = 1, .dims = {6}, .data = idx}};
  FG_CHECK_GRAD(fgt_grad_check(build_gather, NULL, in, 2, 41));
}

FG_TEST(grad_gather_2d_indices_i32, "") {
  static const int32_t idx[6] = {1, 1, 0, 3, 1, 2};
  fgt_input in[2] = {IN(3, 4, 2, 3), {.dtype = FG_I32, .rank = 2, .dims = {2, 3}, .data = idx}};
  FG_CHECK_GRAD(fgt_grad_check(build_gather, NULL, in, 2, 42));
}

/* ---- softmax family ------------------------------------------------------ */

static fg_output build_softmax(fg_graph *g, const fg_output *x, void *ctx) {
  return fg_softmax(g, x[0], *(const int *)ctx);
}

static fg_output build_log_softmax(fg_graph *g, const fg_output *x, void *ctx) {
  return fg_log_softmax(g, x[0], *(const int *)ctx);
}

FG_TEST(grad_softmax_axis0, "") {
  int axis = 0;
  fgt_input in[1] = {{.dtype = FG_F64, .rank = 2, .dims = {3, 4}, .lo = -3, .hi = 3}};
  FG_CHECK_GRAD(fgt_grad_check(build_softmax, &axis, in, 1, 50));
}

FG_TEST(grad_softmax_axis_last, "") {
  int axis = -1;
  fgt_input in[1] = {{.dtype = FG_F64, .rank = 2, .dims = {3, 4}, .lo = -3, .hi = 3}};
  FG_CHECK_GRAD(fgt_grad_check(build_softmax, &axis, in, 1, 51));
}

FG_TEST(grad_softmax_3d_middle_axis, "") {
  int axis = 1;
  fgt_input in[1] = {IN(3, 2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(build_softmax, &axis, in, 1, 52));
}

FG_TEST(grad_log_softmax_axis0, "") {
  int axis = 0;
  fgt_input in[1] = {{.dtype = FG_F64, .rank = 2, .dims = {3, 4}, .lo = -3, .hi = 3}};
  FG_CHECK_GRAD(fgt_grad_check(build_log_softmax, &axis, in, 1, 53));
}

FG_TEST(grad_log_softmax_axis_last, "") {
  int axis = -1;
  fgt_input in[1] = {{.dtype = FG_F64, .rank = 2, .dims = {3, 4}, .lo = -3, .hi = 3}};
  FG_CHECK_GRAD(fgt_grad_check(build_log_softmax, &axis, in, 1, 54));
}

static fg_output build_sce(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  return fg_softmax_cross_entropy(g, x[0], x[1]);
}

FG_TEST(grad_softmax_cross_entropy_i32, "") {
  static const int32_t labels[4] = {2, 0, 1, 2};
  fgt_input in[2] = {{.dtype = FG_F64, .rank = 2, .dims = {4, 3}, .lo = -2, .hi = 2},
                     {.dtype = FG_I32, .rank = 1, .dims = {4}, .data = labels}};
  FG_CHECK_GRAD(fgt_grad_check(build_sce, NULL, in, 2, 60));
}

FG_TEST(grad_softmax_cross_entropy_i64, "") {
  static const int64_t labels[5] = {4, 0, 3, 3, 1};
  fgt_input in[2] = {{.dtype = FG_F64, .rank = 2, .dims = {5, 5}, .lo = -2, .hi = 2},
                     {.dtype = FG_I64, .rank = 1, .dims = {5}, .data = labels}};
  FG_CHECK_GRAD(fgt_grad_check(build_sce, NULL, in, 2, 61));
}

/* ---- support ops ------------------------------------------------------- */

/* A [r]-shaped f64 fill used as the `like` operand (its values never
 * matter, only its shape). */
static fg_output like(fg_graph *g, int rank, const int64_t *dims) {
  return fg_fill(g, FG_F64, rank, dims, 0.0);
}

static fg_output build_expand_dims(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t axes[2] = {0, -1}; /* [3,4] -> [1,3,4,1] */
  return fg_expand_dims(g, x[0], axes, 2);
}

FG_TEST(grad_expand_dims, "") {
  fgt_input in[1] = {IN(2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(build_expand_dims, NULL, in, 1, 70));
}

static fg_output build_reshape_like(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t d[2] = {2, 6};
  return fg_reshape_like(g, x[0], like(g, 2, d));
}

FG_TEST(grad_reshape_like, "") {
  fgt_input in[1] = {IN(2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(build_reshape_like, NULL, in, 1, 71));
}

static fg_output build_broadcast_like(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t d[3] = {2, 3, 4};
  return fg_broadcast_like(g, x[0], like(g, 3, d));
}

FG_TEST(grad_broadcast_like, "") {
  fgt_input in1[1] = {IN(1, 4)};       /* new leading dims */
  fgt_input in2[1] = {IN(3, 2, 1, 4)}; /* a size-1 dim inside */
  FG_CHECK_GRAD(fgt_grad_check(build_broadcast_like, NULL, in1, 1, 72));
  FG_CHECK_GRAD(fgt_grad_check(build_broadcast_like, NULL, in2, 1, 73));
}

static fg_output build_sum_to(fg_graph *g, const fg_output *x, void *ctx) {
  const int64_t *d = ctx; /* d[0] = rank, then dims */
  return fg_sum_to(g, x[0], like(g, (int)d[0], d + 1));
}

FG_TEST(grad_sum_to, "") {
  int64_t to_2d[3] = {2, 3, 1}, to_1d[2] = {1, 4}, to_scalar[1] = {0};
  fgt_input in[1] = {IN(3, 2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(build_sum_to, to_2d, in, 1, 74));
  FG_CHECK_GRAD(fgt_grad_check(build_sum_to, to_1d, in, 1, 75));
  FG_CHECK_GRAD(fgt_grad_check(build_sum_to, to_scalar, in, 1, 76));
}

static fg_output build_slice_grad(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t d[2] = {4, 5}, begin[2] = {1, 2}, size[2] = {2, -1}; /* dy is [2,3] */
  return fg_slice_grad(g, x[0], like(g, 2, d), 2, begin, size);
}

FG_TEST(grad_slice_grad, "") {
  fgt_input in[1] = {IN(2, 2, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_slice_grad, NULL, in, 1, 77));
}

static fg_output build_gather_grad(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  int64_t d[2] = {5, 3};
  return fg_gather_grad(g, x[0], x[1], like(g, 2, d));
}

FG_TEST(grad_gather_grad, "") {
  static const int64_t idx[6] = {4, 0, 4, 2, 4, 0};
  fgt_input in[2] = {IN(2, 6, 3), {.dtype = FG_I64, .rank = 1, .dims = {6}, .data = idx}};
  FG_CHECK_GRAD(fgt_grad_check(build_gather_grad, NULL, in, 2, 78));
}

/* ---- second order: differentiate a gradient graph ------------------------ */

FG_TEST(grad_2nd_matmul_broadcast, "") {
  mm_ctx m = {0, 1};
  fgt_second_ctx c = {build_matmul, &m, 2};
  fgt_input in[2] = {IN(4, 2, 1, 3, 4), IN(3, 2, 5, 4)};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c, in, 2, 100));
}

FG_TEST(grad_2nd_reshape_transpose, "") {
  fgt_second_ctx c1 = {build_reshape, NULL, 1}, c2 = {build_transpose, NULL, 1};
  fgt_input in[1] = {IN(3, 2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c1, in, 1, 101));
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c2, in, 1, 102));
}

FG_TEST(grad_2nd_concat_slice, "") {
  int axis = 1;
  fgt_second_ctx c1 = {build_concat, &axis, 3}, c2 = {build_slice, NULL, 1};
  fgt_input in1[3] = {IN(2, 2, 1), IN(2, 2, 3), IN(2, 2, 2)};
  fgt_input in2[1] = {IN(3, 4, 5, 3)};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c1, in1, 3, 103));
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c2, in2, 1, 104));
}

FG_TEST(grad_2nd_gather, "") {
  static const int64_t idx[6] = {4, 0, 4, 2, 4, 0};
  fgt_second_ctx c = {build_gather, NULL, 1};
  fgt_input in[2] = {IN(2, 5, 3), {.dtype = FG_I64, .rank = 1, .dims = {6}, .data = idx}};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c, in, 2, 105));
}

FG_TEST(grad_2nd_softmax_family, "") {
  int axis = -1;
  fgt_second_ctx c1 = {build_softmax, &axis, 1}, c2 = {build_log_softmax, &axis, 1};
  fgt_input in[1] = {IN(2, 3, 4)};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c1, in, 1, 106));
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c2, in, 1, 107));
}

FG_TEST(grad_2nd_softmax_cross_entropy, "") {
  static const int32_t labels[4] = {2, 0, 1, 2};
  fgt_second_ctx c = {build_sce, NULL, 1};
  fgt_input in[2] = {IN(2, 4, 3), {.dtype = FG_I32, .rank = 1, .dims = {4}, .data = labels}};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c, in, 2, 108));
}

FG_TEST(grad_2nd_support_ops, "") {
  static const int64_t idx[6] = {4, 0, 4, 2, 4, 0};
  int64_t to_2d[3] = {2, 3, 1};
  fgt_second_ctx cs[5] = {{build_expand_dims, NULL, 1},
                          {build_reshape_like, NULL, 1},
                          {build_broadcast_like, NULL, 1},
                          {build_sum_to, to_2d, 1},
                          {build_slice_grad, NULL, 1}};
  fgt_input ins[5][1] = {{IN(2, 3, 4)}, {IN(2, 3, 4)}, {IN(1, 4)}, {IN(3, 2, 3, 4)}, {IN(2, 2, 3)}};
  for (int i = 0; i < 5; i++)
    FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &cs[i], ins[i], 1, 110 + (uint64_t)i));
  fgt_second_ctx cg = {build_gather_grad, NULL, 1};
  fgt_input ing[2] = {IN(2, 6, 3), {.dtype = FG_I64, .rank = 1, .dims = {6}, .data = idx}};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &cg, ing, 2, 115));
}
