/* Finite-difference checks (f64) of the gradients in
 * autodiff/grad_shape_ops.c: pad (constant, reflect, edge), flatten,
 * squeeze, unsqueeze, expand (one way and both ways), tile, split (with an
 * output no gradient reaches) and stack, on odd shapes and asymmetric
 * pads. The "_2nd" cases differentiate a gradient graph again, which
 * checks the gradients of pad_grad and tile_grad. */
#include <flowgraph/autodiff.h>
#include <flowgraph/flowgraph.h>
#include <string.h>

#include "autodiff/grad.h"
#include "fgtest.h"
#include "grad_check.h"

#define IN(r, ...)                                                                                 \
  {                                                                                                \
    .dtype = FG_F64, .rank = (r), .dims = { __VA_ARGS__ }                                          \
  }

/* ---- pad ---------------------------------------------------------------- */

typedef struct pad_ctx {
  const char *mode;
  int64_t pads[8];
} pad_ctx;

static fg_output build_pad(fg_graph *g, const fg_output *x, void *vctx) {
  const pad_ctx *c = vctx;
  return fg_pad(g, x[0], c->pads, c->mode, 0.75);
}

/* x [3, 4, 5]: begins 2, 0, 1 and ends 1, 3, 4 (reflect needs each < dim). */
static const int64_t PADS3[6] = {2, 0, 1, 1, 3, 4};

FG_TEST(grad_pad_constant, "") {
  pad_ctx c = {"constant", {0}};
  memcpy(c.pads, PADS3, sizeof PADS3);
  fgt_input in[1] = {IN(3, 3, 4, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_pad, &c, in, 1, 1));
}

FG_TEST(grad_pad_reflect, "") {
  pad_ctx c = {"reflect", {0}};
  memcpy(c.pads, PADS3, sizeof PADS3);
  fgt_input in[1] = {IN(3, 3, 4, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_pad, &c, in, 1, 2));
}

FG_TEST(grad_pad_edge, "") {
  pad_ctx c = {"edge", {3, 0, 2, 1}};
  fgt_input in[1] = {IN(2, 1, 3)}; /* a dim of 1: every pad repeats it */
  FG_CHECK_GRAD(fgt_grad_check(build_pad, &c, in, 1, 3));
  pad_ctx c3 = {"edge", {0}};
  memcpy(c3.pads, PADS3, sizeof PADS3);
  fgt_input in3[1] = {IN(3, 3, 4, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_pad, &c3, in3, 1, 4));
}

/* ---- views ---------------------------------------------------------------- */

static fg_output build_views(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  /* [2, 1, 3, 5] -> squeeze 1 -> [2, 3, 5] -> unsqueeze 3 -> [2, 3, 5, 1]
   * -> flatten 2 -> [6, 5], times itself so the gradient depends on x */
  fg_output s = fg_squeeze(g, x[0], (int64_t[]){1}, 1);
  fg_output f = fg_flatten(g, fg_unsqueeze(g, s, (int64_t[]){3}, 1), 2);
  return fg_mul(g, f, f);
}

FG_TEST(grad_flatten_squeeze_unsqueeze, "") {
  fgt_input in[1] = {IN(4, 2, 1, 3, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_views, NULL, in, 1, 5));
}

/* ---- expand and tile ---------------------------------------------------------- */

static fg_output build_expand(fg_graph *g, const fg_output *x, void *ctx) {
  const int64_t *shape = ctx;
  return fg_expand(g, x[0], (int)shape[0], shape + 1);
}

FG_TEST(grad_expand, "") {
  int64_t one_way[4] = {3, 2, 3, 4}; /* [3, 1] -> [2, 3, 4] */
  int64_t both_ways[3] = {2, 4, 1};  /* [2, 1, 3] with [4, 1] -> [2, 4, 3] */
  fgt_input a[1] = {IN(2, 3, 1)}, b[1] = {IN(3, 2, 1, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_expand, one_way, a, 1, 6));
  FG_CHECK_GRAD(fgt_grad_check(build_expand, both_ways, b, 1, 7));
}

static fg_output build_tile(fg_graph *g, const fg_output *x, void *ctx) {
  const int64_t *reps = ctx;
  return fg_tile(g, x[0], reps + 1, (int)reps[0]);
}

FG_TEST(grad_tile, "") {
  int64_t reps[4] = {3, 2, 1, 3};
  fgt_input in[1] = {IN(3, 2, 3, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_tile, reps, in, 1, 8));
}

