/* Multi-tensor optimizer updates (kernels/cpu/optim_multi.c): one call over
 * a list of variables gives, bit for bit, what apply_sgd, apply_momentum
 * and apply_adam give one variable at a time, with any thread count and
 * with tensors that straddle the parallel chunks; a few elements are
 * checked against values worked out by hand; bad lists get an error that
 * names the input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executor/threadpool.h"
#include "fgtest.h"
#include "kernels/cpu/optim_multi.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

enum { NT = 6, MAXL = 4 };
/* Sizes around the parallel grain (16384): empty, tiny, several chunks. */
static const int64_t sizes[NT] = {3, 0, 20000, 1, 40001, 16384};

typedef enum { SGD, MOMENTUM, ADAM } rule;
static const int n_lists[] = {2, 3, 4};
static const char *const single_op[] = {"apply_sgd", "apply_momentum", "apply_adam"};

/* One problem: per list and tensor its values (the gradient last). */
typedef struct problem {
  rule r;
  fg_dtype dt;
  size_t es;
  fg_kbuf t[MAXL][NT];
  fg_op_params p;
  double lr, step;
} problem;

static void problem_init(problem *P, rule r, fg_dtype dt, uint64_t seed) {
  memset(P, 0, sizeof *P);
  P->r = r, P->dt = dt, P->es = dt == FG_F32 ? 4 : 8;
  P->lr = 0.03, P->step = 3;
  P->p.multi_update.n = NT;
  P->p.multi_update.momentum = (fg_momentum_params){0.9, r == MOMENTUM};
  P->p.multi_update.adam = (fg_adam_params){0.9, 0.999, 1e-8, 0.01, 0};
  for (int l = 0; l < n_lists[r]; l++)
    for (int k = 0; k < NT; k++) {
      fg_kbuf *b = &P->t[l][k];
      *b = (fg_kbuf){.dtype = dt, .rank = 1, .dims = {sizes[k]}};
      b->data = malloc((size_t)(sizes[k] + 1) * P->es);
      /* Adam's v must not be negative. */
      for (int64_t i = 0; i < sizes[k]; i++) {
        const double u = rng_unit(&seed);
        elem_store(b->data, dt, i, r == ADAM && l == 2 ? u * u : u);
      }
    }
}

static void problem_free(problem *P) {
  for (int l = 0; l < MAXL; l++)
    for (int k = 0; k < NT; k++)
      free(P->t[l][k].data);
}

/* A deep copy of the tensors, for a run that updates them. */
static void copy_tensors(const problem *P, fg_kbuf dst[MAXL][NT]) {
  for (int l = 0; l < n_lists[P->r]; l++)
    for (int k = 0; k < NT; k++) {
      dst[l][k] = P->t[l][k];
      const size_t bytes = (size_t)(sizes[k] + 1) * P->es;
      dst[l][k].data = malloc(bytes);
      memcpy(dst[l][k].data, P->t[l][k].data, bytes);
    }
}

static fg_kbuf scalar(double *v) { return (fg_kbuf){.dtype = FG_F64, .rank = 0, .data = v}; }

/* The reference: the single-tensor kernel once per variable. */
static void run_single(problem *P, fg_kbuf t[MAXL][NT]) {
  fg_kernel_fn fn = fg_cpu_kernel(single_op[P->r], P->dt);
  FG_REQUIRE(fn);
  for (int k = 0; k < NT; k++) {
    fg_kbuf in[6];
    int n = 0;
    for (int l = 0; l < n_lists[P->r]; l++)
      in[n++] = t[l][k];
    in[n++] = scalar(&P->lr);
    if (P->r == ADAM) in[n++] = scalar(&P->step);
    fg_kbuf out = t[0][k];
    char err[256] = "";
    fg_op_params single;
    memset(&single, 0, sizeof single);
    if (P->r == MOMENTUM) single.momentum = P->p.multi_update.momentum;
    if (P->r == ADAM) single.adam = P->p.multi_update.adam;
    fg_kctx ctx = {.in = in,
                   .n_in = n,
                   .out = &out,
                   .n_out = 1,
                   .p = &single,
                   .err = err,
                   .err_size = sizeof err};
    FG_CHECK_INT(fn(&ctx), 0);
  }
}

static int multi_fn_run(const problem *P, const fg_kctx *ctx) {
  const int f64 = P->dt == FG_F64;
  switch (P->r) {
  case SGD: return f64 ? fgk_multi_apply_sgd_f64(ctx) : fgk_multi_apply_sgd_f32(ctx);
  case MOMENTUM: return f64 ? fgk_multi_apply_momentum_f64(ctx) : fgk_multi_apply_momentum_f32(ctx);
  default: return f64 ? fgk_multi_apply_adam_f64(ctx) : fgk_multi_apply_adam_f32(ctx);
  }
}

/* The multi-tensor kernel over all variables; its output aliases variable
 * 0 unless `outs` is given. Returns the kernel's code. */
