/* Finite-difference gradient checks for tests (f64).
 *
 * fgt_grad_check builds y = f(x_0..x_{n-1}) on placeholders, forms the scalar
 * L = sum(y * w) with a fixed random w (so every element of y matters and
 * the check is not fooled by symmetric outputs), asks fg_gradients for dL/dx_i
 * and compares each element with a central difference
 *   (L(x + h e_k) - L(x - h e_k)) / 2h,  h = 1e-6 * max(1, |x_k|).
 * The error of one element is |a - n| / max(|a|, |n|, 1e-3); the function
 * returns the largest over all differentiable inputs, or -1 on an API error
 * (printed). Integer inputs take their given data and get no gradient. */
#ifndef FG_GRAD_CHECK_H
#define FG_GRAD_CHECK_H

#include <flowgraph/flowgraph.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef fg_output (*fgt_build_fn)(fg_graph *g, const fg_output *xs, void *ctx);

typedef struct fgt_input {
  fg_dtype dtype; /* FG_F64 (differentiated) or an integer type (not) */
  int rank;
  int64_t dims[FG_MAX_RANK];
  const void *data; /* NULL: uniform in [lo, hi) from the seed */
  double lo, hi;    /* both 0: [-1, 1) */
} fgt_input;

static inline double fgt_uniform(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}

static inline int64_t fgt_numel(const fgt_input *in) {
  int64_t n = 1;
  for (int i = 0; i < in->rank; i++)
    n *= in->dims[i];
  return n;
}

/* L for the current input values; NAN on error. */
static inline double fgt_eval(fg_session *s, fg_tensor **ts, int n, const char *loss) {
  fg_feed feeds[16];
  char names[16][16];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "x%d", i);
    feeds[i] = (fg_feed){names[i], ts[i]};
  }
  fg_tensor *out = NULL;
  fg_status *st = fg_status_new();
  double v = NAN;
  if (fg_session_run(s, feeds, n, &loss, 1, &out, NULL, 0, st) == 0)
    v = ((double *)fg_tensor_data(out))[0];
  else
    fprintf(stderr, "grad_check: run failed: %s\n", fg_status_message(st));
  fg_tensor_free(out);
  fg_status_free(st);
  return v;
}

static inline double fgt_grad_check(fgt_build_fn f, void *ctx, const fgt_input *ins, int n,
                                    uint64_t seed) {
  if (n > 16) return -1;
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  fg_output xs[16];
  fg_tensor *ts[16] = {0};
  double result = -1;
  fg_session *s = NULL;
  uint64_t rng = seed * 2654435761u + 1;
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    xs[i] = fg_placeholder(g, name, ins[i].dtype, ins[i].rank, ins[i].dims);
    ts[i] = fg_tensor_new(ins[i].dtype, ins[i].rank, ins[i].dims, st);
    if (!ts[i]) goto done;
    int64_t m = fgt_numel(&ins[i]);
    if (ins[i].data) {
      memcpy(fg_tensor_data(ts[i]), ins[i].data, fg_tensor_num_bytes(ts[i]));
    } else if (ins[i].dtype == FG_F64) {
      double lo = ins[i].lo, hi = ins[i].hi;
      if (lo == 0 && hi == 0) lo = -1, hi = 1;
      for (int64_t k = 0; k < m; k++)
        ((double *)fg_tensor_data(ts[i]))[k] = lo + (hi - lo) * fgt_uniform(&rng);
    }
  }
  fg_output y = f(g, xs, ctx);
  /* w has y's static shape; an unknown dim would need a feed, so tests use
   * known shapes here (the unknown batch is tested separately). */
  int64_t yd[FG_MAX_RANK];
  int yr = fg_output_shape(g, y, yd);
  if (yr < 0) {
    fg_graph_status(g, st);
    fprintf(stderr, "grad_check: build failed: %s\n", fg_status_message(st));
    goto done;
  }
  fg_tensor *wt = fg_tensor_new(FG_F64, yr, yd, st);
  if (!wt) goto done;
  for (int64_t k = 0; k < fg_tensor_num_elements(wt); k++)
    ((double *)fg_tensor_data(wt))[k] = 0.5 + fgt_uniform(&rng);
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, fg_constant(g, "w", wt)), NULL, 0, 0);
  fg_set_name(g, loss, "L");
  fg_tensor_free(wt);
  fg_output dx[16];
  fg_output diff_x[16];
  int idx[16], nd = 0;
  for (int i = 0; i < n; i++)
    if (ins[i].dtype == FG_F64) idx[nd] = i, diff_x[nd++] = xs[i];
  if (fg_gradients(g, &loss, 1, diff_x, nd, NULL, dx, st) != 0) {
    fprintf(stderr, "grad_check: fg_gradients failed: %s\n", fg_status_message(st));
    goto done;
  }
  const char *dnames[16];
  char dbuf[16][64];
  for (int j = 0; j < nd; j++) {
    snprintf(dbuf[j], sizeof dbuf[j], "dx%d", j);
    fg_set_name(g, fg_identity(g, dx[j]), dbuf[j]);
    dnames[j] = dbuf[j];
  }
  s = fg_session_new(g, NULL, st);
  if (!s) {
    fprintf(stderr, "grad_check: session failed: %s\n", fg_status_message(st));
    goto done;
  }
  fg_feed feeds[16];
  char names[16][16];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "x%d", i);
    feeds[i] = (fg_feed){names[i], ts[i]};
  }
  fg_tensor *grads[16] = {0};
  if (nd && fg_session_run(s, feeds, n, dnames, nd, grads, NULL, 0, st) != 0) {
    fprintf(stderr, "grad_check: gradient run failed: %s\n", fg_status_message(st));
    goto done;
  }
  double worst = 0;
  for (int j = 0; j < nd; j++) {
    double *x = fg_tensor_data(ts[idx[j]]);
    const double *a = fg_tensor_data(grads[j]);
    for (int64_t k = 0; k < fgt_numel(&ins[idx[j]]); k++) {
      double keep = x[k], h = 1e-6 * (fabs(keep) > 1 ? fabs(keep) : 1);
      x[k] = keep + h;
      double lp = fgt_eval(s, ts, n, "L");
      x[k] = keep - h;
      double lm = fgt_eval(s, ts, n, "L");
      x[k] = keep;
      double num = (lp - lm) / (2 * h);
      double den = fmax(fmax(fabs(a[k]), fabs(num)), 1e-3);
      double err = fabs(a[k] - num) / den;
      if (isnan(err) || err > worst) worst = isnan(err) ? INFINITY : err; /* NaN fails */
      if (err > 1e-6)
        fprintf(stderr, "grad_check: input %d element %lld: symbolic %.12g numeric %.12g\n", idx[j],
                (long long)k, a[k], num);
    }
    fg_tensor_free(grads[j]);
  }
  result = worst;