/* ---- split and stack ------------------------------------------------------------ */

/* Outputs 0 and 2 of a three-way split feed the result; output 1 gets no
 * gradient, so its part of dx is zeros. */
static fg_output build_split(fg_graph *g, const fg_output *x, void *ctx) {
  const int64_t *sizes = ctx;
  fg_output p[3];
  if (fg_split(g, x[0], 1, sizes, 3, p) != 0) return FG_NO_OUTPUT;
  return fg_concat(g, (fg_output[]){fg_mul(g, p[2], p[2]), p[0]}, 2, 1);
}

static fg_output build_split_even(fg_graph *g, const fg_output *x, void *ctx) {
  (void)ctx;
  fg_output p[3];
  if (fg_split(g, x[0], -1, NULL, 3, p) != 0) return FG_NO_OUTPUT; /* 3, 3, 1 of 7 */
  return fg_mul(g, p[1], p[0]);
}

FG_TEST(grad_split, "") {
  int64_t sizes[3] = {2, 1, 4};
  fgt_input in[1] = {IN(3, 2, 7, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_split, sizes, in, 1, 9));
  fgt_input in2[1] = {IN(2, 3, 7)};
  FG_CHECK_GRAD(fgt_grad_check(build_split_even, NULL, in2, 1, 10));
}

static fg_output build_stack(fg_graph *g, const fg_output *x, void *ctx) {
  const int *axis = ctx;
  fg_output s = fg_stack(g, (fg_output[]){x[0], x[1], x[2]}, 3, *axis);
  return fg_mul(g, s, s);
}

FG_TEST(grad_stack, "") {
  for (int axis = -3; axis <= 2; axis++) {
    fgt_input in[3] = {IN(2, 2, 3), IN(2, 2, 3), IN(2, 2, 3)};
    FG_CHECK_GRAD(fgt_grad_check(build_stack, &axis, in, 3, 11 + (uint64_t)(axis + 3)));
  }
}

/* ---- second order: the gradients of pad_grad and tile_grad ------------------ */

FG_TEST(grad_2nd_pad_tile, "") {
  pad_ctx reflect = {"reflect", {0}}, edge = {"edge", {0}};
  memcpy(reflect.pads, PADS3, sizeof PADS3);
  memcpy(edge.pads, PADS3, sizeof PADS3);
  int64_t reps[4] = {3, 2, 1, 3};
  fgt_second_ctx c1 = {build_pad, &reflect, 1}, c2 = {build_pad, &edge, 1},
                 c3 = {build_tile, reps, 1};
  fgt_input in[1] = {IN(3, 3, 4, 5)}, in3[1] = {IN(3, 2, 3, 5)};
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c1, in, 1, 20));
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c2, in, 1, 21));
  FG_CHECK_GRAD(fgt_grad_check(fgt_build_second, &c3, in3, 1, 22));
}

/* ---- registry ------------------------------------------------------------------- */

/* Every entry of this family is a differentiable op, registered once and
 * in no other family, and is what the registry hands out. */
FG_TEST(grad_shape_ops_registry, "") {
  int seen[FG_OP_COUNT] = {0}, n = 0;
  for (const fg_grad_reg *r = fg_grads_shape_ops; r->op >= 0; r++, n++) {
    FG_REQUIRE(r->op < FG_OP_COUNT);
    FG_CHECK(fg_op_table[r->op].flags & FG_OPF_DIFFERENTIABLE);
    FG_CHECK_INT(seen[r->op]++, 0);
    FG_CHECK(fg_grad_lookup(r->op) == r->fn);
  }
  FG_CHECK_INT(n, 9);
  for (const fg_grad_reg *r = fg_grads_math; r->op >= 0; r++)
    FG_CHECK_INT(seen[r->op], 0);
  for (const fg_grad_reg *r = fg_grads_shape; r->op >= 0; r++)
    FG_CHECK_INT(seen[r->op], 0);
  const int ops[9] = {FG_OP_PAD,  FG_OP_PAD_GRAD,  FG_OP_FLATTEN, FG_OP_SQUEEZE, FG_OP_EXPAND,
                      FG_OP_TILE, FG_OP_TILE_GRAD, FG_OP_SPLIT,   FG_OP_STACK};
  for (int i = 0; i < 9; i++)
    FG_CHECK_INT(seen[ops[i]], 1);
}