static int run_multi(problem *P, fg_kbuf t[MAXL][NT], const fg_kparallel *par, fg_kbuf *outs,
                     char *err, size_t err_size) {
  fg_kbuf in[MAXL * NT + 2], out[1];
  int n = 0;
  for (int l = 0; l < n_lists[P->r]; l++)
    for (int k = 0; k < NT; k++)
      in[n++] = t[l][k];
  in[n++] = scalar(&P->lr);
  if (P->r == ADAM) in[n++] = scalar(&P->step);
  out[0] = outs ? outs[0] : t[0][0];
  fg_kctx ctx = {.in = in,
                 .n_in = n,
                 .out = out,
                 .n_out = 1,
                 .p = &P->p,
                 .err = err,
                 .err_size = err_size,
                 .par = par};
  return multi_fn_run(P, &ctx);
}

static int same_bits(const problem *P, fg_kbuf a[MAXL][NT], fg_kbuf b[MAXL][NT]) {
  for (int l = 0; l < n_lists[P->r] - 1; l++) /* the gradient is read only */
    for (int k = 0; k < NT; k++)
      if (memcmp(a[l][k].data, b[l][k].data, (size_t)sizes[k] * P->es) != 0) return 0;
  return 1;
}

static void free_tensors(const problem *P, fg_kbuf t[MAXL][NT]) {
  for (int l = 0; l < n_lists[P->r]; l++)
    for (int k = 0; k < NT; k++)
      free(t[l][k].data);
}

/* Single-tensor kernels, then the multi-tensor one with no pool and with
 * pools of 1 and 2 threads: the same bits every time, over two steps. */
static void check_rule(rule r, fg_dtype dt) {
  problem P;
  problem_init(&P, r, dt, 1234 + (uint64_t)r * 7 + (uint64_t)dt);
  fg_kbuf ref[MAXL][NT];
  copy_tensors(&P, ref);
  run_single(&P, ref);
  run_single(&P, ref);
  for (int threads = 0; threads <= 2; threads++) {
    fg_pool *pool = threads ? fg_pool_new(threads) : NULL;
    const fg_kparallel par = {pool, fg_pool_parallel_for_fn};
    fg_kbuf t[MAXL][NT];
    copy_tensors(&P, t);
    char err[256] = "";
    FG_CHECK_INT(run_multi(&P, t, threads ? &par : NULL, NULL, err, sizeof err), 0);
    FG_CHECK_INT(run_multi(&P, t, threads ? &par : NULL, NULL, err, sizeof err), 0);
    if (!same_bits(&P, ref, t))
      FG_FAIL_AT("%s %s: %d threads differ from the single-tensor kernel", single_op[r],
                 fg_dtype_name(dt), threads);
    free_tensors(&P, t);
    fg_pool_free(pool);
  }
  free_tensors(&P, ref);
  problem_free(&P);
}

FG_TEST(multi_sgd_matches_single_bitwise, "") {
  check_rule(SGD, FG_F32);
  check_rule(SGD, FG_F64);
}

FG_TEST(multi_momentum_matches_single_bitwise, "") {
  check_rule(MOMENTUM, FG_F32);
  check_rule(MOMENTUM, FG_F64);
}

FG_TEST(multi_adam_matches_single_bitwise, "") {
  check_rule(ADAM, FG_F32);
  check_rule(ADAM, FG_F64);
}

/* Values by hand, in f64 with exactly representable numbers: SGD
 * 1.5 - 0.5*0.25 = 1.375; momentum (0.5, plain) buf = 0.5*1 + 2 = 2.5,
 * var = 3 - 0.5*2.5 = 1.75; nesterov var = 3 - 0.5*(2 + 0.5*2.5) = 1.375.
 * A separate output buffer receives variable 0's new value; a control
 * input after the scalars is not read. */
FG_TEST(multi_updates_by_hand, "") {
  double v0 = 1.5, g0 = 0.25, v1 = -2, g1 = 4, lr = 0.5, o = 0, ctrl = 0;
  fg_kbuf in[6] = {{.dtype = FG_F64, .rank = 0, .data = &v0},
                   {.dtype = FG_F64, .rank = 1, .dims = {1}, .data = &v1},
                   {.dtype = FG_F64, .rank = 0, .data = &g0},
                   {.dtype = FG_F64, .rank = 1, .dims = {1}, .data = &g1},
                   scalar(&lr),
                   {.dtype = FG_F64, .rank = 1, .dims = {1}, .data = &ctrl}};
  fg_kbuf out[1] = {{.dtype = FG_F64, .rank = 0, .data = &o}};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.multi_update.n = 2;
  char err[256] = "";
  fg_kctx ctx = {
      .in = in, .n_in = 6, .out = out, .n_out = 1, .p = &p, .err = err, .err_size = sizeof err};
  FG_CHECK_INT(fgk_multi_apply_sgd_f64(&ctx), 0);
  FG_CHECK(v0 == 1.375 && v1 == -4 && o == 1.375 && ctrl == 0);

  for (int nesterov = 0; nesterov <= 1; nesterov++) {
    double var = 3, buf = 1, g = 2, var2 = 3, buf2 = 1, g2 = 2;
    fg_kbuf mi[7] = {scalar(&var), scalar(&var2), scalar(&buf), scalar(&buf2),
                     scalar(&g),   scalar(&g2),   scalar(&lr)};
    fg_kbuf mo[1] = {mi[0]};
    p.multi_update.momentum = (fg_momentum_params){0.5, nesterov};
    fg_kctx mc = {
        .in = mi, .n_in = 7, .out = mo, .n_out = 1, .p = &p, .err = err, .err_size = sizeof err};
    FG_CHECK_INT(fgk_multi_apply_momentum_f64(&mc), 0);
    FG_CHECK(buf == 2.5 && buf2 == 2.5);
    FG_CHECK(var == (nesterov ? 1.375 : 1.75) && var2 == var);
  }
}