done:
  for (int i = 0; i < n; i++)
    fg_tensor_free(ts[i]);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  return result;
}

/* Second order: fgt_build_second builds dF/dx (the first n_float inputs'
 * gradients, flattened and concatenated) for F = sum(f(x)^2 * c), c a
 * fixed non-uniform constant; fgt_grad_check then differentiates that
 * gradient again. The square makes the second derivative depend on x even
 * where f is linear. */
typedef struct fgt_second_ctx {
  fgt_build_fn f;
  void *ctx;
  int n_float; /* leading f64 inputs to differentiate */
} fgt_second_ctx;

static inline fg_output fgt_build_second(fg_graph *g, const fg_output *x, void *vctx) {
  const fgt_second_ctx *c = vctx;
  fg_output y = c->f(g, x, c->ctx);
  int64_t d[FG_MAX_RANK];
  int r = fg_output_shape(g, y, d);
  if (r < 0) return FG_NO_OUTPUT;
  fg_status *st = fg_status_new();
  fg_tensor *ct = fg_tensor_new(FG_F64, r, d, st);
  fg_output out = FG_NO_OUTPUT;
  if (ct) {
    double *p = fg_tensor_data(ct);
    for (int64_t k = 0; k < fg_tensor_num_elements(ct); k++)
      p[k] = 0.25 + 0.125 * (double)(k % 7);
    fg_output f =
        fg_reduce_sum(g, fg_mul(g, fg_mul(g, y, y), fg_constant(g, NULL, ct)), NULL, 0, 0);
    fg_output dx[16];
    if (fg_gradients(g, &f, 1, x, c->n_float, NULL, dx, st) == 0) {
      /* Sum of all first-order gradients, flattened, so every input's
       * second-order path is checked at once. */
      out = fg_reshape(g, dx[0], 1, (int64_t[]){-1});
      for (int i = 1; i < c->n_float; i++)
        out = fg_concat(g, (fg_output[]){out, fg_reshape(g, dx[i], 1, (int64_t[]){-1})}, 2, 0);
    } else {
      fprintf(stderr, "fgt_build_second: %s\n", fg_status_message(st));
    }
  }
  fg_tensor_free(ct);
  fg_status_free(st);
  return out;
}

/* Typical use inside an FG_TEST:
 *   double err = fgt_grad_check(build, NULL, ins, 2, 1);
 *   FG_CHECK(err >= 0 && err < 1e-6);                                        */
#define FG_CHECK_GRAD(err)                                                                         \
  do {                                                                                             \
    double fgt_e = (err);                                                                          \
    if (!(fgt_e >= 0 && fgt_e < 1e-6)) FG_FAIL_AT("gradient check: max relative error %g", fgt_e); \
  } while (0)

#endif