/* Adam's first step moves each element by lr * sign(g) (bias-corrected m
 * is g, sqrt of v is |g|; eps 0, no decay). */
FG_TEST(multi_adam_first_step_by_hand, "") {
  float var[3] = {1, 2, 3}, m[3] = {0}, v[3] = {0}, g[3] = {0.5f, -3, 8};
  double lr = 0.25, step = 1;
  fg_kbuf in[6] = {{.dtype = FG_F32, .rank = 1, .dims = {3}, .data = var},
                   {.dtype = FG_F32, .rank = 1, .dims = {3}, .data = m},
                   {.dtype = FG_F32, .rank = 1, .dims = {3}, .data = v},
                   {.dtype = FG_F32, .rank = 1, .dims = {3}, .data = g},
                   scalar(&lr),
                   scalar(&step)};
  fg_kbuf out[1] = {in[0]};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.multi_update.n = 1;
  p.multi_update.adam = (fg_adam_params){0.9, 0.999, 0, 0, 0};
  char err[256] = "";
  fg_kctx ctx = {
      .in = in, .n_in = 6, .out = out, .n_out = 1, .p = &p, .err = err, .err_size = sizeof err};
  FG_CHECK_INT(fgk_multi_apply_adam_f32(&ctx), 0);
  FG_CHECK_NEAR(var[0], 0.75, 1e-6);
  FG_CHECK_NEAR(var[1], 2.25, 1e-6);
  FG_CHECK_NEAR(var[2], 2.75, 1e-6);
  FG_CHECK_NEAR(m[2], 0.8, 1e-6);
  FG_CHECK_NEAR(v[1], 0.009, 1e-6);
}

/* Bad lists: the error names the input, and nothing is written. */
FG_TEST(multi_bad_inputs_named, "") {
  problem P;
  problem_init(&P, ADAM, FG_F32, 99);
  fg_kbuf t[MAXL][NT];
  copy_tensors(&P, t);
  char err[256] = "";
  /* The gradient of variable 2 one element short. */
  t[3][2].dims[0] = sizes[2] - 1;
  FG_CHECK_INT(run_multi(&P, t, NULL, NULL, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "input 20 (grad 2) is f32 with 19999 elements, var 2 f32 with 20000");
  FG_CHECK(same_bits(&P, P.t, t));
  t[3][2].dims[0] = sizes[2];
  /* m of variable 4 in the wrong dtype. */
  t[1][4].dtype = FG_F64;
  FG_CHECK_INT(run_multi(&P, t, NULL, NULL, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "input 10 (m 4) is f64");
  t[1][4].dtype = FG_F32;
  /* Step 0. */
  P.step = 0;
  FG_CHECK_INT(run_multi(&P, t, NULL, NULL, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "input 25 (step) = 0 must be >= 1");
  FG_CHECK(same_bits(&P, P.t, t));
  free_tensors(&P, t);
  problem_free(&P);

  /* Too few inputs for n: n = 2 needs 2 vars, 2 gradients and lr. */
  float a[2] = {1, 2}, b[2] = {3, 4}, ga[2] = {0};
  double lr = 0.1;
  fg_kbuf in[4] = {{.dtype = FG_F32, .rank = 1, .dims = {2}, .data = a},
                   {.dtype = FG_F32, .rank = 1, .dims = {2}, .data = b},
                   {.dtype = FG_F32, .rank = 1, .dims = {2}, .data = ga},
                   scalar(&lr)};
  fg_kbuf out[1] = {in[0]};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.multi_update.n = 2;
  fg_kctx ctx = {
      .in = in, .n_in = 4, .out = out, .n_out = 1, .p = &p, .err = err, .err_size = sizeof err};
  FG_CHECK_INT(fgk_multi_apply_sgd_f32(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "multi_apply_sgd takes 2 lists of n tensors and 1 scalar(s), one "
                             "output: n = 2 needs 5 inputs, got 4 inputs and 1 outputs");
  FG_CHECK(a[0] == 1 && b[1] == 4);
}
